"""The cost report's lines from the closed days' kept amounts (reports.cost_days) plus the
engine for the rest: the same lines, to the cent, as the engine over the whole range.

A range [t0, hi) that starts at a UTC midnight (on or after the first kept day, or before
it when nothing was allocated before it) is cut at
the last kept day's end `s_hi`: the kept days [t0, s_hi) are summed in SQL (exact
integer numerators, divided once) for every group that is clean on each of them; the engine runs over [s_hi, hi)
for the other groups (today, the days not kept yet), and over the whole range for the
groups that are dirty on a kept day or in that last part (an idle split by membership
weights or overlapping phases: cost_days explains why those do not add up over days).
Anything else (a range starting mid-day, as the overview's last 24 hours, or before the
first kept day while something was) is the engine's alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Max, Min, Q, Sum

from rollmux_web.id_sql import in_ids
from rollmux_web.inventory.models import GpuType
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job
from rollmux_web.reports.models import (
    CostDay,
    CostDayGroup,
    CostDayLine,
    CostGroupLife,
    CostGroupLifeDay,
    CostGroupLifeLine,
)
from rollmux_web.reports.selectors._sql import us_fields
from rollmux_web.reports.selectors._time import us
from rollmux_web.reports.selectors.cost_engine import KEPT_DENOMINATOR
from rollmux_web.reports.selectors.cost_engine import cost_lines as engine_lines
from rollmux_web.reports.selectors.cost_figures import (
    FIGURE_COLUMNS,
    ZERO,
    CostFigures,
    CostLine,
    cents,
    exact_arithmetic,
    hq,
)
from rollmux_web.reports.selectors.cost_rows import STAGES, CostResult
from rollmux_web.reports.selectors.cost_totals import bucket_sums
from rollmux_web.workflow.models import NodeAllocation, Placement
from scheduler.collector import gc_paused

DENOMINATOR = Decimal(KEPT_DENOMINATOR)  # the kept amounts are numerators over it
_SUMS = ", ".join(f"SUM({c})" for c in FIGURE_COLUMNS)


def kept_days() -> tuple[date, date] | None:
    """[first, last] of the kept days (they have no gap), None when none is kept."""
    got = CostDay.objects.aggregate(a=Min("day"), b=Max("day"))
    return None if got["a"] is None else (got["a"], got["b"])


def _allocated_before(t: datetime) -> bool:
    """Whether a node was allocated before `t` (the first kept day: the days before it are
    empty unless kept days were purged with their rollups)."""
    return NodeAllocation.objects.filter(start__lt=t).exists()


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def kept_where(
    lo: date, hi: date, tenant_ids: set[int] | None, skip: set[int]
) -> tuple[str, list[Any]]:
    sql = "day >= %s AND day < %s"
    params: list[Any] = [lo, hi]
    if tenant_ids is not None:
        sql += " AND tenant_id = ANY(%s)"
        params.append(sorted(tenant_ids))
    if skip:
        sql += " AND NOT (group_id = ANY(%s))"
        params.append(sorted(skip))
    return sql, params


Key = tuple[int, int, str]  # job, GPU type id, stage


def _kept_sums(
    lo: date, hi: date, tenant_ids: set[int] | None, skip: set[int]
) -> Iterable[tuple[Key, list[Decimal], list[int]]]:
    """Per (job, GPU type, stage): the kept days' exact sums and the groups it lists."""
    if connection.vendor == "postgresql":
        where, params = kept_where(lo, hi, tenant_ids, skip)
        with connection.cursor() as cur:
            cur.execute(
                f"SELECT job_id, gpu_type_id, stage, {_SUMS}, "  # noqa: S608 (no user input)
                "array_agg(DISTINCT group_id) FILTER (WHERE has_parts) "
                f"FROM {CostDayLine._meta.db_table} WHERE {where} GROUP BY 1, 2, 3",
                params,
            )
            for jid, tid, stage, *rest in cur.fetchall():
                yield (jid, tid, stage), [v / DENOMINATOR for v in rest[:-1]], rest[-1] or []
        return
    # elsewhere (SQLite keeps the amounts as text): the same sums in Python
    qs = CostDayLine.objects.filter(day__gte=lo, day__lt=hi).exclude(group_id__in=skip)
    if tenant_ids is not None:
        qs = qs.filter(tenant_id__in=tenant_ids)
    acc: dict[Key, tuple[list[Decimal], set[int]]] = {}
    for row in qs.values_list("job_id", "gpu_type_id", "stage", "group_id", "has_parts",
                              *FIGURE_COLUMNS):  # fmt: skip
        jid, tid, stage, gid, has_parts, *figs = row
        sums, groups = acc.setdefault((jid, tid, stage), ([ZERO] * len(figs), set()))
        for i, v in enumerate(figs):
            sums[i] += v
        if has_parts:
            groups.add(gid)
    for key, (sums, groups) in acc.items():
        yield key, [v / DENOMINATOR for v in sums], sorted(groups)


