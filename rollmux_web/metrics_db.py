"""Gauges and counters read from the database on each scrape of /metrics, and the view.

The database is the system of record, so these are right whichever process answers and
survive restarts: live jobs by state, all-time finished jobs (a counter), pending jobs by
reason class, nodes, GPUs allocated and busy per pool, the bubble fraction per pool, cost
per hour per tenant, quota usage against quota, migrations, and the latest mean reward of
each running job that reports one. Every tenant gets every live
state and reason class, zeros included, so a rate or an alert does not see a series vanish.
"""

from __future__ import annotations

import hmac
import math
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rollmux_web.metrics import process_registry

# Why a queued job waits, as a small closed set of label values (the full reason is on the
# job page). Checked in order against the reason the planner (or a resubmission) wrote.
REASON_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("no_pool", ("waiting: ",)),
    ("resubmitted", ("resubmitted",)),
    ("drained", ("drained node",)),
    ("host_memory", ("host memory room",)),
    ("capacity", ("needs ", "no capacity", "no existing co-execution group")),
)
REASON_CLASS_NAMES = ("not_planned", *(name for name, _ in REASON_CLASSES), "other")


def reason_class(reason: str) -> str:
    """Return the label value for why a queued job waits (`not_planned`: no pass saw it yet)."""
    if not reason:
        return "not_planned"
    for name, needles in REASON_CLASSES:
        if any(n in reason for n in needles):
            return name
    return "other"


class JobCollector(Collector):
    """rollmux_jobs (live states), rollmux_jobs_finished_total, rollmux_pending_jobs,
    rollmux_job_migrations_total."""

    def collect(self) -> Iterator[Metric]:
        from rollmux_web.accounts.models import Tenant
        from rollmux_web.id_sql import in_ids
        from rollmux_web.jobs.models import TERMINAL_STATUSES, Job, JobStatus
        from rollmux_web.workflow.models import Placement

        terminal = [str(s) for s in TERMINAL_STATUSES]
        live = [s for s in JobStatus.values if s not in terminal]
        # (grouped by the tenant's id, named here: no join of the ~100,000 jobs' rows; in
        # the (tenant, status) index's order, so PostgreSQL counts them off that index:
        # unordered, it scanned and hashed every job's row, ~60 ms more at a fleet's size)
        names = dict(Tenant.objects.values_list("pk", "name"))
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for status, tenant_id, n in (
            Job.objects.order_by("tenant_id", "status")
            .values("tenant_id", "status")
            .annotate(n=Count("*"))
        ).values_list("status", "tenant_id", "n"):
            counts[(status, names[tenant_id])] += n
        tenants = sorted(set(names.values()))
        jobs = GaugeMetricFamily(
            "rollmux_jobs",
            "Live jobs (queued, placed, running) by state and tenant",
            labels=["status", "tenant"],
        )
        finished = CounterMetricFamily(
            "rollmux_jobs_finished",
            "Jobs that reached a final state since the start, by state and tenant",
            labels=["status", "tenant"],
        )
        for tenant in tenants:
            for status in live:
                jobs.add_metric([status, tenant], counts.get((status, tenant), 0))
            for status in terminal:
                finished.add_metric([status, tenant], counts.get((status, tenant), 0))
        yield jobs
        yield finished

        pending: dict[tuple[str, str], int] = defaultdict(int)
        for tenant, reason in Job.objects.filter(status=JobStatus.QUEUED).values_list(
            "tenant__name", "reason"
        ):
            pending[(reason_class(reason), tenant)] += 1
        family = GaugeMetricFamily(
            "rollmux_pending_jobs",
            "Queued jobs by why they wait and tenant",
            labels=["reason_class", "tenant"],
        )
        for tenant in tenants:
            for name in REASON_CLASS_NAMES:
                family.add_metric([name, tenant], pending.get((name, tenant), 0))
        yield family

        # A migration: a job's placement in a different group than its previous attempt's
        # (a resubmitted job the planner moved). Counted from the rows, so it is exact.
        # (the resubmitted jobs first, by their partial index, then their placements by
        # key: joined, PostgreSQL scanned every job's row for the few)
        resubmitted = dict(
            Job.objects.filter(attempts__gt=1).order_by().values_list("pk", "tenant_id")
        )
        rows = (
            Placement.objects.filter(in_ids("job_id", set(resubmitted)))
            .order_by("job_id", "attempt")
            .values_list("job_id", "group_id")
        )
        moved: dict[str, int] = defaultdict(int)
        last: tuple[int, int] | None = None
        for job_id, group_id in rows:
            tenant = names[resubmitted[job_id]]
            if last is not None and last[0] == job_id and last[1] != group_id:
                moved[tenant] += 1
            last = (job_id, group_id)
        migrations = CounterMetricFamily(
            "rollmux_job_migrations",
            "Placements of a resubmitted job into another co-execution group, by tenant",
            labels=["tenant"],
        )
        for tenant in tenants:
            migrations.add_metric([tenant], moved.get(tenant, 0))
        yield migrations


