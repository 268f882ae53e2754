"""Keep each closed day's cost amounts once (issue 25: the month's cost report under 1 s).

Behind the rollup watermark (workflow.services.rollup_days) a day's phase time no longer
changes. For each such day, oldest first and without a gap, the cost engine is run once
over [day, day + 1), keyed by group (`cost_engine.group_amounts`), and its exact amounts
are kept: per (group, job, GPU type, stage) the busy and idle cost and GPU-hours and the
two counterfactuals (`CostDayLine`, as exact integer numerators over
`cost_engine.KEPT_DENOMINATOR`), per group its allocated cost and whether its idle
split is additive over days (`CostDayGroup.dirty`). The report over whole kept days sums
the lines in SQL (`selectors.cost_stored`) and runs the engine only for the days after
the last kept one and for the dirty groups over the whole range.

Why a range's figures are the sum of its days' (the engine's rules,
docs/quotas-and-cost.md "Cost"): a node's allocated cost, each member's busy cost and
GPU-hours, and the counterfactuals are sums over time of microseconds x price, cut at
midnight like any other cut. The idle time of each moment goes evenly to the members
present at that moment: a sum over moments, so additive too, as long as some member is
present at every moment. What is not: idle time while no member is present goes by each
member's membership time over the whole range, and overlapping phase records are scaled
down to the allocation over the whole range; a group with a node in either case on a day
is dirty that day, and a range containing that day computes it from the rows (and a
tail split by equal weights on one day and by unequal ones on another, `tail` and
`uneven`). An amount that adds up is a multiple of 1 / KEPT_DENOMINATOR (microseconds x
GPUs x a four-decimal price / 3.6e13, split by n <= 16 members): kept as that integer
numerator, days sum exactly in SQL, and the range's amount is the exact sum divided once,
as close to the true amount as the engine's own figure, which is exact to 28 digits
(tests/reports/test_cost_days.py and the rollup-watermark tests).

- Idempotent: a day is kept once (its `CostDay` row, written in the day's transaction,
  which holds the rollup watermark's row lock).
- A price recorded later with an effective time before a kept day is not applied to it
  (as for rolled-up and archived days: docs/operations.md "Retention and archives").
- Kept days go with their rollups (ROLLMUX_ROLLUP_RETENTION_MONTHS).
- A month whose days are all kept is summed once more per group, job, GPU type and stage
  (`keep_months`, PostgreSQL): a report over whole months reads those rows (a quarter:
  ~118,000 instead of ~213,000, nearly all a line each as they stand); a month with a day
  past the retention goes with it.
- With each day its lines summed per tenant, GPU type and stage (`CostDayTenant`); with
  the months each one's jobs counted per tenant and by the last kept month before it
  that has each job (`count_months`); then the whole lives of the released groups
  flagged on a kept day (`keep_lives`): what a page reads instead of every line and of
  the engine over those groups (selectors.cost_totals, selectors.cost_stored.kept_lives).
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Max, Min, Q

from rollmux_web.inventory.models import GpuType
from rollmux_web.inventory.selectors import price_book
from rollmux_web.reports.models import (
    CostDay,
    CostDayGroup,
    CostDayLine,
    CostDaySummed,
    CostDayTenant,
    CostGroupLife,
    CostGroupLifeDay,
    CostGroupLifeLine,
    CostMonth,
    CostMonthJobs,
    CostMonthLine,
)
from rollmux_web.reports.selectors._time import next_month, us
from rollmux_web.reports.selectors.cost_engine import KEPT_DENOMINATOR, group_amounts
from rollmux_web.reports.selectors.cost_engine import cost_lines as engine_lines
from rollmux_web.reports.selectors.cost_fetch import fetch_cost_inputs
from rollmux_web.reports.selectors.cost_figures import FIGURE_COLUMNS
from rollmux_web.reports.selectors.cost_rows import CostWindow
from rollmux_web.workflow.models import (
    ExecutionGroup,
    NodeAllocation,
    Placement,
    RollupWatermark,
    rolled_up_to,
)
from rollmux_web.workflow.services.retention import rollup_cutoff

log = logging.getLogger(__name__)
DAYS_PER_RUN = 7
NEAR = Decimal("0.001")  # how far from an integer a numerator may be (its 28 digits: ~1e-5)


def numerator(amount: Decimal) -> int | None:
    """`amount` x KEPT_DENOMINATOR as the exact integer it is (the engine's 28 digits are
    far closer to it than 1/2), or None when it is not one."""
    scaled = amount * KEPT_DENOMINATOR
    n = int(scaled.to_integral_value())
    return n if abs(scaled - n) < NEAR else None


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _next_day(now: datetime) -> date | None:
    """The day to keep next: after the last kept one, else the first allocated day (not
    before the rollup retention's cutoff: older rollups may be gone)."""
    last = CostDay.objects.order_by("-day").values_list("day", flat=True).first()
    if last is not None:
        return last + timedelta(days=1)
    first = NodeAllocation.objects.aggregate(t=Min("start"))["t"]
    if first is None:
        return None
    day = first.astimezone(UTC).date()
    return max(day, rollup_cutoff(now)) if settings.ROLLMUX_ROLLUP_RETENTION_MONTHS else day


def keep_day(day: date, *, now: datetime) -> int | None:
    """Keep `day`'s amounts if it is the next day to keep and before the rollup
    watermark: the number of lines kept, None otherwise."""
    lo, hi = _midnight(day), _midnight(day + timedelta(days=1))
    with transaction.atomic():
        # the watermark's row lock: one writer at a time, and the watermark cannot move
        # back under us (archiving takes it too)
        RollupWatermark.objects.select_for_update().filter(pk=1).first()
        mark = rolled_up_to()
        if mark is None or hi > mark or _next_day(now) != day:
            return None
        inputs = fetch_cost_inputs(tenant_ids=None, t0=lo, hi_dt=hi, now_us=us(now))
        window = CostWindow(lo=us(lo), hi=us(hi), now_us=us(now))
        lines, alloc, flags = (
            ([], {}, None) if inputs is None else group_amounts(inputs, window, price_book())
        )
        dirty = set() if flags is None else flags.dirty
        allocated = {gid: numerator(cost) for gid, cost in alloc.items()}
        dirty |= {gid for gid, n in allocated.items() if n is None}
        rows = []
        for a in lines:
            if a.group_id in dirty:
                continue  # a range with this day computes the group from the rows
            kept = {c: numerator(getattr(a.figures, c)) for c in FIGURE_COLUMNS}
            if None in kept.values():
                dirty.add(a.group_id)  # (not a multiple of 1 / KEPT_DENOMINATOR: keep none)
                continue
            rows.append(
                CostDayLine(
                    day=day,
                    group_id=a.group_id,
                    job_id=a.job_id,
                    tenant_id=a.tenant_id,
                    gpu_type_id=a.gpu_type_id,
                    stage=a.stage,
                    has_parts=a.has_parts,
                    **kept,
                )
            )
        rows = [r for r in rows if r.group_id not in dirty]
        CostDayLine.objects.bulk_create(rows, batch_size=2000)
        CostDayGroup.objects.bulk_create(
            (
                CostDayGroup(
                    day=day,
                    group_id=gid,
                    alloc_cost=allocated[gid] or 0,
                    dirty=gid in dirty,
                    tail=flags is not None and gid in flags.tail,
                    uneven=flags is not None and gid in flags.uneven,
                )
                for gid in alloc
            ),
            batch_size=2000,
        )
        CostDayTenant.objects.bulk_create(tenant_sums(day, rows), batch_size=2000)
        CostDaySummed.objects.create(day=day)
        CostDay.objects.create(day=day, lines=len(rows), computed_at=now)
    log.info("kept the cost of %s: %d lines, %d dirty groups", day, len(rows), len(dirty))
    return len(rows)


def tenant_sums(day: date, rows: list[CostDayLine]) -> list[CostDayTenant]:
    """The day's kept lines summed per tenant, GPU type and stage (their numerators are
    integers: exact sums)."""
    sums: dict[tuple[int, int, str], list[Any]] = {}
    for r in rows:
        got = sums.setdefault(
            (r.tenant_id, r.gpu_type_id, r.stage), [0] * (len(FIGURE_COLUMNS) + 1)
        )
        got[0] += 1
        for i, c in enumerate(FIGURE_COLUMNS, 1):
            got[i] += getattr(r, c)
    return [
        CostDayTenant(
            day=day, tenant_id=t, gpu_type_id=g, stage=s, lines=v[0],
            **dict(zip(FIGURE_COLUMNS, v[1:], strict=True)),
        )
        for (t, g, s), v in sums.items()
    ]  # fmt: skip


def keep_days(now: datetime, *, max_days: int = DAYS_PER_RUN) -> list[date]:
    """Keep at most `max_days` days before the rollup watermark (the beat task's body;
    also what fills the days rolled up before this existed), then the months whose days
    are all kept (`keep_months`)."""
    done: list[date] = []
    for _ in range(max_days):
        day = _next_day(now)
        if day is None or keep_day(day, now=now) is None:
            break
        done.append(day)
    keep_months(now)
    keep_lives(now)
    return done


_FIGS = ", ".join(FIGURE_COLUMNS)
_SUMS = ", ".join(f"SUM({c})" for c in FIGURE_COLUMNS)
# 1. the month's kept lines summed per group, job, GPU type and stage;
# 2. `multi` on every row of a job, type and stage with more than one row (another group,
#    another month: built before or after this one, so both sides are marked)
_MONTH_SQL = (
    "INSERT INTO {m} (month, group_id, job_id, tenant_id, gpu_type_id, stage, has_parts, "
    "multi, {figs}) SELECT %s, group_id, job_id, tenant_id, gpu_type_id, stage, "
    "bool_or(has_parts), false, {sums} FROM {d} WHERE day >= %s AND day < %s "
    "GROUP BY group_id, job_id, tenant_id, gpu_type_id, stage",
    "UPDATE {m} AS m SET multi = true FROM ("
    " SELECT job_id, gpu_type_id, stage FROM {m} WHERE (job_id, gpu_type_id, stage) IN "
    "  (SELECT job_id, gpu_type_id, stage FROM {m} WHERE month = %s)"
    " GROUP BY 1, 2, 3 HAVING COUNT(*) > 1) k "
    "WHERE (m.job_id, m.gpu_type_id, m.stage) = (k.job_id, k.gpu_type_id, k.stage) "
    "AND NOT m.multi",
)


def _allocated_before(day: date) -> bool:
    """Whether a node was allocated before `day` (the days before the first kept one are
    empty unless they were purged)."""
    return NodeAllocation.objects.filter(start__lt=_midnight(day)).exists()


def keep_month(month: date, *, now: datetime) -> bool:
    """Sum the kept days of `month` (all of them kept: its first and its last, the kept
    days have no gap) into `CostMonthLine` once: whether it was summed now (PostgreSQL
    only: exact numeric sums in SQL)."""
    got = CostDay.objects.aggregate(a=Min("day"), b=Max("day"))
    if (
        connection.vendor != "postgresql"
        or got["a"] is None
        or month.day != 1
        or month < got["a"].replace(day=1)
        or (month < got["a"] and _allocated_before(got["a"]))
        or next_month(month) > got["b"] + timedelta(days=1)
    ):
        return False
    tables = {"m": CostMonthLine._meta.db_table, "d": CostDayLine._meta.db_table}
    insert, mark = (q.format(**tables, figs=_FIGS, sums=_SUMS) for q in _MONTH_SQL)
    try:
        with transaction.atomic(), connection.cursor() as cur:
            CostMonth.objects.create(month=month, computed_at=now)  # (a second run: taken)
            cur.execute(insert, [month, month, next_month(month)])
            cur.execute(mark, [month])
    except IntegrityError:
        return False
    log.info("kept the cost of %s as a month", f"{month:%Y-%m}")
    return True


def keep_months(now: datetime) -> list[date]:
    """Sum every month whose days are all kept and that is not summed yet (the first kept
    day's month too when nothing was allocated before that day; not when its first days
    were purged)."""
    got = CostDay.objects.aggregate(a=Min("day"), b=Max("day"))
    if got["a"] is None or connection.vendor != "postgresql":
        return []
    built = set(CostMonth.objects.values_list("month", flat=True))
    done = []
    first = got["a"]
    whole = first.day == 1 or not _allocated_before(first)
    month = first.replace(day=1) if whole else next_month(first)
    while next_month(month) <= got["b"] + timedelta(days=1):
        if month not in built and keep_month(month, now=now):
            done.append(month)
        month = next_month(month)
    count_months(done)
    return done


# a kept month's jobs per tenant and by the last kept month before it with each job
_COUNT_SQL = (
    "SELECT j.tenant_id, (SELECT MAX(m.month) FROM {m} m WHERE m.job_id = j.job_id "
    "AND m.month < %s), COUNT(*) FROM (SELECT DISTINCT tenant_id, job_id FROM {m} "
    "WHERE month = %s) j GROUP BY 1, 2"
)


def count_month_jobs(month: date) -> None:
    """Count the kept month's jobs per tenant, by the last kept month before it that
    has each job (`CostMonthJobs`; again if it was counted)."""
    counts: dict[str, dict[str, int]] = {}
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_COUNT_SQL.format(m=CostMonthLine._meta.db_table), [month, month])
        for tid, prev, n in cur.fetchall():
            counts.setdefault(str(tid), {})[prev.isoformat() if prev else ""] = n
        CostMonthJobs.objects.update_or_create(month=month, defaults={"counts": counts})


