"""Read side of quotas and SLO classes (quotas are tenant-scoped)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.db import connection
from django.db.models import QuerySet, Sum

from rollmux_web.accounts.models import Tenant
from rollmux_web.accounts.selectors import visible_tenants
from rollmux_web.inventory.models import GpuType
from rollmux_web.quotas.models import Quota, SloClass

if TYPE_CHECKING:
    from rollmux_web.jobs.selectors import PoolNow


def quotas_for(tenant: Tenant | int | str) -> dict[str, Quota]:
    """Return the tenant's quotas by GPU type name (a GPU type without a row is unlimited)."""
    qs = Quota.objects.select_related("gpu_type", "tenant")
    if isinstance(tenant, Tenant):
        qs = qs.filter(tenant=tenant)
    elif isinstance(tenant, int):
        qs = qs.filter(tenant_id=tenant)
    else:
        qs = qs.filter(tenant__name=tenant)
    return {q.gpu_type.name: q for q in qs}


def quota_list(
    *, user: Any, tenant: str | None = None, gpu_type: str | None = None
) -> QuerySet[Quota]:
    """Return the quotas of the tenants the user may see."""
    qs = Quota.objects.select_related("tenant", "gpu_type").filter(tenant__in=visible_tenants(user))
    if tenant:
        qs = qs.filter(tenant__name=tenant)
    if gpu_type:
        qs = qs.filter(gpu_type__name=gpu_type)
    return qs.order_by("tenant__name", "gpu_type__name")


def slo_class_list() -> QuerySet[SloClass]:
    return SloClass.objects.order_by("slowdown", "name")


# --- usage against quotas ----------------------------------------------------------------------


@dataclass(frozen=True)
class QuotaUsage:
    """One quota with what its tenant uses of it: the numbers job submission checks.

    `gpus_requested` counts the GPUs *requested* by the tenant's live jobs (queued, placed
    or running), as Kueue charges quota by the requests of admitted workloads: a queued job
    counts, or a tenant could queue past its cap, and a job packed onto a node it shares
    counts its full request. The month's figures are busy GPU time from phase records.
    """

    quota: Quota
    pool_kinds: tuple[str, ...]  # the pools ("rollout", "train") whose GPUs are this type
    price_per_gpu_hour: Decimal  # today's price of the type (what budget checks charge)
    gpus_requested: int  # by the tenant's live jobs, on the pools of this type
    gpu_hours_month: float  # busy GPU-hours of the tenant's phases on those pools this month
    usd_month: float  # gpu_hours_month at today's price

    @property
    def gpus_left(self) -> int | None:
        """Return how many more GPUs a job may request now (None: no cap): up to the
        nominal quota plus the borrowing limit (borrowed GPUs may be taken back)."""
        ceiling = self.quota.ceiling
        if ceiling is None:
            return None
        return max(ceiling - self.gpus_requested, 0)

    # The refusal messages and /quotas/ print these, so they round the same way.
    @property
    def gpu_hours_text(self) -> str:
        return f"{self.gpu_hours_month:.1f}"

    @property
    def usd_text(self) -> str:
        return f"${self.usd_month:,.2f}"

    # What is used up stops every submission on this GPU type (each asks for more): the
    # page flags it, as it flags a full GPU cap, before anyone is refused.
    @property
    def gpu_hours_used_up(self) -> bool:
        limit = self.quota.monthly_gpu_hours
        return limit is not None and self.gpu_hours_month >= limit

    @property
    def budget_used_up(self) -> bool:
        budget = self.quota.monthly_budget_usd
        return budget is not None and self.usd_month >= float(budget)


def month_start(now: datetime) -> datetime:
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def busy_gpu_hours_this_month(
    *, tenant_ids: Iterable[int], now: datetime
) -> dict[int, dict[str, float]]:
    """Return per tenant id the busy GPU-hours per pool kind of its phases this month.

    Usage is busy GPU time from phase records (a running phase counts up to `now`), not
    node allocations: a group's allocation is shared by its members and splitting its idle
    time among tenants is a reporting choice, while phase time belongs to exactly one job.
    """
    from rollmux_web.workflow.usage import busy_gpu_seconds

    # (archived jobs' phases count through their rollups: workflow.usage)
    seconds = busy_gpu_seconds(tenant_ids=tenant_ids, start=month_start(now), end=now)
    return {tid: {kind: s / 3600.0 for kind, s in kinds.items()} for tid, kinds in seconds.items()}


