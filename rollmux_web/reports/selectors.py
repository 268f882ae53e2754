"""Read side of the reports app: every report number and every chart's geometry.

Phase records and node allocations are the single source of truth. Each figure is
computed once here (money in Decimal) and every page, CSV and API renders from the
same result objects, so they agree to the cent.

Cost split inside a co-execution group (documented in the cost page too):
1. a node costs its GPUs x price (price history) for every second it is allocated
   to the group, busy or idle;
2. each member pays the busy time of its own phases on that node;
3. the node's idle (bubble) time is shared by the members pinned to the node, in
   proportion to how long each was a member while the node was allocated (so at
   any moment the members present share evenly);
4. nothing is rounded while computing: every line carries its exact amounts.

Rounding (README "Cost"; the cost page's footnote), once, from exact values:
- a row (total, per tenant, per GPU type): its cost is its exact sum rounded half-up to
  the cent; its busy and idle columns are that cost split by largest remainder (so
  busy + idle = cost in every row); counterfactuals are exact sums rounded once, and a
  saving is the difference of the two figures shown;
- the per-job lines are billing lines (page, API, FOCUS CSV and Parquet alike): the
  total's busy cents and idle cents are each handed out to the lines by largest
  remainder, so the lines add up exactly to the total in every file; a line can differ
  by a cent from its own exact amount rounded.
- the burn-down's "spent" for the report's own month is the tenant row's figure.
"""

from __future__ import annotations

import gc
import json
import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, fields
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache
from typing import Any

from django.db import connection
from django.db.models import BigIntegerField, F, Func, Lookup, Q, QuerySet, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast
from django.http import Http404
from django.utils import timezone

from rollmux_web.accounts.selectors import sees_all_tenants, visible_tenants
from rollmux_web.inventory.models import Cluster, GpuPrice, GpuType, Node, NodeState, PoolKind
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job, JobStatus
from rollmux_web.quotas.models import Quota
from rollmux_web.workflow.models import (
    ExecutionGroup,
    NodeAllocation,
    PhaseRecord,
    PhaseState,
    Placement,
)
from rollmux_web.workflow.selectors import time_scale_of

CENT = Decimal("0.01")
HOURS_Q = Decimal("0.0001")  # GPU-hours are shown to four decimals
ZERO = Decimal(0)
MAX_RANGE_DAYS = 366
HOUR = Decimal(3600)


class ReportInputError(ValueError):
    """Bad report input (reversed or too long a range, a bad window): names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# --------------------------------------------------------------------------- time


def _now(now: datetime | None) -> datetime:
    return now if now is not None else timezone.now()


def _seconds(td: timedelta) -> Decimal:
    """Return a timedelta as exact Decimal seconds (float seconds would lose cents)."""
    return Decimal(td.days * 86400 + td.seconds) + Decimal(td.microseconds) / Decimal(1_000_000)


def _clip(a: Any, b: Any, lo: Any, hi: Any) -> tuple[Any, Any] | None:
    """Return [a, b) (b None = open) clipped to [lo, hi), or None when they do not meet."""
    end = hi if b is None else min(b, hi)
    start = max(a, lo)
    return (start, end) if end > start else None


def day_range(start: date, end: date) -> tuple[datetime, datetime]:
    """Return [start 00:00 UTC, end+1 00:00 UTC) after checking the range; raise ReportInputError."""
    if end < start:
        raise ReportInputError("end", f"the end date {end} is before the start date {start}")
    days = (end - start).days + 1
    if days > MAX_RANGE_DAYS:
        raise ReportInputError(
            "end", f"the range is {days} days long; at most {MAX_RANGE_DAYS} days are allowed"
        )
    return (
        datetime.combine(start, time.min, tzinfo=UTC),
        datetime.combine(end + timedelta(days=1), time.min, tzinfo=UTC),
    )


# --------------------------------------------------------------------------- prices


class PriceBook:
    """Price history of every GPU type, loaded once; integrates price x time exactly.

    Times are integer epoch microseconds so that a report over many thousands of
    phases does no datetime or Decimal arithmetic in its inner loop.
    """

    def __init__(self) -> None:
        self._since_us: dict[int, list[int]] = defaultdict(list)
        self._price: dict[int, list[Decimal]] = defaultdict(list)
        for type_id, price, since in GpuPrice.objects.order_by(
            "gpu_type_id", "effective_from"
        ).values_list("gpu_type_id", "price_per_gpu_hour", "effective_from"):
            self._since_us[type_id].append(_us(since))
            self._price[type_id].append(Decimal(price))

    def price_at(self, type_id: int, t: datetime) -> Decimal:
        """Return the price per GPU-hour in force at `t` (0 before the first price)."""
        i = bisect_right(self._since_us.get(type_id, []), _us(t)) - 1
        return self._price[type_id][i] if i >= 0 else Decimal(0)

    def split_us(self, type_id: int, a: int, b: int) -> list[tuple[int, int]]:
        """Cut [a, b) (epoch microseconds) at price changes: (price index, microseconds)."""
        since = self._since_us.get(type_id)
        if not since or b <= a:
            return []
        i = bisect_right(since, a) - 1
        n = len(since)
        if i >= 0 and (i + 1 == n or since[i + 1] >= b):
            return [(i, b - a)]  # the common case: one price throughout
        out = []
        for k in range(max(i, 0), n):
            seg_lo = max(a, since[k])
            seg_hi = b if k + 1 == n else min(b, since[k + 1])
            if seg_hi > seg_lo:
                out.append((k, seg_hi - seg_lo))
            if seg_hi >= b:
                break
        return out

    def flat_index(self, type_id: int, a: int, b: int) -> int | None:
        """Return the index of the one price in force throughout [a, b), or None.

        None when the price changes inside [a, b) or [a, b) starts before the first
        price: then spans must be cut with split_us.
        """
        since = self._since_us.get(type_id)
        if not since:
            return None
        i = bisect_right(since, a) - 1
        return i if i >= 0 and (i + 1 == len(since) or since[i + 1] >= b) else None

    def amount(self, type_id: int, index: int, us: int, gpus: int) -> Decimal:
        """Return gpus x the index-th price x `us` microseconds, exactly."""
        return self._price[type_id][index] * us * gpus / US_PER_HOUR


US_PER_HOUR = Decimal(3_600_000_000)
MICRO = Decimal(1_000_000)


def _us(dt: datetime) -> int:
    """Return a datetime as integer microseconds since the epoch (exact)."""
    return (dt - EPOCH_DT) // timedelta(microseconds=1)


def apportion(total: Decimal, parts: Sequence[Decimal]) -> list[Decimal]:
    """Round `parts` to cents so they add up exactly to `total` rounded to cents.

    Largest remainder: floor every part to the cent, then give the missing cents to
    the parts that lost the most.
    """
    target = total.quantize(CENT, rounding=ROUND_HALF_UP)
    floors = [(p / CENT).to_integral_value(rounding="ROUND_FLOOR") * CENT for p in parts]
    missing = int(((target - sum(floors, Decimal(0))) / CENT).to_integral_value())
    out = list(floors)
    if not missing:
        return out
    order = sorted(range(len(parts)), key=lambda i: parts[i] - floors[i], reverse=True)
    if missing > 0:
        for i in order[:missing]:
            out[i] += CENT
    else:
        for i in list(reversed(order))[:-missing]:
            out[i] -= CENT
    return out


# --------------------------------------------------------------------------- scoping


def _visible_tenant_ids(user: Any) -> set[int] | None:
    """Return the visible tenant ids, or None when the user sees every tenant.

    Remembered on the user object: one request asks several times, and a request's
    user object lives no longer than the request.
    """
    cached = getattr(user, "_rollmux_visible_tenant_ids", _UNSET)
    if cached is not _UNSET:
        return cast_tenants(cached)
    ids = (
        None if sees_all_tenants(user) else set(visible_tenants(user).values_list("id", flat=True))
    )
    with suppress(AttributeError):  # a user object that takes no new attribute: no cache
        user._rollmux_visible_tenant_ids = ids
    return ids


_UNSET = object()


def cast_tenants(value: Any) -> set[int] | None:
    return value if value is None or isinstance(value, set) else None


def visible_group(*, user: Any, group_id: int) -> ExecutionGroup:
    """Return a group the user may see (one of its members is in a visible tenant), else 404."""
    group = ExecutionGroup.objects.filter(pk=group_id).first()
    if group is None:
        raise Http404("no such group")
    tenant_ids = _visible_tenant_ids(user)
    if (
        tenant_ids is not None
        and not Placement.objects.filter(group=group, job__tenant_id__in=tenant_ids).exists()
    ):
        raise Http404("no such group")
    return group


def visible_job(*, user: Any, job_id: int) -> Job:
    job = Job.objects.select_related("tenant", "slo_class").filter(pk=job_id).first()
    tenant_ids = _visible_tenant_ids(user)
    if job is None or (tenant_ids is not None and job.tenant.pk not in tenant_ids):
        raise Http404("no such job")
    return job


GROUP_STATES = ("all", "active", "released")


def visible_group_ids(*, user: Any, state: str = "all") -> QuerySet[ExecutionGroup]:
    """Return the groups the user may see, newest first (`state`: all, active or released)."""
    tenant_ids = _visible_tenant_ids(user)
    groups = ExecutionGroup.objects.all()
    if tenant_ids is not None:
        groups = groups.filter(placements__job__tenant_id__in=tenant_ids).distinct()
    if state == "active":
        groups = groups.filter(released_at__isnull=True)
    elif state == "released":
        groups = groups.filter(released_at__isnull=False)
    return groups.order_by("-created_at", "-id")


def group_rows(*, user: Any, groups: Iterable[ExecutionGroup]) -> list[dict[str, Any]]:
    """Return one row per group (a page of them) with its members, other tenants' anonymous."""
    groups = list(groups)
    members = _members_by_group([g.pk for g in groups], _visible_tenant_ids(user))
    return [
        {
            "id": g.pk,
            "created_at": g.created_at,
            "released_at": g.released_at,
            "active": g.released_at is None,
            "members": members.get(g.pk, []),
        }
        for g in groups
    ]


def _members_by_group(
    group_ids: list[int], tenant_ids: set[int] | None
) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    rows = Placement.objects.filter(group_id__in=group_ids).values_list(
        "group_id", "job_id", "job__name", "job__tenant_id", "job__tenant__name", "ended_at"
    )
    for gid, jid, name, tid, tname, ended in rows:
        hidden = tenant_ids is not None and tid not in tenant_ids
        out[gid].append(
            {
                "job_id": None if hidden else jid,
                "name": "another tenant's job" if hidden else name,
                "tenant": "" if hidden else tname,
                "active": ended is None,
            }
        )
    return out


# --------------------------------------------------------------------------- timeline

