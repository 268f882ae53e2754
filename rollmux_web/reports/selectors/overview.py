"""The landing page: pools (busy, idle, free nodes), live groups, $/h now and last day, queue."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db.models import Q

from rollmux_web.accounts.access import visible_tenant_ids
from rollmux_web.id_sql import in_ids
from rollmux_web.inventory.models import Cluster, Node, NodeState, PoolKind
from rollmux_web.inventory.selectors import PriceBook, price_book
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.jobs.selectors import jobs_drift
from rollmux_web.reports.selectors._time import now_or, us
from rollmux_web.reports.selectors.cost_figures import CENT, cents
from rollmux_web.reports.selectors.cost_recent import recent_spend
from rollmux_web.reports.selectors.groups import members_by_group
from rollmux_web.workflow.access import groups_for_user
from rollmux_web.workflow.models import NodeAllocation, PhaseRecord, PhaseState, Placement, Strategy
from rollmux_web.workflow.selectors import live_group_states
from scheduler.roundrobin import plan_meta_iteration


@dataclass
class PoolStatus:
    name: str
    kind: str
    gpu_type: str
    total: int
    busy: int
    idle: int
    free: int
    unavailable: int  # drained + down
    drained: int = 0
    draining: int = 0  # drained nodes still running the members they had
    down: int = 0


@dataclass
class GroupStatus:
    id: int
    members: list[dict[str, Any]]
    rollout_nodes: int
    train_nodes: int
    cost_per_hour: Decimal
    t_cycle: float | None = None
    t_load: float | None = None
    saturated: bool | None = None
    utilisation: Any = None
    profile: bool = False  # a job's profiling run (alone, no meta-iteration to show)


OVERVIEW_GROUPS = 50  # live groups the overview lists (the groups list has them all)


@dataclass
class Overview:
    pools: list[PoolStatus]
    groups: list[GroupStatus]
    cost_per_hour_now: Decimal
    cost_last_day: Decimal
    waiting: list[dict[str, Any]]
    meta_note: str = ""
    drifting: list[dict[str, Any]] = field(default_factory=list)  # jobs past their estimates
    cost_is_share: bool = False  # cost_per_hour_now is the viewer's tenants' share
    groups_total: int = 0  # live groups the viewer may see (`groups`: the first of them)

    @property
    def cost_per_hour_last_day(self) -> Decimal:
        return (self.cost_last_day / 24).quantize(CENT, rounding=ROUND_HALF_UP)


def pool_statuses(allocated_nodes: set[int]) -> list[PoolStatus]:
    """Return each pool's nodes by what they do now.

    A drained node counts as drained whatever it does (it takes no new member); `draining`
    says how many of those still run the members they had. busy / idle / free are the
    nodes that are up: allocated with a phase running, allocated without, not allocated.
    """
    running_names: set[str] = set()
    for names in PhaseRecord.objects.filter(
        state=PhaseState.RUNNING, finished_at__isnull=True
    ).values_list("node_names", flat=True):
        running_names.update(names)
    out = []
    for cluster in Cluster.objects.select_related("gpu_type").order_by("kind", "name"):
        # (unordered: counted only; the nodes' ordering sorted 5,000 names a pool)
        nodes = list(
            Node.objects.filter(cluster=cluster).order_by().values_list("id", "name", "state")
        )
        up = [(nid, name) for nid, name, st in nodes if st == NodeState.UP]
        drained = [nid for nid, _, st in nodes if st == NodeState.DRAINED]
        busy = sum(1 for nid, name in up if nid in allocated_nodes and name in running_names)
        idle = sum(1 for nid, name in up if nid in allocated_nodes and name not in running_names)
        free = sum(1 for nid, _ in up if nid not in allocated_nodes)
        out.append(
            PoolStatus(
                name=cluster.name,
                kind=str(PoolKind(cluster.kind).label),
                gpu_type=cluster.gpu_type.name,
                total=len(nodes),
                busy=busy,
                idle=idle,
                free=free,
                unavailable=len(nodes) - busy - idle - free,
                drained=len(drained),
                draining=sum(1 for nid in drained if nid in allocated_nodes),
                down=sum(1 for _, _, st in nodes if st == NodeState.DOWN),
            )
        )
    return out


def cluster_overview(*, user: Any, now: datetime | None = None) -> Overview:
    """Return pools (busy/idle/free nodes), live groups, $/h now and last day, waiting jobs."""
    now_ = now_or(now)
    tenant_ids = visible_tenant_ids(user)
    prices = price_book()
    open_allocs = list(
        NodeAllocation.objects.filter(end__isnull=True).values_list(
            "node_id", "group_id", "node__gpus", "node__gpu_type_id", "node__cluster__kind"
        )
    )
    pools = pool_statuses({a[0] for a in open_allocs})
    # live groups the user may see
    live = groups_for_user(user=user).filter(released_at__isnull=True)
    live_ids = list(live.values_list("id", flat=True))
    members = members_by_group(live_ids, tenant_ids)
    rate: dict[int, Decimal] = defaultdict(Decimal)
    counts: dict[int, dict[str, int]] = defaultdict(lambda: {"rollout": 0, "train": 0})
    for _nid, gid, gpus, tid, kind in open_allocs:
        rate[gid] += prices.price_at(tid, now_) * gpus
        counts[gid][kind] = counts[gid].get(kind, 0) + 1
    profiling = set(
        Placement.objects.filter(
            group_id__in=live_ids, strategy=Strategy.PROFILE, ended_at__isnull=True
        ).values_list("group_id", flat=True)
    )
    groups = [
        GroupStatus(
            id=gid,
            profile=gid in profiling,
            members=[m for m in members.get(gid, []) if m["active"]],
            rollout_nodes=counts[gid]["rollout"],
            train_nodes=counts[gid]["train"],
            cost_per_hour=rate[gid].quantize(CENT, rounding=ROUND_HALF_UP),
        )
        for gid in sorted(live_ids)
    ]
    groups_total = len(groups)
    cost_now = sum((g.cost_per_hour for g in groups), Decimal(0))  # (a tenant: its share)
    # the page lists the first OVERVIEW_GROUPS (a fleet has hundreds live: their meta-
    # iterations and rows took seconds); the groups list has them all
    groups = groups[:OVERVIEW_GROUPS]
    note = _fill_meta_iterations(groups)
    if tenant_ids is None:
        # every allocated node-second is billed to a member, busy or idle: the fleet's last
        # day is its allocations' cost, read without the day's phases (about 100,000 at a
        # fleet's size, seconds through the cost engine; this page polls)
        cost_last_day = cents(allocated_cost(t0=now_ - timedelta(days=1), t1=now_, prices=prices))
    else:
        # the tenants' lines' exact busy and idle sums, each rounded once (the cost report's
        # rule for a row), from the kept closed hours and the engine for the edges
        busy, idle = recent_spend(
            tenant_ids=tenant_ids, t0=now_ - timedelta(days=1), t1=now_, now=now_, prices=prices
        )
        cost_last_day = cents(busy) + cents(idle)
    # (a job without phase times waits for free nodes for its profiling run too)
    waiting_qs = Job.objects.filter(
        status__in=(JobStatus.QUEUED, JobStatus.PROFILING),
        placements__isnull=False,
        placements__ended_at__isnull=True,
    )
    waiting_qs = (
        Job.objects.filter(status__in=(JobStatus.QUEUED, JobStatus.PROFILING))
        .exclude(pk__in=waiting_qs.values("pk"))  # (a profile that runs does not wait)
        .select_related("tenant")
    )
    if tenant_ids is not None:
        waiting_qs = waiting_qs.filter(tenant_id__in=tenant_ids)
    running_qs = Job.objects.filter(status=JobStatus.RUNNING)
    if tenant_ids is not None:
        running_qs = running_qs.filter(tenant_id__in=tenant_ids)
    running = list(running_qs.select_related("tenant")[:200])
    drift = jobs_drift(running)
    drifting = [
        {"id": j.pk, "name": j.name, "tenant": j.tenant.name, "drift": drift[j.pk]}
        for j in running
        if drift[j.pk]
    ]
    waiting = [
        {
            "id": j.pk,
            "name": j.name,
            "tenant": j.tenant.name,
            "submitted_at": j.submitted_at,
            "reason": j.reason or "waiting for the next planning pass",
        }
        for j in waiting_qs.order_by("-priority", "submitted_at")[:50]
    ]
    if tenant_ids is not None:
        cost_now = _share_per_hour_now(open_allocs, tenant_ids, prices, now_)
    return Overview(
        pools=pools,
        groups=groups,
        groups_total=groups_total,
        cost_per_hour_now=cost_now,
        cost_is_share=tenant_ids is not None,
        cost_last_day=cost_last_day,
        waiting=waiting,
        meta_note=note,
        drifting=drifting,
    )


def allocated_cost(*, t0: datetime, t1: datetime, prices: PriceBook) -> Decimal:
    """Return the exact cost of every node allocated to a group over [t0, t1) (an open
    allocation up to t1), GPUs x price history x time: the cost report's total over all
    tenants for that range, from the allocations alone."""
    lo, hi = us(t0), us(t1)
    total = Decimal(0)
    for type_id, gpus, start, end in (
        NodeAllocation.objects.filter(start__lt=t1)
        .filter(Q(end__gt=t0) | Q(end__isnull=True))
        .values_list("node__gpu_type_id", "node__gpus", "start", "end")
    ):
        a, b = max(us(start), lo), hi if end is None else min(us(end), hi)
        for index, micros in prices.split_us(type_id, a, b):
            total += prices.amount(type_id, index, micros, gpus)
    return total


def _share_per_hour_now(
    open_allocs: list[tuple[int, int, int, int, str]],
    tenant_ids: set[int],
    prices: PriceBook,
    now: datetime,
) -> Decimal:
    """Return the $/h the tenants' jobs hold now: each allocated node's $/h split equally among
    the live members pinned to it (a shared node is not charged in full to every tenant on it;
    over a period the cost report splits by busy time, with idle time shared the same way)."""
    pinned: dict[int, list[int]] = defaultdict(list)  # node -> tenant of each member on it
    # the live members first, then their pins by placement (a fleet's pin tables hold every
    # placement's nodes since the start: ~200,000 rows each, scanned whole when joined)
    # (and their jobs' tenants by id: a join made PostgreSQL scan every job)
    live_jobs = dict(Placement.objects.filter(ended_at__isnull=True).values_list("pk", "job_id"))
    tenant_of = dict(
        Job.objects.filter(in_ids("id", set(live_jobs.values())))
        .order_by()
        .values_list("pk", "tenant_id")
    )
    live = {pk: tenant_of[job_id] for pk, job_id in live_jobs.items()}
    for through in (Placement.rollout_nodes.through, Placement.train_nodes.through):
        for node_id, placement_id in through.objects.filter(
            in_ids("placement_id", set(live))
        ).values_list("node_id", "placement_id"):
            pinned[node_id].append(live[placement_id])
    total = Decimal(0)
    for node_id, _gid, gpus, type_id, _kind in open_allocs:
        members = pinned.get(node_id)
        if not members:
            continue
        mine = sum(1 for t in members if t in tenant_ids)
        total += prices.price_at(type_id, now) * gpus * mine / len(members)
    return total.quantize(CENT, rounding=ROUND_HALF_UP)


def _fill_meta_iterations(groups: list[GroupStatus]) -> str:
    """Fill T_cycle, T_load and saturation from the core's round-robin plan of each group."""
    if not groups:
        return ""
    try:
        by_id = live_group_states([g.id for g in groups])
    except Exception as exc:  # a broken snapshot must not take the landing page down
        return f"T_cycle and T_load unavailable: {exc}"
    for g in groups:
        core = by_id.get(g.id)
        if core is None or not core.members:
            continue
        mi = plan_meta_iteration(core, switch_overhead_s=settings.ROLLMUX_SWITCH_OVERHEAD_S)
        g.t_cycle = mi.t_cycle
        g.t_load = mi.t_load
        g.saturated = mi.saturated
        g.utilisation = mi.utilisation
    return ""