def quota_usage(
    *,
    tenants: Iterable[Tenant] | QuerySet[Tenant],
    now: datetime,
    lock: bool = False,
    pools: dict[str, PoolNow] | None = None,
    exclude_job: int | None = None,
    count_live: bool = True,
) -> list[QuotaUsage]:
    """Return every quota of the tenants with its usage now and this month.

    The one source of these numbers: job submission refuses with them and /quotas/ shows
    them, so a page and a refusal never disagree.

    With `lock` (a submission, inside its transaction, after it inserted its job and audit
    entry: `exclude_job` is that job, left out of the live count) the rows of the quotas
    with a GPU cap are locked (FOR UPDATE OF the quota only, in one order) just before the
    live jobs are counted, so two submissions of one tenant cannot both pass the "at once"
    check, and the lock is held only for that count, the checks and the commit (no other
    statement: everything else here, the prices, the month's usage, is read before it, and
    the inserts are made before it too); a tenant without a GPU cap takes no lock at all.
    Budgets need no lock: the month's usage comes from phase records, which submissions do
    not write (and with `lock` it is not read when no quota has a monthly limit). `pools`
    is a `pools_now()` read the caller has already made (a submission: the one its field
    checks used). `count_live=False` leaves `gpus_requested` at 0 and reads no live jobs
    (a caller checking the budgets alone).
    """
    from rollmux_web.jobs.selectors import pool_prices

    # 1. the quota rows (read, not locked yet)
    if isinstance(tenants, list | tuple) and connection.vendor == "postgresql":
        quotas = _quotas_of(tenants)  # (a submission's path: SQL, not the ORM)
    else:
        qs = Quota.objects.select_related("tenant", "gpu_type").filter(tenant__in=tenants)
        quotas = list(qs.order_by("tenant__name", "gpu_type__name"))
    if not quotas:
        return []
    tenant_ids = {q.tenant_id for q in quotas}
    # 2. which pools each GPU type serves, at what price now (both pools may share a type)
    kinds: dict[int, list[str]] = defaultdict(list)
    price: dict[int, Decimal] = {}
    for kind, pool in pool_prices(pools).items():
        if pool is not None:
            kinds[pool.gpu_type.pk].append(kind)
            price[pool.gpu_type.pk] = pool.price_per_gpu_hour
    # 3. busy GPU-hours this month, per tenant and pool kind (for an admission, `lock` or
    # `count_live=False`, only when a quota has a monthly limit to check them against)
    budgeted = any(
        q.monthly_gpu_hours is not None or q.monthly_budget_usd is not None for q in quotas
    )
    admission = lock or not count_live
    month = (
        busy_gpu_hours_this_month(tenant_ids=tenant_ids, now=now)
        if budgeted or not admission
        else {}
    )
    # 4. lock the capped quotas (by primary key: every submission locks in the same order,
    # so two cannot deadlock), re-reading their caps (an admin may have changed one), and
    # 5. count the GPUs requested by live jobs, per tenant and pool kind, after the lock:
    # that read sees every job an earlier holder of the lock committed
    capped = sorted(q.pk for q in quotas if q.max_gpus is not None)
    if lock and capped:
        caps, live = _lock_and_count(capped, tenant_ids, exclude_job)
        for q in quotas:
            if q.pk in caps:
                q.max_gpus, q.borrowing_limit = caps[q.pk]
    else:
        live = _live_gpus(tenant_ids, exclude_job) if count_live else {}
    out = []
    for q in quotas:
        pool_kinds = tuple(kinds.get(q.gpu_type_id, ()))
        p = price.get(q.gpu_type_id, Decimal("0"))
        requested = live.get(q.tenant_id, {})
        used = month.get(q.tenant_id, {})
        hours = sum(used.get(k, 0.0) for k in pool_kinds)
        out.append(
            QuotaUsage(
                quota=q,
                pool_kinds=pool_kinds,
                price_per_gpu_hour=p,
                gpus_requested=sum(requested.get(k, 0) for k in pool_kinds),
                gpu_hours_month=hours,
                usd_month=hours * float(p),
            )
        )
    return out


