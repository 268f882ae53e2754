"""The cost report: lines per job and GPU type, rows per tenant and type, the burn-down.

Phase records and node allocations are the single source of truth. Each figure is
computed once (money in Decimal, `cost_engine`) and rounded once (`cost_figures`: a
tenant's billed lines add up to its row, the tenant rows to the total, and a finished
job's lines never change from one run of the report to the next), and
every page, CSV and API renders from the same result objects, so they agree to the
cent. The burn-down's "spent" for the report's own month is the tenant row's figure.
A job's profiling run is billed on lines of its own (stage "profile"); `by_stage` sums the
profiling runs and the production runs apart, and `by_job` gives each job's profiling run,
production run and total (profile + run) from its billed lines.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db import connection

from rollmux_web.accounts.access import visible_tenant_ids
from rollmux_web.accounts.selectors import visible_tenants
from rollmux_web.inventory.selectors import PriceBook, price_book
from rollmux_web.quotas.models import Quota
from rollmux_web.reports.selectors._time import day_range, month_days, now_or
from rollmux_web.reports.selectors.cost_engine import STAGES
from rollmux_web.reports.selectors.cost_figures import (
    STAGE_LABELS,
    CostLine,
    CostTotals,
    JobCost,
    add_rows,
    bill_lines,
    cents,
    exact_arithmetic,
    job_costs,
    sum_lines,
)
from rollmux_web.reports.selectors.cost_paged import paged_lines
from rollmux_web.reports.selectors.cost_rows import CostResult
from rollmux_web.reports.selectors.cost_stored import cost_lines, kept_buckets, stored_plan
from scheduler.collector import gc_paused


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
    def overspent(self) -> Decimal | None:
        """Return how much the spend is past the budget, or None (no budget, or within it)."""
        if self.budget is None or self.spent <= self.budget:
            return None
        return self.spent - self.budget

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
    by_stage: list[CostTotals] = field(default_factory=list)  # profiling runs, production runs
    by_job: list[JobCost] = field(default_factory=list)
    group_costs: dict[int, Decimal] = field(default_factory=dict)
    burn_down: list[BurnDown] = field(default_factory=list)
    # the month the burn-down shows (that of the range's last day, or today's if earlier)
    # and whether it is still running (then the burn-down is month to date)
    burn_down_month: date | None = None
    burn_down_to_date: bool = False
    # a page of jobs (cost_report_page): `by_job` and `lines` hold that page's only, these
    # say how many jobs the range has and whether any of its lines is a profiling run's
    jobs_count: int | None = None
    any_profiling: bool | None = None

    @property
    def empty(self) -> bool:
        return not self.lines if self.jobs_count is None else not self.jobs_count

    @property
    def has_profiling(self) -> bool:
        if self.any_profiling is not None:
            return self.any_profiling
        return any(ln.is_profile for ln in self.lines)


def _totals(lines: Sequence[CostLine], key: str) -> list[CostTotals]:
    grouped: dict[str, list[CostLine]] = defaultdict(list)
    for ln in lines:
        grouped[ln.tenant if key == "tenant" else ln.gpu_type].append(ln)
    return [sum_lines(grouped[k], key=k, label=k) for k in sorted(grouped)]


def _stage_totals(lines: Sequence[CostLine]) -> list[CostTotals]:
    """Return the profiling runs' row and the production runs' row (each exact, rounded once)."""
    grouped: dict[str, list[CostLine]] = {stage: [] for stage in STAGES}
    for ln in lines:
        grouped[ln.stage].append(ln)
    return [sum_lines(grouped[s], key=s, label=STAGE_LABELS[s].capitalize() + "s") for s in STAGES]


@gc_paused()  # the lines' billing, rows and per-job sums too, not only their computing
@exact_arithmetic
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
    now_ = now_or(now)
    tenant_ids = visible_tenant_ids(user)
    prices = price_book()
    # when the range starts on the burn-down month's first day and both stop at the same
    # moment (the default: month to date; or the whole month once it is over), the
    # burn-down's daily figures come from the report's own pass
    month_start, _next_month, days = month_days(min(end, now_.date()))
    shared = with_burn_down and start == month_start and min(t1, now_) == min(days[-1], now_)
    result = cost_lines(
        tenant_ids=tenant_ids,
        t0=t0,
        t1=t1,
        now=now_,
        prices=prices,
        buckets=days if shared else (),
        counterfactuals=True,
    )
    lines = result.lines
    bill_lines(lines)
    by_tenant = _totals(lines, "tenant")
    report = CostReport(
        start=start,
        end=end,
        t0=t0,
        t1=t1,
        lines=lines,
        total=add_rows(by_tenant, key="total", label="Total"),
        by_tenant=by_tenant,
        by_gpu_type=_totals(lines, "gpu_type"),
        by_stage=_stage_totals(lines),
        by_job=job_costs(lines),
        group_costs=result.group_costs,
    )
    if with_burn_down:
        report.burn_down_month = month_start
        report.burn_down_to_date = now_ < days[-1]
        report.burn_down = burn_down(
            user=user,
            month_of=min(end, now_.date()),
            now=now_,
            prices=prices,
            per_bucket=result.per_bucket_tenant if shared else None,
            spent={t.key: t.cost for t in report.by_tenant} if shared else None,
        )
    return report


@gc_paused()
@exact_arithmetic
def cost_report_page(
    *,
    user: Any,
    start: date,
    end: date,
    page: int,
    page_size: int,
    now: datetime | None = None,
    with_burn_down: bool = True,
) -> CostReport:
    """Return the cost report for [start, end] with one page of its jobs (`page` from 1,
    `page_size` jobs in the lines' order): `by_job` and `lines` hold that page's jobs and
    their billing lines, `jobs_count` the range's number of jobs; every other figure is
    the whole range's, and each is cost_report's (the same cents whichever page), but
    `group_costs`, left empty (nothing on a page of the report reads it).

    Over kept days (PostgreSQL) the lines are billed and summed in SQL and only the
    page's are built (cost_paged); otherwise the whole report is built and sliced.
    """
    t0, t1 = day_range(start, end)
    now_ = now_or(now)
    tenant_ids = visible_tenant_ids(user)
    prices = price_book()
    month_start, _next_month, days = month_days(min(end, now_.date()))
    shared = with_burn_down and start == month_start and min(t1, now_) == min(days[-1], now_)
    plan = (
        stored_plan(
            tenant_ids=tenant_ids, t0=t0, t1=t1, now=now_, prices=prices,
            buckets=days if shared else (), counterfactuals=True, lives=True,
        )
        if connection.vendor == "postgresql"
        else None
    )  # fmt: skip
    if plan is None or isinstance(plan, CostResult):
        # (the engine's alone: its lines are all built anyway)
        full = cost_report(user=user, start=start, end=end, now=now, with_burn_down=with_burn_down)
        jobs = full.by_job[(page - 1) * page_size : page * page_size]
        on_page = {j.job_id for j in jobs}
        full.jobs_count = len(full.by_job)
        full.any_profiling = full.has_profiling
        full.by_job = jobs
        full.lines = [ln for ln in full.lines if ln.job_id in on_page]
        return full
    got = paged_lines(plan, page=page, page_size=page_size)
    report = CostReport(
        start=start,
        end=end,
        t0=t0,
        t1=t1,
        lines=got.lines,
        total=add_rows(got.by_tenant, key="total", label="Total"),
        by_tenant=got.by_tenant,
        by_gpu_type=got.by_gpu_type,
        by_stage=got.by_stage,
        by_job=job_costs(got.lines),
        jobs_count=got.jobs_count,
        any_profiling=got.any_profiling,
    )
    if with_burn_down:
        report.burn_down_month = month_start
        report.burn_down_to_date = now_ < days[-1]
        report.burn_down = burn_down(
            user=user,
            month_of=min(end, now_.date()),
            now=now_,
            prices=prices,
            per_bucket=kept_buckets(plan, days) if shared else None,
            spent={t.key: t.cost for t in report.by_tenant} if shared else None,
        )
    return report


@exact_arithmetic
def burn_down(
    *,
    user: Any,
    month_of: date,
    now: datetime | None = None,
    prices: PriceBook | None = None,
    per_bucket: dict[tuple[int, int, str], Decimal] | None = None,
    spent: dict[str, Decimal] | None = None,
) -> list[BurnDown]:
    """Return month-to-date spend per tenant, day by day, against its monthly budgets.

    `per_bucket` ((day index, tenant, busy|idle) -> exact cost) is reused when the caller already
    computed the month to date with daily buckets; `spent` (tenant name -> the report's
    tenant row, in cents) is then the figure shown as spent and as the last day's point,
    so the burn-down and the tenant row on one page are the same number. Otherwise each
    day's cumulative exact spend is rounded once, busy and idle apart as the rows are.
    """
    now_ = now_or(now)
    month_start, _next_month, days = month_days(month_of)
    if per_bucket is None:
        # (cost_lines' per_bucket_tenant, without building its lines: a month at a
        # fleet's size has ~29,000, which only the buckets' sums need here)
        plan = stored_plan(
            tenant_ids=visible_tenant_ids(user),
            t0=days[0],
            t1=days[-1],
            now=now_,
            prices=prices or price_book(),
            buckets=days,
            lives=True,
        )
        per_bucket = (
            plan.per_bucket_tenant if isinstance(plan, CostResult) else kept_buckets(plan, days)
        )
    budgets: dict[int, Decimal] = defaultdict(Decimal)
    has_budget: set[int] = set()
    for tid, b in Quota.objects.filter(monthly_budget_usd__isnull=False).values_list(
        "tenant_id", "monthly_budget_usd"
    ):
        budgets[tid] += b or Decimal(0)
        has_budget.add(tid)
    out = []
    last_day = min(len(days) - 1, max(0, (now_.date() - month_start).days + 1))
    for tenant in visible_tenants(user).order_by("name"):
        busy = idle = Decimal(0)
        series = []
        for i in range(last_day):
            busy += per_bucket.get((i, tenant.pk, "busy"), Decimal(0))
            idle += per_bucket.get((i, tenant.pk, "idle"), Decimal(0))
            series.append((days[i].date(), cents(busy) + cents(idle)))
        if not (busy or idle) and tenant.pk not in has_budget:
            continue  # nothing spent and nothing to burn down
        total = cents(busy) + cents(idle)
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
