"""The cost report as FinOps FOCUS-style files: CSV and Parquet, the same rows and columns.

Both are written from `selectors.focus_rows`, so a row, a column name and every
amount are the same in either file. A row's BilledCost is its billed cents: the
report total's busy cents and idle cents handed out to the rows by largest remainder
(`selectors.bill_lines`), so the rows add up exactly to the total on the page and in
the API; the per-tenant and per-GPU-type rows there are exact sums rounded once, so the
rows of one tenant or GPU type can add up to a cent or two off those.

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
from typing import Any

from rollmux_web.reports.selectors import FOCUS_COLUMNS, CostReport, focus_rows
from rollmux_web.spreadsheet import csv_safe

PARQUET_MEDIA_TYPE = "application/vnd.apache.parquet"
TIMESTAMP_COLUMNS = frozenset(
    {"BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"}
)
MONEY_COLUMNS = frozenset({"BilledCost", "EffectiveCost", "ListCost"})
QUANTITY_COLUMNS = frozenset({"ConsumedQuantity"})
MONEY_PRECISION, MONEY_SCALE = 18, 2
QUANTITY_PRECISION, QUANTITY_SCALE = 18, 4


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