def count_months(kept: list[date]) -> list[date]:
    """Count the jobs of every kept month not counted yet (`kept` now, or by an older
    version), and again those after a month kept now (the last month before with a job
    may be that one)."""
    if connection.vendor != "postgresql":
        return []
    counted = set(CostMonthJobs.objects.values_list("month", flat=True))
    since = min(kept, default=None)
    todo = [
        m
        for m in sorted(CostMonth.objects.values_list("month", flat=True))
        if m not in counted or (since is not None and m > since)
    ]
    for m in todo:
        count_month_jobs(m)
    return todo


LIVES_PER_RUN = 500


def _life(gid: int) -> tuple[datetime, datetime] | None:
    """[the first day's midnight, the midnight after the last day) of a released group's
    allocations and memberships; None while any is open."""
    group = ExecutionGroup.objects.filter(pk=gid).values_list("released_at", flat=True).first()
    allocs = NodeAllocation.objects.filter(group_id=gid).aggregate(
        a=Min("start"), b=Max("end"), open=Count("pk", filter=Q(end__isnull=True))
    )
    members = Placement.objects.filter(group_id=gid).aggregate(
        a=Min("created_at"), b=Max("ended_at"), open=Count("pk", filter=Q(ended_at__isnull=True))
    )
    if group is None or allocs["a"] is None or allocs["open"] or members["open"]:
        return None
    lo = min(t for t in (allocs["a"], members["a"]) if t is not None)
    hi = max(t for t in (group, allocs["b"], members["b"]) if t is not None)
    return _midnight(lo.astimezone(UTC).date()), _midnight(
        (hi - timedelta(microseconds=1)).astimezone(UTC).date() + timedelta(days=1)
    )


