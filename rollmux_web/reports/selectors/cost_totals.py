"""A range's kept amounts summed per tenant, GPU type and stage, and its jobs per tenant,
without reading each line (issue 25: the quarter's cost report under 500 ms).

The cost report's rows (per tenant, per GPU type, per stage) are sums of its lines, and a
line's kept part is a sum of kept day rows (`CostDayLine`): so the rows' kept part is the
sum of the days' rows per tenant, GPU type and stage, which each kept day also keeps
summed (`CostDayTenant`, written with the day: reports.cost_days.keep_day). A range adds
those (a quarter: ~10,000 rows instead of ~118,000 month rows or ~213,000 day rows) and
takes away the rows of its dirty groups (which it computes from the phase rows over the
whole range instead: cost_stored), read by group. The numerators are integers, so the
sums are the same integers in any order: the same figures, to the last digit.

A day kept before its sums were (no `CostDaySummed` row) is not summed: the range is then
read line by line, as before (`row_sums` is None).

The page of jobs needs the jobs in the range per tenant (how many, to find the tenants a
page of jobs falls in: `jobs_per_tenant`); the lines are then read for those tenants only
(cost_paged).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db import connection

from rollmux_web.reports.models import (
    CostDay,
    CostDayLine,
    CostDaySummed,
    CostDayTenant,
    CostMonthJobs,
    CostMonthLine,
)
from rollmux_web.reports.selectors.cost_figures import FIGURE_COLUMNS

RowKey = tuple[int, int, str]  # tenant id, GPU type id, stage
_SUMS = ", ".join(f"SUM({c})" for c in FIGURE_COLUMNS)


def summed(lo: date, hi: date) -> bool:
    """Whether every kept day in [lo, hi) has its per-tenant sums (PostgreSQL only: the
    sums are exact numerics there). (The days of a range served from the kept days are
    kept, but those before the first kept day, when nothing was allocated then.)"""
    if connection.vendor != "postgresql":
        return False
    days = {"day__gte": lo, "day__lt": hi}
    return CostDaySummed.objects.filter(**days).count() == CostDay.objects.filter(**days).count()


def _scope(tenant_ids: set[int] | None) -> tuple[str, list[Any]]:
    if tenant_ids is None:
        return "", []
    return " AND tenant_id = ANY(%s)", [sorted(tenant_ids)]


def _summed_rows(
    select: str, group_by: str, lo: date, hi: date, tenant_ids: set[int] | None, dirty: set[int]
) -> list[tuple[Any, ...]]:
    """`select` + the days' sums (`CostDayTenant`) in [lo, hi) and in scope, grouped by
    `group_by`, then the same of the dirty groups' day rows (`CostDayLine`) negated: a
    row per group of each (the caller adds them up)."""
    scope, params = _scope(tenant_ids)
    sql = (
        f"SELECT {select}, SUM(lines), {_SUMS} FROM {CostDayTenant._meta.db_table} "  # noqa: S608
        f"WHERE day >= %s AND day < %s{scope} GROUP BY {group_by}"
    )
    args: list[Any] = [lo, hi, *params]
    if dirty:
        negated = ", ".join(f"-SUM({c})" for c in FIGURE_COLUMNS)
        sql += (
            f" UNION ALL SELECT {select}, -COUNT(*), {negated} "
            f"FROM {CostDayLine._meta.db_table} WHERE group_id = ANY(%s) "
            f"AND day >= %s AND day < %s{scope} GROUP BY {group_by}"
        )
        args += [sorted(dirty), lo, hi, *params]
    with connection.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()


def row_sums(
    lo: date, hi: date, tenant_ids: set[int] | None, dirty: set[int]
) -> dict[RowKey, tuple[int, list[Decimal]]] | None:
    """(tenant, GPU type, stage) -> (the kept day rows, their exact numerators summed) of
    the kept days [lo, hi) in scope but the `dirty` groups'; None when a day is not
    summed."""
    if not summed(lo, hi):
        return None
    out: dict[RowKey, list[Any]] = {}
    for tid, gid, stage, n, *figs in _summed_rows(
        "tenant_id, gpu_type_id, stage", "1, 2, 3", lo, hi, tenant_ids, dirty
    ):
        got = out.get((tid, gid, stage))
        out[(tid, gid, stage)] = (
            [n, *figs] if got is None else [a + b for a, b in zip(got, [n, *figs], strict=True)]
        )
    # (a key whose every row is a dirty group's has none left: no line of the range)
    return {k: (v[0], v[1:]) for k, v in out.items() if v[0]}


def bucket_sums(
    lo: date,
    hi: date,
    tenant_ids: set[int] | None,
    dirty: set[int],
    buckets: Sequence[datetime],
) -> dict[tuple[int, int, str], Decimal] | None:
    """(bucket, tenant, busy|idle) -> the kept days' exact numerators (the buckets are
    days) in scope but the `dirty` groups'; None when a day is not summed."""
    if not summed(lo, hi):
        return None
    index = {b.date(): i for i, b in enumerate(buckets[:-1])}
    out: dict[tuple[int, int, str], Decimal] = defaultdict(Decimal)
    busy, idle = 1 + FIGURE_COLUMNS.index("busy_cost"), 1 + FIGURE_COLUMNS.index("idle_cost")
    for day, tid, *rest in _summed_rows("day, tenant_id", "1, 2", lo, hi, tenant_ids, dirty):
        bi = index.get(day)
        if bi is not None:
            out[(bi, tid, "busy")] += rest[busy]
            out[(bi, tid, "idle")] += rest[idle]
    return dict(out)


