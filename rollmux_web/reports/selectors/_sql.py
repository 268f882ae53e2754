"""PostgreSQL helpers of the report selectors: epoch columns, node lists (id arrays:
rollmux_web.id_sql).

Parsing tens of thousands of timestamps into aware datetimes dominates a large report,
so on PostgreSQL the database hands out epoch time (rollmux_web.epoch_sql). Other
databases fall back to datetimes, converted by `_time.us` / `epoch`.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

from django.db import connection
from django.db.models import Func, TextField
from django.db.models.functions import Cast

from rollmux_web.epoch_sql import epoch_s, epoch_us
from rollmux_web.reports.selectors._time import EPOCH_DT, exact_seconds

NODES_TXT = Cast("node_names", TextField())  # parsed once per distinct list, not per row


def epoch_fields(*, exact: bool) -> tuple[dict[str, Any], tuple[str, str]]:
    """Return annotations giving started_at/finished_at as epoch numbers, and their names.

    Integer microseconds (exact, for money) or float8 seconds (for chart geometry).
    """
    if connection.vendor != "postgresql":
        return {}, ("started_at", "finished_at")

    expr = epoch_us if exact else epoch_s
    return (
        {"s_ep": expr("started_at"), "f_ep": expr("finished_at")},
        ("s_ep", "f_ep"),
    )


def us_fields(**columns: str) -> tuple[dict[str, Func], bool]:
    """Return annotations giving datetime columns as integer epoch microseconds, by alias.

    PostgreSQL only (as `epoch_fields`), and column names qualified by Django, so
    they can be used on joined querysets. Elsewhere ({}, False): callers read the
    datetimes and convert them with `_time.us`.
    """
    if connection.vendor != "postgresql":
        return {}, False
    return {alias: epoch_us(column) for alias, column in columns.items()}, True


def epoch(value: Any, *, exact: bool) -> Any:
    """Return epoch seconds (Decimal if exact, else float) from a datetime or a DB number."""
    if value is None or isinstance(value, Decimal | float):
        return value if exact or not isinstance(value, Decimal) else float(value)
    if isinstance(value, datetime):
        return exact_seconds(value - EPOCH_DT) if exact else value.timestamp()
    return Decimal(value) if exact else float(value)


@lru_cache(maxsize=4096)
def nodes(raw: str | None) -> tuple[str, ...]:
    """Parse a phase's node list (JSON text); a group has few distinct lists."""
    if not raw:
        return ()
    value = json.loads(raw)
    if isinstance(value, str):  # a JSON string holding the list (double-encoded)
        value = json.loads(value)
    return tuple(value)