def _kept_buckets(
    lo: date, hi: date, tenant_ids: set[int] | None, skip: set[int], buckets: Sequence[datetime]
) -> dict[tuple[int, int, str], Decimal]:
    """(bucket, tenant, busy|idle) -> the kept days' exact cost (the buckets are days)."""
    index = {b.date(): i for i, b in enumerate(buckets[:-1])}
    out: dict[tuple[int, int, str], Decimal] = defaultdict(Decimal)
    rows: Iterable[tuple[Any, ...]]
    if connection.vendor == "postgresql":
        where, params = kept_where(lo, hi, tenant_ids, skip)
        with connection.cursor() as cur:
            cur.execute(
                "SELECT day, tenant_id, SUM(busy_cost), SUM(idle_cost) "  # noqa: S608
                f"FROM {CostDayLine._meta.db_table} WHERE {where} GROUP BY 1, 2",
                params,
            )
            rows = cur.fetchall()
    else:
        qs = CostDayLine.objects.filter(day__gte=lo, day__lt=hi).exclude(group_id__in=skip)
        if tenant_ids is not None:
            qs = qs.filter(tenant_id__in=tenant_ids)
        rows = qs.values_list("day", "tenant_id", "busy_cost", "idle_cost")
    for day, tid, busy, idle in rows:
        bi = index.get(day)
        if bi is not None:
            out[(bi, tid, "busy")] += busy
            out[(bi, tid, "idle")] += idle
    return {k: v / DENOMINATOR for k, v in out.items()}


def _kept_group_costs(lo: date, hi: date, skip: set[int]) -> dict[int, Decimal]:
    out: dict[int, Decimal] = defaultdict(Decimal)
    qs = CostDayGroup.objects.filter(day__gte=lo, day__lt=hi).exclude(group_id__in=skip)
    rows: Iterable[tuple[int, Any]] = (
        qs.values("group_id").annotate(t=Sum("alloc_cost")).values_list("group_id", "t")
        if connection.vendor == "postgresql"  # (exact numeric sums)
        else qs.values_list("group_id", "alloc_cost")
    )
    for gid, cost in rows:
        out[gid] += Decimal(cost)
    return {gid: v / DENOMINATOR for gid, v in out.items()}


def _jobs(ids: set[int]) -> dict[int, tuple[str, int, str, int | None]]:
    """job -> (name, tenant id, tenant, closed_us) as the engine's rows have them."""
    out: dict[int, tuple[str, int, str, int | None]] = {}
    unended: list[int] = []
    ann, native = us_fields(f_us="finished_at")
    for jid, name, tid, tenant, status, finished in (
        Job.objects.filter(in_ids("id", ids))
        .annotate(**ann)
        .values_list("id", "name", "tenant_id", "tenant__name", "status", *(ann or ["finished_at"]))
    ):
        closed = None
        if status in TERMINAL_STATUSES:
            if finished is None:
                unended.append(jid)
            else:
                closed = finished if native else us(finished)
        out[jid] = (name, tid, tenant, closed)
    if unended:  # (a job marked finished with no end time: its last placement's end)
        for jid, left in (
            Placement.objects.filter(job_id__in=unended)
            .values("job_id")
            .annotate(t=Max("ended_at"))
            .values_list("job_id", "t")
        ):
            if left is not None:
                name, tid, tenant, _ = out[jid]
                out[jid] = (name, tid, tenant, us(left))
    return out


