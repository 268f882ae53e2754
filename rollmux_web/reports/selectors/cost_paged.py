"""One page of the cost report's jobs, from the kept days in SQL (issue 25: a month < 1 s).

`cost.cost_report` builds every billing line of the range in Python (a month at a fleet's
size has ~29,000) to bill them, sum the rows and list the jobs; the page shows the rows
and 200 jobs. Here, when the range is served from the kept days (`cost_stored`),
PostgreSQL sums the kept days' exact integer numerators per line, runs each tenant's
billing remainder in billing order (a window over the same numerators, exact), sums the
rows (per tenant and stage, per GPU type and stage) and counts the jobs; Python builds
line objects only for the page's jobs. The engine's parts (the days not kept yet, the
dirty groups) are a few lines whose exact amounts are added in Python: to their own
line, to its rows, and to the running sums of the lines billed after it.

Every figure is the same exact amount as `cost_report`'s, up to the 60-digit drift that
`cost_figures.cents` / `hq` already absorb (numerators summed as integers and divided
once here, each line divided and then added there), so the same cents and GPU-hours:
tests/reports/test_cost_paged.py compares every page of both, page and API data.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import replace
from datetime import date
from decimal import Decimal
from typing import Any

from django.db import connection, transaction

from rollmux_web.accounts.models import Tenant
from rollmux_web.inventory.models import GpuType
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job
from rollmux_web.reports.models import CostDayLine, CostMonth, CostMonthLine
from rollmux_web.reports.selectors._time import next_month
from rollmux_web.reports.selectors.cost_figures import (
    FIGURE_COLUMNS,
    STAGE_LABELS,
    ZERO,
    CostFigures,
    CostLine,
    CostTotals,
    cents,
    exact_arithmetic,
    hq,
    row_of,
)
from rollmux_web.reports.selectors.cost_rows import STAGES
from rollmux_web.reports.selectors.cost_stored import DENOMINATOR, StoredPlan
from rollmux_web.reports.selectors.cost_totals import jobs_per_tenant, row_sums
from rollmux_web.workflow.models import Placement

Key = tuple[int, int, str]  # job, GPU type id, stage
BillKey = tuple[int, int, int, int, str]  # cost_figures.billing_order's
_N = len(FIGURE_COLUMNS)
WORK_MEM = "32MB"

# 1. the kept days' numerators per line: the whole months' summed rows (CostMonthLine,
#    `kept_parts`) as they stand when a line has one row in all the kept months and none
#    in the range's other days (a quarter's ~113,000 of ~116,000: no sort or sum), the
#    others summed with the other days' rows (a quarter read ~213,000 day rows, sorted and
#    summed them); with the engine parts' line keys (their amounts are added in Python)
#    and the engine's end times for their jobs (cost_stored._merge takes a job's from its
#    engine lines first);
# 2. the page's jobs (in the lines' order: tenant, job name, job id), and the running
#    busy and idle numerators in billing order (billing_order: finished jobs by their
#    end, then live ones; job, profiling run first, GPU type) over narrow rows of the
#    page's tenants only (a tenant's running sums read no other tenant's lines: a
#    quarter's window went from ~115 ms to ~35 ms), joined to the lines by hash
#    (materialized: the lines' row estimate can be far off, and a nested loop over every
#    line was seconds);
# 3. out: the page's lines, the rows' sums (and line counts), the number of jobs.
# (COLLATE "C": Python's order of strings, by code point)
_SQL = """
WITH day_rows AS MATERIALIZED (
    SELECT job_id, gpu_type_id, stage, group_id, has_parts, {columns}
    FROM {lines} WHERE {day_where}
), month_rows AS (
    SELECT job_id, gpu_type_id, stage, group_id, has_parts, multi, {columns}
    FROM {months} WHERE {month_where}
), kept AS (
    SELECT job_id, gpu_type_id, stage, {columns},
           CASE WHEN has_parts THEN ARRAY[group_id] END AS gids
    FROM month_rows m WHERE NOT multi AND NOT EXISTS (SELECT 1 FROM day_rows d WHERE {same})
    UNION ALL
    SELECT job_id, gpu_type_id, stage, {sums},
           array_agg(group_id) FILTER (WHERE has_parts) AS gids
    FROM (
        SELECT job_id, gpu_type_id, stage, group_id, has_parts, {columns} FROM month_rows m
        WHERE multi OR EXISTS (SELECT 1 FROM day_rows d WHERE {same})
        UNION ALL
        SELECT * FROM day_rows
    ) r GROUP BY 1, 2, 3
), extra AS (
    SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[]) AS e(job_id, gpu_type_id, stage)
), ended AS (
    SELECT * FROM unnest(%s::bigint[], %s::bigint[]) AS o(job_id, closed_us)
), line AS MATERIALIZED (
    SELECT l.job_id, l.gpu_type_id, l.stage, j.name AS job_name, j.tenant_id,
           t.name AS tenant, COALESCE(g.name, l.gpu_type_id::text) AS gpu_type,
           CASE WHEN o.job_id IS NOT NULL THEN o.closed_us
                WHEN j.status = ANY(%s::text[]) THEN COALESCE(
                    {finished},
                    (SELECT {left} FROM {placements} p WHERE p.job_id = l.job_id)
                ) END AS closed_us,
           {coalesced}, COALESCE(l.gids, '{{}}') AS gids
    FROM (kept FULL JOIN extra USING (job_id, gpu_type_id, stage)) l
    JOIN {jobs} j ON j.id = l.job_id{job_scope}
    JOIN {tenants} t ON t.id = j.tenant_id
    LEFT JOIN {types} g ON g.id = l.gpu_type_id
    LEFT JOIN ended o ON o.job_id = l.job_id
), page AS MATERIALIZED (
    SELECT job_id FROM (SELECT DISTINCT tenant, job_name, job_id FROM line) j
    ORDER BY tenant COLLATE "C", job_name COLLATE "C", job_id LIMIT %s OFFSET %s
), page_line AS MATERIALIZED (
    SELECT line.* FROM line JOIN page USING (job_id)
), billed AS (
    SELECT job_id, gpu_type_id, stage,
           SUM(busy_cost) OVER w AS run_busy, SUM(idle_cost) OVER w AS run_idle
    FROM line WHERE tenant_id IN (SELECT tenant_id FROM page_line)
    WINDOW w AS (
        PARTITION BY tenant_id
        ORDER BY closed_us IS NULL, COALESCE(closed_us, 0), job_id, stage <> 'profile',
                 gpu_type COLLATE "C"
        ROWS UNBOUNDED PRECEDING
    )
), page_billed AS MATERIALIZED (
    SELECT billed.* FROM billed JOIN page USING (job_id)
)
SELECT 'line', tenant_id, tenant, job_id, job_name, gpu_type, stage, closed_us, gids,
       {columns}, run_busy, run_idle