def keep_lives(now: datetime, *, max_groups: int = LIVES_PER_RUN) -> list[int]:
    """Keep the amounts over its whole life of each released group that is dirty on a
    kept day, or a tail on one and uneven on another, and whose life is all kept days (at most
    `max_groups` a run): a range holding such a life reads them instead of running the
    cost engine over the group (selectors.cost_stored). The engine's own run over the
    life, by day (the burn-down's buckets), with the counterfactuals."""
    last = CostDay.objects.aggregate(b=Max("day"))["b"]
    if last is None:
        return []
    end = _midnight(last + timedelta(days=1))
    kept = set(CostGroupLife.objects.values_list("group_id", flat=True))
    # (dirty on a day, or a tail on one and uneven on another: what makes a range holding
    # its life compute it from the rows)
    flagged = (
        CostDayGroup.objects.filter(Q(dirty=True) | Q(tail=True) | Q(uneven=True))
        .values("group_id")
        .annotate(
            d=Count("pk", filter=Q(dirty=True)),
            t=Count("pk", filter=Q(tail=True)),
            u=Count("pk", filter=Q(uneven=True)),
        )
        .filter(Q(d__gt=0) | Q(t__gt=0, u__gt=0))
        .values_list("group_id", flat=True)
    )
    candidates = sorted(set(flagged) - kept)
    prices = price_book()
    done: list[int] = []
    for gid in candidates:
        if len(done) >= max_groups:
            break
        life = _life(gid)
        if life is None or life[1] > end:
            continue
        lo, hi = life
        days = [lo + timedelta(days=i) for i in range((hi - lo).days + 1)]
        res = engine_lines(
            tenant_ids=None, t0=lo, t1=hi, now=now, prices=prices, buckets=days,
            counterfactuals=True, only_groups={gid},
        )  # fmt: skip
        type_ids = dict(GpuType.objects.values_list("name", "id"))
        try:
            with transaction.atomic():
                CostGroupLife.objects.create(group_id=gid, lo=lo, hi=hi, computed_at=now)
                CostGroupLifeLine.objects.bulk_create(
                    CostGroupLifeLine(
                        group_id=gid, job_id=ln.job_id, tenant_id=ln.tenant_id,
                        gpu_type_id=type_ids.get(ln.gpu_type, -1), stage=ln.stage,
                        has_parts=gid in ln.group_ids,
                        **{c: getattr(ln.exact, c) for c in FIGURE_COLUMNS},
                    )
                    for ln in res.lines
                )  # fmt: skip
                CostGroupLifeDay.objects.bulk_create(
                    CostGroupLifeDay(group_id=gid, day=days[bi].date(), tenant_id=tid,
                                     kind=kind, cost=cost)
                    for (bi, tid, kind), cost in res.per_bucket_tenant.items()
                )  # fmt: skip
        except IntegrityError:
            continue  # (kept by another run)
        done.append(gid)
    if done:
        log.info("kept %d groups' lives", len(done))
    return done


