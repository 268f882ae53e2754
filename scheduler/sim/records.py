"""What a simulated run draws and observes: each job's actual phase durations, and the
raw records of the run (jobs, phases, moves) that scheduler.sim.metrics summarises.
The engine (scheduler.sim.engine) fills them."""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler.model import ClusterSpec, JobProfile, PhaseKind, Pool
from scheduler.planner.objective import JobProgress

__all__ = [
    "JobRecord",
    "LiveProgress",
    "MoveRecord",
    "PhaseRecord",
    "RunResult",
    "draw_durations",
]


def draw_durations(job: JobProfile, seed: int) -> tuple[array[float], array[float]]:
    """Draw every iteration's actual rollout and training durations for `job`.

    The generator is keyed by (seed, crc32(job id)), so a job's draws are the same
    under every policy and in any subset of the trace: policies are compared on the
    same actual durations, and the optimal search can simulate groups in isolation.
    """
    rng = np.random.default_rng([seed, zlib.crc32(job.id.encode("utf-8"))])
    roll = rng.uniform(job.roll_min, job.t_roll_max_s, size=job.iterations)
    train = rng.uniform(job.train_min, job.t_train_max_s, size=job.iterations)
    # plain arrays of doubles: the engine reads one at every phase event, and at 2,000
    # jobs a list's float objects are cache misses the packed doubles mostly are not
    return array("d", roll.tobytes()), array("d", train.tobytes())


@dataclass(slots=True)
class JobRecord:
    """What the run observed about one job (slotted: the engine reads and writes it at
    every phase event)."""

    profile: JobProfile
    roll: Sequence[float]  # drawn rollout durations, one per iteration (`draw_durations`)
    train: Sequence[float]
    status: str = "pending"  # pending | waiting | running | done | infeasible | stuck
    reason: str = ""
    admitted_s: float | None = None
    finished_s: float | None = None
    group_id: str | None = None
    strategy: str | None = None
    predicted_slowdown: float | None = None
    retries: int = 0
    iterations_done: int = 0
    tail_fractions: Sequence[float] | None = None  # long-tail model: tau / T per iteration
    moves: int = 0
    restart_s: float = 0.0  # seconds of restarts its moves cost it
    drift: str = "none"  # its drift template (scheduler.sim.drift)
    replans: int = 0  # times a drift re-plan moved it (checkpoint, resubmit, resume)
    solo_done_s: float = 0.0  # drawn rollout + training (+ sync) of the iterations done
    first_boundary_s: float | None = None  # when its first iteration ended (its first checkpoint)

    @property
    def solo_iteration_s(self) -> float:
        """Mean drawn (rollout + training) duration: the spec's solo iteration time,
        plus the job's weight syncs (one after every training but the last)."""
        n = len(self.roll)
        syncs = (n - 1) * self.profile.t_sync_s
        roll: float = sum(self.roll)  # (typed: mypyc adds two untyped `sum`s as ints)
        train: float = sum(self.train)
        return (roll + train + syncs) / n

    @property
    def mean_iteration_s(self) -> float | None:
        """Mean iteration time under sharing: (completion - admission) / iterations."""
        if self.finished_s is None or self.admitted_s is None:
            return None
        return (self.finished_s - self.admitted_s) / len(self.roll)


@dataclass
class PhaseRecord:
    """One executed phase (kept only when the run asks for a timeline)."""

    job_id: str
    kind: PhaseKind
    iteration: int
    nodes: tuple[str, ...]
    start_s: float
    end_s: float
    switch: bool
    restart_s: float = 0.0  # a moved job's restart, paid by its first phase after the move
    # when its nodes were free for another phase: end_s, or earlier for a rollout whose
    # tail long-tail migration consolidated (scheduler.sim.longtail)
    released_s: float | None = None

    @property
    def nodes_free_s(self) -> float:
        """Return when the phase's nodes could start another phase."""
        return self.end_s if self.released_s is None else self.released_s


@dataclass
class RunResult:
    """Raw observations of one simulated run; scheduler.sim.metrics summarises them."""

    policy: str
    spec: ClusterSpec
    jobs: dict[str, JobRecord]
    node_pool: dict[str, Pool]
    node_price_per_hour: dict[str, float]
    allocations: list[tuple[str, float, float]]  # (node, start_s, end_s)
    busy_s: dict[str, float]
    peak_nodes: dict[Pool, int]
    admissions: dict[str, int]
    decision_latency_s: list[float]
    start_s: float
    end_s: float
    phases: list[PhaseRecord] = field(default_factory=list)
    moves: list[MoveRecord] = field(default_factory=list)
    tail_saved_s: float = 0.0  # node-seconds long-tail migration freed for the next rollout


@dataclass(frozen=True)
class MoveRecord:
    """One consolidation move the run made (scheduler.planner.consolidation)."""

    at_s: float
    job_id: str
    from_group: str
    to_group: str
    saving_usd: float
    restart_s: float


class LiveProgress(Mapping[str, JobProgress]):
    """The planner's view of the running jobs' progress (`JobProgress` by job id), read
    from the records when asked: a decision reads a few jobs' progress, and building it
    for every running job at every decision was quadratic at 2,000 live jobs (issue 25
    item 4). The engine makes a new one per decision and changes no record while the
    planner reads it, so it is the snapshot a dict of every running job would be."""

    def __init__(self, jobs: Mapping[str, JobRecord]) -> None:
        self._jobs = jobs
        self._made: dict[str, JobProgress] = {}
        self._len: int | None = None

    def __getitem__(self, job_id: str) -> JobProgress:
        made = self._made.get(job_id)
        if made is None:
            r = self._jobs[job_id]
            if r.status != "running" or r.admitted_s is None:
                raise KeyError(job_id)
            made = JobProgress(r.admitted_s, r.iterations_done, r.moves, r.solo_done_s)
            self._made[job_id] = made
        return made

    def get(self, job_id: str, default: Any = None) -> Any:
        """Return the job's progress, or `default` when it is not running: without the
        KeyError `Mapping.get` raises and catches inside (most of the planner's reads of a
        job not running yet: a newcomer, a mover's rest)."""
        made = self._made.get(job_id)
        if made is not None:
            return made
        r = self._jobs.get(job_id)
        if r is None or r.status != "running" or r.admitted_s is None:
            return default
        return self[job_id]

    def __contains__(self, job_id: object) -> bool:
        r = self._jobs.get(job_id)  # type: ignore[call-overload]
        return r is not None and r.status == "running" and r.admitted_s is not None

    def __iter__(self) -> Iterator[str]:
        return (
            job_id
            for job_id, r in self._jobs.items()
            if r.status == "running" and r.admitted_s is not None
        )

    def __len__(self) -> int:
        if self._len is None:
            self._len = sum(1 for _ in self)
        return self._len

    def __bool__(self) -> bool:
        return next(iter(self), None) is not None
