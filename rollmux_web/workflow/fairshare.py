"""Fair share on the live cluster (issue 22): the database's rows as the core's inputs.

The policy is `scheduler.fairshare` (pure; the simulator calls the same functions): this
module only reads. Pools are named by GPU type (a tenant's quota row is its share of that
type); a tenant with no quota row on a type, or a quota with no GPU cap, is unlimited
there as submission treats it: its nominal quota is the pool's whole capacity.

- `shares`, `holdings`, `loads`: the core's `Share`s, what each tenant's placed and running
  jobs hold per pool, and each tenant's `TenantLoad` (GPU-seconds from the phase records,
  the busy time the cost report charges, per node's GPU type, decayed with
  ROLLMUX_FAIR_SHARE_HALF_LIFE_S; what it holds; the entry penalty of its recent admissions);
- `queue_positions`: every queued job's position and why (`scheduler.fairshare.queue_order`),
  which the planning pass follows and the queue page, job page, API and CLI show;
- `share_rows`: per tenant and pool, nominal, borrowed, lent, decayed usage and share
  (the quotas page, the API, the metrics).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from array import array
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection
from django.db.models import F, Max, OuterRef, Subquery, Sum, TextField
from django.db.models.functions import Cast, TruncHour

from rollmux_web.accounts.models import Tenant
from rollmux_web.epoch_sql import epoch_s
from rollmux_web.inventory.models import Cluster, Node, NodeState
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.quotas.models import Quota
from rollmux_web.workflow.models import FairShareHour, PhaseRecord, Placement, Strategy
from scheduler.fairshare import (
    DEFAULT_PENALTY_HALF_LIFE_S,
    QueuedJob,
    QueuePosition,
    Share,
    ShareOf,
    TenantLoad,
    borrowed_share,
    decayed_usage,
    dominant_share,
    entry_penalty,
    queue_order,
    shares_by_tenant,
)

HOLDING = (JobStatus.PLACED, JobStatus.RUNNING)
# a phase older than this many half-lives weighs less than 0.1%: not read
HALF_LIVES_READ = 10


def half_life_s() -> float:
    return float(settings.ROLLMUX_FAIR_SHARE_HALF_LIFE_S)


def pool_types() -> dict[str, str]:
    """Return the GPU type name of each pool kind ("rollout", "train"): the first cluster
    of each kind, as the planner's cluster spec takes it."""
    out: dict[str, str] = {}
    for kind, name in Cluster.objects.order_by("pk").values_list("kind", "gpu_type__name"):
        out.setdefault(kind, name)
    return out


def capacity() -> dict[str, int]:
    """Return the GPUs of each GPU type on nodes up or drained (what a pool can ever hold)."""
    states = (NodeState.UP, NodeState.DRAINED)
    # (summed in the database: a fleet has 10,000 nodes, each read and sorted by name)
    rows = (
        Node.objects.filter(state__in=states)
        .order_by()
        .values("gpu_type__name")
        .annotate(gpus=Sum("gpus"))
        .values_list("gpu_type__name", "gpus")
    )
    return {name: int(gpus) for name, gpus in rows}


def job_gpus(rollout_gpus: int, train_gpus: int, types: Mapping[str, str]) -> dict[str, int]:
    """Return what a job holds per pool once admitted (its requests, as quotas count them)."""
    out: dict[str, int] = defaultdict(int)
    for kind, gpus in (("rollout", rollout_gpus), ("train", train_gpus)):
        if kind in types and gpus:
            out[types[kind]] += gpus
    return dict(out)


