"""Read side of the reports app: every report number and every chart's geometry.

One module per read model (the views and APIs import them through this package):
- `_time`, `_sql`: report windows and epoch helpers, PostgreSQL tricks;
- `timeline_queries`: a group's or job's phases for the Gantt (geometry: `reports.timeline`);
- `trace_export`: the same phases as Chrome/Perfetto trace JSON;
- `cost_engine` (fetch + a pure accumulator), `cost_figures` (rounding), `cost` (the report
  and the burn-down); the FOCUS files and the JSON are in `reports.exports`;
- `slo`: the SLO report; `outcome`: a finished job's slowdown and cost; `overview`: the landing page; `groups`: the groups list.

Tenant scoping and the member label come from `rollmux_web.accounts.access`; prices
from `rollmux_web.inventory.selectors.PriceBook`.
"""

from rollmux_web.reports.selectors._time import MAX_RANGE_DAYS, ReportInputError, day_range
from rollmux_web.reports.selectors.cost import (
    BurnDown,
    CostReport,
    burn_down,
    cost_report,
    cost_report_page,
)
from rollmux_web.reports.selectors.cost_figures import (
    CostFigures,
    CostLine,
    CostTotals,
    apportion,
    bill_lines,
)
from rollmux_web.reports.selectors.groups import (
    GROUP_STATES,
    group_list_members,
    group_rows,
    visible_group_ids,
)
from rollmux_web.reports.selectors.outcome import JobOutcome, job_outcome
from rollmux_web.reports.selectors.overview import (
    GroupStatus,
    Overview,
    PoolStatus,
    cluster_overview,
)
from rollmux_web.reports.selectors.slo import (
    JobSlo,
    SloAttainment,
    SloReport,
    slo_report,
    slo_report_json,
    with_groups,
)
from rollmux_web.reports.selectors.slo_paged import SloReportPage, slo_report_page
from rollmux_web.reports.selectors.timeline_queries import (
    group_timeline,
    group_window,
    job_timeline,
    job_window,
)
from rollmux_web.reports.selectors.trace_export import group_trace, job_trace, trace_events
from rollmux_web.reports.timeline import BAR_LIMIT, DEFAULT_WIDTH, LANE_H, Timeline

__all__ = [
    "BAR_LIMIT",
    "DEFAULT_WIDTH",
    "GROUP_STATES",
    "LANE_H",
    "MAX_RANGE_DAYS",
    "BurnDown",
    "CostFigures",
    "CostLine",
    "CostReport",
    "CostTotals",
    "GroupStatus",
    "JobOutcome",
    "JobSlo",
    "Overview",
    "PoolStatus",
    "ReportInputError",
    "SloAttainment",
    "SloReport",
    "SloReportPage",
    "Timeline",
    "apportion",
    "bill_lines",
    "burn_down",
    "cluster_overview",
    "cost_report",
    "cost_report_page",
    "day_range",
    "group_list_members",
    "group_rows",
    "group_timeline",
    "group_trace",
    "group_window",
    "job_outcome",
    "job_timeline",
    "job_trace",
    "job_window",
    "slo_report",
    "slo_report_page",
    "slo_report_json",
    "with_groups",
    "trace_events",
    "visible_group_ids",
]
