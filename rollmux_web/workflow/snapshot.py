"""The planner's snapshot of the live cluster, read from the database (selector work).

`cluster_state()` is step 1 of the decision cycle: the pools' nodes, prices in force and
the active co-execution groups with their members, as the core's `ClusterState`. The
row -> dataclass mapping is `workflow.converters`; this module runs the queries.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Count, Min, OuterRef, Q, Subquery
from django.utils import timezone

from rollmux_web.inventory.models import Cluster, GpuPrice, NodeState
from rollmux_web.inventory.models import GpuType as GpuTypeRow
from rollmux_web.inventory.models import Node as NodeRow
from rollmux_web.jobs.models import Job
from rollmux_web.jobs.runners import time_scale_of
from rollmux_web.workflow import starts
from rollmux_web.workflow.converters import (
    NoPoolConfigured,
    core_group,
    core_node,
    job_id_str,
    pool_of,
)
from rollmux_web.workflow.models import EndReason, ExecutionGroup, NodeAllocation, Strategy
from rollmux_web.workflow.models import Placement as PlacementRow
from scheduler.model import ClusterSpec, ClusterState, GpuType, Group, JobProfile, Pool

if TYPE_CHECKING:
    from scheduler.planner.objective import JobProgress

__all__ = [
    "CAPACITY_STATES",
    "NoPoolConfigured",
    "cluster_spec",
    "cluster_state",
    "current_prices",
    "group_states",
    "held_young",
    "open_placements",
    "planner_input",
    "pool_node_counts",
]


def current_prices() -> dict[int, Decimal]:
    """Return the price per GPU-hour in force now, per GpuType id."""
    now = timezone.now()
    latest = (
        GpuPrice.objects.filter(gpu_type=OuterRef("pk"), effective_from__lte=now)
        .order_by("-effective_from")
        .values("price_per_gpu_hour")[:1]
    )
    return {
        row["pk"]: row["price"] or Decimal("0")
        for row in GpuTypeRow.objects.annotate(price=Subquery(latest)).values("pk", "price")
    }


# The states a node of a pool's capacity is in: what the pool can ever hold. A drained
# node counts (the operator takes it back up, or down: either way the planner decides
# again then), so a job that fits only with it waits with a reason; a down node does not
# (nodes are never deleted, down is also how one leaves service), so a job that fits only
# with down nodes is INFEASIBLE instead of waiting forever on a repair nobody promised.
CAPACITY_STATES = (NodeState.UP, NodeState.DRAINED)


def pool_node_counts() -> dict[str, tuple[int, int]]:
    """Return per pool kind: (nodes in the pool's capacity, nodes down)."""
    rows = (
        NodeRow.objects.order_by()
        .values("cluster__kind")
        .annotate(
            capacity=Count("pk", filter=Q(state__in=CAPACITY_STATES)),
            down=Count("pk", filter=Q(state=NodeState.DOWN)),
        )
    )
    return {r["cluster__kind"]: (r["capacity"], r["down"]) for r in rows}


def cluster_spec(prices: dict[int, Decimal] | None = None) -> ClusterSpec:
    """Return the core cluster spec: the GPU types of the rollout and the training pool,
    each with its capacity (nodes up or drained) and its down nodes."""
    prices = prices if prices is not None else current_prices()
    counts = pool_node_counts()
    types: dict[Pool, GpuType] = {}
    for cluster in Cluster.objects.select_related("gpu_type").order_by("pk"):
        pool = pool_of(cluster.kind)
        if pool in types:
            continue
        gt = cluster.gpu_type
        capacity, down = counts.get(cluster.kind, (0, 0))
        types[pool] = GpuType(
            name=gt.name,
            price_per_gpu_hour=float(prices.get(gt.pk, Decimal("0"))),
            gpus_per_node=gt.gpus_per_node,
            host_mem_gb=gt.host_mem_gb,
            nodes=capacity,
            nodes_down=down,
            # (the rollout pool's type is the one profiles are measured on: 1.0)
            rollout_speed_factor=(
                settings.ROLLMUX_ROLLOUT_SPEED_FACTOR if pool is Pool.TRAIN else 1.0
            ),
        )
    missing = [p.value for p in Pool if p not in types]
    if missing:
        raise NoPoolConfigured(f"no {' and no '.join(missing)} pool is configured")
    return ClusterSpec(
        rollout=types[Pool.ROLLOUT],
        train=types[Pool.TRAIN],
        switch_overhead_s=settings.ROLLMUX_SWITCH_OVERHEAD_S,
    )


def open_placements(group_ids: Iterable[int] | None = None) -> list[PlacementRow]:
    qs = (
        PlacementRow.objects.filter(ended_at__isnull=True)
        .select_related("job", "job__slo_class", "job__tenant")
        .prefetch_related("rollout_nodes", "train_nodes")
        .order_by("created_at", "pk")
    )
    if group_ids is not None:
        qs = qs.filter(group_id__in=list(group_ids))
    return list(qs)


def cluster_state() -> ClusterState:
    """Return the planner's snapshot: the pools' nodes and active groups with their members.

    Nodes that are up are usable; drained nodes are in the snapshot cordoned (the members a
    group has on one keep running; the planner never pins a new member to it, and it still
    counts in the pool's capacity); down nodes are left out (their jobs are resubmitted by
    `node_state_changed`). A member's profile counts its remaining iterations (what the
    pages' meta-iterations and SLO chances model); the planner reads `planner_input`.
    """
    return _read(whole_run=False)[0]


def planner_input() -> tuple[ClusterState, dict[str, JobProgress]]:
    """Return the snapshot as the planner reads it, in the simulator's terms, and the
    running members' progress.

    Each member's profile counts all its iterations and its `JobProgress` says what it has
    done: iterations done (the job's `iterations_done`), when its SLO clock started (its
    first admission: its first placement that is not a profiling run, so a yield's wait
    in the queue counts) and its moves (its placements that ended `moved` or `yielded`:
    services.moves; a yield is a re-plan, as the simulator counts it); so the expected-cost
    objective and consolidation read its remaining iterations as the simulator's do.

    With drift re-planning on (ROLLMUX_DRIFT_REPLAN), a short member is planned stricter
    (`held_young`), as the simulator's re-planning runs hold it for its whole run.
    """
    return _read(whole_run=True)


def held_young(profile: JobProfile, *, iterations: int) -> JobProfile:
    """Return `profile` (of a job of `iterations` in all: a running member's, an arriving
    job's, or the what-if preview's) as the planner
    plans it: with drift re-planning on, a job too short to be re-planned in time is held
    to scheduler.replan.young_profile for its whole run, its own admission included (it
    joins a group, and a newcomer joins its group, only if it would keep its SLO even were
    its run to shrink), else as it is; as the simulator's re-planning runs plan it."""
    from scheduler.replan import admission_profile

    # the core decides on the whole run (a resubmitted job's profile counts what is left)
    return admission_profile(
        profile, run_iterations=iterations, young=settings.ROLLMUX_DRIFT_REPLAN
    )


def resume_profile(job: Job, asked: JobProfile, now: datetime) -> JobProfile:
    """Return `asked` (a queued job's profile, before it is held young: `held_young`) with
    what is left of its SLO budget when the job is back from a yield (its last placement
    ended `yielded`), as the simulator's `_resume` resubmits it (scheduler.replan.
    admission_profile with the job's outlook now, on its SLO clock from its first
    admission, profile seconds, and its restart); else `asked` as it is. One query for a
    job placed before, none for a new one: this gathers the inputs, the rule is the core's."""
    from scheduler.planner.consolidation import restart_seconds
    from scheduler.replan import admission_profile, planned_outlook

    if not job.attempts:
        return asked
    rows = list(
        PlacementRow.objects.filter(job=job)
        .exclude(strategy=Strategy.PROFILE)
        .values_list("attempt", "end_reason", "created_at")
    )
    if not any(a == job.attempts and end == EndReason.YIELDED for a, end, _ in rows):
        return asked
    first = min(created for _, _, created in rows)
    scale = time_scale_of(job.runner, job.time_scale)
    elapsed = max(0.0, (now - first).total_seconds()) * scale
    outlook = planned_outlook(
        replace(asked, iterations=job.iterations),
        remaining=job.iterations - job.iterations_done,
        elapsed_s=elapsed,
        done=job.iterations_done,
    )
    # held young after (held_young), as the simulator's _resume holds it
    return admission_profile(
        asked,
        run_iterations=job.iterations,
        young=False,
        budget=outlook,
        restart_s=restart_seconds(asked),
    )


def _read(*, whole_run: bool) -> tuple[ClusterState, dict[str, JobProgress]]:
    prices = current_prices()
    spec = cluster_spec(prices)
    groups = list(ExecutionGroup.objects.filter(released_at__isnull=True).order_by("pk"))
    allocations: dict[int, list[NodeAllocation]] = defaultdict(list)
    for alloc in NodeAllocation.objects.filter(end__isnull=True).select_related(
        "node", "node__cluster"
    ):
        allocations[alloc.group_id].append(alloc)
    by_group: dict[int, list[PlacementRow]] = defaultdict(list)
    for p in open_placements([g.pk for g in groups]):
        by_group[p.group_id].append(p)
    # A profiling run has its nodes to itself (services.profiling): the planner sees
    # neither its group nor its nodes (they count in the capacity: a job needing them waits).
    profiles = {g.pk for g in groups if any(p.strategy == Strategy.PROFILE for p in by_group[g.pk])}
    held = {a.node.name for g in profiles for a in allocations[g]}
    nodes = [
        core_node(n, prices)
        for n in NodeRow.objects.select_related("cluster", "gpu_type")
        .filter(state__in=CAPACITY_STATES)
        .exclude(name__in=held)
        .order_by("name")
    ]
    usable = {n.name for n in nodes}
    # the members' measured warm and cold starts (one query): their switch overhead, restart
    measured = starts.measured_starts(p.job_id for ps in by_group.values() for p in ps)
    core_groups = []
    for g in groups:
        if g.pk in profiles:
            continue
        allocs = [a for a in allocations[g.pk] if a.node.name in usable]
        if not allocs and not by_group[g.pk]:
            continue
        group = core_group(g, allocs, by_group[g.pk], whole_run=whole_run)
        group = starts.group_with_measured_starts(group, measured)
        if whole_run:  # the planner's view
            group = _young_held(group, by_group[g.pk])
        core_groups.append(group)
    state = ClusterState(spec=spec, nodes=tuple(nodes), groups=tuple(core_groups))
    if not whole_run:
        return state, {}
    done = {p.job_id: p.job.iterations_done for g in core_groups for p in by_group[int(g.id)]}
    return state, _progress(done)


def group_states(group_ids: Iterable[int]) -> dict[int, Group]:
    """Return the core Group of each of these live groups as `cluster_state()` has it
    (remaining iterations, measured starts; a profiling run's group left out), without
    reading the pools' nodes: what the pages' meta-iterations and SLO chances need, where
    the whole snapshot reads every node (10,000 at a fleet's size: seconds, issue 25)."""
    ids = sorted(set(group_ids))
    if not ids:
        return {}
    groups = list(
        ExecutionGroup.objects.filter(pk__in=ids, released_at__isnull=True).order_by("pk")
    )
    allocations: dict[int, list[NodeAllocation]] = defaultdict(list)
    for alloc in NodeAllocation.objects.filter(end__isnull=True, group_id__in=ids).select_related(
        "node", "node__cluster"
    ):
        allocations[alloc.group_id].append(alloc)
    by_group: dict[int, list[PlacementRow]] = defaultdict(list)
    for p in open_placements(ids):
        by_group[p.group_id].append(p)
    measured = starts.measured_starts(p.job_id for ps in by_group.values() for p in ps)
    out: dict[int, Group] = {}
    for g in groups:
        placements = by_group[g.pk]
        if any(p.strategy == Strategy.PROFILE for p in placements):
            continue
        # (a node of a live group is not held by a profiling run: it is in one group)
        allocs = [a for a in allocations[g.pk] if a.node.state in CAPACITY_STATES]
        if not allocs and not placements:
            continue
        group = core_group(g, allocs, placements, whole_run=False)
        out[g.pk] = starts.group_with_measured_starts(group, measured)
    return out


def _young_held(group: Group, placements: list[PlacementRow]) -> Group:
    """Return `group` with its members as the planner plans them (`held_young`)."""
    jobs = {job_id_str(p.job_id): p.job for p in placements}
    members = tuple(
        replace(m, job=held_young(m.job, iterations=jobs[m.job.id].iterations))
        for m in group.members
    )
    return replace(group, members=members)


def _progress(done: dict[int, int]) -> dict[str, JobProgress]:
    """Return the JobProgress of the members whose iterations done are `done` (by job id;
    see `planner_input`)."""
    from scheduler.planner.objective import JobProgress

    if not done:
        return {}
    first = dict(
        PlacementRow.objects.filter(job_id__in=list(done))
        .exclude(strategy=Strategy.PROFILE)
        .order_by()
        .values("job_id")
        .annotate(first=Min("created_at"))
        .values_list("job_id", "first")
    )
    moved = dict(
        PlacementRow.objects.filter(
            job_id__in=list(done), end_reason__in=(EndReason.MOVED, EndReason.YIELDED)
        )
        .order_by()
        .values("job_id")
        .annotate(n=Count("pk"))
        .values_list("job_id", "n")
    )
    return {
        job_id_str(pk): JobProgress(
            admitted_s=first[pk].timestamp() if pk in first else 0.0,
            iterations_done=n,
            moves=moved.get(pk, 0),
        )
        for pk, n in done.items()
    }
