"""PostgreSQL helpers of the report selectors: epoch columns, node lists (id arrays:
rollmux_web.id_sql).

Parsing tens of thousands of timestamps into aware datetimes dominates a large report,
so on PostgreSQL the database hands out epoch time (rollmux_web.epoch_sql). Other
databases fall back to datetimes, converted by `_time.us` / `epoch`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

from django.db import connection
from django.db.models import BigIntegerField, Func, QuerySet, TextField
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Cast

from rollmux_web.epoch_sql import epoch_s, epoch_us
from rollmux_web.reports.selectors._time import EPOCH_DT, exact_seconds

NODES_TXT = Cast("node_names", TextField())  # parsed once per distinct list, not per row


def json_key_txt(key: str, column: str = "metrics") -> Cast:
    """A JSON column's key as its JSON text (None when absent): `json.loads` of it is the
    value the JSONField would give, without the field's converter on every row (which
    keeps `cursor_rows` / `cursor_iter` on the cursor's path)."""
    return Cast(KeyTransform(key, column), TextField())


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


def cursor_rows(qs: QuerySet[Any, Any]) -> list[tuple[Any, ...]]:
    """Return a `values_list` queryset's rows as PostgreSQL's cursor gives them: the same
    tuples for columns whose fields convert nothing on the way out (numbers, text,
    booleans, datetimes, and `us_fields`' integers), without Django's per-row iterator
    (~7 µs a row: a fleet's month of the SLO report is ~14,800 jobs). Elsewhere, or with a
    column a field converts, the queryset's own rows."""
    compiled = _plain_sql(qs)
    if compiled is None:
        return list(qs)
    with connection.cursor() as cur:
        cur.execute(*compiled)
        return cur.fetchall()


def cursor_iter(qs: QuerySet[Any, Any], chunk_size: int = 5000) -> Iterator[tuple[Any, ...]]:
    """`cursor_rows`, streamed `chunk_size` rows at a time through a server-side cursor
    (as `qs.iterator(chunk_size)`, without Django's per-row iterator: the cost engine's
    phase spans are ~20,000 for a day of a fleet, a month's rollups ~56,000)."""
    compiled = _plain_sql(qs)
    if compiled is None:
        yield from qs.iterator(chunk_size=chunk_size)
        return
    # (a pooler in transaction mode cannot hold a server-side cursor: Django's setting)
    server_side = not connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS")
    with connection.chunked_cursor() if server_side else connection.cursor() as cur:
        cur.execute(*compiled)
        while rows := cur.fetchmany(chunk_size):
            yield from rows


def _plain_sql(qs: QuerySet[Any, Any]) -> tuple[str, Any] | None:
    """The queryset's SQL and parameters when PostgreSQL's rows need no conversion, else
    None (another database, or a column a field converts)."""
    compiler = qs.query.get_compiler(qs.db)
    if connection.vendor != "postgresql" or _converts(compiler):
        return None
    return compiler.as_sql()


def _converts(compiler: Any) -> bool:
    """Whether a column of the compiled query has a converter that changes a value psycopg
    returns (a field's `from_db_value`, a backend's); the integer cast of an expression
    (`us_fields`) does not: psycopg returns bigint as int."""
    compiler.setup_query()
    found = compiler.get_converters([selected[0] for selected in compiler.select])
    return any(
        not isinstance(getattr(expr, "output_field", None), BigIntegerField)
        or getattr(expr.output_field, "from_db_value", None) is not None
        for _convs, expr in found.values()
    )


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
