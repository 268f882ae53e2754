"""Formatting filters for report pages: percentages, money and durations."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache
from typing import Any

from django import template
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils.formats import localize
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe

from rollmux_web.formatting import (
    duration,
    duration_in,
    duration_unit,
    human_bytes,
    iteration_number,
)

register = template.Library()


@register.filter(name="bytes")
def bytes_(value: Any) -> str:
    """Format a byte count in decimal units ("1.2 GB"); None shows a dash."""
    if value is None or value == "":
        return "—"
    return human_bytes(int(value))


@register.filter(name="iteration_number")
def iteration_number_(value: Any) -> Any:
    """Show a stored 0-based iteration index as a person reads it, counted from 1
    (`rollmux_web.formatting.iteration_number`); "" stays "" (nothing to number)."""
    return "" if value is None or value == "" else iteration_number(int(value))


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
def estimate(value: Any) -> str:
    """Format an estimated rate in dollars (a cost per iteration, not a billed figure): as
    `money` from a cent up, two significant digits below it ("$0.0017"), so a real job of
    sub-second phases does not read "$0.00" for a cost that is not nothing."""
    if value is None or value == "":
        return "—"
    v = Decimal(str(value))
    if v == 0 or abs(v) >= CENT:
        return money(v)
    sign = "-" if v < 0 else ""
    return f"{sign}${float(abs(v)):.2g}"


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


# The cost page's per-job and per-line rows, rendered here rather than by template loops
# (a page of 200 jobs has ~600 rows of ~10 cells: Django's variable lookups and filters
# took ~80 ms of a quarter's page). The same HTML as the loops they replace, each value
# localized and escaped as the template engine does (tests/reports/test_cost_rows.py).
_NO_PROFILE = '<td class="num muted" title="no profiling run in this range">—</td>'
_LOSS = (
    ' loss" title="negative: this line cost more than the same phases on dedicated pools '
    "(its share of its group's idle time)"
)


def _v(value: Any) -> str:
    """A value as `{{ value }}` renders it (localized, escaped)."""
    return str(conditional_escape(localize(value)))


def _e(text: str) -> str:
    """A filter's text as `{{ x|filter }}` renders it (escaped)."""
    return str(conditional_escape(text))


@register.simple_tag
def cost_job_rows(jobs: Any) -> str:
    """Return the cost page's per-job rows (the body of its `Per job` table)."""
    out = []
    for j in jobs:
        jid = _v(j.job_id)
        profile = (
            f'<td class="num">{_e(hours(j.profile.gpu_hours, 4))}</td>'
            f'<td class="num profile-cost">{_e(money(j.profile.cost))}</td>'
            if j.profiled
            else _NO_PROFILE + _NO_PROFILE
        )
        out.append(
            f'\n          <tr data-job="{jid}">\n'
            f"            <td>{_v(j.tenant)}</td><td><a "
            f'href="{_e(url_of_id(j.job_id, "jobs:detail"))}">{_v(j.job_name)}</a> '
            f'<span class="muted job-id">#{jid}</span></td>\n'
            f"            {profile}\n"
            f'            <td class="num">{_e(hours(j.run.gpu_hours, 4))}</td>'
            f'<td class="num run-cost">{_e(money(j.run.cost))}</td>\n'
            f'            <td class="num">{_e(hours(j.gpu_hours, 4))}</td>'
            f'<td class="num job-total">{_e(money(j.cost))}</td>\n'
            "          </tr>\n        "
        )
    return mark_safe("".join(out))  # noqa: S308 (every value escaped above)


def _groups(ids: list[int]) -> str:
    if len(ids) == 1:
        return f'<a href="{_e(url_of_id(ids[0], "groups:timeline"))}">group {_v(ids[0])}</a>'
    if ids:
        return "groups " + ", ".join(
            f'<a href="{_e(url_of_id(g, "groups:timeline"))}" aria-label="group {_v(g)}">'
            f"{_v(g)}</a>"
            for g in ids
        )
    return "—"


@register.simple_tag
def cost_line_rows(lines: Any) -> str:
    """Return the cost page's billing-line rows (the body of its `Per job, stage and GPU
    type` table)."""
    out = []
    for ln in lines:
        jid = _v(ln.job_id)
        label = _v(ln.stage_label)
        stage = f'<span class="badge profiling">{label}</span>' if ln.is_profile else label
        saving = ln.saving_vs_solo
        out.append(
            f'\n          <tr data-job="{jid}" data-stage="{_v(ln.stage)}">\n'
            f"            <td>{_v(ln.tenant)}</td><td><a "
            f'href="{_e(url_of_id(ln.job_id, "reports:job-timeline"))}">{_v(ln.job_name)}</a> '
            f'<span class="muted job-id">#{jid}</span></td><td class="stage">{stage}</td>'
            f"<td>{_v(ln.gpu_type)}</td>\n"
            f'            <td class="groups">{_groups(ln.group_ids)}</td>\n'
            f'            <td class="num">{_e(hours(ln.gpu_hours))}</td>'
            f'<td class="num">{_e(money(ln.busy_cost))}</td>'
            f'<td class="num">{_e(money(ln.idle_cost))}</td>\n'
            f'            <td class="num">{_e(money(ln.cost))}</td>'
            f'<td class="num">{_e(money(ln.solo_disagg_cost))}</td>'
            f'<td class="num">{_e(money(ln.colocated_cost))}</td>'
            f'<td class="num{_LOSS if saving < 0 else ""}">{_e(money(saving))}</td>\n'
            "          </tr>\n        "
        )
    return mark_safe("".join(out))  # noqa: S308 (every value escaped above)