class TrainingCollector(Collector):
    """rollmux_job_reward_mean: the latest mean reward of each running job that reports one.

    The one series here with a job label. Cardinality: one series per *running* job (jobs
    hold GPUs while they run, so their number is bounded by the cluster, and a job's series
    ends when it does), written once per scrape, not once per iteration. The per-iteration
    metrics themselves (reward, loss, KL, ...) are not Prometheus series: a job x iteration
    or job x metric label would grow without bound; they are in the database, on the job
    page and at /api/v1/jobs/{id}/metrics/.
    """

    def collect(self) -> Iterator[Metric]:
        from django.db.models import OuterRef, Subquery

        from rollmux_web.jobs.models import Job, JobStatus
        from rollmux_web.workflow.models import IterationMetrics

        latest = IterationMetrics.objects.filter(
            job=OuterRef("pk"), reward_mean__isnull=False
        ).order_by("-iteration")
        rows = (
            Job.objects.filter(status=JobStatus.RUNNING)
            .annotate(reward=Subquery(latest.values("reward_mean")[:1]))
            .filter(reward__isnull=False)
            .values_list("pk", "tenant__name", "reward")
            .order_by("pk")
        )
        family = GaugeMetricFamily(
            "rollmux_job_reward_mean",
            "The mean reward of a running job's latest iteration that reported one",
            labels=["job", "tenant"],
        )
        for pk, tenant, reward in rows:
            family.add_metric([str(pk), tenant], reward)
        yield family


class InventoryCollector(Collector):
    """rollmux_nodes, rollmux_gpu_price_dollars_per_gpu_hour, and per pool: rollmux_pool_gpus,
    rollmux_pool_gpus_allocated, rollmux_pool_gpus_busy, rollmux_pool_bubble_ratio."""

    def collect(self) -> Iterator[Metric]:
        from rollmux_web.inventory.models import Cluster, Node, NodeState
        from rollmux_web.inventory.selectors import current_prices
        from rollmux_web.workflow.models import NodeAllocation, PhaseRecord, PhaseState

        nodes = GaugeMetricFamily(
            "rollmux_nodes", "Nodes by GPU type and state", labels=["gpu_type", "state"]
        )
        counts = {
            (r["gpu_type__name"], r["state"]): r["n"]
            for r in Node.objects.values("gpu_type__name", "state").annotate(n=Count("id"))
        }
        prices = current_prices()
        for gpu_type in sorted(set(prices) | {g for g, _ in counts}):
            for state in NodeState.values:
                nodes.add_metric([gpu_type, state], counts.get((gpu_type, state), 0))
        yield nodes
        price = GaugeMetricFamily(
            "rollmux_gpu_price_dollars_per_gpu_hour",
            "Price in force now per GPU-hour, by GPU type",
            labels=["gpu_type"],
        )
        for name, value in sorted(prices.items()):
            price.add_metric([name], float(value))
        yield price

        # Busy: a node that runs a phase now. Allocated: a node held by a co-execution group
        # (busy or idle). The bubble fraction is the allocated GPUs that are idle now.
        busy_names = {
            name
            for names in PhaseRecord.objects.filter(state=PhaseState.RUNNING).values_list(
                "node_names", flat=True
            )
            for name in names or ()
        }
        pools = {c.pk: c for c in Cluster.objects.select_related("gpu_type")}
        # (summed in the database, and only the allocated nodes read: a fleet has 10,000)
        capacity: dict[int, int] = defaultdict(int)
        capacity.update(
            Node.objects.exclude(state=NodeState.DOWN)
            .order_by()
            .values("cluster_id")
            .annotate(gpus_up=Sum("gpus"))
            .values_list("cluster_id", "gpus_up")
        )
        allocated: dict[int, int] = defaultdict(int)
        busy: dict[int, int] = defaultdict(int)
        for cluster_id, gpus, name in (
            NodeAllocation.objects.filter(end__isnull=True)
            .order_by()
            .values_list("node__cluster_id", "node__gpus", "node__name")
        ):
            allocated[cluster_id] += gpus
            if name in busy_names:
                busy[cluster_id] += gpus
        labels = ["pool", "kind", "gpu_type"]
        families = {
            "cap": GaugeMetricFamily(
                "rollmux_pool_gpus",
                "GPUs of the pool's nodes that are up or drained",
                labels=labels,
            ),
            "alloc": GaugeMetricFamily(
                "rollmux_pool_gpus_allocated",
                "GPUs of the pool held by co-execution groups (busy or idle)",
                labels=labels,
            ),
            "busy": GaugeMetricFamily(
                "rollmux_pool_gpus_busy",
                "Allocated GPUs of the pool running a phase now",
                labels=labels,
            ),
            "bubble": GaugeMetricFamily(
                "rollmux_pool_bubble_ratio",
                "Fraction of the pool's allocated GPUs that are idle now (0 when none is allocated)",
                labels=labels,
            ),
        }
        for pk, pool in sorted(pools.items(), key=lambda kv: kv[1].name):
            values = [pool.name, pool.kind, pool.gpu_type.name]
            families["cap"].add_metric(values, capacity[pk])
            families["alloc"].add_metric(values, allocated[pk])
            families["busy"].add_metric(values, busy[pk])
            ratio = (allocated[pk] - busy[pk]) / allocated[pk] if allocated[pk] else 0.0
            families["bubble"].add_metric(values, ratio)
        yield from families.values()