@dataclass
class StoredPlan:
    """How a range is served from the kept days: the kept days [lo_day, hi_day) summed in
    SQL for every group but `dirty`, plus the engine's `parts` (the days not kept yet,
    the dirty groups over the whole range)."""

    parts: list[CostResult]
    lo_day: date
    hi_day: date
    tenant_ids: set[int] | None
    dirty: set[int]
    with_cf: bool


def stored_plan(
    *,
    tenant_ids: set[int] | None,
    t0: datetime,
    t1: datetime,
    now: datetime,
    prices: Any,
    buckets: Sequence[datetime] = (),
    counterfactuals: bool | None = None,
    lives: bool = False,
) -> StoredPlan | CostResult:
    """Return how `cost_lines` serves the range from the kept days, or the engine's own
    result when the range cannot be (see the module's docstring). With `lives`, the dirty
    groups whose whole life the range holds are read from their kept lives (`kept_lives`:
    no group's cost; the page of the report and the burn-down read none)."""
    hi_dt = min(t1, now)
    kept = kept_days() if t0.astimezone(UTC).time() == time.min else None
    first = None if kept is None else _midnight(kept[0])
    s_hi = None if kept is None else min(_midnight(kept[1] + timedelta(days=1)), hi_dt)
    if s_hi is not None and s_hi.time() != time.min:
        s_hi = _midnight(s_hi.date())
    if first is not None and t0 < first and _allocated_before(first):
        first = None  # (days before the first kept one that cost something: purged)
    if first is None or s_hi is None or s_hi <= t0:
        return engine_lines(
            tenant_ids=tenant_ids, t0=t0, t1=t1, now=now, prices=prices,
            buckets=buckets, counterfactuals=counterfactuals,
        )  # fmt: skip
    with_cf = not buckets if counterfactuals is None else counterfactuals
    run = dict(tenant_ids=tenant_ids, now=now, prices=prices, buckets=buckets,
               counterfactuals=with_cf)  # fmt: skip
    lo_day, hi_day = t0.date(), s_hi.date()
    dirty: set[int] = set()
    tail: set[int] = set()
    uneven: set[int] = set()
    for gid, d, t, u in (
        CostDayGroup.objects.filter(day__gte=lo_day, day__lt=hi_day)
        .filter(Q(dirty=True) | Q(tail=True) | Q(uneven=True))
        .values_list("group_id", "dirty", "tail", "uneven")
    ):
        for flag, into in ((d, dirty), (t, tail), (u, uneven)):
            if flag:
                into.add(gid)
    dirty |= tail & uneven
    parts: list[CostResult] = []
    if hi_dt > s_hi:  # the days not kept yet, for the groups clean so far
        rest = engine_lines(t0=s_hi, t1=hi_dt, skip_groups=dirty, **run)  # type: ignore[arg-type]
        more = rest.dirty_groups | ((tail | rest.tail_groups) & (uneven | rest.uneven_groups))
        if more - dirty:
            dirty |= more
            rest = engine_lines(t0=s_hi, t1=hi_dt, skip_groups=dirty, **run)  # type: ignore[arg-type]
        parts.append(rest)
    rest_dirty = dirty
    if dirty and lives:  # the dirty groups whose whole life the range holds: as kept
        got = kept_lives(dirty, t0=t0, hi=hi_dt, tenant_ids=tenant_ids, buckets=buckets,
                         with_cf=with_cf)  # fmt: skip
        if got is not None:
            parts.append(got[0])
            rest_dirty = dirty - got[1]
    if rest_dirty:  # the (other) dirty groups over the whole range
        parts.append(engine_lines(t0=t0, t1=hi_dt, only_groups=rest_dirty, **run))  # type: ignore[arg-type]
    return StoredPlan(parts, lo_day, hi_day, tenant_ids, dirty, with_cf)