def _count_distinct(
    day_where: str, day_params: list[Any], month_where: str, month_params: list[Any],
    engine: Sequence[tuple[int, int]],
) -> dict[int, int]:  # fmt: skip
    """tenant -> its jobs with a kept row where cost_paged.kept_parts reads them or in
    `engine`, counted over every row."""
    sql = (
        "SELECT tenant_id, COUNT(DISTINCT job_id) FROM ("  # noqa: S608 (no user input)
        f" SELECT tenant_id, job_id FROM {CostMonthLine._meta.db_table} WHERE {month_where}"
        f" UNION ALL SELECT tenant_id, job_id FROM {CostDayLine._meta.db_table}"
        f" WHERE {day_where}"
        " UNION ALL SELECT * FROM unnest(%s::bigint[], %s::bigint[])"
        ") j GROUP BY 1"
    )
    params = [*month_params, *day_params, [t for t, _ in engine], [j for _, j in engine]]
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return dict(cur.fetchall())


def jobs_per_tenant(
    *,
    lo: date,
    hi: date,
    months: list[date],
    tenant_ids: set[int] | None,
    dirty: set[int],
    parts: tuple[str, list[Any], str, list[Any]],
    engine: Sequence[tuple[int, int]],
) -> dict[int, int]:
    """tenant -> how many jobs the range has: a kept row where cost_paged.kept_parts
    reads them (`parts`: the whole `months`' rows, the other days', in scope, but the
    `dirty` groups') or an engine line (`engine`: (tenant, job)).

    The whole months' jobs are their counts (`CostMonthJobs`): a job is counted in the
    first of `months` it has a row in, the months it has a row in before being all
    outside the range; that counts a row of a dirty group too, which is right when each
    job with such a row has an engine line in the range (the engine runs over that group
    then: the same job's time), checked here; the other days' and the engine's jobs
    that none of the months has are added. Anything else (a month not counted, a dirty
    group's job with no engine line) counts every row (`_count_distinct`).
    """
    day_where, day_params, _month_where, _month_params = parts
    got = {r.month: r.counts for r in CostMonthJobs.objects.filter(month__in=months)}
    scope, scope_params = _scope(tenant_ids)
    engine_jobs = {j for _, j in engine}
    if len(got) != len(months):
        return _count_distinct(*parts, engine=engine)
    if dirty:
        with connection.cursor() as cur:
            cur.execute(
                f"SELECT DISTINCT job_id FROM {CostDayLine._meta.db_table} "  # noqa: S608
                f"WHERE group_id = ANY(%s) AND day >= %s AND day < %s{scope}",
                [sorted(dirty), lo, hi, *scope_params],
            )
            if any(jid not in engine_jobs for (jid,) in cur.fetchall()):
                return _count_distinct(*parts, engine=engine)
    counts: dict[int, int] = defaultdict(int)
    first = min(months, default=None)
    for by_tenant in got.values():
        for tid, by_before in by_tenant.items():
            if tenant_ids is not None and int(tid) not in tenant_ids:
                continue
            for before, n in by_before.items():
                if first is None or not before or date.fromisoformat(before) < first:
                    counts[int(tid)] += n
    # the other days' and the engine's jobs that no whole month of the range has
    sql = (
        "SELECT tenant_id, COUNT(*) FROM (SELECT DISTINCT tenant_id, job_id FROM ("  # noqa: S608
        f" SELECT tenant_id, job_id FROM {CostDayLine._meta.db_table} WHERE {day_where}"
        " UNION ALL SELECT * FROM unnest(%s::bigint[], %s::bigint[])) r) j "
        f"WHERE NOT EXISTS (SELECT 1 FROM {CostMonthLine._meta.db_table} m "
        "WHERE m.job_id = j.job_id AND m.month = ANY(%s::date[])) GROUP BY 1"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [*day_params, [t for t, _ in engine], [j for _, j in engine], months])
        for tid, n in cur.fetchall():
            counts[tid] += n
    return dict(counts)