def cost_per_hour_by_tenant() -> dict[str, Decimal]:
    """Return what each tenant's open placements cost per hour now.

    Every node held by a group costs GPUs x today's price per hour, busy or idle; the rate
    of a node is split evenly among the open placements pinned to it (the cost report splits
    busy time by use and idle time by the members pinned, which averages to this over time).
    """
    from rollmux_web.id_sql import in_ids
    from rollmux_web.inventory.selectors import current_prices
    from rollmux_web.jobs.models import Job
    from rollmux_web.workflow.models import NodeAllocation, Placement

    prices = current_prices()
    rate = {
        node_id: Decimal(gpus) * prices.get(gpu_type, Decimal("0"))
        for node_id, gpus, gpu_type in NodeAllocation.objects.filter(end__isnull=True).values_list(
            "node_id", "node__gpus", "node__gpu_type__name"
        )
    }
    # the open placements' tenants, then their node pins (a placement pins a node once):
    # small reads, not a join of the pins to every job's row; the jobs by key (joined to
    # the placements, PostgreSQL hashed all ~100,000 jobs' rows: ~70 ms at a fleet's size)
    job_of = dict(
        Placement.objects.filter(ended_at__isnull=True).order_by().values_list("pk", "job_id")
    )
    tenant_of_job = dict(
        Job.objects.filter(in_ids("id", set(job_of.values())))
        .order_by()
        .values_list("pk", "tenant__name")
    )
    tenant_of = {pk: tenant_of_job[job_id] for pk, job_id in job_of.items()}
    pinned: dict[int, list[str]] = defaultdict(list)
    for relation in (Placement.rollout_nodes, Placement.train_nodes):
        # (the open placements' pins by their ids: joined to the placements, PostgreSQL
        # scanned a pin table's ~100,000 rows each)
        for node_id, placement_id in (
            relation.through.objects.filter(in_ids("placement_id", set(job_of)))
            .order_by()
            .values_list("node_id", "placement_id")
        ):
            pinned[node_id].append(tenant_of[placement_id])
    out: dict[str, Decimal] = defaultdict(Decimal)
    for node_id, node_rate in rate.items():
        tenants = pinned.get(node_id)
        if not tenants:
            continue  # held by a group whose last member is leaving: released on commit
        for tenant in tenants:
            out[tenant] += node_rate / len(tenants)
    return dict(out)


