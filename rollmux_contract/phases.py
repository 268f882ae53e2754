"""The dispatch contract: what the controller hands a dispatcher and what comes back.

Standard library only (an import-linter contract keeps it so): the web services build
`PhaseOrder`s and apply `PhaseReport`s (through `rollmux_web.ports`), the
dispatchers in `workers.dispatch` implement `Dispatcher`; both import this module and
neither imports the other.

Messages are forward- and backward-compatible across a rolling upgrade: a field this side
does not know is dropped and logged, a field the message lacks takes its default.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, Protocol

log = logging.getLogger(__name__)


def known_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """Return the items of `data` that are fields of the dataclass `cls`.

    A message from a newer host (a rolling upgrade: workers restarted on new code before
    the controller, or the other way round) may carry fields this side does not know yet;
    they are logged and dropped rather than failing every report of the phase. A field
    this side knows and the message lacks takes its default.
    """
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        log.warning("%s: ignoring unknown fields %s (a newer peer?)", cls.__name__, unknown)
    return {k: v for k, v in data.items() if k in names}


# The training metrics RollMux stores per job iteration (issue 21 item 2): a runner that
# returns any of these names from its rollout or train phase (`metrics`) gets them recorded
# with the iteration (`workflow.IterationMetrics`), drawn as the job's reward curve and
# served by /api/v1/jobs/{id}/metrics/. Other names stay in the phase record's metrics only.
TRAINING_METRICS = (
    "reward_mean",  # the mean reward of the iteration's responses
    "reward_std",  # their standard deviation
    "loss",  # the training objective after the update
    "kl",  # KL to the reference policy
    "entropy",  # the policy's mean token entropy
    "tokens_per_s",  # generated (rollout) or trained (train) tokens per second
    "samples",  # responses generated (rollout) or trained on (train)
)
# Added up over a pool's workers (each reports its own share); the rest are averaged.
POOL_SUMS = ("samples", "tokens_per_s", "responses")


def pool_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Return one phase's metrics from its workers' (one row per rank of the pool).

    Counts and rates add up (`POOL_SUMS`); `reward_mean` is weighted by each rank's
    `samples` when they report it, and `reward_std` is then the pooled standard deviation
    of all their responses (within-rank variance plus the spread of the rank means); any
    other name is the plain mean over the ranks that report it.
    """
    keys = {k for row in rows for k in row}
    out: dict[str, float] = {}
    for k in keys:
        values = [r[k] for r in rows if k in r]
        out[k] = sum(values) if k in POOL_SUMS else sum(values) / len(values)
    weighted = [r for r in rows if "reward_mean" in r and r.get("samples", 0) > 0]
    if len(weighted) == len(rows) > 1:
        n = sum(r["samples"] for r in weighted)
        mean = sum(r["reward_mean"] * r["samples"] for r in weighted) / n
        out["reward_mean"] = mean
        if all("reward_std" in r for r in weighted):
            var = sum(
                r["samples"] * (r["reward_std"] ** 2 + (r["reward_mean"] - mean) ** 2)
                for r in weighted
            )
            out["reward_std"] = (var / n) ** 0.5
    return out


@dataclass(frozen=True)
class PhaseOrder:
    """One phase to run: which job, placement (the host's identity), kind, iteration, nodes."""

    phase_id: int
    job_id: int
    placement_id: int
    kind: str
    iteration: int  # 0-based, as stored (pages show it + 1)
    nodes: tuple[str, ...]
    pinned_nodes: tuple[str, ...]  # every node of the job's placement (where its host lives)
    runner: str
    context: dict[str, Any]  # RunnerContext.to_dict()
    checkpoint_dir: str = ""
    resume_iteration: int = 0  # restore the checkpoint taken after this many iterations
    group_id: int | None = None  # echoed in the report (the controller locks the group first)
    # the job's nodes per pool: its rollout workers live on the first, its trainers on the
    # second (one worker per GPU of each node; empty: every pinned node serves both)
    rollout_nodes: tuple[str, ...] = ()
    train_nodes: tuple[str, ...] = ()
    # long-tail migration (a rollout): once this share of its responses is done, the
    # rollout's workers on `tail_nodes` hand their unfinished responses to its workers on
    # its other nodes and the host reports the nodes free (`phase_tail`); 0: never
    tail_nodes: tuple[str, ...] = ()
    tail_threshold: float = 0.0
    # the GPUs the job needs on each of its nodes (its GPUs of a pool over the pool's nodes):
    # a Ray node that serves one of them with fewer fails the phase at once, naming it
    node_gpus: dict[str, int] = field(default_factory=dict)
    # when the dispatcher handed it to the host's transport (its wall clock, epoch seconds):
    # the host records `dispatch_s`, that moment to the phase's start (None: not stamped)
    sent_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in _NODE_TUPLES:
            data[key] = list(data[key])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhaseOrder:
        data = dict(data)
        for key in _NODE_TUPLES:
            data[key] = tuple(data.get(key) or ())
        data["node_gpus"] = dict(data.get("node_gpus") or {})
        return cls(**known_fields(cls, data))

    @property
    def host_name(self) -> str:
        return host_name(self.job_id, self.placement_id)


_NODE_TUPLES = ("nodes", "pinned_nodes", "rollout_nodes", "train_nodes", "tail_nodes")


def host_name(job_id: int, placement_id: int) -> str:
    """Name the resident host of one placement of a job (a Ray actor name)."""
    return f"job-{job_id}-p{placement_id}"


