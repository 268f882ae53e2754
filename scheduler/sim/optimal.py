"""The `optimal` policy: an exhaustive offline search for traces of at most 8 jobs.

What it optimises
-----------------
The total provisioning cost (node-allocation time x price, the spec's cost) of
the whole trace, over every *static plan*: a partition of the jobs into
co-execution groups of at most `max_group_size` members, and inside each group a
partition of the members into rollout sharing classes (members of one class are
pinned to the same rollout nodes, as many as the largest of them needs; every
member shares the group's training nodes, as many as the largest needs). That
covers direct packing (a class of several jobs), rollout scaling (one class per
job on shared training nodes), isolated groups (singletons) and a job alone
co-located on its training nodes (the planner's fourth strategy, within its SLO at
the training type's rollout speed factor), in every combination, with hindsight
of every arrival and every drawn duration.

A plan is admissible only if, for every group, the worst-case round-robin
meta-iteration of ALL its members together (the core's `plan_meta_iteration`,
the same check Algorithm 1 makes) keeps every member within its SLO against the
profile, and every node's residents fit in its host memory. So `optimal`, like
`rollmux`, attains 100% SLO against the profile by construction.

How
---
1. Enumerate candidate groups: every subset of the jobs up to `max_group_size`
   and every rollout-class partition of it; keep the admissible ones. A subset
   of an admissible group is admissible (fewer members never lengthen the
   meta-iteration nor fill a node), so a subset is only extended if all its
   one-smaller subsets were admissible.
2. Simulate each admissible candidate group on its own with the engine (the
   same durations as the full run: draws are keyed by job id and seed) and keep
   each subset's cheapest arrangement. Groups share no nodes, so with enough
   capacity a plan's cost is the sum of its groups' costs.
3. Dynamic programming over subsets picks the cheapest partition (3^n steps).
4. The winning plan is replayed on the full trace by the engine, which gives
   the reported metrics.

Limits
------
- Static plans only: no regrouping or migration after admission (the paper's
  offline optimum also allows "reorder and regroup"; ours does not, so it is an
  upper bound on that optimum and may even lose to an online policy that pins a
  job to a partly overlapping set of rollout nodes).
- Capacity is ignored when choosing (each group is costed alone); the replay
  does respect it, and reports any wait.
- At most 8 jobs (`OPTIMAL_MAX_JOBS`): the candidate count grows with the Bell
  numbers of the group size and the simulations with the trace length.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from scheduler.cluster import nodes_needed
from scheduler.model import (
    ClusterSpec,
    ClusterState,
    Group,
    JobProfile,
    Member,
    PlacementResult,
    PlacementStatus,
    Pool,
)
from scheduler.planner.colocated import colocated_iteration_s
from scheduler.planner.objective import JobProgress
from scheduler.sim.engine import simulate
from scheduler.sim.metrics import total_cost_usd
from scheduler.sim.policies import (
    COLOCATED_CLASS,
    OPTIMAL_MAX_JOBS,
    PLAN_RUNTIME,
    CorePolicy,
    PlanEntry,
    PlannedPolicy,
    pick_class_nodes,
)
from scheduler.sim.records import RunResult
from scheduler.slo import check_group

# Floating-point slack on the SLO bound, as in the planner's own comparison.
SLO_SLACK = 1e-9


def set_partitions(items: Sequence[int]) -> Iterator[list[list[int]]]:
    """Yield every partition of `items` into non-empty blocks (Bell(n) of them)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in set_partitions(rest):
        for index in range(len(partition)):
            yield partition[:index] + [[first, *partition[index]]] + partition[index + 1 :]
        yield [[first], *partition]


@dataclass(frozen=True)
class OptimalSearch:
    """The outcome of the offline search."""

    plan: dict[str, PlanEntry]
    predicted_cost_usd: float
    candidates_checked: int
    candidates_simulated: int
    search_s: float
    excluded: dict[str, str]  # job id -> why it cannot run at all


def _alone_infeasible(job: JobProfile, spec: ClusterSpec) -> str | None:
    for pool in (Pool.ROLLOUT, Pool.TRAIN):
        gpu_type = spec.gpu_type(pool)
        if job.host_mem_gb > gpu_type.host_mem_gb:
            return (
                f"needs {job.host_mem_gb:g} GB host memory per node; "
                f"{gpu_type.name} nodes have {gpu_type.host_mem_gb:g} GB"
            )
        if gpu_type.nodes is not None and nodes_needed(job, spec, pool) > gpu_type.nodes:
            return f"needs more {gpu_type.name} nodes than the pool has"
    return None