class TenantCollector(Collector):
    """rollmux_tenant_cost_dollars_per_hour and quota usage against quota per tenant and GPU
    type (the figures /quotas/ shows and submissions are checked against)."""

    def collect(self) -> Iterator[Metric]:
        from rollmux_web.accounts.models import Tenant
        from rollmux_web.quotas.selectors import quota_usage

        tenants = list(Tenant.objects.order_by("name"))
        costs = cost_per_hour_by_tenant()
        cost = GaugeMetricFamily(
            "rollmux_tenant_cost_dollars_per_hour",
            "What the tenant's placed jobs cost per hour now (their share of allocated nodes)",
            labels=["tenant"],
        )
        for tenant in tenants:
            cost.add_metric([tenant.name], float(costs.get(tenant.name, Decimal("0"))))
        yield cost

        labels = ["tenant", "gpu_type"]
        fam = {
            name: GaugeMetricFamily(f"rollmux_quota_{name}", text, labels=labels)
            for name, text in (
                ("gpus_limit", "GPUs the tenant's live jobs may request at once"),
                ("gpus_requested", "GPUs requested by the tenant's live jobs"),
                ("gpu_hours_limit", "Busy GPU-hours the tenant may use this month"),
                ("gpu_hours_used", "Busy GPU-hours the tenant used this month"),
                ("budget_dollars_limit", "Dollars the tenant may spend this month"),
                ("budget_dollars_used", "Dollars of busy GPU time this month at today's price"),
            )
        }
        for usage in quota_usage(tenants=tenants, now=timezone.now()):
            q = usage.quota
            values = [q.tenant.name, q.gpu_type.name]
            fam["gpus_requested"].add_metric(values, usage.gpus_requested)
            fam["gpu_hours_used"].add_metric(values, usage.gpu_hours_month)
            fam["budget_dollars_used"].add_metric(values, usage.usd_month)
            # a limit that is not set has no series: "used / limit" exists only where capped
            if q.ceiling is not None:
                fam["gpus_limit"].add_metric(values, q.ceiling)
            if q.monthly_gpu_hours is not None:
                fam["gpu_hours_limit"].add_metric(values, q.monthly_gpu_hours)
            if q.monthly_budget_usd is not None:
                fam["budget_dollars_limit"].add_metric(values, float(q.monthly_budget_usd))
        yield from fam.values()
        yield from _fair_share_families(labels)


def _fair_share_families(labels: list[str]) -> Iterator[Metric]:
    """rollmux_tenant_share (1 = its weighted share), rollmux_tenant_borrowed_gpus,
    rollmux_tenant_lent_gpus, rollmux_tenant_nominal_gpus per tenant and GPU type
    (workflow.fairshare.share_rows: the quotas page's figures)."""
    from rollmux_web.workflow.fairshare import share_rows

    fam = {
        name: GaugeMetricFamily(f"rollmux_tenant_{name}", text, labels=labels)
        for name, text in (
            ("share", "The tenant's weighted share of the GPU type (1 = its fair share)"),
            ("borrowed_gpus", "GPUs the tenant holds above its nominal quota"),
            ("lent_gpus", "GPUs of the tenant's nominal quota other tenants borrow"),
            ("nominal_gpus", "The tenant's nominal quota (GPUs)"),
        )
    }
    for row in share_rows(timezone.now()):
        values = [row.tenant, row.gpu_type]
        if math.isfinite(row.share):
            fam["share"].add_metric(values, row.share)
        fam["borrowed_gpus"].add_metric(values, row.borrowed)
        fam["lent_gpus"].add_metric(values, row.lent)
        fam["nominal_gpus"].add_metric(values, row.nominal)
    yield from fam.values()


def database_registry() -> CollectorRegistry:
    """Return a registry of the database collectors (built per scrape: it holds no state)."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in (
        JobCollector(),
        TrainingCollector(),
        InventoryCollector(),
        TenantCollector(),
    ):
        registry.register(collector)
    return registry


def _authorized(request: HttpRequest) -> bool:
    token = getattr(settings, "ROLLMUX_METRICS_TOKEN", "")
    if not token:
        # Open only in embedded mode (make run, tests): production without a token is closed.
        return bool(getattr(settings, "ROLLMUX_EMBEDDED", True))
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve the Prometheus exposition: process counters plus gauges read from the database."""
    if not _authorized(request):
        response = HttpResponse(
            "metrics token required (set ROLLMUX_METRICS_TOKEN and send it as a Bearer token)\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body = generate_latest(process_registry()) + generate_latest(database_registry())
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
