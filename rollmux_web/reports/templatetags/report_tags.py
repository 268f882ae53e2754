"""Formatting filters for report pages: percentages, money and durations."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache
from typing import Any

from django import template
from django.urls import get_script_prefix, get_urlconf, reverse

from rollmux_web.formatting import duration, duration_in, duration_unit, human_bytes

register = template.Library()


@register.filter(name="bytes")
def bytes_(value: Any) -> str:
    """Format a byte count in decimal units ("1.2 GB"); None shows a dash."""
    if value is None or value == "":
        return "—"
    return human_bytes(int(value))


@register.filter
def pct(value: Any, digits: int = 1) -> str:
    """Format a fraction as a percentage; None shows a dash."""
    if value is None or value == "":
        return "—"
    return f"{float(value) * 100:.{int(digits)}f}%"


CENT = Decimal("0.01")


@register.filter
def money(value: Any) -> str:
    """Format an amount as dollars with thousands separators and cents: "$12,000.00".

    Report figures arrive already in cents (the same digits as the CSV and the API); any
    other amount is rounded half-up to the cent here, once.
    """
    if value is None or value == "":
        return "—"
    v = Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP)
    sign = "-" if v < 0 else ""
    return f"{sign}${abs(v):,.2f}"


@register.filter
def saving(value: Any) -> str:
    """Word what RollMux saves: "saves $6.46", "costs $6.46 more" (negative), "costs the same"."""
    if value is None or value == "":
        return "—"
    v = Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP)
    if v > 0:
        return f"saves {money(v)}"
    if v < 0:
        return f"costs {money(-v)} more"
    return "costs the same"


@register.filter
def hours(value: Any, places: int = 2) -> str:
    """GPU-hours to two decimals, or `places` (`|hours:4`: the billed quantity, as in the
    CSV, so a row of sums of billed lines adds up as shown)."""
    if value is None:
        return "—"
    return f"{Decimal(value):,.{int(places)}f}"


@register.filter
def seconds(value: Any, unit: str = "") -> str:
    """Format seconds as a duration (`rollmux_web.formatting`), in `unit` when given (a
    table column's one unit: `{{ v|seconds:unit }}`); None shows a dash."""
    if value is None or value == "":
        return "—"
    return duration_in(float(value), unit) if unit else duration(float(value))


@register.simple_tag
def column_unit(rows: Any, *attrs: str) -> str:
    """Return the one duration unit of a table column: that of its longest value.

    `{% column_unit report.jobs "mean_iteration_s" "solo_iteration_s" as unit %}`, then
    `{{ j.mean_iteration_s|seconds:unit }}` in every cell of those columns.
    """
    values = [
        abs(float(v))
        for row in rows
        for a in attrs
        if (v := (row.get(a) if isinstance(row, dict) else getattr(row, a, None))) is not None
    ]
    return duration_unit(max(values, default=0.0))[0]


# an id no URL pattern's own text contains: where a reversed URL takes the id
_ID_MARK = 918273645546372819


@lru_cache(maxsize=64)
def _url_around_id(name: str, prefix: str, urlconf: Any) -> tuple[str, str]:
    """The URL named `name` (one integer argument) before and after its id."""
    head, _, tail = reverse(name, args=[_ID_MARK]).partition(str(_ID_MARK))
    return head, tail


@register.filter
def url_of_id(pk: Any, name: str) -> str:
    """Return `{% url name pk %}` for an integer id, reversed once per URL name (and script
    prefix): the SLO report's page links 600 rows' jobs and groups, ~70 us a `url` tag."""
    head, tail = _url_around_id(name, get_script_prefix(), get_urlconf())
    return f"{head}{int(pk)}{tail}"