PALETTE_HUES = (212, 28, 140, 280, 355, 48, 175, 320, 95, 250)
BAR_LIMIT = 3000  # above this many phases in the window, sub-pixel bars are aggregated
LANE_H = 22
LANE_GAP = 6
LEFT = 120
RIGHT = 16
TOP = 28
AXIS_H = 26


def job_colours(job_ids: Iterable[int]) -> dict[int, tuple[str, str]]:
    """Return (rollout = light, training = dark) shades of one hue per job."""
    out = {}
    for i, jid in enumerate(sorted(set(job_ids))):
        hue = PALETTE_HUES[i % len(PALETTE_HUES)]
        out[jid] = (f"hsl({hue},70%,74%)", f"hsl({hue},62%,36%)")
    return out


@dataclass(frozen=True)
class Lane:
    node: str
    pool: str
    y: float


@dataclass(frozen=True)
class BarRect:
    x: float
    y: float
    w: float


@dataclass(frozen=True)
class PhaseBar:
    """One phase record: one SVG element, with one rectangle per node lane it ran on."""

    phase_id: int
    job_id: int
    kind: str
    fill: str
    rects: tuple[BarRect, ...]
    tip: str
    warm_start: bool | None
    running: bool


@dataclass(frozen=True)
class AggRect:
    """Several sub-pixel phases of one lane merged into one rectangle."""

    x: float
    y: float
    w: float
    fill: str
    opacity: float
    tip: str


@dataclass(frozen=True)
class Bubble:
    x: float
    y: float
    w: float
    tip: str


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class PoolBubbles:
    """Bubble fraction of one pool now, if each member ran alone, and the share reclaimed."""

    pool: str
    allocated_node_s: float
    busy_node_s: float
    bubble_fraction: float | None
    solo_bubble_fraction: float | None
    reclaimed_share: float | None


@dataclass(frozen=True)
class Timeline:
    title: str
    t0: datetime
    t1: datetime
    width: int
    height: int
    plot_left: int
    plot_right: int
    lanes: tuple[Lane, ...]
    bars: tuple[PhaseBar, ...]
    aggregates: tuple[AggRect, ...]
    bubbles: tuple[Bubble, ...]
    ticks: tuple[Tick, ...]
    phase_count: int
    aggregated_count: int
    legend: tuple[tuple[str, str, str], ...]  # (job label, light, dark)
    headline: tuple[PoolBubbles, ...]
    live: bool
    empty_message: str = ""