def _candidate_group(
    members: Sequence[JobProfile], classes: Sequence[Sequence[int]], spec: ClusterSpec
) -> Group:
    """Build the worst-case group for a subset and a rollout-class partition of it."""
    train_count = max(nodes_needed(j, spec, Pool.TRAIN) for j in members)
    train_nodes = tuple(f"t{i}" for i in range(train_count))
    pinned: list[Member] = [
        Member(j, (), train_nodes[: nodes_needed(j, spec, Pool.TRAIN)]) for j in members
    ]
    roll_nodes: list[str] = []
    for c, block in enumerate(classes):
        # Members join in arrival order and take the class's least-loaded nodes,
        # adding new ones when the class has fewer than they need: the same rule
        # PlannedPolicy follows when it replays the plan.
        fresh = 0
        mates: list[Member] = []
        for i in sorted(block):
            need = nodes_needed(members[i], spec, Pool.ROLLOUT)
            nodes = pick_class_nodes(mates, need)
            while len(nodes) < need:
                nodes.append(f"r{c}.{fresh}")
                roll_nodes.append(f"r{c}.{fresh}")
                fresh += 1
            pinned[i] = Member(members[i], tuple(nodes), pinned[i].train_nodes)
            mates.append(pinned[i])
    return Group("candidate", tuple(roll_nodes), train_nodes, tuple(pinned))


def _admissible(group: Group, spec: ClusterSpec) -> bool:
    mem: dict[str, float] = {}
    for member in group.members:
        for node in member.rollout_nodes + member.train_nodes:
            mem[node] = mem.get(node, 0.0) + member.job.host_mem_gb
    for node, used in mem.items():
        limit = spec.rollout.host_mem_gb if node.startswith("r") else spec.train.host_mem_gb
        if used > limit:
            return False
    if len(group.members) == 1:
        return True
    # The planner's own SLO rule (scheduler.slo), so the optimum is held to what rollmux is.
    return check_group(group.members, switch_overhead_s=spec.switch_overhead_s).ok


def excluded_jobs(jobs: Sequence[JobProfile], spec: ClusterSpec) -> dict[str, str]:
    """Return the jobs that cannot run on `spec` even alone, with the reason."""
    return {j.id: why for j in jobs if (why := _alone_infeasible(j, spec)) is not None}


def runnable_jobs(jobs: Sequence[JobProfile], excluded: dict[str, str]) -> list[JobProfile]:
    """Return the jobs not excluded, in arrival order (the order a replay admits them)."""
    return sorted((j for j in jobs if j.id not in excluded), key=lambda j: (j.arrival_s, j.id))


def admissible_arrangements(
    runnable: Sequence[JobProfile],
    spec: ClusterSpec,
    *,
    max_group_size: int,
    colocated: bool = True,
) -> tuple[dict[int, list[list[list[int]]]], int]:
    """Return the admissible rollout-class partitions per subset mask, and how many were checked.

    Subsets are built up by size: a subset of an admissible group is admissible
    (fewer members never lengthen the meta-iteration nor fill a node), so a subset is
    only tried when all its one-smaller subsets were admissible. With `colocated` a
    job alone may also run co-located (the arrangement with no rollout classes).
    """
    n = len(runnable)
    admissible: dict[int, list[list[list[int]]]] = {}
    checked = 0
    for size in range(1, min(n, max_group_size) + 1):
        for combo in itertools.combinations(range(n), size):
            mask = sum(1 << b for b in combo)
            if size > 1 and any((mask & ~(1 << b)) not in admissible for b in combo):
                continue
            members = [runnable[b] for b in combo]
            options = []
            for classes in set_partitions(list(range(size))):
                checked += 1
                if _admissible(_candidate_group(members, classes, spec), spec):
                    options.append(classes)
            if size == 1 and colocated:
                # alone co-located (no rollout classes): within its SLO at the training
                # type's rollout speed factor, as the planner's co-located strategy
                checked += 1
                if colocated_iteration_s(members[0], spec.train.rollout_speed_factor) <= members[
                    0
                ].slo * members[0].t_solo_max_s * (1 + SLO_SLACK):
                    options.append([])
            if options:
                admissible[mask] = options
    return admissible, checked


def cost_arrangements(
    runnable: Sequence[JobProfile],
    admissible: dict[int, list[list[list[int]]]],
    spec: ClusterSpec,
    *,
    seed: int,
    progress: Callable[[float], None] | None = None,
) -> list[tuple[int, list[list[int]], float]]:
    """Return (mask, classes, cost) for every admissible arrangement, each simulated alone.

    Groups share no nodes, so with enough capacity a plan's cost is the sum of its
    groups' costs; the draws are keyed by job id and seed, so a group alone sees the
    durations it sees in the full run.
    """
    n = len(runnable)
    runtime_policy = CorePolicy("rollmux", seed=seed, config=PLAN_RUNTIME)
    out: list[tuple[int, list[list[int]], float]] = []
    total = sum(len(v) for v in admissible.values()) or 1
    for mask, options in admissible.items():
        members = [runnable[b] for b in range(n) if mask >> b & 1]
        for classes in options:
            group_plan = plan_for(members, classes, key="g")
            run = simulate(
                members, spec, PlannedPolicy(group_plan, runtime_policy=runtime_policy), seed=seed
            )
            out.append((mask, classes, total_cost_usd(run)))
            if progress is not None:
                progress(0.9 * len(out) / total)
    return out


