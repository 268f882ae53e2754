"""The one set of builders and drivers of the core's tests (tests/scheduler).

* `job`, `member`, `group`, `cluster_spec`: the domain values, with defaults a test
  file may bind once (`functools.partial(job, iterations=4)`);
* `drive` / `drive_to_end`: run a GroupRuntime as the simulator does (events at
  phase ends) and return the phases it ran, as `Segment`s;
* `simulate_round_robin`: the reference oracle of the round-robin recursion
  (explicit loops, no max-plus algebra), which the planning arithmetic of
  scheduler.meta_iteration must agree with.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler.group_runtime import GroupRuntime, PhaseStart
from scheduler.model import ClusterSpec, GpuType, Group, JobProfile, Member, PhaseKind

R, T = PhaseKind.ROLLOUT, PhaseKind.TRAIN


def job(
    job_id: str,
    roll: float,
    train: float,
    *,
    slo: float = 1.5,
    mem: float = 400,
    rollout_gpus: int = 8,
    train_gpus: int = 8,
    iterations: int = 200,
    time_scale: float = 1.0,
    roll_min: float | None = None,
    train_min: float | None = None,
) -> JobProfile:
    """Return a job of `roll` + `train` worst-case seconds (8 + 8 GPUs by default)."""
    return JobProfile(
        id=job_id,
        arrival_s=0.0,
        iterations=iterations,
        rollout_gpus=rollout_gpus,
        train_gpus=train_gpus,
        t_roll_max_s=roll,
        t_train_max_s=train,
        host_mem_gb=mem,
        slo=slo,
        t_roll_min_s=roll_min,
        t_train_min_s=train_min,
        time_scale=time_scale,
    )


def member(
    j: JobProfile, rollout: tuple[str, ...] = ("r1",), train: tuple[str, ...] = ("t1",)
) -> Member:
    """Return `j` pinned to `rollout` and `train` nodes."""
    return Member(j, rollout, train)


def group(*members: Member, group_id: str = "g") -> Group:
    """Return a co-execution group of `members` holding exactly their nodes."""
    rollout = tuple(dict.fromkeys(n for m in members for n in m.rollout_nodes))
    train = tuple(dict.fromkeys(n for m in members for n in m.train_nodes))
    return Group(group_id, rollout, train, members)


def cluster_spec(
    roll_nodes: int | None = 8,
    train_nodes: int | None = 8,
    overhead: float = 2.0,
    *,
    roll_down: int = 0,
    train_down: int = 0,
) -> ClusterSpec:
    """Return an H20 + H800 cluster of 8-GPU, 2 TB nodes (None: an unbounded pool)."""
    return ClusterSpec(
        GpuType("H20", 1.85, 8, 2048, roll_nodes, roll_down),
        GpuType("H800", 5.28, 8, 2048, train_nodes, train_down),
        overhead,
    )


@dataclass(frozen=True)
class Segment:
    job_id: str
    kind: PhaseKind
    iteration: int
    nodes: tuple[str, ...]
    start: float
    end: float
    switch: bool
    cold: bool
    meta_iteration: int


Duration = Callable[[PhaseStart], float]


def drive(
    rt: GroupRuntime,
    duration: Duration,
    *,
    until: float = float("inf"),
    on_finish: Callable[[float, GroupRuntime], GroupRuntime] | None = None,
) -> list[Segment]:
    """Run `rt` as the simulator does (events at phase ends) and return the phases run."""
    return drive_to_end(rt, duration, until=until, on_finish=on_finish)[0]


def drive_to_end(
    rt: GroupRuntime,
    duration: Duration,
    *,
    until: float = float("inf"),
    on_finish: Callable[[float, GroupRuntime], GroupRuntime] | None = None,
    t0: float = 0.0,
) -> tuple[list[Segment], GroupRuntime]:
    """Run `rt` from time `t0` as the simulator does; return the phases run and the runtime.

    `duration` gives a phase's length (switch overhead is the caller's business);
    `on_finish(t, rt)` may replace the runtime (e.g. a to_dict/from_dict round trip)
    or admit/remove members between events.
    """
    t = t0
    seq = 0
    heap: list[tuple[float, int, str, PhaseKind]] = []
    open_: dict[str, tuple[PhaseStart, float]] = {}
    out: list[Segment] = []

    def launch(now: float) -> None:
        nonlocal seq
        for p in rt.start_ready():
            open_[p.job_id] = (p, now)
            heapq.heappush(heap, (now + duration(p), seq, p.job_id, p.kind))
            seq += 1

    launch(t)
    while heap and t <= until:
        t, _, job_id, kind = heapq.heappop(heap)
        p, start = open_.pop(job_id)
        out.append(
            Segment(
                job_id, kind, p.iteration, p.nodes, start, t, p.switch, p.cold, p.meta_iteration
            )
        )
        rt.finish(job_id, kind)
        if on_finish is not None:
            rt = on_finish(t, rt)
        launch(t)
    return out, rt


def worst_case(members: list[Member], overhead: float = 0.0) -> Duration:
    by_id = {m.job.id: m.job for m in members}

    def d(p: PhaseStart) -> float:
        return by_id[p.job_id].phase_max_s(p.kind) + (overhead if p.switch else 0.0)

    return d


def runtime_with(
    members: list[Member], *, overhead: float = 0.0, iterations: int | None = None
) -> GroupRuntime:
    rt = GroupRuntime("g", switch_overhead_s=overhead)
    for m in members:
        rt.admit(m, iterations=iterations or m.job.iterations)
    return rt


def assert_no_node_overlap(segments: list[Segment]) -> None:
    by_node: dict[str, list[Segment]] = {}
    for s in segments:
        for n in s.nodes:
            by_node.setdefault(n, []).append(s)
    for n, segs in by_node.items():
        segs.sort(key=lambda s: s.start)
        for a, b in zip(segs, segs[1:], strict=False):
            assert a.end <= b.start + 1e-9, f"node {n} runs {a} and {b} at once"


# Default number of meta-iterations simulate_round_robin runs.
PLAN_META_ITERATIONS = 10


def simulate_round_robin(
    members: Sequence[Member],
    *,
    switch_overhead_s: float,
    meta_iterations: int = PLAN_META_ITERATIONS,
    roll_s: Sequence[float] | None = None,
    train_s: Sequence[float] | None = None,
) -> list[list[float]]:
    """Return each member's training finish times over `meta_iterations` rounds.

    All members start at t=0 on idle nodes, in the order given (admission order),
    and follow the round-robin rule of scheduler.group_runtime. Durations default to the
    worst case; the switch overhead is added to a phase whenever one of its nodes
    last ran another job.
    """
    n = len(members)
    roll = [m.job.t_roll_max_s for m in members] if roll_s is None else list(roll_s)
    train = [m.job.t_train_max_s for m in members] if train_s is None else list(train_s)
    index: dict[str, int] = {}
    rnodes: list[list[int]] = []
    tnodes: list[list[int]] = []
    for m in members:
        rnodes.append([index.setdefault(x, len(index)) for x in m.rollout_nodes])
        tnodes.append([index.setdefault(x, len(index)) for x in m.train_nodes])
    free = [0.0] * len(index)
    last = [-1] * len(index)
    done = [0.0] * n  # finish of each member's previous phase
    roll_prev_start = 0.0
    train_prev_start = 0.0
    out: list[list[float]] = [[] for _ in range(n)]
    sw = switch_overhead_s
    for _ in range(meta_iterations):
        for j in range(n):
            start = max(done[j], roll_prev_start)
            switch = False
            for x in rnodes[j]:
                if free[x] > start:
                    start = free[x]
                if last[x] != j and last[x] >= 0:
                    switch = True
            end = start + roll[j] + (sw if switch else 0.0)
            for x in rnodes[j]:
                free[x] = end
                last[x] = j
            done[j] = end
            roll_prev_start = start
        for j in range(n):
            start = max(done[j], train_prev_start)
            switch = False
            for x in tnodes[j]:
                if free[x] > start:
                    start = free[x]
                if last[x] != j and last[x] >= 0:
                    switch = True
            end = start + train[j] + (sw if switch else 0.0)
            for x in tnodes[j]:
                free[x] = end
                last[x] = j
            done[j] = end
            train_prev_start = start
            out[j].append(end)
    return out