def shares(tenants: Iterable[str], cap: Mapping[str, int]) -> list[Share]:
    """Return the core's shares of `tenants` on every pool (module docstring: no quota row,
    or no GPU cap, is the pool's whole capacity)."""
    names = set(tenants)
    rows = {
        (t, g): (nominal, borrow, lend, weight)
        for t, g, nominal, borrow, lend, weight in Quota.objects.filter(
            tenant__name__in=names
        ).values_list(
            "tenant__name",
            "gpu_type__name",
            "max_gpus",
            "borrowing_limit",
            "lending_limit",
            "weight",
        )
    }
    out = []
    for tenant in sorted(names):
        for pool, size in sorted(cap.items()):
            nominal, borrow, lend, weight = rows.get((tenant, pool), (None, 0, None, 1.0))
            if nominal is None:
                out.append(Share(tenant, pool, max(size, 0), 0, None, float(weight)))
            else:
                lend = None if lend is None else min(lend, nominal)
                out.append(Share(tenant, pool, nominal, borrow, lend, float(weight)))
    return out


def holdings(types: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """Return tenant -> pool -> GPUs its placed and running jobs hold."""
    held: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    rows = Job.objects.filter(status__in=HOLDING).values_list(
        "tenant__name", "rollout_gpus", "train_gpus"
    )
    for tenant, r, t in rows:
        for pool, g in job_gpus(r, t, types).items():
            held[tenant][pool] += g
    return {t: dict(p) for t, p in held.items()}


# Closed hours' decayed sums, per process (issue 25: ten half-lives at a fleet's size are
# ~3.4 million phase records, seconds to group on every read of /quotas/ or /metrics): a
# phase's end is stamped when its report comes in, so an hour more than CLOSED_AFTER past
# holds no new phase. Per hour, per tenant and GPU type: the sum of its samples' GPU-seconds
# x 2^((end - hour start) / half-life), decayed to `now` as one term. The key (`usage_key`)
# names the half-life and the nodes' (name, GPU type, GPUs): a change of either reads them
# again. The retention beat keeps them in the database too (`FairShareHour`,
# services.fair_share_hours), so a fresh process reads those, not the raw window.
CLOSED_AFTER = timedelta(hours=1)
FILL_HOURS = 24  # more closed hours missing than this: the whole window in one query
_closed_hours: dict[str, dict[int, dict[tuple[str, str], float]]] = {}


def usage_key(h: float, nodes: list[tuple[str, str, int]]) -> str:
    """The key of closed hours' sums: the half-life and the nodes they were summed with."""
    return hashlib.sha256(repr((float(h), nodes)).encode()).hexdigest()


def _nodes() -> list[tuple[str, str, int]]:
    # (unordered in SQL, sorted here: the nodes' ordering sorts 10,000 names by collation)
    return sorted(Node.objects.order_by().values_list("name", "gpu_type__name", "gpus"))


def closed_hours(
    half_life: float | None = None,
) -> tuple[str, dict[int, dict[tuple[str, str], float]]]:
    """Return the current key and this process's kept closed hours under it (hour start,
    epoch s -> (tenant, GPU type) -> sum), as the last `usage_gpu_s` left them."""
    key = usage_key(half_life or half_life_s(), _nodes())
    return key, _closed_hours.get(key, {})


def _read_kept(key: str, closed: dict[int, Any], hours: list[datetime]) -> None:
    """Fill `closed` with the stored sums (`FairShareHour`) of those of `hours` stored
    under `key` (the floats as they were summed, as float64 bytes)."""
    wanted = {int(hr.timestamp()) for hr in hours}
    rows = FairShareHour.objects.filter(key=key, hour__gte=hours[0], hour__lte=hours[-1])
    for hour, tenants, sums in rows.values_list("hour", "tenants", "sums"):
        t = int(hour.timestamp())
        if t in wanted:
            closed[t] = dict(zip(_pairs(tenants), unpack_sums(sums), strict=True))


@lru_cache(maxsize=1024)
def _pairs(raw: str) -> tuple[tuple[str, str], ...]:
    """A stored hour's (tenant, GPU type) pairs from their JSON text (most hours share one)."""
    return tuple((tenant, gt) for tenant, gt in json.loads(raw))


def pack_sums(sums: Mapping[tuple[str, str], float]) -> tuple[str, bytes]:
    """An hour's sums as `FairShareHour` stores them: (pairs as JSON text, float64 bytes)."""
    keys = sorted(sums)
    values = array("d", [sums[k] for k in keys])
    if sys.byteorder != "little":
        values.byteswap()
    return json.dumps([list(k) for k in keys]), values.tobytes()


def unpack_sums(raw: bytes | memoryview) -> array[float]:
    """The float64s `pack_sums` stored, in order."""
    out = array("d")
    out.frombytes(bytes(raw))
    if sys.byteorder != "little":
        out.byteswap()
    return out


def clear_usage_cache() -> None:
    _closed_hours.clear()


@lru_cache(maxsize=65536)
def _names(raw: str) -> tuple[str, ...]:
    """A phase's node list from its JSON text (a fleet has few distinct lists per group)."""
    return tuple(json.loads(raw))


def _hour_sums(
    since: datetime,
    until: datetime | None,
    node: Mapping[str, tuple[str, int]],
    *,
    few_hours: bool = False,
) -> dict[int, list[tuple[str, str, float, float]]]:
    """Return per hour (its start, epoch s) the samples (tenant, GPU type, end s,
    GPU-seconds) of the phases that ended in [since, until) (until None: open), summed per
    tenant, node list and hour they ended in: a pass reads a few rows per job and hour, not
    every phase (each hour's busy time is decayed from the last end in it: 0.4% of a
    7-day half-life at most). A row's hour is that of its last end (not read back: parsing
    ~1.4 million truncated timestamps cost more than the query)."""
    ended = PhaseRecord.objects.filter(started_at__isnull=False, finished_at__gte=since)
    if until is not None:
        ended = ended.filter(finished_at__lt=until)
    tenant: Any = "job__tenant__name"
    if few_hours:
        # a few hours' phases (the edges of a read, the hours closed since the last one):
        # each row's tenant by its job's primary key, where the join made PostgreSQL hash
        # the whole jobs table (~100,000 rows at a fleet's size) for some thousand phases
        ended = ended.annotate(
            tenant_of=Subquery(
                Job.objects.filter(pk=OuterRef("job_id")).order_by().values("tenant_id")
            )
        )
        tenant = "tenant_of"
    rows = (
        ended.annotate(nodes_txt=Cast("node_names", TextField()), hour=TruncHour("finished_at"))
        .order_by()
        .values(tenant, "nodes_txt", "hour")
        .annotate(busy=Sum(F("finished_at") - F("started_at")), last=Max("finished_at"))
    )
    if connection.vendor == "postgresql":
        # as float seconds from the database (a fleet's window is ~1.4 million rows: an
        # interval and a timestamp parsed each cost more than the query): the exact
        # seconds rounded once, as timedelta.total_seconds() and datetime.timestamp() do
        rows = rows.annotate(
            busy_s=epoch_s(Sum(F("finished_at") - F("started_at"))),
            end_s=epoch_s(Max("finished_at")),
        )
        values: Iterable[tuple[Any, Any, Any, Any]] = rows.values_list(
            tenant, "nodes_txt", "busy_s", "end_s"
        )
    else:
        values = (
            (who, txt, None if b is None else b.total_seconds(), None if e is None else e.timestamp())
            for who, txt, b, e in rows.values_list(tenant, "nodes_txt", "busy", "last")
        )  # fmt: skip
    names_of = dict(Tenant.objects.values_list("pk", "name")) if few_hours else {}
    out: dict[int, list[tuple[str, str, float, float]]] = defaultdict(list)
    for who, names_txt, busy_s, end_s in values:
        if busy_s is None or end_s is None:
            continue
        tenant_name: str = names_of[who] if few_hours else who
        names = _names(names_txt) if isinstance(names_txt, str) else names_txt
        got = out[int(end_s // 3600) * 3600]
        for gt, gpu_s in _busy_gpu_s(names, node, max(busy_s, 0.0)):
            got.append((tenant_name, gt, end_s, gpu_s))
    return out


def _busy_gpu_s(
    names: Iterable[str] | None, node: Mapping[str, tuple[str, int]], busy_s: float
) -> Iterator[tuple[str, float]]:
    """Yield (GPU type, GPU-seconds) of a phase busy `busy_s` on each known node of `names`."""
    for name in names or ():
        if name in node:
            gt, gpus = node[name]
            yield gt, gpus * busy_s


def usage_gpu_s(now: datetime, half_life: float | None = None) -> dict[str, dict[str, float]]:
    """Return tenant -> GPU type -> busy GPU-seconds of its phases, decayed to `now`.

    A phase is busy on each node it ran on for its whole length (a running one up to now),
    GPUs x time per node's GPU type: the busy time the cost report charges
    (reports.selectors.cost_engine). Decayed by the core (`decayed_usage`) by when it ended;
    the hours past CLOSED_AFTER as one term each, summed once per process (above).
    """
    h = half_life or half_life_s()
    now = now.astimezone(UTC)  # (hours are UTC hours, as the database truncates them)
    since = now - timedelta(seconds=HALF_LIVES_READ * h)
    nodes = _nodes()
    node = {name: (gt, gpus) for name, gt, gpus in nodes}
    now_s = now.timestamp()
    one_hour = timedelta(hours=1)
    # the whole hours inside the window that are closed: summed once, kept
    first = since.replace(minute=0, second=0, microsecond=0)
    first = first if first == since else first + one_hour
    last = (now - CLOSED_AFTER).replace(minute=0, second=0, microsecond=0)  # (its start)
    kept_key = usage_key(h, nodes)
    closed = _closed_hours.setdefault(kept_key, {})
    for hour_s in [hr for hr in closed if hr < first.timestamp()]:
        del closed[hour_s]  # out of the window now
    wanted = [first + i * one_hour for i in range(max(0, int((last - first) / one_hour)))]
    missing = [hr for hr in wanted if int(hr.timestamp()) not in closed]
    if missing:  # (a fresh process: those the beat stored)
        _read_kept(kept_key, closed, missing)
        missing = [hr for hr in missing if int(hr.timestamp()) not in closed]
    wanted_s = {int(hr.timestamp()) for hr in wanted}
    samples: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    if len(missing) > FILL_HOURS:
        # a process's first read: the whole window in one query (what every read cost
        # before the hours were kept), its closed hours kept, the rest used as it is
        window = _hour_sums(since, None, node)
        got, rest = window, [rows for t, rows in window.items() if t not in wanted_s]
    else:
        # a few hours closed since the last read: those hours, then the edges raw
        got = (
            _hour_sums(missing[0], missing[-1] + one_hour, node, few_hours=True) if missing else {}
        )
        rest = []
        edges = [(since, wanted[0] if wanted else None)]
        if wanted:
            edges.append((wanted[-1] + one_hour, None))
        for lo, hi in edges:
            if hi is None or hi > lo:
                rest.extend(_hour_sums(lo, hi, node, few_hours=True).values())
    for hour in missing:
        t = int(hour.timestamp())
        sums: dict[tuple[str, str], float] = defaultdict(float)
        for tenant, gt, end_s, gpu_s in got.get(t, ()):
            sums[(tenant, gt)] += gpu_s * 2.0 ** ((end_s - t) / h)
        closed[t] = dict(sums)
    cached: dict[tuple[str, str], float] = defaultdict(float)
    for t in sorted(wanted_s):
        age = (now_s - t) / h
        for key, value in closed[t].items():
            cached[key] += value * 0.5**age
    for rows in rest:
        for tenant, gt, end_s, gpu_s in rows:
            samples[(tenant, gt)].append((min(end_s, now_s), gpu_s))
    running = PhaseRecord.objects.filter(
        started_at__isnull=False, finished_at__isnull=True
    ).values_list("job__tenant__name", "node_names", "started_at")
    for tenant, names, started in running:
        if started is None:
            continue
        busy = max(0.0, now_s - started.timestamp())
        for gt, gpu_s in _busy_gpu_s(names, node, busy):
            samples[(tenant, gt)].append((now_s, gpu_s))
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for key in set(samples) | set(cached):
        tenant, gt = key
        out[tenant][gt] = cached.get(key, 0.0) + decayed_usage(samples.get(key, ()), now_s, h)
    return dict(out)


def penalties(now: datetime, types: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Return tenant -> pool -> the entry penalty of its recent admissions (the core's
    `entry_penalty`): a burst admitted a moment ago weighs before its usage catches up."""
    since = now - timedelta(seconds=HALF_LIVES_READ * DEFAULT_PENALTY_HALF_LIFE_S)
    admitted: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    rows = (
        Placement.objects.filter(created_at__gte=since)
        .exclude(strategy=Strategy.PROFILE)
        .values_list("job__tenant__name", "job__rollout_gpus", "job__train_gpus", "created_at")
    )
    for tenant, r, t, at in rows:
        for pool, g in job_gpus(r, t, types).items():
            admitted[(tenant, pool)].append((at.timestamp(), float(g)))
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (tenant, pool), got in admitted.items():
        out[tenant][pool] = entry_penalty(got, now.timestamp())
    return dict(out)


@dataclass(frozen=True)
class Picture:
    """Everything the fair-share functions read, once: for a planning pass or a page."""

    now: datetime
    types: dict[str, str]  # pool kind -> GPU type name
    capacity: dict[str, int]  # GPU type -> GPUs up or drained
    shares: list[Share]
    held: dict[str, dict[str, int]]  # tenant -> GPU type -> GPUs held now
    loads: dict[str, TenantLoad]
    # the shares of tenants with a quota that neither wait, hold nor used GPUs: what they
    # keep of their nominal quota (lending limits) is not lent even while they are idle
    idle_shares: list[Share] = field(default_factory=list)

    def share_of(self, tenant: str) -> ShareOf:
        mine = shares_by_tenant(self.shares).get(tenant, {})
        load = self.loads.get(tenant, TenantLoad(tenant))
        return dominant_share(load, mine, half_life_s())


def picture(now: datetime, tenants: Iterable[str] = ()) -> Picture:
    """Read the fair-share inputs of `tenants` and of every tenant holding or using GPUs."""
    types = pool_types()
    cap = capacity()
    held = holdings(types)
    used = usage_gpu_s(now)
    pen = penalties(now, types)
    names = set(tenants) | set(held) | set(used) | set(pen)
    loads = {
        t: TenantLoad(t, used.get(t, {}), held.get(t, {}), pen.get(t, {})) for t in sorted(names)
    }
    idle = set(Quota.objects.exclude(tenant__name__in=names).values_list("tenant__name", flat=True))
    return Picture(now, types, cap, shares(names, cap), held, loads, shares(idle, cap))


class Queued(NamedTuple):
    """A queued job as the queue order reads it (`QUEUED_FIELDS` of its row)."""

    pk: int
    tenant: str
    rollout_gpus: int
    train_gpus: int
    priority: int
    submitted_at: datetime


# the Job fields of a `Queued`, for `values_list`
QUEUED_FIELDS = ("pk", "tenant__name", "rollout_gpus", "train_gpus", "priority", "submitted_at")


def queued_rows() -> list[Queued]:
    """Return the queued jobs (not cancelled) as the queue order reads them."""
    rows = Job.objects.filter(status=JobStatus.QUEUED, cancel_requested=False)
    return [Queued(*row) for row in rows.values_list(*QUEUED_FIELDS)]


def _queued(row: Queued, types: Mapping[str, str]) -> QueuedJob:
    return QueuedJob(
        id=str(row.pk),
        tenant=row.tenant,
        gpus=job_gpus(row.rollout_gpus, row.train_gpus, types),
        priority=row.priority,
        submitted_s=row.submitted_at.timestamp(),
    )


def queued_job(job: Job, types: Mapping[str, str]) -> QueuedJob:
    row = Queued(
        job.pk, job.tenant.name, job.rollout_gpus, job.train_gpus, job.priority, job.submitted_at
    )
    return _queued(row, types)


def queue_positions(
    now: datetime, queued: Iterable[Queued] | None = None
) -> tuple[list[QueuePosition], Picture]:
    """Return every queued job's position and why, in the order the planner takes them
    (`scheduler.fairshare.queue_order`: priority, weighted share, submission time), and
    the picture it was decided on. `queued`: the queued jobs (not cancelled), when the
    caller read them already (the planning pass), else read here."""
    rows = queued_rows() if queued is None else list(queued)
    pic = picture(now, {j.tenant for j in rows})
    jobs = [_queued(j, pic.types) for j in rows]
    if not settings.ROLLMUX_FAIR_SHARE:
        return _fifo(jobs, pic), pic
    return queue_order(jobs, pic.loads, pic.shares, half_life_s()), pic


def _fifo(jobs: list[QueuedJob], pic: Picture) -> list[QueuePosition]:
    """Fair share off: priority, then submission time (the order before issue 22)."""
    from scheduler.fairshare import ordinal

    ordered = sorted(jobs, key=lambda j: (-j.priority, j.submitted_s, int(j.id)))
    return [
        QueuePosition(j.id, i, pic.share_of(j.tenant), f"{ordinal(i)} in the queue")
        for i, j in enumerate(ordered, start=1)
    ]


@dataclass(frozen=True)
class ShareRow:
    """One tenant on one pool as the quotas page, the API and the metrics show it."""

    tenant: str
    gpu_type: str
    nominal: int
    unlimited: bool  # no quota row or no GPU cap: nominal is the pool's capacity
    borrowing_limit: int
    lending_limit: int | None
    weight: float
    held: int
    borrowed: int  # GPUs held above nominal
    lent: int  # GPUs of its nominal others use (its idle nominal, at most its lending limit)
    usage_gpu_hours: float  # decayed
    share: float  # its weighted dominant share's value on this pool (1.0 = its share)
    borrowed_share: float  # what the no-loop rule compares

    @property
    def share_percent(self) -> str:
        return "—" if math.isinf(self.share) else f"{self.share:.0%}"


def share_rows(now: datetime, tenants: Iterable[str] | None = None) -> list[ShareRow]:
    """Return per tenant (of `tenants`, None: all with a quota or a load) and pool the
    fair-share figures (class docstring)."""
    quota_tenants = set(Quota.objects.values_list("tenant__name", flat=True))
    pic = picture(now, quota_tenants)
    wanted = None if tenants is None else set(tenants)
    limited = {
        (t, g)
        for t, g in Quota.objects.filter(max_gpus__isnull=False).values_list(
            "tenant__name", "gpu_type__name"
        )
    }
    by_tenant = shares_by_tenant(pic.shares)
    # per pool: GPUs held above nominal by each tenant, and capacity no nominal covers
    borrowed_by: dict[str, dict[str, int]] = defaultdict(dict)
    nominal_sum: dict[str, int] = defaultdict(int)
    for tenant, pools in by_tenant.items():
        for pool, share in pools.items():
            nominal_sum[pool] += share.nominal
            borrowed_by[pool][tenant] = max(
                0, pic.held.get(tenant, {}).get(pool, 0) - share.nominal
            )
    h = half_life_s()
    out = []
    for tenant, pools in sorted(by_tenant.items()):
        if wanted is not None and tenant not in wanted:
            continue
        load = pic.loads.get(tenant, TenantLoad(tenant))
        held = pic.held.get(tenant, {})
        b_share = borrowed_share(tenant, held, pools, pic.capacity)
        for pool, share in sorted(pools.items()):
            mine = held.get(pool, 0)
            # lent: what others borrow beyond the capacity no nominal covers, out of the
            # part of its nominal it leaves idle and may lend (an estimate: borrowers are
            # not tied to lenders)
            unassigned = max(0, pic.capacity.get(pool, 0) - nominal_sum[pool])
            others = sum(g for t, g in borrowed_by[pool].items() if t != tenant)
            idle = max(0, share.nominal - mine)
            lendable = idle - min(idle, share.reserved)
            lent = min(lendable, max(0, others - unassigned))
            one = dominant_share(
                TenantLoad(
                    tenant,
                    {pool: load.usage_gpu_s.get(pool, 0.0)},
                    {pool: mine},
                    {pool: load.penalty_gpus.get(pool, 0.0)},
                ),
                {pool: share},
                h,
            )
            out.append(
                ShareRow(
                    tenant=tenant,
                    gpu_type=pool,
                    nominal=share.nominal,
                    unlimited=(tenant, pool) not in limited,
                    borrowing_limit=share.borrowing_limit or 0,
                    lending_limit=share.lending_limit,
                    weight=share.weight,
                    held=mine,
                    borrowed=max(0, mine - share.nominal),
                    lent=lent,
                    usage_gpu_hours=load.usage_gpu_s.get(pool, 0.0) / 3600.0,
                    share=one.value,
                    borrowed_share=b_share,
                )
            )
    return out


@dataclass(frozen=True)
class QueueRow:
    """One queued job as a viewer may see it: another tenant's job keeps its position and
    nothing else (accounts.access: no id, name, tenant or reason)."""

    position: int
    hidden: bool
    job_id: int | None
    name: str
    tenant: str
    priority: int | None
    why: str  # its place in the order ("3rd in the queue; vision holds 120% of ...")
    waiting: str  # why it is not placed yet (the planner's reason)
    submitted_at: datetime | None


def queue_view(viewer: Any, now: datetime) -> list[QueueRow]:
    """Return the queue in planning order, masked for `viewer` (QueueRow)."""
    from rollmux_web.accounts.access import OTHER_TENANT_JOB, tenant_visible, visible_tenant_ids

    positions, _ = queue_positions(now)
    jobs = Job.objects.in_bulk([int(p.job_id) for p in positions])
    visible = visible_tenant_ids(viewer)
    out = []
    for p in positions:
        job = jobs.get(int(p.job_id))
        if job is None:
            continue
        if not tenant_visible(job.tenant_id, visible):
            out.append(QueueRow(p.position, True, None, OTHER_TENANT_JOB, "", None, "", "", None))
            continue
        out.append(
            QueueRow(
                p.position,
                False,
                job.pk,
                job.name,
                p.share.tenant,
                job.priority,
                p.reason,
                job.reason,
                job.submitted_at,
            )
        )
    return out


def position_of(job: Job, viewer: Any, now: datetime) -> QueueRow | None:
    """Return a queued job's row of the queue (None: it is not queued)."""
    if job.status != JobStatus.QUEUED:
        return None
    return next((r for r in queue_view(viewer, now) if r.job_id == job.pk), None)


def lending_refusal(job: Job, pic: Picture) -> str | None:
    """Return why `job` may not be admitted now because it would borrow what another tenant
    keeps for itself, or None. Beyond its nominal quota on a GPU type a tenant may use only
    the GPUs no other tenant holds or reserves (their nominal less their lending limit:
    `scheduler.fairshare.borrowable`); within its nominal quota it is never refused here.
    Holdings are the picture's, advanced by `hold` as a pass admits jobs."""
    from scheduler.fairshare import borrowable

    tenant = job.tenant.name
    mine = {s.pool: s for s in pic.shares if s.tenant == tenant}
    for pool, gpus in job_gpus(job.rollout_gpus, job.train_gpus, pic.types).items():
        share = mine.get(pool)
        if share is None or gpus <= 0 or share.nominal >= pic.capacity.get(pool, 0):
            continue  # (no quota, or one that covers the pool: it never borrows)
        held = pic.held.get(tenant, {}).get(pool, 0)
        over = max(0, held + gpus - share.nominal) - max(0, held - share.nominal)
        if over <= 0:
            continue
        free = borrowable(tenant, pool, pic.held, pic.shares + pic.idle_shares, pic.capacity)
        if over > free:
            return (
                f"it would borrow {over} {pool} GPUs beyond its tenant's nominal quota of "
                f"{share.nominal}, and {free} are not kept by other tenants (lending limits)"
            )
    return None


def hold(job: Job, pic: Picture) -> None:
    """Count an admitted job's GPUs in the picture's holdings (the rest of the pass)."""
    tenant = pic.held.setdefault(job.tenant.name, {})
    for pool, gpus in job_gpus(job.rollout_gpus, job.train_gpus, pic.types).items():
        tenant[pool] = tenant.get(pool, 0) + gpus
