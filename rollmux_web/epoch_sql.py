"""Timestamps and intervals as epoch numbers computed by PostgreSQL.

Parsing tens of thousands of timestamps into aware datetimes costs more than the query
that reads them (a report's phase records, a rollup batch, fair share's window), so on
PostgreSQL the database hands them out as numbers: integer microseconds (exact, for
money and spans) or float8 seconds (the exact seconds rounded once, as
`datetime.timestamp()` and `timedelta.total_seconds()` round them). One home for every
app (reports, workflow, jobs); callers fall back to datetimes on other databases.
"""

from __future__ import annotations

from typing import Any

from django.db.models import BigIntegerField, F, FloatField, Func

MICROS = "(EXTRACT(EPOCH FROM %(expressions)s) * 1000000)::bigint"
SECONDS = "EXTRACT(EPOCH FROM %(expressions)s)::float8"


def epoch_us(expression: Any) -> Func:
    """Return `expression` (a column name, or a timestamp or interval expression) as
    integer epoch microseconds."""
    inner = F(expression) if isinstance(expression, str) else expression
    return Func(inner, template=MICROS, output_field=BigIntegerField())


def epoch_s(expression: Any) -> Func:
    """Return `expression` (a column name, or a timestamp or interval expression) as
    float8 epoch seconds."""
    inner = F(expression) if isinstance(expression, str) else expression
    return Func(inner, template=SECONDS, output_field=FloatField())
