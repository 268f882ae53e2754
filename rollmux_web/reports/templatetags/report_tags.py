"""Formatting filters for report pages: percentages, money and durations."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import template

register = template.Library()


@register.filter
def pct(value: Any, digits: int = 1) -> str:
    """Format a fraction as a percentage; None shows a dash."""
    if value is None or value == "":
        return "—"
    return f"{float(value) * 100:.{int(digits)}f}%"


@register.filter
def money(value: Any) -> str:
    """Format a Decimal as dollars with cents (the same digits as the CSV and the API)."""
    if value is None:
        return "—"
    v = Decimal(value)
    sign = "-" if v < 0 else ""
    return f"{sign}${abs(v):,.2f}"


@register.filter
def hours(value: Any) -> str:
    if value is None:
        return "—"
    return f"{Decimal(value):,.2f}"


@register.filter
def seconds(value: Any) -> str:
    if value is None:
        return "—"
    s = float(value)
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"