def purge_days(now: datetime) -> int:
    """Delete the kept days older than the rollup retention (their rollups go then too)."""
    if not settings.ROLLMUX_ROLLUP_RETENTION_MONTHS:
        return 0
    cutoff = rollup_cutoff(now)
    # (a month with a day before the cutoff no longer sums its kept days)
    CostMonthLine.objects.filter(month__lt=cutoff).delete()
    CostMonth.objects.filter(month__lt=cutoff).delete()
    CostMonthJobs.objects.filter(month__lt=cutoff).delete()
    CostDayTenant.objects.filter(day__lt=cutoff).delete()
    old = CostGroupLife.objects.filter(lo__lt=_midnight(cutoff)).values_list("group_id", flat=True)
    CostGroupLifeLine.objects.filter(group_id__in=old).delete()
    CostGroupLifeDay.objects.filter(group_id__in=old).delete()
    CostGroupLife.objects.filter(lo__lt=_midnight(cutoff)).delete()
    CostDaySummed.objects.filter(day__lt=cutoff).delete()
    CostDayLine.objects.filter(day__lt=cutoff).delete()
    CostDayGroup.objects.filter(day__lt=cutoff).delete()
    return int(CostDay.objects.filter(day__lt=cutoff).delete()[0])


__all__ = [
    "count_months",
    "keep_day",
    "keep_days",
    "keep_lives",
    "keep_month",
    "keep_months",
    "purge_days",
]