FROM page_line JOIN page_billed USING (job_id, gpu_type_id, stage)
"""
# the rows' sums and the number of jobs, when they are not read from the kept days' sums
# (cost_totals)
_SQL_ROWS = """
UNION ALL
SELECT CASE WHEN GROUPING(tenant) = 0 THEN 'tenant' ELSE 'type' END, NULL, tenant,
       COUNT(*), NULL, gpu_type, stage, NULL, NULL, {sums}, NULL, NULL
FROM line GROUP BY GROUPING SETS ((tenant, stage), (gpu_type, stage))
UNION ALL
SELECT 'jobs', NULL, NULL, COUNT(DISTINCT job_id), NULL, NULL, NULL, NULL, NULL,
       {nulls}, NULL, NULL
FROM line
"""


def _statement(
    day_where: str, month_where: str, *, rows: bool, tenant_ids: set[int] | None = None
) -> str:
    us = "(EXTRACT(EPOCH FROM {}) * 1000000)::bigint"  # (rollmux_web.epoch_sql's MICROS)
    return (_SQL + (_SQL_ROWS if rows else "")).format(
        months=CostMonthLine._meta.db_table,
        day_where=day_where,
        # (the lines of a few tenants: their jobs by the tenant's index, not a hash of
        # every job; ids from the database, integers)
        job_scope=""
        if tenant_ids is None
        else f" AND j.tenant_id IN ({', '.join(str(int(t)) for t in sorted(tenant_ids)) or 'NULL'})",
        month_where=month_where,
        same=" AND ".join(f"d.{c} = m.{c}" for c in ("job_id", "gpu_type_id", "stage")),
        sums=", ".join(f"SUM({c}) AS {c}" for c in FIGURE_COLUMNS),
        coalesced=", ".join(f"COALESCE(l.{c}, 0) AS {c}" for c in FIGURE_COLUMNS),
        columns=", ".join(FIGURE_COLUMNS),
        nulls=", ".join("NULL::numeric" for _ in FIGURE_COLUMNS),
        lines=CostDayLine._meta.db_table,
        jobs=Job._meta.db_table,
        tenants=Tenant._meta.db_table,
        types=GpuType._meta.db_table,
        placements=Placement._meta.db_table,
        finished=us.format("j.finished_at"),
        left=us.format("MAX(p.ended_at)"),
    )


def kept_months(lo: date, hi: date) -> list[date]:
    """The whole months in [lo, hi) that are summed (`CostMonthLine`)."""
    return sorted(
        m
        for m in CostMonth.objects.filter(month__gte=lo, month__lt=hi).values_list(
            "month", flat=True
        )
        if next_month(m) <= hi
    )


def kept_parts(plan: StoredPlan) -> tuple[str, list[Any], str, list[Any]]:
    """Where the kept days [plan.lo_day, plan.hi_day) are read: the whole months summed
    (`CostMonthLine`) and the other days (`CostDayLine`), each in the plan's scope (its
    tenants, not its dirty groups): (day rows' WHERE, params, month rows' WHERE, params)."""
    lo, hi = plan.lo_day, plan.hi_day
    months = kept_months(lo, hi)
    spans, at = [], lo
    for m in months:
        if m > at:
            spans.append((at, m))
        at = next_month(m)
    if hi > at:
        spans.append((at, hi))
    scope, scope_params = "", []
    if plan.tenant_ids is not None:
        scope += " AND tenant_id = ANY(%s)"
        scope_params.append(sorted(plan.tenant_ids))
    if plan.dirty:
        scope += " AND NOT (group_id = ANY(%s))"
        scope_params.append(sorted(plan.dirty))
    day_where = " OR ".join("(day >= %s AND day < %s)" for _ in spans) or "false"
    day_params: list[Any] = [d for span in spans for d in span]
    return (
        f"({day_where}){scope}",
        day_params + scope_params,
        f"month = ANY(%s::date[]){scope}",
        [months, *scope_params],
    )


def billing_key(closed_us: int | None, job_id: int, stage: str, gpu_type: str) -> BillKey:
    """cost_figures.billing_order of a line with these fields."""
    closed = closed_us is not None
    return (0 if closed else 1, closed_us or 0, job_id, 0 if stage == "profile" else 1, gpu_type)


class _EngineParts:
    """The engine parts' exact amounts per line, and per tenant their running busy and
    idle sums in billing order (to add to the kept days' running sums)."""

    def __init__(self, plan: StoredPlan, type_ids: dict[str, int]) -> None:
        self.exact: dict[Key, list[Decimal]] = {}
        self.groups: dict[Key, set[int]] = defaultdict(set)
        self.closed: dict[int, int | None] = {}
        self.tenant_of: dict[Key, tuple[int, str, str]] = {}  # tenant id, tenant, GPU type
        for res in plan.parts:
            for ln in res.lines:
                key = (ln.job_id, type_ids.get(ln.gpu_type, -1), ln.stage)
                figs = [getattr(ln.exact, c) for c in FIGURE_COLUMNS]
                got = self.exact.get(key)
                self.exact[key] = (
                    figs if got is None else [a + b for a, b in zip(got, figs, strict=True)]
                )
                self.groups[key].update(ln.group_ids)
                self.closed[ln.job_id] = ln.closed_us
                self.tenant_of[key] = (ln.tenant_id, ln.tenant, ln.gpu_type)
        busy, idle = FIGURE_COLUMNS.index("busy_cost"), FIGURE_COLUMNS.index("idle_cost")
        order: dict[int, list[tuple[BillKey, Decimal, Decimal]]] = defaultdict(list)
        for key, figs in self.exact.items():
            jid, _tid, stage = key
            tenant_id, _t, gpu_type = self.tenant_of[key]
            bk = billing_key(self.closed[jid], jid, stage, gpu_type)
            order[tenant_id].append((bk, figs[busy], figs[idle]))
        self.running: dict[int, tuple[list[BillKey], list[Decimal], list[Decimal]]] = {}
        for tenant_id, items in order.items():
            items.sort(key=lambda x: x[0])
            keys, run_b, run_i = [], [], []
            b = i = ZERO
            for bk, xb, xi in items:
                b, i = b + xb, i + xi
                keys.append(bk)
                run_b.append(b)
                run_i.append(i)
            self.running[tenant_id] = (keys, run_b, run_i)

    def running_upto(self, tenant_id: int, bk: BillKey) -> tuple[Decimal, Decimal]:
        """The busy and idle sums of the tenant's engine lines billed up to `bk` (included)."""
        got = self.running.get(tenant_id)
        if got is None:
            return ZERO, ZERO
        keys, run_b, run_i = got
        at = bisect_right(keys, bk)
        return (run_b[at - 1], run_i[at - 1]) if at else (ZERO, ZERO)


def _figures(figs: list[Decimal]) -> CostFigures:
    return CostFigures(**dict(zip(FIGURE_COLUMNS, figs, strict=True)))


def _add(a: list[Decimal], b: list[Decimal] | None) -> list[Decimal]:
    return a if b is None else [x + y for x, y in zip(a, b, strict=True)]


class PagedLines:
    """One page of jobs' billed lines, the rows' exact sums and the number of jobs."""

    def __init__(self) -> None:
        self.lines: list[CostLine] = []
        self.jobs_count = 0
        self.by_tenant: list[CostTotals] = []
        self.by_gpu_type: list[CostTotals] = []
        self.by_stage: list[CostTotals] = []
        self.any_profiling = False


def _page_tenants(
    counts: dict[int, int], names: dict[int, str], offset: int, page_size: int
) -> tuple[set[int], int]:
    """The tenants whose jobs a page of jobs from `offset` holds (the lines' order is by
    tenant first) and the page's offset among their jobs."""
    chosen: set[int] = set()
    at = skip = 0
    for tid in sorted(counts, key=lambda t: names[t]):
        n = counts[tid]
        if at + n > offset and at < offset + page_size:
            if not chosen:
                skip = offset - at
            chosen.add(tid)
        at += n
    return chosen, skip


@exact_arithmetic
def paged_lines(plan: StoredPlan, *, page: int, page_size: int) -> PagedLines:
    """Return the page `page` (from 1) of `page_size` jobs of the range `plan` serves, with
    the whole range's rows and job count (PostgreSQL only).

    When the range's kept days are summed per tenant (`cost_totals`), the rows are those
    sums and the statement reads the lines of the page's tenants only (their billing runs
    over their own lines alone); otherwise it reads every line of the range.
    """
    type_ids = {name: tid for tid, name in GpuType.objects.values_list("id", "name")}
    eng = _EngineParts(plan, type_ids)
    kept_rows = row_sums(plan.lo_day, plan.hi_day, plan.tenant_ids, plan.dirty)
    out = PagedLines()
    offset = (page - 1) * page_size
    lines_plan, ekeys = plan, sorted(eng.exact)
    names: dict[int, str] = {}
    if kept_rows is not None:
        # 1. the jobs per tenant (the kept rows', the engine's), 2. the tenants the page
        # falls in, 3. their lines only
        counts = jobs_per_tenant(
            lo=plan.lo_day,
            hi=plan.hi_day,
            months=kept_months(plan.lo_day, plan.hi_day),
            tenant_ids=plan.tenant_ids,
            dirty=plan.dirty,
            parts=kept_parts(plan),
            engine=sorted({(t[0], k[0]) for k, t in eng.tenant_of.items()}),
        )
        names = dict(Tenant.objects.filter(id__in=counts.keys() | {k[0] for k in kept_rows})
                     .values_list("id", "name"))  # fmt: skip
        chosen, offset = _page_tenants(counts, names, offset, page_size)
        out.jobs_count = sum(counts.values())
        lines_plan = replace(plan, tenant_ids=chosen)
        ekeys = [k for k in ekeys if eng.tenant_of[k][0] in chosen]
    rows = _read(lines_plan, eng, ekeys, offset, page_size, with_rows=kept_rows is None)
    by_tenant: dict[tuple[str, str], list[Decimal]] = {}
    by_type: dict[tuple[str, str], list[Decimal]] = {}
    if kept_rows is not None:
        # the rows' numerators added up first and divided once, as the statement's SUMs
        type_names = {tid: name for name, tid in type_ids.items()}
        nums_t: dict[tuple[str, str], list[Decimal]] = {}
        nums_g: dict[tuple[str, str], list[Decimal]] = {}
        for (tid, gid, stage), (_n, nums) in kept_rows.items():
            kt, kg = (names[tid], stage), (type_names.get(gid, str(gid)), stage)
            nums_t[kt] = _add(nums_t[kt], nums) if kt in nums_t else nums
            nums_g[kg] = _add(nums_g[kg], nums) if kg in nums_g else nums
            if stage == "profile":
                out.any_profiling = True
        by_tenant = {k: [v / DENOMINATOR for v in n] for k, n in nums_t.items()}
        by_type = {k: [v / DENOMINATOR for v in n] for k, n in nums_g.items()}
    with_cf = plan.with_cf
    for kind, tenant_id, tenant, jid, name, gpu_type, stage, closed, gids, *rest in rows:
        if kind == "jobs":
            out.jobs_count = jid
            continue
        figs = [v / DENOMINATOR for v in rest[:_N]]
        if kind in ("tenant", "type"):
            (by_tenant if kind == "tenant" else by_type)[
                (tenant if kind == "tenant" else gpu_type, stage)
            ] = figs
            if stage == "profile" and jid:
                out.any_profiling = True
        else:
            key = (jid, type_ids.get(gpu_type, -1), stage)
            e = eng.exact.get(key)
            exact = _figures(_add(figs, e))
            if not with_cf:
                exact.solo_disagg_cost = exact.colocated_cost = ZERO
            bk = billing_key(closed, jid, stage, gpu_type)
            e_busy, e_idle = eng.running_upto(tenant_id, bk)
            run_busy = rest[_N] / DENOMINATOR + e_busy
            run_idle = rest[_N + 1] / DENOMINATOR + e_idle
            out.lines.append(
                CostLine(
                    tenant_id=tenant_id,
                    tenant=tenant,
                    job_id=jid,
                    job_name=name,
                    gpu_type=gpu_type,
                    stage=stage,
                    group_ids=sorted(set(gids) | eng.groups.get(key, set())),
                    closed_us=closed,
                    busy_gpu_hours=hq(exact.busy_gpu_hours),
                    idle_gpu_hours=hq(exact.idle_gpu_hours),
                    # bill_lines' running remainder: the tenant's exact sum up to this
                    # line rounded, minus the same before it
                    busy_cost=cents(run_busy) - cents(run_busy - exact.busy_cost),
                    idle_cost=cents(run_idle) - cents(run_idle - exact.idle_cost),
                    solo_disagg_cost=cents(exact.solo_disagg_cost),
                    colocated_cost=cents(exact.colocated_cost),
                    exact=exact,
                )
            )
    # the engine parts' amounts in their rows (their lines are in the SQL's, at zero)
    for key, e in eng.exact.items():
        _tid, tenant, gpu_type = eng.tenant_of[key]
        stage = key[2]
        by_tenant[(tenant, stage)] = _add(by_tenant.get((tenant, stage), [ZERO] * _N), e)
        by_type[(gpu_type, stage)] = _add(by_type.get((gpu_type, stage), [ZERO] * _N), e)
        if stage == "profile":
            out.any_profiling = True
    if not with_cf:
        for sums in (*by_tenant.values(), *by_type.values()):
            sums[-2:] = [ZERO, ZERO]
    out.lines.sort(
        key=lambda ln: (ln.tenant, ln.job_name, ln.job_id, STAGES.index(ln.stage), ln.gpu_type)
    )
    out.by_tenant = _rows(by_tenant)
    out.by_gpu_type = _rows(by_type)
    per_stage: dict[tuple[str, str], list[Decimal]] = {}
    for (_tenant, stage), sums in by_tenant.items():
        per_stage[(stage, stage)] = _add(per_stage.get((stage, stage), [ZERO] * _N), sums)
    out.by_stage = [
        _row(per_stage.get((s, s), [ZERO] * _N), profile=s == "profile", key=s,
             label=STAGE_LABELS[s].capitalize() + "s")
        for s in STAGES
    ]  # fmt: skip
    return out


def _read(
    plan: StoredPlan,
    eng: _EngineParts,
    ekeys: list[Key],
    offset: int,
    page_size: int,
    *,
    with_rows: bool,
) -> list[tuple[Any, ...]]:
    """The statement's rows: the page's lines (the kept days' in `plan`'s scope, the
    engine's `ekeys`), with the rows' sums and the jobs' count when `with_rows`."""
    day_where, day_params, month_where, month_params = kept_parts(plan)
    params = day_params + month_params
    ended = sorted(eng.closed.items())
    params += [
        [k[0] for k in ekeys], [k[1] for k in ekeys], [k[2] for k in ekeys],
        [j for j, _ in ended], [c for _, c in ended],
        [str(s) for s in TERMINAL_STATUSES],
        page_size, offset,
    ]  # fmt: skip
    with transaction.atomic(), connection.cursor() as cur:
        # its sorts and hashes in memory (a month at a fleet's size: ~30,000 lines, ~50,000
        # kept rows; PostgreSQL's default 4 MB spilled three sorts to disk), for this
        # transaction only
        cur.execute(f"SET LOCAL work_mem = '{WORK_MEM}'")
        cur.execute(
            _statement(day_where, month_where, rows=with_rows, tenant_ids=plan.tenant_ids),
            params,
        )
        return cur.fetchall()


def _row(sums: list[Decimal], *, profile: bool, key: str, label: str) -> CostTotals:
    exact = _figures(sums)
    return row_of(exact, exact.cost if profile else ZERO, key=key, label=label)


def _rows(sums: dict[tuple[str, str], list[Decimal]]) -> list[CostTotals]:
    """Rows keyed by the first of (key, stage): the stages' sums added, the profiling
    runs' cost apart (sum_lines' profile_cost)."""
    total: dict[str, list[Decimal]] = {}
    profile: dict[str, Decimal] = {}
    for (key, stage), figs in sums.items():
        total[key] = _add(total.get(key, [ZERO] * _N), figs)
        if stage == "profile":
            f = _figures(figs)
            profile[key] = profile.get(key, ZERO) + f.cost
    out = []
    for key in sorted(total):
        exact = _figures(total[key])
        out.append(row_of(exact, profile.get(key, ZERO), key=key, label=key))
    return out