class Outcome(StrEnum):
    """How a phase ended (`PhaseReport.outcome`; the why is `PhaseReport.reason`)."""

    OK = "ok"  # the phase ran
    ERROR = "error"  # the job's own failure: its runner raised, or it overran
    LOST = "lost"  # the platform's: the host (actor) died, or the dispatch never arrived
    # the job's runner cannot be loaded (not allowlisted, not importable, not a runner):
    # the same code fails the same way on any node, so the job fails at once, never retried
    LOAD_ERROR = "load-error"


REASON_CHARS = 480  # a reason is cut to this (it is stored beside the phase's record)


@dataclass
class PhaseReport:
    """The end of a phase as its host saw it (times are Unix seconds).

    `outcome` says whose failure it was, `reason` why (empty when it ran) and, for a phase
    lost because an inventory node is gone (its Ray node died, or no live Ray node has its
    label), `lost_node` names that node: the controller marks it down. Nothing is parsed
    out of the reason: it is for people.
    """

    phase_id: int
    outcome: Outcome = Outcome.OK
    started_at: float | None = None
    finished_at: float | None = None
    warm: bool | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    group_id: int | None = None
    job_id: int | None = None
    # where it ran: the Ray node id and the GPU ids Ray gave its workers, per inventory node
    ray_node_ids: dict[str, str] = field(default_factory=dict)
    gpu_ids: dict[str, list[int]] = field(default_factory=dict)
    bytes_moved: int | None = None  # sync: bytes that crossed from the training pool
    # long-tail migration: the nodes the rollout freed before its end, and when (Unix s)
    released: dict[str, float] = field(default_factory=dict)
    reason: str = ""  # why it did not run to its end ("" when it ran)
    lost_node: str | None = None  # LOST because this inventory node is gone
    # where its time went (seconds; None: a host that does not split it): set-up (a cold
    # start: workers created, the runner built), load (a warm start's reload from host
    # memory, or a cold start's restore from the checkpoint) and work (the phase itself, what
    # the profile and the learned estimates use)
    setup_s: float | None = None
    load_s: float | None = None
    work_s: float | None = None

    def __post_init__(self) -> None:
        self.outcome = Outcome(self.outcome)  # a known kind, or ValueError naming it
        self.reason = self.reason[:REASON_CHARS]

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    @property
    def result(self) -> Outcome:
        """Return the outcome's kind (the name callers used before `outcome` was typed)."""
        return self.outcome

    @property
    def load_error(self) -> bool:
        """The runner could not be loaded: never retried (it would fail the same way)."""
        return self.outcome is Outcome.LOAD_ERROR

    @property
    def summary(self) -> str:
        """Return the outcome as a person reads it: "ok", or "lost: node h20-1 died"."""
        return self.outcome.value if not self.reason else f"{self.outcome.value}: {self.reason}"

    @classmethod
    def failed(
        cls,
        phase_id: int,
        result: Outcome,
        why: str,
        *,
        lost_node: str | None = None,
        **fields: Any,
    ) -> PhaseReport:
        """Return the report of a phase that did not run to its end (`lost_node`: the
        inventory node whose loss is why, with `result` LOST)."""
        if lost_node is not None and result is not Outcome.LOST:
            raise ValueError(f"lost_node {lost_node!r} with outcome {result.value!r}")
        return cls(phase_id, result, reason=why, lost_node=lost_node, **fields)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhaseReport:
        """Read a report from a peer of any version: a newer one's unknown fields are
        dropped (and logged), an unknown outcome counts as the job's error (to be safe), and
        an older one's single "kind: why" outcome string is read as the two fields it was."""
        data = known_fields(cls, data)
        outcome = str(data.get("outcome", Outcome.OK.value))
        if "reason" not in data and ":" in outcome:
            outcome, _, why = outcome.partition(":")
            data["reason"] = why.strip()
            if outcome.strip() == Outcome.LOST.value and "lost_node" not in data:
                data["lost_node"] = _legacy_lost_node(data["reason"])
        try:
            data["outcome"] = Outcome(outcome.strip())
        except ValueError:
            log.warning("PhaseReport: unknown outcome %r counts as the job's error", outcome)
            data["outcome"] = Outcome.ERROR
            data["reason"] = f"{outcome.strip()}: {data.get('reason') or ''}".rstrip(": ")
        return cls(**data)


# An older host wrote "lost: node h20-1 died (...)" / "lost: node h20-1, h20-2: no live Ray
# node has the label ..." and no `lost_node`: the first node named is the one it meant.
_LEGACY_LOST_NODE = re.compile(r"^node ([\w.-]+)")


def _legacy_lost_node(reason: str) -> str | None:
    match = _LEGACY_LOST_NODE.match(reason)
    return match.group(1) if match else None


@dataclass(frozen=True)
class Probe:
    """What a host says about a phase: "running", "done" (with its report), "unknown" (never
    received it) or "dead" (no host)."""

    state: str
    report: PhaseReport | None = None


ReportSink = Callable[[PhaseReport], None]


class Dispatcher(Protocol):
    """Run phases on resident job hosts. Every method returns quickly (no phase-long block)."""

    def dispatch(self, order: PhaseOrder) -> None:
        """Start the phase; its end arrives later as a PhaseReport."""

    def probe(self, order: PhaseOrder) -> Probe:
        """Ask the job's host about a phase (for reconcile)."""

    def release(self, job_id: int, placement_id: int) -> None:
        """Drop a placement's host and its resident state (the job left the group)."""

    def kill(self, job_id: int, placement_id: int) -> None:
        """Kill a placement's host abruptly (tests, and recovery from an overrun)."""
