"""The cost report as FinOps FOCUS-style files: CSV and Parquet, the same rows and columns.

Both are written from `focus_rows`, so a row, a column name and every
amount are the same in either file. A row's BilledCost is its billed cents: billed per
tenant with a running remainder (`selectors.cost_figures.bill_lines`), so a tenant's rows
add up exactly to its row on the page and in the API, all rows to the total, and a
finished job's rows are the same in every run of the report.

A job's profiling run (issue 13) is billed on rows of its own: ResourceId
`job-<id>/<GPU type>/profile`, ChargeDescription starting "Profiling run:", and
Tags `"stage": "profile"` (a production run's rows: `job-<id>/<GPU type>`, `"stage": "run"`).

Parquet types, for the finance tools that read it (Spark, Trino/Athena, BigQuery,
Snowflake, DuckDB, pandas):
- the period columns are timestamps in microseconds with the UTC time zone;
- BilledCost, EffectiveCost and ListCost are decimal(18, 2), ConsumedQuantity
  decimal(18, 4): exact, as FOCUS defines them and as in the CSV. A float64 would
  turn $0.10 into 0.1000000000000000055 and sums would drift off the invoice's
  cents; every one of those tools reads Parquet DECIMAL as an exact decimal;
- everything else is a string; Tags is the CSV's JSON object text.
"""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from typing import Any

from rollmux_web.reports.selectors.cost import CostReport
from rollmux_web.reports.selectors.cost_figures import CostTotals
from rollmux_web.spreadsheet import csv_safe
from scheduler.collector import gc_paused

PARQUET_MEDIA_TYPE = "application/vnd.apache.parquet"
TIMESTAMP_COLUMNS = frozenset(
    {"BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"}
)
MONEY_COLUMNS = frozenset({"BilledCost", "EffectiveCost", "ListCost"})
QUANTITY_COLUMNS = frozenset({"ConsumedQuantity"})
MONEY_PRECISION, MONEY_SCALE = 18, 2
QUANTITY_PRECISION, QUANTITY_SCALE = 18, 4

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