def search_optimal(
    jobs: Sequence[JobProfile],
    spec: ClusterSpec,
    *,
    seed: int,
    max_group_size: int = 5,
    progress: Callable[[float], None] | None = None,
) -> OptimalSearch:
    """Find the cheapest admissible static plan for `jobs` (at most 8 of them)."""
    if len(jobs) > OPTIMAL_MAX_JOBS:
        raise ValueError(
            f"optimal searches at most {OPTIMAL_MAX_JOBS} jobs exhaustively; "
            f"this trace has {len(jobs)}"
        )
    started = time.perf_counter()
    excluded = excluded_jobs(jobs, spec)
    runnable = runnable_jobs(jobs, excluded)
    n = len(runnable)
    admissible, checked = admissible_arrangements(runnable, spec, max_group_size=max_group_size)
    arrangements = cost_arrangements(runnable, admissible, spec, seed=seed, progress=progress)
    simulated = len(arrangements)
    # each subset's cheapest arrangement
    cost: dict[int, tuple[float, list[list[int]]]] = {}
    for mask, classes, value in arrangements:
        if mask not in cost or value < cost[mask][0] - 1e-9:
            cost[mask] = (value, classes)
    # 3. cheapest partition of all runnable jobs into admissible groups.
    full = (1 << n) - 1
    best: dict[int, tuple[float, int]] = {0: (0.0, 0)}
    for mask in range(1, full + 1):
        low = mask & -mask
        choice: tuple[float, int] | None = None
        sub = mask
        while sub:
            if sub & low and sub in cost:
                value = cost[sub][0] + best[mask & ~sub][0]
                if choice is None or value < choice[0] - 1e-9:
                    choice = (value, sub)
            sub = (sub - 1) & mask
        assert choice is not None  # singletons are always admissible
        best[mask] = choice
    plan: dict[str, PlanEntry] = {}
    mask, group_index = full, 0
    while mask:
        sub = best[mask][1]
        members = [runnable[b] for b in range(n) if sub >> b & 1]
        plan.update(plan_for(members, cost[sub][1], key=f"g{group_index}"))
        group_index += 1
        mask &= ~sub
    return OptimalSearch(
        plan=plan,
        predicted_cost_usd=best[full][0] if n else 0.0,
        candidates_checked=checked,
        candidates_simulated=simulated,
        search_s=time.perf_counter() - started,
        excluded=excluded,
    )


def plan_for(
    members: Sequence[JobProfile], classes: Sequence[Sequence[int]], *, key: str
) -> dict[str, PlanEntry]:
    if not classes:  # a job alone, co-located
        return {j.id: PlanEntry(group=key, rollout_class=COLOCATED_CLASS) for j in members}
    plan: dict[str, PlanEntry] = {}
    for c, block in enumerate(classes):
        for i in block:
            plan[members[i].id] = PlanEntry(group=key, rollout_class=f"{key}.c{c}")
    return plan


class ExcludedPolicy(PlannedPolicy):
    """Replay a plan; jobs without an entry are INFEASIBLE with the search's reason."""

    def __init__(self, search: OptimalSearch, *, runtime_policy: CorePolicy) -> None:
        super().__init__(search.plan, runtime_policy=runtime_policy)
        self.excluded = search.excluded

    def place(
        self,
        job: JobProfile,
        state: ClusterState,
        progress: Mapping[str, JobProgress] | None = None,
        now: float = 0.0,
    ) -> PlacementResult:
        """Refuse excluded jobs, place the others as planned."""
        if job.id in self.excluded:
            return PlacementResult(PlacementStatus.INFEASIBLE, self.excluded[job.id])
        return super().place(job, state, progress, now)


def run_optimal(
    jobs: Sequence[JobProfile],
    spec: ClusterSpec,
    *,
    seed: int,
    max_group_size: int = 5,
    progress: Callable[[float], None] | None = None,
) -> tuple[RunResult, OptimalSearch]:
    """Search the optimal plan, then replay it on the full trace."""
    search = search_optimal(jobs, spec, seed=seed, max_group_size=max_group_size, progress=progress)
    policy = ExcludedPolicy(
        search,
        runtime_policy=CorePolicy(
            "rollmux", seed=seed, config=PLAN_RUNTIME.with_(max_group_size=max_group_size)
        ),
    )
    return simulate(jobs, spec, policy, seed=seed), search