def _fmt_s(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def _ticks(t0: datetime, t1: datetime, left: float, plot_w: float) -> tuple[Tick, ...]:
    span = (t1 - t0).total_seconds()
    if span <= 0:
        return ()
    steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600]
    steps += [43200, 86400, 172800, 604800]
    step = next((s for s in steps if span / s <= 8), steps[-1])
    first = math.ceil(t0.timestamp() / step) * step
    ticks = []
    t = first
    while t <= t1.timestamp():
        dt = datetime.fromtimestamp(t, tz=UTC)
        x = left + (t - t0.timestamp()) / span * plot_w
        fmt = "%H:%M:%S" if step < 60 else ("%H:%M" if step < 86400 else "%m-%d")
        if step >= 3600 and step < 86400 and dt.hour == 0:
            fmt = "%m-%d %H:%M"
        ticks.append(Tick(x=round(x, 1), label=dt.strftime(fmt)))
        t += step
    return tuple(ticks)


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _subtract(
    outer: list[tuple[float, float]], inner: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Return the parts of `outer` (merged) not covered by `inner` (merged)."""
    gaps = []
    j = 0
    for a, b in outer:
        cur = a
        while j < len(inner) and inner[j][1] <= cur:
            j += 1
        k = j
        while k < len(inner) and inner[k][0] < b:
            if inner[k][0] > cur:
                gaps.append((cur, inner[k][0]))
            cur = max(cur, inner[k][1])
            k += 1
        if cur < b:
            gaps.append((cur, b))
    return gaps


def parse_window(
    start: str | None,
    end: str | None,
    *,
    default: Callable[[], tuple[datetime, datetime]],
) -> tuple[datetime, datetime]:
    """Return the time window from query strings (ISO datetimes), or raise ReportInputError.

    `default` (the object's whole life) is only queried when a bound is missing.
    """
    fallback = default() if not (start and end) else None

    def parse(name: str, raw: str | None, otherwise: datetime) -> datetime:
        if not raw:
            return otherwise
        try:
            value = datetime.fromisoformat(raw.strip().replace(" ", "T").replace("Z", "+00:00"))
        except ValueError:
            raise ReportInputError(
                name, f"{raw!r} is not a date and time (use YYYY-MM-DDTHH:MM[:SS])"
            ) from None
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    t0 = parse("start", start, fallback[0] if fallback else EPOCH_DT)
    t1 = parse("end", end, fallback[1] if fallback else EPOCH_DT)
    if t1 <= t0:
        raise ReportInputError("end", "the window ends before it starts")
    if (t1 - t0).days > MAX_RANGE_DAYS:
        raise ReportInputError("end", f"the window is longer than {MAX_RANGE_DAYS} days")
    return t0, t1


def group_window(
    group: ExecutionGroup, *, now: datetime | None = None
) -> tuple[datetime, datetime]:
    """Return the group's whole life: first allocation or phase to release (or now)."""
    first_alloc = (
        NodeAllocation.objects.filter(group=group).order_by("start").values_list("start", flat=True)
    ).first()
    first_phase = (
        PhaseRecord.objects.filter(group=group, started_at__isnull=False)
        .order_by("started_at")
        .values_list("started_at", flat=True)
        .first()
    )
    starts = [t for t in (first_alloc, first_phase, group.created_at) if t is not None]
    t0 = min(starts)
    t1 = group.released_at if group.released_at is not None else _now(now)
    last = (
        PhaseRecord.objects.filter(group=group, finished_at__isnull=False)
        .order_by("-finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )
    if last is not None and last > t1:
        t1 = last
    if t1 <= t0:
        t1 = t0 + timedelta(minutes=1)
    return t0, t1


def job_window(job: Job, *, now: datetime | None = None) -> tuple[datetime, datetime]:
    first = (
        PhaseRecord.objects.filter(job=job, started_at__isnull=False)
        .order_by("started_at")
        .values_list("started_at", flat=True)
        .first()
    )
    last = (
        PhaseRecord.objects.filter(job=job, finished_at__isnull=False)
        .order_by("-finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )
    t0 = first or job.submitted_at
    t1 = _now(now) if not job.is_terminal else (last or job.finished_at or _now(now))
    if last and last > t1:
        t1 = last
    if t1 <= t0:
        t1 = t0 + timedelta(minutes=1)
    return t0, t1


def _epoch_fields(*, exact: bool) -> tuple[dict[str, Any], tuple[str, str]]:
    """Return annotations giving started_at/finished_at as epoch numbers, and their names.

    Parsing tens of thousands of timestamps into aware datetimes dominates a large
    report, so on PostgreSQL the database hands out epoch time: integer microseconds
    (exact, for money) or float8 seconds (for chart geometry). Other databases fall
    back to datetimes, converted by `_us` / `_epoch`.
    """
    if connection.vendor != "postgresql":
        return {}, ("started_at", "finished_at")

    def expr(col: str) -> RawSQL:
        if exact:
            return RawSQL(f"(EXTRACT(EPOCH FROM {col}) * 1000000)::bigint", ())
        return RawSQL(f"EXTRACT(EPOCH FROM {col})::float8", ())

    return (
        {"s_ep": expr("started_at"), "f_ep": expr("finished_at")},
        ("s_ep", "f_ep"),
    )


class _AnyOf(Lookup):  # type: ignore[type-arg]
    """`column = ANY(%s)`: a set of ids as one array parameter (PostgreSQL).

    A cost report filters on thousands of group ids. As `__in` that is a placeholder
    per id for Django to build and psycopg to parse (longer than the query runs); as a
    subquery the plan depends on row estimates, which are far off right after a bulk
    load (nested loops: seconds instead of milliseconds).
    """

    lookup_name = "any_of"
    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: Any) -> Any:
        lhs, params = self.process_lhs(compiler, connection)
        # the column's own type: psycopg sends small ids as int2[], and bigint = int2 is a
        # cross-type operator PostgreSQL cannot hash (a linear search of the array per row)
        array_type = self.lhs.output_field.db_type(connection)
        return f"{lhs} = ANY(%s::{array_type}[])", [*params, sorted(self.rhs)]


def _in_ids(column: str, ids: set[int]) -> Any:
    """Return a filter `column in ids` (one array parameter on PostgreSQL)."""
    if connection.vendor == "postgresql":
        return _AnyOf(F(column), ids)
    return Q(**{f"{column}__in": ids})


def _us_fields(**columns: str) -> tuple[dict[str, Func], bool]:
    """Return annotations giving datetime columns as integer epoch microseconds, by alias.

    PostgreSQL only (as `_epoch_fields`), and column names qualified by Django, so
    they can be used on joined querysets. Elsewhere ({}, False): callers read the
    datetimes and convert them with `_us`.
    """
    if connection.vendor != "postgresql":
        return {}, False
    template = "(EXTRACT(EPOCH FROM %(expressions)s) * 1000000)::bigint"
    return {
        alias: Func(F(column), template=template, output_field=BigIntegerField())
        for alias, column in columns.items()
    }, True


def _epoch(value: Any, *, exact: bool) -> Any:
    """Return epoch seconds (Decimal if exact, else float) from a datetime or a DB number."""
    if value is None or isinstance(value, Decimal | float):
        return value if exact or not isinstance(value, Decimal) else float(value)
    if isinstance(value, datetime):
        return _seconds(value - EPOCH_DT) if exact else value.timestamp()
    return Decimal(value) if exact else float(value)


EPOCH_DT = datetime(1970, 1, 1, tzinfo=UTC)
NODES_TXT = Cast("node_names", TextField())  # parsed once per distinct list, not per row


@lru_cache(maxsize=4096)
def _nodes(raw: str | None) -> tuple[str, ...]:
    """Parse a phase's node list (JSON text); a group has few distinct lists."""
    if not raw:
        return ()
    value = json.loads(raw)
    if isinstance(value, str):  # a JSON string holding the list (double-encoded)
        value = json.loads(value)
    return tuple(value)


def _phase_rows(
    flt: Q, t0: datetime | None, t1: datetime | None
) -> list[tuple[int, int, int, str, tuple[str, ...], bool | None, float, float | None, str]]:
    """Query only the phases overlapping the window (uses the (group, started_at) index).

    Times come back as float epoch seconds.
    """
    qs = PhaseRecord.objects.filter(flt, started_at__isnull=False)
    if t1 is not None:
        qs = qs.filter(started_at__lt=t1)
    if t0 is not None:
        qs = qs.filter(Q(finished_at__gt=t0) | Q(finished_at__isnull=True))
    annotations, (s_col, f_col) = _epoch_fields(exact=False)
    rows = (
        qs.annotate(nodes_txt=NODES_TXT, **annotations)
        .order_by("started_at", "id")
        .values_list(
            "id", "job_id", "iteration", "kind", "nodes_txt", "warm_start", s_col, f_col, "state"
        )
    )
    if annotations:
        return [(*r[:4], _nodes(r[4]), *r[5:]) for r in rows]
    return [
        (*r[:4], _nodes(r[4]), r[5], _epoch(r[6], exact=False), _epoch(r[7], exact=False), r[8])
        for r in rows
    ]


def group_timeline(
    *,
    user: Any,
    group_id: int,
    start: str | None = None,
    end: str | None = None,
    width: int = 1200,
    now: datetime | None = None,
    group: ExecutionGroup | None = None,
) -> Timeline:
    """Return the Gantt geometry of a group: one lane per node, one bar per phase record.

    `group`, if given, is the row the caller already checked with `visible_group`.
    """
    if group is None or group.pk != group_id:
        group = visible_group(user=user, group_id=group_id)
    now_ = _now(now)
    t0, t1 = parse_window(start, end, default=lambda: group_window(group, now=now_))
    # 1. lanes: every node ever allocated to the group, rollout pool first
    allocs = list(
        NodeAllocation.objects.filter(group=group).values_list(
            "node__name", "node__cluster__kind", "start", "end"
        )
    )
    pools: dict[str, str] = {}
    alloc_by_node: dict[str, list[tuple[datetime, datetime | None]]] = defaultdict(list)
    for name, kind, a, b in allocs:
        pools[name] = kind
        alloc_by_node[name].append((a, b))
    rows, pre, sums = _group_phase_rows(group.pk, t0, t1, width)
    tenant_ids = _visible_tenant_ids(user)
    job_info = {
        jid: (name, tid)
        for jid, name, tid in Placement.objects.filter(group=group).values_list(
            "job_id", "job__name", "job__tenant_id"
        )
    }
    labels = {
        jid: (name if tenant_ids is None or tid in tenant_ids else f"job #{jid} (other tenant)")
        for jid, (name, tid) in job_info.items()
    }
    return _build_timeline(
        title=f"Group {group.pk}",
        rows=rows,
        pre_aggregated=pre,
        pre_job_sums=sums,
        pools=pools,
        alloc_by_node=alloc_by_node,
        labels=labels,
        t0=t0,
        t1=t1,
        width=width,
        now=now_,
        live=group.released_at is None,
        with_headline=True,
    )


def job_timeline(
    *,
    user: Any,
    job_id: int,
    start: str | None = None,
    end: str | None = None,
    width: int = 1200,
    now: datetime | None = None,
) -> Timeline:
    """Return the Gantt geometry of one job: its phases on the nodes they ran on."""
    job = visible_job(user=user, job_id=job_id)
    now_ = _now(now)
    t0, t1 = parse_window(start, end, default=lambda: job_window(job, now=now_))
    rows = _phase_rows(Q(job_id=job.pk), t0, t1)
    node_names = {n for r in rows for n in r[4]}
    pools = dict(Node.objects.filter(name__in=node_names).values_list("name", "cluster__kind"))
    return _build_timeline(
        title=f"Job {job.name}",
        rows=rows,
        pools=pools,
        alloc_by_node={},
        labels={job.pk: job.name},
        t0=t0,
        t1=t1,
        width=width,
        now=now_,
        live=not job.is_terminal,
        with_headline=False,
    )


def _group_phase_rows(
    group_id: int, t0: datetime, t1: datetime, width: int
) -> tuple[
    list[Any],
    list[tuple[int, str, tuple[str, ...], int, float, int]],
    list[tuple[int, tuple[str, ...], float]],
]:
    """Return a group's phases in the window: rows to draw, and pre-aggregated short ones.

    With many phases in the window (PostgreSQL), phases shorter than a pixel are
    summed per lane and pixel column in the database (coloured by the column's
    longest phase), and per job and lane for the headline, so a group with 10,000
    phases sends back at most lanes x columns sums instead of every row; the others
    come back one row per phase as usual.
    """
    flt = Q(group_id=group_id)
    if connection.vendor != "postgresql":
        return _phase_rows(flt, t0, t1), [], []
    count = (
        PhaseRecord.objects.filter(flt, started_at__isnull=False, started_at__lt=t1)
        .filter(Q(finished_at__gt=t0) | Q(finished_at__isnull=True))
        .count()
    )
    if count <= BAR_LIMIT:
        return _phase_rows(flt, t0, t1), [], []
    plot_w = max(400, min(int(width), 4000)) - LEFT - RIGHT
    px = (t1 - t0).total_seconds() / plot_w
    pixel = timedelta(seconds=px)
    rows = _phase_rows(
        flt & (Q(finished_at__isnull=True) | Q(finished_at__gte=F("started_at") + pixel)), t0, t1
    )
    table = PhaseRecord._meta.db_table
    clipped = "EXTRACT(EPOCH FROM LEAST(finished_at, %s) - GREATEST(started_at, %s))"
    where = f"""
        FROM {table}
        WHERE group_id = %s AND started_at IS NOT NULL AND started_at < %s
          AND finished_at > %s AND finished_at < started_at + %s"""
    where_params: list[Any] = [group_id, t1, t0, pixel]
    with connection.cursor() as cur:
        # one sum per lane and pixel column, coloured by its longest phase
        cur.execute(
            f"""
            SELECT node_names::text,
                   floor((EXTRACT(EPOCH FROM GREATEST(started_at, %s)) - %s) / %s)::int,
                   sum({clipped}), count(*),
                   (array_agg(job_id ORDER BY finished_at - started_at DESC))[1],
                   (array_agg(kind ORDER BY finished_at - started_at DESC))[1]
            {where}
            GROUP BY 1, 2
            """,  # noqa: S608 - the table name is the model's own, every value a parameter
            [t0, t0.timestamp(), px, t1, t0, *where_params],
        )
        pre = [
            (jid, kind, _nodes(nodes), int(col), float(busy), int(n))
            for nodes, col, busy, n, jid, kind in cur.fetchall()
        ]
        # busy time per job and node list, for the bubble headline
        cur.execute(
            f"SELECT node_names::text, job_id, sum({clipped}) {where} GROUP BY 1, 2",  # noqa: S608
            [t1, t0, *where_params],
        )
        sums = [(jid, _nodes(nodes), float(busy)) for nodes, jid, busy in cur.fetchall()]
    return rows, pre, sums


def _build_timeline(
    *,
    title: str,
    rows: list[Any],
    pre_aggregated: Sequence[tuple[int, str, tuple[str, ...], int, float, int]] = (),
    pre_job_sums: Sequence[tuple[int, tuple[str, ...], float]] = (),
    pools: dict[str, str],
    alloc_by_node: dict[str, list[tuple[datetime, datetime | None]]],
    labels: dict[int, str],
    t0: datetime,
    t1: datetime,
    width: int,
    now: datetime,
    live: bool,
    with_headline: bool,
) -> Timeline:
    width = max(400, min(int(width), 4000))
    for r in rows:
        for n in r[4]:
            pools.setdefault(n, PoolKind.ROLLOUT if r[3] == "rollout" else PoolKind.TRAIN)
    for _jid, kind, nodes, _col, _busy, _n in pre_aggregated:
        for n in nodes:
            pools.setdefault(n, PoolKind.ROLLOUT if kind == "rollout" else PoolKind.TRAIN)
    order = {PoolKind.ROLLOUT: 0, PoolKind.TRAIN: 1}
    lane_names = sorted(pools, key=lambda n: (order.get(pools[n], 2), n))  # type: ignore[call-overload]
    lanes = tuple(
        Lane(node=n, pool=pools[n], y=TOP + i * (LANE_H + LANE_GAP))
        for i, n in enumerate(lane_names)
    )
    lane_y = {ln.node: ln.y for ln in lanes}
    plot_w = width - LEFT - RIGHT
    w0 = t0.timestamp()
    span = (t1 - t0).total_seconds()
    scale = plot_w / span
    colours = job_colours(
        labels.keys()
        | {r[1] for r in rows}
        | {p[0] for p in pre_aggregated}
        | {p[0] for p in pre_job_sums}
    )
    pre_count = sum(p[5] for p in pre_aggregated)
    aggregate = len(rows) + pre_count > BAR_LIMIT
    bars: list[PhaseBar] = []
    busy: dict[str, list[tuple[float, float]]] = defaultdict(list)
    # lane -> column -> job -> (kind, busy seconds)
    agg_cols: dict[str, dict[int, dict[tuple[int, str], float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    aggregated_count = pre_count
    now_ts = now.timestamp()
    # the database's per-job sums stand in for the short phases in the headline
    pseudo_rows = [
        (0, jid, 0, "", nodes, None, w0, w0 + secs, PhaseState.SUCCEEDED)
        for jid, nodes, secs in pre_job_sums
    ]
    for jid, kind, nodes, col, secs, _n in pre_aggregated:
        cs = w0 + col / scale
        for n in nodes:
            agg_cols[n][col][(jid, kind)] += secs
            busy[n].append((cs, cs + secs))
    for pid, jid, it, kind, nodes, warm, s, f, state in rows:
        a = max(s, w0)
        b_raw = f if f is not None else max(now_ts, s)
        b = min(b_raw, t1.timestamp())
        if b < a:
            b = a
        for n in nodes:
            busy[n].append((a, b))
        x = LEFT + (a - w0) * scale
        w = (b - a) * scale
        light, dark = colours.get(jid, ("#ccc", "#666"))
        fill = light if kind == "rollout" else dark
        if aggregate and w < 1.0:
            aggregated_count += 1
            col = int((a - w0) * scale)
            for n in nodes:
                agg_cols[n][col][(jid, kind)] += b - a
            continue
        duration = f - s if f is not None else now_ts - s
        start_kind = {True: "warm start", False: "cold start"}.get(warm, "start unknown")
        tip = (
            f"{labels.get(jid, f'job #{jid}')} · iteration {it} · {kind} · "
            f"{_fmt_s(duration)}{' (running)' if f is None else ''} · {start_kind}"
            f" · {', '.join(nodes)}"
        )
        rects = tuple(
            BarRect(x=round(x, 2), y=lane_y[n] + 2, w=round(max(w, 0.6), 2))
            for n in nodes
            if n in lane_y
        )
        bars.append(
            PhaseBar(
                phase_id=pid,
                job_id=jid,
                kind=kind,
                fill=fill,
                rects=rects,
                tip=tip,
                warm_start=warm,
                running=f is None or state == PhaseState.RUNNING,
            )
        )
    aggregates: list[AggRect] = []
    for n, cols in agg_cols.items():
        y = lane_y[n] + 2
        run: list[Any] | None = None  # [start col, end col, key, opacity bucket, seconds]
        for col in sorted(cols):
            per_job = cols[col]
            key = max(per_job, key=lambda k: per_job[k])
            secs = sum(per_job.values())
            opacity = min(1.0, max(0.25, round(secs * scale * 4) / 4))
            if run and run[1] == col - 1 and run[2] == key and run[3] == opacity:
                run[1] = col
                run[4] += secs
                continue
            if run:
                aggregates.append(_agg_rect(run, y, colours, labels))
            run = [col, col, key, opacity, secs]
        if run:
            aggregates.append(_agg_rect(run, y, colours, labels))
    # bubbles: allocated (or, for a job view, spanned) but idle
    bubbles: list[Bubble] = []
    min_w = 1.0 if aggregate else 0.5
    for n in lane_names:
        if alloc_by_node:
            outer = _merge(
                [
                    (max(a.timestamp(), w0), min((b or now).timestamp(), t1.timestamp()))
                    for a, b in alloc_by_node.get(n, [])
                    if (b or now).timestamp() > w0 and a.timestamp() < t1.timestamp()
                ]
            )
        else:
            continue
        for a, b in _subtract(outer, _merge(busy.get(n, []))):
            w = (b - a) * scale
            if w >= min_w:
                bubbles.append(
                    Bubble(
                        x=round(LEFT + (a - w0) * scale, 2),
                        y=lane_y[n] + 2,
                        w=round(w, 2),
                        tip=f"bubble on {n}: idle {_fmt_s(b - a)}",
                    )
                )
    height = TOP + len(lanes) * (LANE_H + LANE_GAP) + AXIS_H
    legend = tuple(
        (labels.get(jid, f"job #{jid}"), light, dark) for jid, (light, dark) in colours.items()
    )
    headline: tuple[PoolBubbles, ...] = ()
    if with_headline:
        headline = _bubble_headline(rows + pseudo_rows, pools, alloc_by_node, t0, t1, now)
    return Timeline(
        title=title,
        t0=t0,
        t1=t1,
        width=width,
        height=height,
        plot_left=LEFT,
        plot_right=width - RIGHT,
        lanes=lanes,
        bars=tuple(bars),
        aggregates=tuple(aggregates),
        bubbles=tuple(bubbles),
        ticks=_ticks(t0, t1, LEFT, plot_w),
        phase_count=len(rows) + pre_count,
        aggregated_count=aggregated_count,
        legend=legend,
        headline=headline,
        live=live,
        empty_message="" if rows or pre_aggregated else "No phase ran in this window.",
    )


def _agg_rect(
    run: list[Any], y: float, colours: dict[int, tuple[str, str]], labels: dict[int, str]
) -> AggRect:
    c0, c1, (jid, kind), opacity, secs = run
    light, dark = colours.get(jid, ("#ccc", "#666"))
    return AggRect(
        x=float(LEFT + c0),
        y=y,
        w=float(c1 - c0 + 1),
        fill=light if kind == "rollout" else dark,
        opacity=opacity,
        tip=f"{c1 - c0 + 1} px of short phases, mostly {labels.get(jid, f'job #{jid}')} {kind};"
        f" busy {_fmt_s(secs)}",
    )


def _bubble_headline(
    rows: list[Any],
    pools: dict[str, str],
    alloc_by_node: dict[str, list[tuple[datetime, datetime | None]]],
    t0: datetime,
    t1: datetime,
    now: datetime,
) -> tuple[PoolBubbles, ...]:
    """Return bubble fractions per pool now and if each member ran alone on dedicated pools.

    Alone, a job keeps its own rollout and training nodes for its whole iteration, so
    its rollout nodes idle during its training and vice versa: allocated node-seconds
    = its nodes per pool x (its rollout time + its training time), busy the same as now.
    """
    alloc_s: dict[str, float] = defaultdict(float)
    for n, spans in alloc_by_node.items():
        for a, b in spans:
            c = _clip(a, b or now, t0, t1)
            if c:
                alloc_s[pools.get(n, "")] += (c[1] - c[0]).total_seconds()
    busy_s: dict[str, float] = defaultdict(float)
    job_time: dict[int, float] = defaultdict(float)  # phase seconds (both kinds) in window
    job_nodes: dict[tuple[int, str], set[str]] = defaultdict(set)
    lo, hi, now_ts = t0.timestamp(), t1.timestamp(), now.timestamp()
    for _pid, jid, _it, _kind, nodes, _warm, s, f, _state in rows:
        d = min(hi, now_ts if f is None else f) - max(lo, s)
        if d <= 0:
            continue
        job_time[jid] += d
        for n in nodes:
            pool = pools.get(n, "")
            busy_s[pool] += d
            job_nodes[(jid, pool)].add(n)
    out = []
    for pool in (PoolKind.ROLLOUT, PoolKind.TRAIN):
        alloc = alloc_s.get(pool, 0.0)
        busy = min(busy_s.get(pool, 0.0), alloc) if alloc else busy_s.get(pool, 0.0)
        solo_alloc = sum(len(job_nodes.get((jid, pool), ())) * t for jid, t in job_time.items())
        frac = (alloc - busy) / alloc if alloc > 0 else None
        solo_frac = (solo_alloc - busy_s.get(pool, 0.0)) / solo_alloc if solo_alloc > 0 else None
        reclaimed = None
        if solo_alloc > 0 and alloc > 0:
            solo_idle = solo_alloc - busy_s.get(pool, 0.0)
            now_idle = alloc - busy
            reclaimed = max(0.0, 1 - now_idle / solo_idle) if solo_idle > 0 else None
        out.append(
            PoolBubbles(
                pool=str(pool),
                allocated_node_s=alloc,
                busy_node_s=busy,
                bubble_fraction=frac,
                solo_bubble_fraction=solo_frac,
                reclaimed_share=reclaimed,
            )
        )
    return tuple(out)


def trace_events(
    timeline_rows: list[Any], pools: dict[str, str], labels: dict[int, str]
) -> dict[str, Any]:
    """Return Chrome/Perfetto trace JSON: one complete ("X") event per phase and node.

    pid = pool, tid = node; ts and dur in microseconds since the first phase.
    """
    events: list[dict[str, Any]] = []
    pid_of = {PoolKind.ROLLOUT.value: 1, PoolKind.TRAIN.value: 2}
    tids: dict[str, int] = {}
    base = min((r[6] for r in timeline_rows), default=None)
    for pool, pid in pid_of.items():
        events.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": pid,
                "tid": 0,
                "args": {"name": "Rollout pool" if pool == "rollout" else "Training pool"},
            }
        )
    for pid_, jid, it, kind, nodes, warm, s, f, state in timeline_rows:
        if f is None or base is None:
            continue
        for n in nodes:
            pool = pools.get(n, "rollout" if kind == "rollout" else "train")
            if n not in tids:
                tids[n] = len(tids) + 1
                events.append(
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": pid_of.get(pool, 3),
                        "tid": tids[n],
                        "args": {"name": n},
                    }
                )
            events.append(
                {
                    "name": f"{labels.get(jid, f'job #{jid}')} {kind} #{it}",
                    "cat": kind,
                    "ph": "X",
                    "ts": round((s - base) * 1e6),
                    "dur": round((f - s) * 1e6),
                    "pid": pid_of.get(pool, 3),
                    "tid": tids[n],
                    "args": {
                        "phase_id": pid_,
                        "job_id": jid,
                        "iteration": it,
                        "warm_start": warm,
                        "state": state,
                        "started_at": datetime.fromtimestamp(s, tz=UTC).isoformat(),
                    },
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def group_trace(*, user: Any, group_id: int) -> dict[str, Any]:
    """Return the whole group as Chrome/Perfetto trace JSON."""
    group = visible_group(user=user, group_id=group_id)
    t0, t1 = group_window(group)
    rows = _phase_rows(Q(group_id=group.pk), None, None)
    pools = dict(
        NodeAllocation.objects.filter(group=group).values_list("node__name", "node__cluster__kind")
    )
    tenant_ids = _visible_tenant_ids(user)
    labels = {
        jid: (name if tenant_ids is None or tid in tenant_ids else f"job #{jid}")
        for jid, name, tid in Placement.objects.filter(group=group).values_list(
            "job_id", "job__name", "job__tenant_id"
        )
    }
    return trace_events(rows, pools, labels)


def job_trace(*, user: Any, job_id: int) -> dict[str, Any]:
    """Return one job's phases as Chrome/Perfetto trace JSON."""
    job = visible_job(user=user, job_id=job_id)
    rows = _phase_rows(Q(job_id=job.pk), None, None)
    names = {n for r in rows for n in r[4]}
    pools = dict(Node.objects.filter(name__in=names).values_list("name", "cluster__kind"))
    return trace_events(rows, pools, {job.pk: job.name})


# --------------------------------------------------------------------------- cost


@dataclass(kw_only=True)
class CostFigures:
    """The money and GPU-hour columns every cost row and total carries."""

    busy_gpu_hours: Decimal = Decimal(0)
    idle_gpu_hours: Decimal = Decimal(0)
    busy_cost: Decimal = Decimal(0)
    idle_cost: Decimal = Decimal(0)
    solo_disagg_cost: Decimal = Decimal(0)
    colocated_cost: Decimal = Decimal(0)

    @property
    def gpu_hours(self) -> Decimal:
        return self.busy_gpu_hours + self.idle_gpu_hours

    @property
    def cost(self) -> Decimal:
        return self.busy_cost + self.idle_cost

    @property
    def saving_vs_solo(self) -> Decimal:
        return self.solo_disagg_cost - self.cost

    @property
    def saving_vs_colocated(self) -> Decimal:
        return self.colocated_cost - self.cost


FIGURE_COLUMNS = tuple(f.name for f in fields(CostFigures))


def _hq(hours: Decimal) -> Decimal:
    """Round GPU-hours once, half-up, to the four decimals shown."""
    return hours.quantize(HOURS_Q, rounding=ROUND_HALF_UP)


def _cents(amount: Decimal) -> Decimal:
    """Round money once, half-up, to the cent."""
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


@dataclass(kw_only=True)
class _Rounded(CostFigures):
    """Figures shown in cents (and GPU-hours to 4 decimals) with the exact ones they came from."""

    exact: CostFigures = field(default_factory=CostFigures)

    @property
    def gpu_hours(self) -> Decimal:
        return _hq(self.exact.gpu_hours)


@dataclass(kw_only=True)
class CostLine(_Rounded):
    """One job on one GPU type over the range: a billing line.

    `exact` holds the unrounded amounts; busy_cost and idle_cost are the billed cents
    (the total's cents handed out by largest remainder, see bill_lines); the
    counterfactuals are the exact ones rounded once.
    """

    tenant_id: int
    tenant: str
    job_id: int
    job_name: str
    gpu_type: str
    group_ids: list[int]


@dataclass(kw_only=True)
class CostTotals(_Rounded):
    """A row of sums: exact sums of the lines, rounded once (see totals_of)."""

    key: str
    label: str


@dataclass
class BurnDown:
    tenant: str
    month_start: date
    budget: Decimal | None
    spent: Decimal
    daily_cumulative: list[tuple[date, Decimal]]

    @property
    def remaining(self) -> Decimal | None:
        return None if self.budget is None else self.budget - self.spent

    @property
    def used_share(self) -> float | None:
        if not self.budget:
            return None
        return float(self.spent / self.budget)


@dataclass
class CostReport:
    start: date
    end: date
    t0: datetime
    t1: datetime
    lines: list[CostLine]
    total: CostTotals
    by_tenant: list[CostTotals]
    by_gpu_type: list[CostTotals]
    group_costs: dict[int, Decimal] = field(default_factory=dict)
    burn_down: list[BurnDown] = field(default_factory=list)
    # the month the burn-down shows (that of the range's last day, or today's if earlier)
    # and whether it is still running (then the burn-down is month to date)
    burn_down_month: date | None = None
    burn_down_to_date: bool = False

    @property
    def empty(self) -> bool:
        return not self.lines


def _hours(seconds: Decimal, gpus: int) -> Decimal:
    return seconds * gpus / HOUR


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a report builds its many small objects.

    A month of 10,000 jobs makes hundreds of thousands of tuples, dicts and lines, none
    of them garbage in a cycle, and the collector kept scanning them all: a third of
    the report's time. Reference counting frees memory as usual; the collector runs
    again afterwards (if it was on: a caller that turned it off keeps it off).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@_gc_paused()
def _cost_engine(
    *,
    tenant_ids: set[int] | None,
    t0: datetime,
    t1: datetime,
    now: datetime,
    prices: PriceBook,
    buckets: Sequence[datetime] = (),
    counterfactuals: bool | None = None,
) -> tuple[list[CostLine], dict[int, Decimal], dict[tuple[int, int], Decimal]]:
    """Compute cost lines over [t0, t1); also per (bucket, tenant) costs when buckets are given.

    Returns (lines, group cost per group id, {(bucket index, tenant id): cost}).
    """
    hi_dt = min(t1, now)
    if hi_dt <= t0:
        return [], {}, {}
    with_cf = not buckets if counterfactuals is None else counterfactuals  # none for burn-down
    # integer microseconds since the epoch: exact, and much cheaper than Decimal per phase
    lo, hi, now_us = _us(t0), _us(hi_dt), _us(now)
    buckets_us = [_us(b) for b in buckets]
    last_bucket = len(buckets_us) - 1
    # 1. groups in scope: allocated in the range and (for a researcher) with a visible member
    alloc_qs = NodeAllocation.objects.filter(start__lt=hi_dt).filter(
        Q(end__gt=t0) | Q(end__isnull=True)
    )
    if tenant_ids is not None:
        alloc_qs = alloc_qs.filter(group__placements__job__tenant_id__in=tenant_ids).distinct()
    ann, native = _us_fields(a_us="start", b_us="end")
    allocs = list(
        alloc_qs.annotate(**ann).values_list(
            "group_id", "node_id", "node__name", "node__gpus", "node__gpu_type_id", *ann
        )
        if native
        else alloc_qs.values_list(
            "group_id", "node_id", "node__name", "node__gpus", "node__gpu_type_id", "start", "end"
        )
    )
    group_ids = {a[0] for a in allocs}
    if not group_ids:
        return [], {}, {}
    type_names = dict(GpuType.objects.values_list("id", "name"))
    rollout_type, train_type = _pool_types()
    # a GPU type whose price does not change inside the range needs no cutting per phase
    flat = {tid: prices.flat_index(tid, lo, hi) for tid in type_names}
    # 2. placements (members) with their jobs, and the nodes they are pinned to
    ann, _ = _us_fields(c_us="created_at", e_us="ended_at")
    job_cols = ("job__name", "job__tenant_id", "job__tenant__name")
    gpu_cols = ("job__rollout_gpus", "job__train_gpus")
    placements: list[tuple[int, int, int, int, int]] = []  # id, group, job, joined, left (us)
    jobs: dict[int, tuple[int, str, int, str, int, int]] = {}
    for pl_id, gid, jid, created, ended, *job in (
        Placement.objects.filter(_in_ids("group_id", group_ids))
        .annotate(**ann)
        .values_list(
            "id", "group_id", "job_id", *(ann or ("created_at", "ended_at")), *job_cols, *gpu_cols
        )
    ):
        if not native:
            created, ended = _us(created), None if ended is None else _us(ended)
        placements.append((pl_id, gid, jid, created, now_us if ended is None else ended))
        jobs[jid] = (jid, *job)  # type: ignore[assignment]
    pinned: dict[int, set[int]] = defaultdict(set)  # node id -> placement ids
    for through in (Placement.rollout_nodes.through, Placement.train_nodes.through):
        for pl_id, node_id in through.objects.filter(
            _in_ids("placement__group_id", group_ids)
        ).values_list("placement_id", "node_id"):
            pinned[node_id].add(pl_id)
    # 3. allocated time per (group, node), cut at price changes (and buckets)
    node_info: dict[tuple[int, str], tuple[int, int, int]] = {}  # (group, name) -> id, gpus, type
    alloc_spans: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    node_meta: dict[int, tuple[int, int]] = {}  # node id -> gpus, type
    alloc_us: dict[tuple[int, int, int], int] = defaultdict(int)  # (group, node, price) -> us
    bucket_alloc_us: dict[tuple[int, int, int, int], int] = defaultdict(int)
    for gid, nid, name, gpus, tid, a, b in allocs:
        if not native:
            a, b = _us(a), None if b is None else _us(b)
        c = _clip(a, b, lo, hi)
        if not c:
            continue
        node_info[(gid, name)] = (nid, gpus, tid)
        node_meta[nid] = (gpus, tid)
        alloc_spans[(gid, nid)].append(c)
        for seg, us in prices.split_us(tid, *c):
            alloc_us[(gid, nid, seg)] += us
        for bi, piece in _split(c, buckets_us):
            for seg, us in prices.split_us(tid, *piece):
                bucket_alloc_us[(bi, gid, nid, seg)] += us
    # 4. busy time per (group, node, job) from the phase records; the common case (one
    # price over the range, a phase inside one bucket) is written out inline: this loop
    # runs once per phase record and node
    busy_us: dict[tuple[int, int, int, int], int] = defaultdict(int)  # (g, node, job, price)
    bucket_busy_us: dict[tuple[int, int, int, int, int], int] = defaultdict(int)
    cf_roll_us: dict[tuple[int, int], int] = defaultdict(int)  # (job, price) -> us
    cf_train_us: dict[tuple[int, int], int] = defaultdict(int)
    roll_flat = None if rollout_type is None else flat.get(rollout_type)
    train_flat = None if train_type is None else flat.get(train_type)
    annotations, (s_col, f_col) = _epoch_fields(exact=True)
    phases = (
        PhaseRecord.objects.filter(_in_ids("group_id", group_ids), started_at__isnull=False)
        .filter(started_at__lt=hi_dt)
        .filter(Q(finished_at__gt=t0) | Q(finished_at__isnull=True))
        .annotate(nodes_txt=NODES_TXT, **annotations)
        .values_list("group_id", "job_id", "nodes_txt", s_col, f_col)
    )
    pieces: Sequence[tuple[int, tuple[int, int]]] = ()
    for gid, jid, nodes_raw, s, f in phases.iterator(chunk_size=5000):
        if not native:
            s, f = _us(s), None if f is None else _us(f)
        pa = s if s > lo else lo
        pb = hi if f is None or f > hi else f
        if pb <= pa:
            continue
        if buckets_us:
            bi = bisect_right(buckets_us, pa) - 1
            if 0 <= bi < last_bucket and pb <= buckets_us[bi + 1]:
                pieces = ((bi, (pa, pb)),)
            else:
                pieces = _split((pa, pb), buckets_us)
        for name in _nodes(nodes_raw):
            info = node_info.get((gid, name))
            if info is None:
                continue  # not allocated to this group in the range: costs nothing here
            nid, _gpus, tid = info
            one_price = flat.get(tid)
            if one_price is not None:
                busy_us[(gid, nid, jid, one_price)] += pb - pa
                for bi, (a, b) in pieces:
                    bucket_busy_us[(bi, gid, nid, jid, one_price)] += b - a
                continue
            for seg, us in prices.split_us(tid, pa, pb):
                busy_us[(gid, nid, jid, seg)] += us
            for bi, (a, b) in pieces:
                for seg, us in prices.split_us(tid, a, b):
                    bucket_busy_us[(bi, gid, nid, jid, seg)] += us
        # counterfactuals for the same work: alone, the job holds both its pools for
        # the duration of every one of its phases (trace-format.md, "Baselines")
        if with_cf:
            if roll_flat is not None:
                cf_roll_us[(jid, roll_flat)] += pb - pa
            elif rollout_type is not None:
                for seg, us in prices.split_us(rollout_type, pa, pb):
                    cf_roll_us[(jid, seg)] += us
            if train_flat is not None:
                cf_train_us[(jid, train_flat)] += pb - pa
            elif train_type is not None:
                for seg, us in prices.split_us(train_type, pa, pb):
                    cf_train_us[(jid, seg)] += us
    # 4b. microseconds x price, once per key (Decimal: exact to the cent and beyond)
    alloc_cost: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
    group_exact: dict[int, Decimal] = defaultdict(Decimal)
    for (gid, nid, seg), us in alloc_us.items():
        gpus, tid = node_meta[nid]
        amount = prices.amount(tid, seg, us, gpus)
        alloc_cost[(gid, nid)] += amount
        group_exact[gid] += amount
    busy_s: dict[tuple[int, int, int], Decimal] = defaultdict(Decimal)
    busy_cost: dict[tuple[int, int, int], Decimal] = defaultdict(Decimal)
    for (gid, nid, jid, seg), us in busy_us.items():
        gpus, tid = node_meta[nid]
        busy_cost[(gid, nid, jid)] += prices.amount(tid, seg, us, gpus)
        busy_s[(gid, nid, jid)] += us / MICRO
    # (group, node) -> bucket -> allocated cost: only the buckets a node was allocated in
    bucket_alloc: dict[tuple[int, int], dict[int, Decimal]] = defaultdict(
        lambda: defaultdict(Decimal)
    )
    for (bi, gid, nid, seg), us in bucket_alloc_us.items():
        gpus, tid = node_meta[nid]
        bucket_alloc[(gid, nid)][bi] += prices.amount(tid, seg, us, gpus)
    bucket_busy: dict[tuple[int, int, int, int], Decimal] = defaultdict(Decimal)
    for (bi, gid, nid, jid, seg), us in bucket_busy_us.items():
        gpus, tid = node_meta[nid]
        bucket_busy[(bi, gid, nid, jid)] += prices.amount(tid, seg, us, gpus)
    cf_solo: dict[tuple[int, int], Decimal] = defaultdict(Decimal)  # (job, type) -> cost
    cf_coloc: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
    for (jid, seg), us in cf_roll_us.items():
        job = jobs.get(jid)
        if job is not None and rollout_type is not None:
            cf_solo[(jid, rollout_type)] += prices.amount(rollout_type, seg, us, job[4])
    for (jid, seg), us in cf_train_us.items():
        job = jobs.get(jid)
        if job is not None and train_type is not None:
            part = prices.amount(train_type, seg, us, job[5])
            cf_solo[(jid, train_type)] += part
            cf_coloc[(jid, train_type)] += part
    # 5. split each node's idle cost among the members pinned to it
    pl_by_group: dict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
    for pl_id, gid, jid, joined, left in placements:
        pl_by_group[gid].append((pl_id, jid, joined, left))
    parts: dict[int, dict[tuple[int, int, str], Decimal]] = defaultdict(
        lambda: defaultdict(Decimal)
    )  # group -> (job, type, busy|idle) -> exact cost
    hours: dict[tuple[int, int, str], Decimal] = defaultdict(Decimal)
    bucket_job: dict[tuple[int, int], Decimal] = defaultdict(Decimal)  # (bucket, job)
    busy_by_node: dict[tuple[int, int], list[int]] = defaultdict(list)
    for gid, nid, jid in busy_s:
        busy_by_node[(gid, nid)].append(jid)
    for (gid, nid), spans in alloc_spans.items():
        gpus, tid = node_meta[nid]
        total_alloc = alloc_cost[(gid, nid)]
        alloc_sec = sum(b - a for a, b in spans) / MICRO
        jobs_busy = busy_by_node.get((gid, nid), [])
        busy_sum = sum((busy_cost[(gid, nid, j)] for j in jobs_busy), Decimal(0))
        busy_sec_sum = sum((busy_s[(gid, nid, j)] for j in jobs_busy), Decimal(0))
        # phases overlapping on one node (should not happen) must not charge more than
        # the allocation: scale busy down so busy + idle = allocated, always
        # (x * 1 is x exactly: the usual case skips the multiplication)
        shrink = total_alloc / busy_sum if busy_sum > total_alloc and busy_sum > 0 else None
        shrink_s = alloc_sec / busy_sec_sum if busy_sec_sum > alloc_sec and busy_sec_sum else None
        gparts = parts[gid]
        for j in jobs_busy:
            cost, sec = busy_cost[(gid, nid, j)], busy_s[(gid, nid, j)]
            gparts[(j, tid, "busy")] += cost if shrink is None else cost * shrink
            hours[(j, tid, "busy")] += _hours(sec if shrink_s is None else sec * shrink_s, gpus)
        idle_cost = total_alloc - min(busy_sum, total_alloc)
        idle_sec = alloc_sec - min(busy_sec_sum, alloc_sec)
        weights = _idle_weights(pl_by_group.get(gid, []), pinned.get(nid, set()), spans)
        if not weights and jobs_busy:
            weights = {j: 1 for j in jobs_busy}
        wsum = sum(weights.values())
        for j, w in weights.items():
            gparts[(j, tid, "idle")] += idle_cost * w / wsum
            hours[(j, tid, "idle")] += _hours(idle_sec * w / wsum, gpus)
        if buckets:
            node_buckets = bucket_alloc.get((gid, nid), {})
            for bi in sorted(node_buckets):
                b_alloc = node_buckets[bi]
                if not b_alloc:
                    continue
                b_busy = {j: bucket_busy.get((bi, gid, nid, j), Decimal(0)) for j in jobs_busy}
                b_busy_sum = sum(b_busy.values(), Decimal(0))
                b_idle = b_alloc - min(b_busy_sum, b_alloc)
                for j, v in b_busy.items():
                    bucket_job[(bi, j)] += v
                for j, w in weights.items():
                    bucket_job[(bi, j)] += b_idle * w / wsum
    # 6. exact (unrounded) amounts per (job, GPU type, busy|idle): nothing is rounded here;
    # rows and totals are rounded once, from exact sums, in cost_report
    exact_parts: dict[tuple[int, int, str], Decimal] = defaultdict(Decimal)
    line_groups: dict[tuple[int, int], set[int]] = defaultdict(set)
    for gid, gparts in parts.items():
        for k, v in gparts.items():
            exact_parts[k] += v
            line_groups[(k[0], k[1])].add(gid)
    group_costs = {
        gid: exact.quantize(CENT, rounding=ROUND_HALF_UP) for gid, exact in group_exact.items()
    }
    # 7. lines for visible tenants only (exact figures; cost_report bills them in cents)
    lines: dict[tuple[int, int], CostLine] = {}
    keys_all = set(line_groups) | set(cf_solo)
    for jid, tid in sorted(keys_all):
        job = jobs.get(jid)
        if job is None or (tenant_ids is not None and job[2] not in tenant_ids):
            continue
        busy_h = hours.get((jid, tid, "busy"), ZERO)
        idle_h = hours.get((jid, tid, "idle"), ZERO)
        lines[(jid, tid)] = CostLine(
            tenant_id=job[2],
            tenant=job[3],
            job_id=jid,
            job_name=job[1],
            gpu_type=type_names.get(tid, str(tid)),
            group_ids=sorted(line_groups.get((jid, tid), ())),
            busy_gpu_hours=_hq(busy_h),
            idle_gpu_hours=_hq(idle_h),
            exact=CostFigures(
                busy_gpu_hours=busy_h,
                idle_gpu_hours=idle_h,
                busy_cost=exact_parts.get((jid, tid, "busy"), ZERO),
                idle_cost=exact_parts.get((jid, tid, "idle"), ZERO),
                solo_disagg_cost=cf_solo.get((jid, tid), ZERO),
                colocated_cost=cf_coloc.get((jid, tid), ZERO),
            ),
        )
    by_bucket_tenant: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
    for (bi, jid), v in bucket_job.items():
        job = jobs.get(jid)
        if job is not None and (tenant_ids is None or job[2] in tenant_ids):
            by_bucket_tenant[(bi, job[2])] += v
    ordered = sorted(
        lines.values(), key=lambda ln: (ln.tenant, ln.job_name, ln.job_id, ln.gpu_type)
    )
    return ordered, group_costs, dict(by_bucket_tenant)


def _split(span: tuple[int, int], buckets: Sequence[int]) -> list[tuple[int, tuple[int, int]]]:
    """Cut a span at bucket boundaries: (bucket index, sub-span) pairs."""
    if not buckets:
        return []
    a, b = span
    out = []
    for i in range(max(0, bisect_right(buckets, a) - 1), len(buckets) - 1):
        lo, hi = buckets[i], buckets[i + 1]
        if lo >= b:
            break
        if hi > a:
            out.append((i, (max(a, lo), min(b, hi))))
    return out


def _idle_weights(
    members: list[tuple[int, int, int, int]],
    pinned_placements: set[int],
    spans: list[tuple[int, int]],
) -> dict[int, int]:
    """Weight each job by its membership time (microseconds) overlapping the node's allocation."""
    candidates = [m for m in members if m[0] in pinned_placements] or members
    weights: dict[int, int] = defaultdict(int)
    for _pl, jid, joined, left in candidates:
        for a, b in spans:
            overlap = min(left, b) - max(joined, a)
            if overlap > 0:
                weights[jid] += overlap
    return {j: w for j, w in weights.items() if w > 0}


def _pool_types() -> tuple[int | None, int | None]:
    """Return the GPU type ids of the rollout pool and the training pool."""
    kinds = dict(Cluster.objects.order_by("-id").values_list("kind", "gpu_type_id"))
    return kinds.get(PoolKind.ROLLOUT), kinds.get(PoolKind.TRAIN)


def _sum_lines(lines: Sequence[CostLine], *, key: str, label: str) -> CostTotals:
    """Return the row of `lines`: exact column sums, each rounded once.

    cost = the exact sum rounded half-up to the cent; busy and idle are that cost split
    by largest remainder (busy + idle = cost); GPU-hours to four decimals; the
    counterfactuals rounded once.
    """
    exact = CostFigures(
        **{
            column: sum((getattr(ln.exact, column) for ln in lines), Decimal(0))
            for column in FIGURE_COLUMNS
        }
    )
    busy, idle = apportion(exact.cost, [exact.busy_cost, exact.idle_cost])
    return CostTotals(
        key=key,
        label=label,
        exact=exact,
        busy_gpu_hours=_hq(exact.busy_gpu_hours),
        idle_gpu_hours=_hq(exact.idle_gpu_hours),
        busy_cost=busy,
        idle_cost=idle,
        solo_disagg_cost=_cents(exact.solo_disagg_cost),
        colocated_cost=_cents(exact.colocated_cost),
    )


def bill_lines(lines: Sequence[CostLine], total: CostTotals) -> None:
    """Set every line's busy and idle cents so each column adds up to the total's.

    Largest remainder per column: each line gets its exact amount floored to the cent,
    and the cents still missing to the total's figure go to the lines that lost the
    most (ties in line order). A line is never more than a cent from its exact amount.
    The counterfactuals are each line's exact amount rounded once.
    """
    for column, target in (("busy_cost", total.busy_cost), ("idle_cost", total.idle_cost)):
        exact = [getattr(ln.exact, column) for ln in lines]
        for ln, cents in zip(lines, apportion(target, exact), strict=True):
            setattr(ln, column, cents)
    for ln in lines:
        ln.solo_disagg_cost = _cents(ln.exact.solo_disagg_cost)
        ln.colocated_cost = _cents(ln.exact.colocated_cost)


def _totals(lines: list[CostLine], key: str) -> list[CostTotals]:
    grouped: dict[str, list[CostLine]] = defaultdict(list)
    for ln in lines:
        grouped[ln.tenant if key == "tenant" else ln.gpu_type].append(ln)
    return [_sum_lines(grouped[k], key=k, label=k) for k in sorted(grouped)]


def cost_report(
    *,
    user: Any,
    start: date,
    end: date,
    now: datetime | None = None,
    with_burn_down: bool = True,
) -> CostReport:
    """Return the cost report for [start, end] (whole UTC days), scoped to the user's tenants."""
    t0, t1 = day_range(start, end)
    now_ = _now(now)
    tenant_ids = _visible_tenant_ids(user)
    prices = PriceBook()
    # when the range starts on the burn-down month's first day and both stop at the same
    # moment (the default: month to date; or the whole month once it is over), the
    # burn-down's daily figures come from the report's own pass
    month_start, _next_month, days = _month(min(end, now_.date()))
    shared = with_burn_down and start == month_start and min(t1, now_) == min(days[-1], now_)
    lines, group_costs, per_bucket = _cost_engine(
        tenant_ids=tenant_ids,
        t0=t0,
        t1=t1,
        now=now_,
        prices=prices,
        buckets=days if shared else (),
        counterfactuals=True,
    )
    total = _sum_lines(lines, key="total", label="Total")
    bill_lines(lines, total)
    report = CostReport(
        start=start,
        end=end,
        t0=t0,
        t1=t1,
        lines=lines,
        total=total,
        by_tenant=_totals(lines, "tenant"),
        by_gpu_type=_totals(lines, "gpu_type"),
        group_costs=group_costs,
    )
    if with_burn_down:
        report.burn_down_month = month_start
        report.burn_down_to_date = now_ < days[-1]
        report.burn_down = burn_down(
            user=user,
            month_of=min(end, now_.date()),
            now=now_,
            prices=prices,
            per_bucket=per_bucket if shared else None,
            spent={t.key: t.cost for t in report.by_tenant} if shared else None,
        )
    return report


def _month(month_of: date) -> tuple[date, date, list[datetime]]:
    """Return the month's first day, the next month's first day and its day boundaries."""
    month_start = month_of.replace(day=1)
    next_month = (month_start + timedelta(days=32)).replace(day=1)
    t0 = datetime.combine(month_start, time.min, tzinfo=UTC)
    days = [t0 + timedelta(days=i) for i in range((next_month - month_start).days + 1)]
    return month_start, next_month, days


def burn_down(
    *,
    user: Any,
    month_of: date,
    now: datetime | None = None,
    prices: PriceBook | None = None,
    per_bucket: dict[tuple[int, int], Decimal] | None = None,
    spent: dict[str, Decimal] | None = None,
) -> list[BurnDown]:
    """Return month-to-date spend per tenant, day by day, against its monthly budgets.

    `per_bucket` ((day index, tenant) -> exact cost) is reused when the caller already
    computed the month to date with daily buckets; `spent` (tenant name -> the report's
    tenant row, in cents) is then the figure shown as spent and as the last day's point,
    so the burn-down and the tenant row on one page are the same number. Otherwise each
    day's cumulative exact spend is rounded once.
    """
    now_ = _now(now)
    month_start, next_month, days = _month(month_of)
    if per_bucket is None:
        _, _, per_bucket = _cost_engine(
            tenant_ids=_visible_tenant_ids(user),
            t0=days[0],
            t1=days[-1],
            now=now_,
            prices=prices or PriceBook(),
            buckets=days,
        )
    tenants = visible_tenants(user).order_by("name")
    budgets: dict[int, Decimal] = defaultdict(Decimal)
    has_budget: set[int] = set()
    for tid, b in Quota.objects.filter(monthly_budget_usd__isnull=False).values_list(
        "tenant_id", "monthly_budget_usd"
    ):
        budgets[tid] += b or Decimal(0)
        has_budget.add(tid)
    out = []
    last_day = min(len(days) - 1, max(0, (now_.date() - month_start).days + 1))
    for tenant in tenants:
        cum = Decimal(0)
        series = []
        for i in range(last_day):
            cum += per_bucket.get((i, tenant.pk), Decimal(0))
            series.append((days[i].date(), _cents(cum)))
        if not cum and tenant.pk not in has_budget:
            continue  # nothing spent and nothing to burn down
        total = _cents(cum)
        if spent is not None:
            total = spent.get(tenant.name, total)
            if series:
                series[-1] = (series[-1][0], total)
        out.append(
            BurnDown(
                tenant=tenant.name,
                month_start=month_start,
                budget=budgets[tenant.pk] if tenant.pk in has_budget else None,
                spent=total,
                daily_cumulative=series,
            )
        )
    return out


FOCUS_COLUMNS = (
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "BillingCurrency",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "SubAccountId",
    "SubAccountName",
    "ChargeCategory",
    "ChargeDescription",
    "Tags",
)


@_gc_paused()
def focus_rows(report: CostReport) -> list[dict[str, str]]:
    """Return the report as FinOps FOCUS-style rows: per job and GPU type, busy and idle apart."""
    rows = []
    iso = "%Y-%m-%dT%H:%M:%SZ"
    period = {
        "BillingPeriodStart": report.t0.strftime(iso),
        "BillingPeriodEnd": report.t1.strftime(iso),
        "ChargePeriodStart": report.t0.strftime(iso),
        "ChargePeriodEnd": report.t1.strftime(iso),
    }
    for ln in report.lines:
        line = {
            "ResourceId": f"job-{ln.job_id}/{ln.gpu_type}",
            "ResourceName": ln.job_name,
            "ResourceType": f"{ln.gpu_type} GPU",
            "SubAccountId": str(ln.tenant_id),
            "SubAccountName": ln.tenant,
            "ChargeCategory": "Usage",
        }
        # Tags is json.dumps({"charge", "gpu_type", "groups", "job_id"}, sort_keys=True):
        # "charge" sorts first, so the rest is dumped once per line and the charge put before
        tags_rest = json.dumps(
            {"gpu_type": ln.gpu_type, "groups": ln.group_ids, "job_id": ln.job_id}, sort_keys=True
        )[1:]
        for charge, qty, cost, desc in (
            ("busy", ln.busy_gpu_hours, ln.busy_cost, "GPU time running the job's phases"),
            ("idle", ln.idle_gpu_hours, ln.idle_cost, "Idle (bubble) share of allocated nodes"),
        ):
            if not qty and not cost:
                continue
            money = f"{cost:.2f}"
            rows.append(
                {
                    **period,
                    "BilledCost": money,
                    "EffectiveCost": money,
                    "ListCost": money,
                    "BillingCurrency": "USD",
                    "ConsumedQuantity": f"{qty:.4f}",
                    "ConsumedUnit": "GPU-Hours",
                    **line,
                    "ChargeDescription": desc,
                    "Tags": f'{{"charge": "{charge}", {tags_rest}',
                }
            )
    return rows


def _money(v: Decimal) -> str:
    return f"{v:.2f}"


def cost_report_json(report: CostReport) -> dict[str, Any]:
    """Return the report as JSON-ready data (money as strings with two decimals)."""

    def tot(t: CostTotals) -> dict[str, Any]:
        return {
            "key": t.key,
            "gpu_hours": f"{t.gpu_hours:.4f}",
            "busy_gpu_hours": f"{t.busy_gpu_hours:.4f}",
            "idle_gpu_hours": f"{t.idle_gpu_hours:.4f}",
            "cost": _money(t.cost),
            "busy_cost": _money(t.busy_cost),
            "idle_cost": _money(t.idle_cost),
            "solo_disagg_cost": _money(t.solo_disagg_cost),
            "colocated_cost": _money(t.colocated_cost),
            "saving_vs_solo_disagg": _money(t.saving_vs_solo),
            "saving_vs_colocated": _money(t.saving_vs_colocated),
        }

    return {
        "start": report.start.isoformat(),
        "end": report.end.isoformat(),
        "currency": "USD",
        "total": tot(report.total),
        "by_tenant": [tot(t) for t in report.by_tenant],
        "by_gpu_type": [tot(t) for t in report.by_gpu_type],
        "lines": [
            {
                "tenant": ln.tenant,
                "job_id": ln.job_id,
                "job": ln.job_name,
                "gpu_type": ln.gpu_type,
                "groups": ln.group_ids,
                "gpu_hours": f"{ln.gpu_hours:.4f}",
                "busy_gpu_hours": f"{ln.busy_gpu_hours:.4f}",
                "idle_gpu_hours": f"{ln.idle_gpu_hours:.4f}",
                "cost": _money(ln.cost),
                "busy_cost": _money(ln.busy_cost),
                "idle_cost": _money(ln.idle_cost),
                "solo_disagg_cost": _money(ln.solo_disagg_cost),
                "colocated_cost": _money(ln.colocated_cost),
                "saving_vs_solo_disagg": _money(ln.saving_vs_solo),
                "saving_vs_colocated": _money(ln.saving_vs_colocated),
            }
            for ln in report.lines
        ],
        "burn_down": [
            {
                "tenant": b.tenant,
                "month": b.month_start.isoformat(),
                "budget": None if b.budget is None else _money(b.budget),
                "spent": _money(b.spent),
            }
            for b in report.burn_down
        ],
    }


# --------------------------------------------------------------------------- SLO


@dataclass
class JobSlo:
    job_id: int
    job_name: str
    tenant: str
    slo_class: str
    slo: float
    status: str
    iterations_measured: int
    mean_iteration_s: float
    solo_iteration_s: float
    profile_iteration_s: float
    group_ids: list[int]

    @property
    def slowdown_vs_solo(self) -> float:
        return self.mean_iteration_s / self.solo_iteration_s if self.solo_iteration_s else 0.0

    @property
    def slowdown_vs_profile(self) -> float:
        return self.mean_iteration_s / self.profile_iteration_s if self.profile_iteration_s else 0.0

    @property
    def met(self) -> bool:
        return self.slowdown_vs_solo <= self.slo + 1e-9

    @property
    def met_vs_profile(self) -> bool:
        return self.slowdown_vs_profile <= self.slo + 1e-9

    @property
    def finished(self) -> bool:
        return self.status == JobStatus.COMPLETED


@dataclass
class SloAttainment:
    tenant: str
    slo_class: str
    finished: int
    met: int
    met_vs_profile: int
    in_progress: int
    ended_early: int = 0  # cancelled or failed: no attainment either way

    @property
    def attainment(self) -> float | None:
        return self.met / self.finished if self.finished else None

    @property
    def attainment_vs_profile(self) -> float | None:
        return self.met_vs_profile / self.finished if self.finished else None


@dataclass
class SloReport:
    start: date
    end: date
    jobs: list[JobSlo]
    attainment: list[SloAttainment]

    @property
    def violations(self) -> list[JobSlo]:
        return [j for j in self.jobs if not j.met]

    @property
    def overall(self) -> SloAttainment:
        s = SloAttainment("all", "all", 0, 0, 0, 0)
        for a in self.attainment:
            s.finished += a.finished
            s.met += a.met
            s.met_vs_profile += a.met_vs_profile
            s.in_progress += a.in_progress
            s.ended_early += a.ended_early
        return s


def slo_report(*, user: Any, start: date, end: date, now: datetime | None = None) -> SloReport:
    """Return each job's measured slowdown and SLO attainment per tenant and SLO class.

    A job counts when one of its phases ran in the range. Its mean iteration time
    is the span from its first rollout start to its last training end over its
    completed iterations (each iteration a rollout then a training); its solo time
    is the mean of (rollout + training) durations as they ran; its profile time is
    t_roll_max_s + t_train_max_s, divided by the job's time scale for emulated runners.
    """
    t0, t1 = day_range(start, end)
    tenant_ids = _visible_tenant_ids(user)
    job_qs = Job.objects.filter(
        phases__started_at__lt=t1, phases__started_at__gte=t0 - timedelta(days=MAX_RANGE_DAYS)
    )
    job_qs = job_qs.filter(
        Q(phases__finished_at__gte=t0) | Q(phases__finished_at__isnull=True)
    ).distinct()
    if tenant_ids is not None:
        job_qs = job_qs.filter(tenant_id__in=tenant_ids)
    jobs = {
        j[0]: j
        for j in job_qs.values_list(
            "id",
            "name",
            "tenant__name",
            "slo_class__name",
            "slo_class__slowdown",
            "status",
            "t_roll_max_s",
            "t_train_max_s",
            "runner",
            "time_scale",
        )
    }
    phases: dict[int, dict[tuple[int, int], dict[str, tuple[datetime, datetime]]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for jid, pl, it, kind, s, f in PhaseRecord.objects.filter(
        job_id__in=list(jobs),
        state=PhaseState.SUCCEEDED,
        started_at__isnull=False,
        finished_at__isnull=False,
    ).values_list("job_id", "placement_id", "iteration", "kind", "started_at", "finished_at"):
        if s is not None and f is not None:
            phases[jid][(pl, it)][kind] = (s, f)
    groups: dict[int, set[int]] = defaultdict(set)
    for jid, gid in Placement.objects.filter(job_id__in=list(jobs)).values_list(
        "job_id", "group_id"
    ):
        groups[jid].add(gid)
    out: list[JobSlo] = []
    for jid, (_, name, tenant, cls, slo, status, rmax, tmax, runner, scale) in jobs.items():
        iters = [p for p in phases[jid].values() if "rollout" in p and "train" in p]
        if not iters:
            continue
        solo = sum(
            (p["rollout"][1] - p["rollout"][0]).total_seconds()
            + (p["train"][1] - p["train"][0]).total_seconds()
            for p in iters
        ) / len(iters)
        span_start = min(p["rollout"][0] for p in iters)
        span_end = max(p["train"][1] for p in iters)
        mean_iter = (span_end - span_start).total_seconds() / len(iters)
        out.append(
            JobSlo(
                job_id=jid,
                job_name=name,
                tenant=tenant,
                slo_class=cls,
                slo=slo,
                status=status,
                iterations_measured=len(iters),
                mean_iteration_s=mean_iter,
                solo_iteration_s=solo,
                # emulated runs are sped up: compare with the profile at the same speed
                profile_iteration_s=(rmax + tmax) / time_scale_of(runner, scale),
                group_ids=sorted(groups.get(jid, ())),
            )
        )
    out.sort(key=lambda j: (j.tenant, j.slo_class, -j.slowdown_vs_solo))
    buckets: dict[tuple[str, str], SloAttainment] = {}
    for j in out:
        a = buckets.setdefault(
            (j.tenant, j.slo_class), SloAttainment(j.tenant, j.slo_class, 0, 0, 0, 0)
        )
        if j.finished:
            a.finished += 1
            a.met += int(j.met)
            a.met_vs_profile += int(j.met_vs_profile)
        elif j.status in TERMINAL_STATUSES:
            a.ended_early += 1
        else:
            a.in_progress += 1
    return SloReport(
        start=start, end=end, jobs=out, attainment=[buckets[k] for k in sorted(buckets)]
    )


def slo_report_json(report: SloReport) -> dict[str, Any]:
    def att(a: SloAttainment) -> dict[str, Any]:
        return {
            "tenant": a.tenant,
            "slo_class": a.slo_class,
            "finished": a.finished,
            "met": a.met,
            "attainment": a.attainment,
            "attainment_vs_profile": a.attainment_vs_profile,
            "in_progress": a.in_progress,
            "cancelled_or_failed": a.ended_early,
        }

    return {
        "start": report.start.isoformat(),
        "end": report.end.isoformat(),
        "overall": att(report.overall),
        "attainment": [att(a) for a in report.attainment],
        "jobs": [
            {
                "job_id": j.job_id,
                "job": j.job_name,
                "tenant": j.tenant,
                "slo_class": j.slo_class,
                "slo": j.slo,
                "status": j.status,
                "iterations_measured": j.iterations_measured,
                "mean_iteration_s": round(j.mean_iteration_s, 3),
                "solo_iteration_s": round(j.solo_iteration_s, 3),
                "profile_iteration_s": round(j.profile_iteration_s, 3),
                "slowdown_vs_solo": round(j.slowdown_vs_solo, 4),
                "slowdown_vs_profile": round(j.slowdown_vs_profile, 4),
                "met": j.met,
                "groups": j.group_ids,
            }
            for j in report.jobs
        ],
    }


# --------------------------------------------------------------------------- overview


@dataclass
class PoolStatus:
    name: str
    kind: str
    gpu_type: str
    total: int
    busy: int
    idle: int
    free: int
    unavailable: int


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


@dataclass
class Overview:
    pools: list[PoolStatus]
    groups: list[GroupStatus]
    cost_per_hour_now: Decimal
    cost_last_day: Decimal
    waiting: list[dict[str, Any]]
    meta_note: str = ""
    cost_is_share: bool = False  # cost_per_hour_now is the viewer's tenants' share

    @property
    def cost_per_hour_last_day(self) -> Decimal:
        return (self.cost_last_day / 24).quantize(CENT, rounding=ROUND_HALF_UP)


def cluster_overview(*, user: Any, now: datetime | None = None) -> Overview:
    """Return pools (busy/idle/free nodes), live groups, $/h now and last day, waiting jobs."""
    now_ = _now(now)
    tenant_ids = _visible_tenant_ids(user)
    prices = PriceBook()
    open_allocs = list(
        NodeAllocation.objects.filter(end__isnull=True).values_list(
            "node_id", "group_id", "node__gpus", "node__gpu_type_id", "node__cluster__kind"
        )
    )
    allocated_nodes = {a[0] for a in open_allocs}
    running_names: set[str] = set()
    for names in PhaseRecord.objects.filter(
        state__in=[PhaseState.RUNNING, PhaseState.DISPATCHED], finished_at__isnull=True
    ).values_list("node_names", flat=True):
        running_names.update(names)
    pools = []
    for cluster in Cluster.objects.select_related("gpu_type").order_by("kind", "name"):
        nodes = list(Node.objects.filter(cluster=cluster).values_list("id", "name", "state"))
        busy = sum(1 for nid, name, _ in nodes if nid in allocated_nodes and name in running_names)
        idle = sum(
            1 for nid, name, _ in nodes if nid in allocated_nodes and name not in running_names
        )
        free = sum(1 for nid, _, st in nodes if nid not in allocated_nodes and st == NodeState.UP)
        pools.append(
            PoolStatus(
                name=cluster.name,
                kind=str(PoolKind(cluster.kind).label),
                gpu_type=cluster.gpu_type.name,
                total=len(nodes),
                busy=busy,
                idle=idle,
                free=free,
                unavailable=len(nodes) - busy - idle - free,
            )
        )
    # live groups the user may see
    live = ExecutionGroup.objects.filter(released_at__isnull=True)
    if tenant_ids is not None:
        live = live.filter(placements__job__tenant_id__in=tenant_ids).distinct()
    live_ids = list(live.values_list("id", flat=True))
    members = _members_by_group(live_ids, tenant_ids)
    rate: dict[int, Decimal] = defaultdict(Decimal)
    counts: dict[int, dict[str, int]] = defaultdict(lambda: {"rollout": 0, "train": 0})
    for _nid, gid, gpus, tid, kind in open_allocs:
        rate[gid] += prices.price_at(tid, now_) * gpus
        counts[gid][kind] = counts[gid].get(kind, 0) + 1
    groups = [
        GroupStatus(
            id=gid,
            members=[m for m in members.get(gid, []) if m["active"]],
            rollout_nodes=counts[gid]["rollout"],
            train_nodes=counts[gid]["train"],
            cost_per_hour=rate[gid].quantize(CENT, rounding=ROUND_HALF_UP),
        )
        for gid in sorted(live_ids)
    ]
    note = _fill_meta_iterations(groups)
    last_day_lines, _, _ = _cost_engine(
        tenant_ids=tenant_ids, t0=now_ - timedelta(days=1), t1=now_, now=now_, prices=prices
    )
    waiting_qs = Job.objects.filter(status=JobStatus.QUEUED).select_related("tenant")
    if tenant_ids is not None:
        waiting_qs = waiting_qs.filter(tenant_id__in=tenant_ids)
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
    if tenant_ids is None:
        cost_now = sum((g.cost_per_hour for g in groups), Decimal(0))
    else:
        cost_now = _share_per_hour_now(open_allocs, tenant_ids, prices, now_)
    return Overview(
        pools=pools,
        groups=groups,
        cost_per_hour_now=cost_now,
        cost_is_share=tenant_ids is not None,
        # from the lines' exact amounts, rounded once (the cost report's rule)
        cost_last_day=_sum_lines(last_day_lines, key="total", label="Total").cost,
        waiting=waiting,
        meta_note=note,
    )


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
    for through in (Placement.rollout_nodes.through, Placement.train_nodes.through):
        for node_id, tenant_id in through.objects.filter(
            placement__ended_at__isnull=True
        ).values_list("node_id", "placement__job__tenant_id"):
            pinned[node_id].append(tenant_id)
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
    from django.conf import settings

    from rollmux_web.reports.whatif import live_snapshot
    from scheduler.roundrobin import plan_meta_iteration

    try:
        state = live_snapshot()
    except Exception as exc:  # a broken snapshot must not take the landing page down
        return f"T_cycle and T_load unavailable: {exc}"
    by_id = {str(g.id): g for g in state.groups}
    for g in groups:
        core = by_id.get(str(g.id)) or by_id.get(f"group-{g.id}")
        if core is None or not core.members:
            continue
        mi = plan_meta_iteration(core, switch_overhead_s=settings.ROLLMUX_SWITCH_OVERHEAD_S)
        g.t_cycle = mi.t_cycle
        g.t_load = mi.t_load
        g.saturated = mi.saturated
        g.utilisation = mi.utilisation
    return ""


def group_list_members(*, user: Any, group: ExecutionGroup) -> list[dict[str, Any]]:
    """Return a group's members (other tenants' jobs anonymous) with their placements."""
    tenant_ids = _visible_tenant_ids(user)
    out = []
    for pl in (
        Placement.objects.filter(group=group)
        .select_related("job", "job__tenant")
        .order_by("created_at")
    ):
        hidden = tenant_ids is not None and pl.job.tenant.pk not in tenant_ids
        out.append(
            {
                "job_id": None if hidden else pl.job.pk,
                "name": f"job #{pl.job.pk} (other tenant)" if hidden else pl.job.name,
                "tenant": "" if hidden else pl.job.tenant.name,
                "strategy": pl.strategy.replace("_", " "),
                "predicted_slowdown": pl.predicted_slowdown,
                "joined": pl.created_at,
                "left": pl.ended_at,
            }
        )
    return out
