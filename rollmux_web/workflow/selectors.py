"""Reads of the live workflow: groups, phase records and the planner's cluster snapshot.

Tenant scoping (decided here): a co-execution group is visible to a user when it has (or
had) a member of a tenant the user may see. Inside a visible group, members of tenants the
user may not see are listed without identity: `hidden: true`, no job id, name or tenant,
only the nodes they are pinned to and whether they are active, so the group's shape and
load stay understandable without leaking another team's work. Another tenant's job's
phases are a 404 (through the jobs app's visibility rule).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db.models import Prefetch, QuerySet
from django.http import Http404

from rollmux_web.accounts.access import member_hidden, visible_tenant_ids
from rollmux_web.accounts.selectors import visible_tenants
from rollmux_web.inventory.models import Node, PoolKind
from rollmux_web.jobs.models import Job
from rollmux_web.jobs.runners import time_scale_of as time_scale_of  # (re-exported)
from rollmux_web.workflow import converters, snapshot
from rollmux_web.workflow.access import groups_for_user
from rollmux_web.workflow.models import (
    ExecutionGroup,
    IterationMetrics,
    NodeAllocation,
    PhaseRecord,
    Placement,
)
from scheduler.model import ClusterSpec, ClusterState, Group, JobProfile
from scheduler.roundrobin import plan_meta_iteration

if TYPE_CHECKING:
    from scheduler.planner.objective import JobProgress


def cluster_spec() -> ClusterSpec:
    """Return the planner's cluster spec (pool GPU types, prices now, capacity: nodes up or
    drained); raises snapshot.NoPoolConfigured when a pool is missing."""
    return snapshot.cluster_spec()


def cluster_snapshot() -> ClusterState:
    """Return the core ClusterState of the live cluster: nodes up, drained nodes cordoned
    (no new member), and the active groups with their members (what the planner sees; the
    what-if preview calls this)."""
    return snapshot.cluster_state()


def live_group_states(group_ids: Iterable[int]) -> dict[int, Group]:
    """Return the core Group of each of these live groups, as `cluster_snapshot()` has it,
    without reading every node of the pools (`snapshot.group_states`)."""
    return snapshot.group_states(group_ids)


def planner_input() -> tuple[ClusterState, dict[str, JobProgress]]:
    """Return the snapshot as the planning pass reads it and the running members' progress
    (`snapshot.planner_input`: the simulator's terms; the what-if preview places on it)."""
    return snapshot.planner_input()


def planned_as(profile: JobProfile) -> JobProfile:
    """Return an arriving job's profile as the planning pass places it (`snapshot.held_young`:
    a short job stricter while drift re-planning is on)."""
    return snapshot.held_young(profile, iterations=profile.iterations)


def visible_groups(*, user: Any) -> QuerySet[ExecutionGroup]:
    """Return the groups with at least one member of a tenant the user may see."""
    return groups_for_user(user=user)


def _placements_prefetch() -> Prefetch[Any]:
    return Prefetch(
        "placements",
        queryset=Placement.objects.select_related("job", "job__tenant", "job__slo_class")
        .prefetch_related(
            # (a member's nodes are read by name only: group_data, converters.member)
            Prefetch("rollout_nodes", queryset=Node.objects.only("id", "name")),
            Prefetch("train_nodes", queryset=Node.objects.only("id", "name")),
        )
        .order_by("created_at", "pk"),
    )


# what group_data and converters.core_group read of a group's allocations and their nodes
ALLOCATION_FIELDS = (
    "id", "group_id", "node_id", "start", "end", "node__name", "node__gpus", "node__state",
    "node__cluster__kind", "node__gpu_type__name",
)  # fmt: skip


def _allocations_prefetch() -> Prefetch[Any]:
    # every allocation, not only the open ones: a released group lists the nodes it had
    return Prefetch(
        "allocations",
        queryset=NodeAllocation.objects.select_related("node", "node__cluster", "node__gpu_type")
        .only(*ALLOCATION_FIELDS)
        .order_by("node__name", "start", "pk"),
        to_attr="all_allocations",
    )


def group_list(*, user: Any, active: bool | None = None) -> QuerySet[ExecutionGroup]:
    """Return the visible groups, newest first; `active` filters on released_at."""
    qs = visible_groups(user=user)
    if active is True:
        qs = qs.filter(released_at__isnull=True)
    elif active is False:
        qs = qs.filter(released_at__isnull=False)
    return qs.prefetch_related(_placements_prefetch(), _allocations_prefetch()).order_by(
        "-created_at", "-pk"
    )


def group_get(*, user: Any, group_id: int) -> ExecutionGroup:
    """Return one visible group or raise Http404 (also for a group of other tenants only)."""
    group = group_list(user=user).filter(pk=group_id).first()
    if group is None:
        raise Http404("No such group")
    return group


def group_data(group: ExecutionGroup, *, user: Any) -> dict[str, Any]:
    """Return a group as API data: members, past ones too (others' hidden), nodes and its
    meta-iteration. A released group lists the nodes it had; an active one those it holds."""
    viewer = visible_tenant_ids(user)  # remembered on the user: one query per request
    placements = list(group.placements.all())  # type: ignore[attr-defined]
    members = []
    for p in placements:
        entry: dict[str, Any] = {
            "active": p.ended_at is None,
            "rollout_nodes": sorted(n.name for n in p.rollout_nodes.all()),
            "train_nodes": sorted(n.name for n in p.train_nodes.all()),
        }
        if not member_hidden(p.job, viewer):
            entry.update(
                hidden=False,
                job=p.job.pk,
                name=p.job.name,
                tenant=p.job.tenant.name,
                status=p.job.status,
                attempt=p.attempt,
                strategy=p.strategy,
                predicted_slowdown=p.predicted_slowdown,
                marginal_cost_per_hour=str(p.marginal_cost_per_hour),
                joined_at=p.created_at,
                left_at=p.ended_at,
                end_reason=p.end_reason,
                iterations_done=p.job.iterations_done,
                iterations=p.job.iterations,
            )
        else:
            entry.update(hidden=True)
        members.append(entry)
    every = getattr(group, "all_allocations", None)
    if every is None:
        every = list(
            NodeAllocation.objects.filter(group=group)
            .select_related("node", "node__cluster", "node__gpu_type")
            .order_by("node__name", "start", "pk")
        )
    allocations = [a for a in every if a.end is None]
    if group.released_at is not None:
        last: dict[int, NodeAllocation] = {}
        for a in every:  # each node's latest allocation to this group
            last[a.node_id] = a
        shown = sorted(last.values(), key=lambda a: a.node.name)
    else:
        shown = allocations
    nodes = [
        {
            "name": a.node.name,
            "pool": a.node.cluster.kind,
            "gpu_type": a.node.gpu_type.name,
            "gpus": a.node.gpus,
            "state": a.node.state,
            "since": a.start,
        }
        for a in shown
    ]
    data: dict[str, Any] = {
        "id": group.pk,
        "created_at": group.created_at,
        "released_at": group.released_at,
        "active": group.released_at is None,
        "members": members,
        "nodes": nodes,
        "rollout_nodes": [n["name"] for n in nodes if n["pool"] == PoolKind.ROLLOUT],
        "train_nodes": [n["name"] for n in nodes if n["pool"] == PoolKind.TRAIN],
        "meta_iteration": None,
    }
    active = [p for p in placements if p.ended_at is None]
    if active:
        core = converters.core_group(group, list(allocations), active)
        from django.conf import settings

        meta = plan_meta_iteration(core, switch_overhead_s=settings.ROLLMUX_SWITCH_OVERHEAD_S)
        data["meta_iteration"] = {
            "t_cycle_s": meta.t_cycle,
            "t_load_s": meta.t_load,
            "t_meta_s": meta.t_meta,
            "saturated": meta.saturated,
            "bottleneck": meta.bottleneck,
            "utilisation": {pool.value: u for pool, u in meta.utilisation.items()},
        }
    return data


def job_phases(*, user: Any, job_id: int) -> QuerySet[PhaseRecord]:
    """Return a visible job's phase records in execution order; Http404 for another
    tenant's job or an unknown one."""
    if not Job.objects.filter(pk=job_id, tenant__in=visible_tenants(user)).exists():
        raise Http404("No such job")
    return PhaseRecord.objects.filter(job_id=job_id).order_by("queued_at", "iteration", "pk")


def job_iteration_metrics(*, user: Any, job_id: int) -> QuerySet[IterationMetrics]:
    """Return a visible job's training metrics per iteration, in iteration order, with the
    placement (attempt, group) that wrote each; Http404 for another tenant's job or an
    unknown one."""
    if not Job.objects.filter(pk=job_id, tenant__in=visible_tenants(user)).exists():
        raise Http404("No such job")
    return (
        IterationMetrics.objects.filter(job_id=job_id)
        .select_related("placement")
        .order_by("iteration")
    )