@gc_paused()
def focus_rows(report: CostReport) -> list[dict[str, str]]:
    """Return the report as FinOps FOCUS-style rows: per job, GPU type and stage (profiling
    run or production run), busy and idle apart."""
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
            "ResourceId": f"job-{ln.job_id}/{ln.gpu_type}" + ("/profile" if ln.is_profile else ""),
            "ResourceName": ln.job_name,
            "ResourceType": f"{ln.gpu_type} GPU",
            "SubAccountId": str(ln.tenant_id),
            "SubAccountName": ln.tenant,
            "ChargeCategory": "Usage",
        }
        # Tags is json.dumps({"charge", "gpu_type", "groups", "job_id", "stage"}, sort_keys=True):
        # "charge" sorts first, so the rest is dumped once per line and the charge put before
        tags_rest = json.dumps(
            {
                "gpu_type": ln.gpu_type,
                "groups": ln.group_ids,
                "job_id": ln.job_id,
                "stage": ln.stage,
            },
            sort_keys=True,
        )[1:]
        what = "Profiling run: " if ln.is_profile else ""
        for charge, qty, cost, desc in (
            ("busy", ln.busy_gpu_hours, ln.busy_cost, f"{what}GPU time running the job's phases"),
            (
                "idle",
                ln.idle_gpu_hours,
                ln.idle_cost,
                f"{what}Idle (bubble) share of allocated nodes",
            ),
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


def page_count(count: int, page_size: int) -> int:
    """Return how many pages of `page_size` jobs `count` jobs make (one when none)."""
    return max(1, -(-count // page_size))


def cost_report_json(
    report: CostReport, *, page: int = 1, page_size: int | None = None
) -> dict[str, Any]:
    """Return the report as JSON-ready data (money as strings with two decimals); with
    `page_size`, `by_job` and `lines` hold that page of jobs and their lines only (the
    totals, tenants, GPU types and stages stay the whole range's; a report of one page,
    `selectors.cost_report_page`, holds them already)."""
    jobs = report.by_job
    lines = report.lines
    paging: dict[str, Any] = {}
    if page_size is not None:
        count = report.jobs_count
        if count is None:  # (the whole report: its page here)
            count = len(report.by_job)
            jobs = jobs[(page - 1) * page_size : page * page_size]
            on_page = {j.job_id for j in jobs}
            lines = [ln for ln in lines if ln.job_id in on_page]
        paging = {
            "jobs_count": count,
            "page": page,
            "pages": page_count(count, page_size),
            "page_size": page_size,
        }

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
            "profile_cost": _money(t.profile_cost),
        }

    return {
        "start": report.start.isoformat(),
        "end": report.end.isoformat(),
        "currency": "USD",
        "total": tot(report.total),
        "by_tenant": [tot(t) for t in report.by_tenant],
        "by_gpu_type": [tot(t) for t in report.by_gpu_type],
        "by_stage": [tot(t) for t in report.by_stage],
        "by_job": [
            {
                "tenant": j.tenant,
                "job_id": j.job_id,
                "job": j.job_name,
                "profile_gpu_hours": f"{j.profile.gpu_hours:.4f}",
                "profile_cost": _money(j.profile.cost),
                "run_gpu_hours": f"{j.run.gpu_hours:.4f}",
                "run_cost": _money(j.run.cost),
                "gpu_hours": f"{j.gpu_hours:.4f}",
                "cost": _money(j.cost),
            }
            for j in jobs
        ],
        "lines": [
            {
                "tenant": ln.tenant,
                "job_id": ln.job_id,
                "job": ln.job_name,
                "gpu_type": ln.gpu_type,
                "stage": ln.stage,
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
            for ln in lines
        ],
        **paging,
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


def focus_filename(report: CostReport, extension: str) -> str:
    return f"rollmux-cost-{report.start}-{report.end}.{extension}"


def focus_csv(report: CostReport) -> str:
    """Return the FOCUS rows as CSV text (header first)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FOCUS_COLUMNS)
    writer.writeheader()
    numbers = TIMESTAMP_COLUMNS | MONEY_COLUMNS | QUANTITY_COLUMNS
    for row in focus_rows(report):
        # job and tenant names are user text: no cell may run as a spreadsheet formula
        writer.writerow(
            {
                k: v if k in numbers or not isinstance(v, str) else csv_safe(v)
                for k, v in row.items()
            }
        )
    return out.getvalue()


def focus_parquet_schema() -> Any:
    """Return the Arrow schema of the FOCUS Parquet file (the CSV's columns, in order)."""
    import pyarrow as pa

    def column_type(name: str) -> Any:
        if name in TIMESTAMP_COLUMNS:
            return pa.timestamp("us", tz="UTC")
        if name in MONEY_COLUMNS:
            return pa.decimal128(MONEY_PRECISION, MONEY_SCALE)
        if name in QUANTITY_COLUMNS:
            return pa.decimal128(QUANTITY_PRECISION, QUANTITY_SCALE)
        return pa.string()

    return pa.schema([pa.field(name, column_type(name), nullable=False) for name in FOCUS_COLUMNS])


def focus_parquet(report: CostReport) -> bytes:
    """Return the FOCUS rows as a Parquet file (one row group per 64k rows, Snappy)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = focus_rows(report)
    schema = focus_parquet_schema()
    # each column from the CSV's own text, converted by Arrow: exact and strict (a value
    # with more decimals than the column's scale, or not a time, raises: never rounded)
    arrays = [
        pa.array([row[f.name] for row in rows], type=pa.string()).cast(f.type) for f in schema
    ]
    table = pa.Table.from_arrays(arrays, schema=schema).replace_schema_metadata(
        {
            "rollmux.report": "cost",
            "rollmux.start": report.start.isoformat(),
            "rollmux.end": report.end.isoformat(),
            "rollmux.currency": "USD",
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy", row_group_size=65536)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]