def kept_lives(
    groups: set[int],
    *,
    t0: datetime,
    hi: datetime,
    tenant_ids: set[int] | None,
    buckets: Sequence[datetime],
    with_cf: bool,
) -> tuple[CostResult, set[int]] | None:
    """The kept lives (`CostGroupLife`) of those of `groups` that [t0, hi) holds whole
    (and the buckets, if any): their lines and (bucket, tenant, busy|idle) costs, as the
    engine computes them over the range (`group_exact` left empty: the callers that ask
    for lives read no group's cost), and which groups they are; None when none is kept."""
    held = {
        gid: lo
        for gid, lo, end in CostGroupLife.objects.filter(in_ids("group_id", groups)).values_list(
            "group_id", "lo", "hi"
        )
        if lo >= t0 and end <= hi and (not buckets or (lo >= buckets[0] and end <= buckets[-1]))
    }
    if not held:
        return None
    type_names = dict(GpuType.objects.values_list("id", "name"))
    rows = CostGroupLifeLine.objects.filter(in_ids("group_id", set(held)))
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=tenant_ids)
    got = list(rows.values_list("group_id", "job_id", "gpu_type_id", "stage", "has_parts",
                                *FIGURE_COLUMNS))  # fmt: skip
    meta = _jobs({r[1] for r in got})
    lines = []
    for gid, jid, tid, stage, has_parts, *figs in got:
        name, tenant_id, tenant, closed = meta[jid]
        f = CostFigures(**dict(zip(FIGURE_COLUMNS, figs, strict=True)))
        if not with_cf:
            f.solo_disagg_cost = f.colocated_cost = ZERO
        lines.append(
            CostLine(
                tenant_id=tenant_id, tenant=tenant, job_id=jid, job_name=name,
                gpu_type=type_names.get(tid, str(tid)), stage=stage,
                group_ids=[gid] if has_parts else [], closed_us=closed,
                busy_gpu_hours=hq(f.busy_gpu_hours), idle_gpu_hours=hq(f.idle_gpu_hours),
                exact=f,
            )
        )  # fmt: skip
    per_bucket: dict[tuple[int, int, str], Decimal] = defaultdict(Decimal)
    if buckets:
        index = {b.date(): i for i, b in enumerate(buckets[:-1])}
        days = CostGroupLifeDay.objects.filter(in_ids("group_id", set(held)))
        if tenant_ids is not None:
            days = days.filter(tenant_id__in=tenant_ids)
        for day, tid, kind, cost in days.values_list("day", "tenant_id", "kind", "cost"):
            per_bucket[(index[day], tid, kind)] += cost
    return CostResult(lines=lines, per_bucket_tenant=dict(per_bucket)), set(held)


@gc_paused()
@exact_arithmetic
def cost_lines(
    *,
    tenant_ids: set[int] | None,
    t0: datetime,
    t1: datetime,
    now: datetime,
    prices: Any,
    buckets: Sequence[datetime] = (),
    counterfactuals: bool | None = None,
) -> CostResult:
    """The engine's `cost_lines` (same arguments, same result), from the kept days where
    the range allows."""
    plan = stored_plan(
        tenant_ids=tenant_ids, t0=t0, t1=t1, now=now, prices=prices,
        buckets=buckets, counterfactuals=counterfactuals,
    )  # fmt: skip
    if isinstance(plan, CostResult):
        return plan
    return _merge(plan, buckets)