def _quotas_of(tenants: list[Tenant] | tuple[Tenant, ...]) -> list[Quota]:
    """Return the quotas of `tenants` as `Quota.objects.select_related("tenant", "gpu_type")`
    ordered by tenant and GPU type name loads them (the tenants are the objects given), in
    SQL: building that queryset cost more than running it, on every submission's path
    (tests/web/test_quota_usage.py checks the two agree)."""
    by_id = {t.pk: t for t in tenants}
    gpu_type_t = GpuType._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            "SELECT q.id, q.tenant_id, q.max_gpus, q.monthly_gpu_hours, q.monthly_budget_usd,"
            " q.borrowing_limit, q.lending_limit, q.weight,"
            " g.id, g.name, g.gpus_per_node, g.host_mem_gb"
            f" FROM {Quota._meta.db_table} q JOIN {gpu_type_t} g ON g.id = q.gpu_type_id"
            " WHERE q.tenant_id = ANY(%s)",
            [list(by_id)],
        )
        rows = cur.fetchall()
    out = []
    for pk, tenant_id, cap, hours, usd, borrow, lend, weight, type_id, name, per_node, mem in rows:
        gt = GpuType(id=type_id, name=name, gpus_per_node=per_node, host_mem_gb=mem)
        q = Quota(
            id=pk,
            tenant=by_id[tenant_id],
            gpu_type=gt,
            max_gpus=cap,
            monthly_gpu_hours=hours,
            monthly_budget_usd=usd,
            borrowing_limit=borrow,
            lending_limit=lend,
            weight=weight,
        )
        for obj in (gt, q):
            obj._state.adding, obj._state.db = False, connection.alias  # as the ORM loads it
        out.append(q)
    return sorted(out, key=lambda q: (q.tenant.name, q.gpu_type.name))


def _live_gpus(tenant_ids: Iterable[int], exclude_job: int | None) -> dict[int, dict[str, int]]:
    """Return the GPUs the tenants' live jobs request, per tenant id and pool kind."""
    from rollmux_web.jobs.models import Job
    from rollmux_web.jobs.selectors import ACTIVE_STATUSES

    qs = Job.objects.filter(tenant_id__in=list(tenant_ids), status__in=ACTIVE_STATUSES)
    if exclude_job is not None:
        qs = qs.exclude(pk=exclude_job)
    return {
        row["tenant_id"]: {"rollout": row["rollout"] or 0, "train": row["train"] or 0}
        for row in qs.values("tenant_id").annotate(
            rollout=Sum("rollout_gpus"), train=Sum("train_gpus")
        )
    }


def _lock_and_count(
    capped: list[int], tenant_ids: Iterable[int], exclude_job: int | None
) -> tuple[dict[int, tuple[int | None, int]], dict[int, dict[str, int]]]:
    """Lock the quota rows `capped` (FOR UPDATE, primary-key order) and return their caps
    (nominal, borrowing limit) as they are now and `_live_gpus` read after the lock was granted.

    On PostgreSQL in one round trip: the lock and the count are two statements of one
    query string (Django's psycopg cursor binds client-side, so the string goes out as one
    simple query). Each statement of it takes its own snapshot, so the count, which starts
    once the lock is granted, sees every job committed by the lock's previous holder (one
    statement locking and counting would count from the snapshot taken before it waited).
    The lock is then held for this round trip and the commit only, no Python in between
    but the checks: the tenant's other submissions queue on it for that long.
    """
    from rollmux_web.jobs.models import Job
    from rollmux_web.jobs.selectors import ACTIVE_STATUSES

    if connection.vendor != "postgresql":
        rows = Quota.objects.select_for_update().filter(pk__in=capped)
        caps = {
            pk: (cap, b) for pk, cap, b in rows.values_list("pk", "max_gpus", "borrowing_limit")
        }
        return caps, _live_gpus(tenant_ids, exclude_job)
    quota_t, job_t = Quota._meta.db_table, Job._meta.db_table
    sql = (
        f"SELECT id, max_gpus, borrowing_limit FROM {quota_t} WHERE id = ANY(%s)"
        " ORDER BY id FOR UPDATE;"
        f" SELECT tenant_id, SUM(rollout_gpus), SUM(train_gpus) FROM {job_t}"
        " WHERE tenant_id = ANY(%s) AND status = ANY(%s) AND id IS DISTINCT FROM %s"
        " GROUP BY tenant_id"
    )
    with connection.cursor() as cur:
        statuses = [str(s) for s in ACTIVE_STATUSES]
        cur.execute(sql, [capped, sorted(tenant_ids), statuses, exclude_job])
        caps = {int(pk): (cap, borrow) for pk, cap, borrow in cur.fetchall()}
        cur.nextset()
        live = {int(t): {"rollout": r or 0, "train": n or 0} for t, r, n in cur.fetchall()}
    return caps, live


def quota_usage_list(*, user: Any, now: datetime) -> list[QuotaUsage]:
    """Return the quotas and usage of the tenants the user may see (researchers: theirs)."""
    return quota_usage(tenants=visible_tenants(user), now=now)