def kept_buckets(plan: StoredPlan, buckets: Sequence[datetime]) -> dict[Key, Decimal]:
    """(bucket, tenant, busy|idle) -> exact cost: the kept days' plus the engine parts'."""
    per_bucket: dict[Any, Decimal] = {}
    if buckets:
        # the days' per-tenant sums where they are kept (cost_totals), else every line
        sums = bucket_sums(plan.lo_day, plan.hi_day, plan.tenant_ids, plan.dirty, buckets)
        per_bucket = (
            _kept_buckets(plan.lo_day, plan.hi_day, plan.tenant_ids, plan.dirty, buckets)
            if sums is None
            else {k: v / DENOMINATOR for k, v in sums.items()}
        )
    for res in plan.parts:
        for k, v in res.per_bucket_tenant.items():
            per_bucket[k] = per_bucket.get(k, ZERO) + v
    return dict(per_bucket)


def _merge(plan: StoredPlan, buckets: Sequence[datetime]) -> CostResult:
    parts, lo_day, hi_day = plan.parts, plan.lo_day, plan.hi_day
    tenant_ids, dirty, with_cf = plan.tenant_ids, plan.dirty, plan.with_cf
    exact: dict[Key, list[Decimal]] = {}
    groups: dict[Key, set[int]] = defaultdict(set)
    meta: dict[int, tuple[str, int, str, int | None]] = {}
    type_ids = {name: tid for tid, name in GpuType.objects.values_list("id", "name")}
    type_names = {tid: name for name, tid in type_ids.items()}
    for res in parts:
        for ln in res.lines:
            key = (ln.job_id, type_ids.get(ln.gpu_type, -1), ln.stage)
            figs = [getattr(ln.exact, c) for c in FIGURE_COLUMNS]
            got = exact.get(key)
            exact[key] = figs if got is None else [a + b for a, b in zip(got, figs, strict=True)]
            groups[key].update(ln.group_ids)
            meta[ln.job_id] = (ln.job_name, ln.tenant_id, ln.tenant, ln.closed_us)
    for key, figs, gids in _kept_sums(lo_day, hi_day, tenant_ids, dirty):
        got = exact.get(key)
        exact[key] = figs if got is None else [a + b for a, b in zip(got, figs, strict=True)]
        groups[key].update(gids)
    meta.update(_jobs({jid for jid, _t, _s in exact} - set(meta)))
    lines = []
    for (jid, tid, stage), (bh, ih, bc, ic, sc, cc) in exact.items():
        name, tenant_id, tenant, closed = meta[jid]
        f = CostFigures(
            busy_gpu_hours=bh,
            idle_gpu_hours=ih,
            busy_cost=bc,
            idle_cost=ic,
            solo_disagg_cost=sc if with_cf else ZERO,
            colocated_cost=cc if with_cf else ZERO,
        )
        lines.append(
            CostLine(
                tenant_id=tenant_id,
                tenant=tenant,
                job_id=jid,
                job_name=name,
                gpu_type=type_names.get(tid, str(tid)),
                stage=stage,
                group_ids=sorted(groups.get((jid, tid, stage), ())),
                closed_us=closed,
                busy_gpu_hours=hq(f.busy_gpu_hours),
                idle_gpu_hours=hq(f.idle_gpu_hours),
                exact=f,
            )
        )
    lines.sort(
        key=lambda ln: (ln.tenant, ln.job_name, ln.job_id, STAGES.index(ln.stage), ln.gpu_type)
    )
    group_exact = _kept_group_costs(lo_day, hi_day, dirty)
    if tenant_ids is not None:  # (the groups of the visible jobs' lines)
        seen = {g for ln in lines for g in ln.group_ids}
        group_exact = {g: c for g, c in group_exact.items() if g in seen}
    for res in parts:
        for gid, c in res.group_exact.items():
            group_exact[gid] = group_exact.get(gid, ZERO) + c
    return CostResult(
        lines=lines,
        group_costs={gid: cents(c) for gid, c in group_exact.items()},
        group_exact=group_exact,
        per_bucket_tenant=kept_buckets(plan, buckets),
    )
