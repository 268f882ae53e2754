"""Draw report charts as SVG strings from the geometry the selectors computed.

Everything is escaped here; templates insert the result as safe markup. Each chart
carries a <title>/<desc> and an aria-label so it reads without JavaScript; elements
with `data-tip` get a hover tooltip from static/js/app.js.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from html import escape

from django.utils.safestring import SafeString, mark_safe

from rollmux_web.reports.timeline import LANE_H, MAX_WIDTH, MIN_WIDTH, PhaseBar, Timeline


def _a(value: object) -> str:
    return escape(str(value), quote=True)


# hatches: a bubble (allocated, idle), a failed or lost phase, a control-plane delay
DEFS = (
    "<defs>"
    '<pattern id="bubble-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff4f2"/>'
    '<line x1="0" y1="0" x2="0" y2="6" stroke="#f2b8ae" stroke-width="2"/></pattern>'
    '<pattern id="failed-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(-45)"><line x1="0" y1="0" x2="0" y2="6" stroke="#b42318" '
    'stroke-width="2.5"/></pattern>'
    '<pattern id="delay-hatch" width="8" height="8" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="8" height="8" fill="#fef0c7"/>'
    '<line x1="0" y1="0" x2="0" y2="8" stroke="#dc6803" stroke-width="3"/></pattern>'
    "</defs>"
)
LANE_FILL = {"rollout": "#f7f9ff", "train": "#f9f7fb"}
# a profiling run's phase: a dashed violet outline (the job's own colours inside)
PROFILE_EDGE = ' stroke="#6941c6" stroke-width="2" stroke-dasharray="4 2"'


def _bar(bar: PhaseBar) -> list[str]:
    """Return one phase's element(s): the bar, a hatch over a failed or lost one, and its
    start marker (warm: a green wedge, cold: a red one; both outlined so they show on
    light and dark shades alike)."""
    ids = "" if bar.job_id is None else f'data-phase="{bar.phase_id}" data-job="{bar.job_id}" '
    state = (" failed" if bar.failed else "") + (" profile" if bar.profile else "")
    attrs = (
        f'class="bar {bar.kind}{" running" if bar.running else ""}{state}" {ids}'
        f'data-tip="{_a(bar.tip)}"'
    )
    edge = (
        ' stroke="#b42318" stroke-width="1.5"'
        if bar.failed
        else PROFILE_EDGE
        if bar.profile
        else ""
    )
    out = []
    if len(bar.rects) == 1:
        r = bar.rects[0]
        out.append(
            f'<rect {attrs} x="{r.x}" y="{r.y}" width="{r.w}" height="{LANE_H}" '
            f'fill="{bar.fill}"{edge}/>'
        )
    else:
        out.append(f'<g {attrs} fill="{bar.fill}"{edge}>')
        out.extend(
            f'<rect x="{r.x}" y="{r.y}" width="{r.w}" height="{LANE_H}"/>' for r in bar.rects
        )
        out.append("</g>")
    if bar.failed:
        out.extend(
            f'<rect class="failed-hatch" x="{r.x}" y="{r.y}" width="{r.w}" height="{LANE_H}" '
            'fill="url(#failed-hatch)" pointer-events="none" aria-hidden="true"/>'
            for r in bar.rects
        )
    if bar.marker:  # set only on a bar wide enough for the wedge (timeline.MARKER_MIN_W)
        colour = "#12b76a" if bar.marker == "warm" else "#c0362c"
        for r in bar.rects:
            out.append(
                f'<path class="{bar.marker}" '
                f'd="M{r.x} {r.y}h9l-9 11z" fill="{colour}" stroke="#fff" stroke-width="1" '
                'pointer-events="none" aria-hidden="true"/>'
            )
    return out


def timeline_svg(tl: Timeline, *, fitted: bool = False) -> SafeString:
    """Return the Gantt chart: lanes per node under pool titles, bubbles, control-plane
    delays, one element per phase record.

    It is scaled to its card's width (static/css/reports.css); `fitted`: it was drawn at
    the width the page measured for it, so it is scaled 1:1 (static/js/timeline.js asks
    for it again at that width otherwise, within data-min-width..data-max-width)."""
    out: list[str] = []
    desc = (
        f"{tl.phase_count} phases from {tl.t0:%Y-%m-%d %H:%M:%S} to {tl.t1:%Y-%m-%d %H:%M:%S} UTC"
        f" on {len(tl.lanes)} nodes"
    )
    out.append(
        f'<svg class="timeline{" fitted" if fitted else ""}" xmlns="http://www.w3.org/2000/svg" '
        f'role="img" width="{tl.width}" height="{tl.height}" '
        f'viewBox="0 0 {tl.width} {tl.height}" preserveAspectRatio="xMinYMin meet" '
        f'data-min-width="{MIN_WIDTH}" data-max-width="{MAX_WIDTH}" '
        f'aria-label="{_a(tl.title)} timeline: {_a(desc)}" '
        f'data-t0="{tl.t0.timestamp():.3f}" data-t1="{tl.t1.timestamp():.3f}" '
        f'data-left="{tl.plot_left}" data-right="{tl.plot_right}">'
        f"<title>{_a(tl.title)} timeline</title><desc>{_a(desc)}</desc>{DEFS}"
    )
    bottom = tl.height - 22
    top = tl.lanes[0].y if tl.lanes else 20
    for tick in tl.ticks:
        out.append(
            f'<line class="grid" x1="{tick.x}" x2="{tick.x}" y1="{top}"'
            f' y2="{bottom}" stroke="#eef0f3"/>'
            f'<text x="{tick.x}" y="{bottom + 14}" font-size="11" text-anchor="middle" '
            f'fill="#667085">{_a(tick.label)}</text>'
        )
    for head in tl.pool_heads:
        out.append(
            f'<text class="pool-head" x="6" y="{head.y + 12}" font-size="11" font-weight="600" '
            f'fill="#475467">{_a(head.title)}</text>'
        )
    for lane in tl.lanes:
        out.append(
            f'<g class="lane" data-node="{_a(lane.node)}" data-pool="{_a(lane.pool)}">'
            f'<rect x="{tl.plot_left}" y="{lane.y}" width="{tl.plot_right - tl.plot_left}" '
            f'height="{LANE_H + 4}" fill="{LANE_FILL.get(lane.pool, "#f9f7fb")}"/>'
            f'<text x="{tl.plot_left - 6}" y="{lane.y + LANE_H / 2 + 6}" font-size="12" '
            f'text-anchor="end" fill="#1d2330">{_a(lane.node)}</text></g>'
        )
    for b in tl.bubbles:
        out.append(
            f'<rect class="bubble" x="{b.x}" y="{b.y}" width="{b.w}" height="{LANE_H}" rx="3" '
            f'fill="url(#bubble-hatch)" data-tip="{_a(b.tip)}"/>'
        )
    for d in tl.delays:
        out.append(
            f'<rect class="delay" x="{d.x}" y="{d.y}" width="{d.w}" height="{LANE_H}" '
            f'fill="url(#delay-hatch)" stroke="#dc6803" data-tip="{_a(d.tip)}"/>'
        )
    for agg in tl.aggregates:
        out.append(
            f'<rect class="agg {agg.kind}" x="{agg.x}" y="{agg.y}" width="{agg.w}" '
            f'height="{LANE_H}" fill="{agg.fill}" fill-opacity="{agg.opacity}" '
            f'data-tip="{_a(agg.tip)}"/>'
        )
    for bar in tl.bars:
        out.extend(_bar(bar))
    if tl.empty_message:
        out.append(
            f'<text x="{(tl.plot_left + tl.plot_right) / 2}" y="{tl.height / 2}" font-size="14" '
            f'text-anchor="middle" fill="#667085">{_a(tl.empty_message)}</text>'
        )
    out.append("</svg>")
    return mark_safe("".join(out))  # noqa: S308 - every value above is escaped


def bar_chart_svg(
    title: str,
    items: Sequence[tuple[str, float, str]],
    *,
    unit: str = "",
    width: int = 520,
    fmt: str = "{:,.2f}",
) -> SafeString:
    """Return a horizontal bar chart of (label, value, colour) items."""
    row_h = 26
    left = 150
    height = 30 + row_h * len(items) + 10
    peak = max((v for _, v, _ in items), default=0.0) or 1.0
    texts = [fmt.format(value) + (f" {unit}" if unit else "") for _, value, _ in items]
    # room right of the longest bar for its value: a fleet's quarter ("5,644,606.50 USD")
    # would run past the chart's edge in a fixed 90 px; 0.64 em a character is DejaVu
    # Sans's digit (its comma, period and space are narrower), 12 px text, 6 px gap
    room = max([90, *(6 + math.ceil(len(t) * 12 * 0.64) + 4 for t in texts)])
    plot_w = max(60, width - left - room)
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" aria-label="{_a(title)}" '
        ">"
        f"<title>{_a(title)}</title>"
        f'<text x="0" y="16" font-size="13" font-weight="600">{_a(title)}</text>'
    ]
    for i, ((label, value, colour), text) in enumerate(zip(items, texts, strict=True)):
        y = 28 + i * row_h
        w = max(0.0, value) / peak * plot_w
        out.append(
            f'<text x="{left - 6}" y="{y + 15}" font-size="12" text-anchor="end">{_a(label)}</text>'
            f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{row_h - 8}" fill="{colour}" '
            f'data-tip="{_a(label)}: {_a(text)}"/>'
            f'<text x="{left + w + 6:.1f}" y="{y + 14}" font-size="12" fill="#344054">'
            f"{_a(text)}</text>"
        )
    out.append("</svg>")
    return mark_safe("".join(out))  # noqa: S308


def _usd(v: Decimal | float) -> str:
    return f"${v:,.2f}"


def burn_down_svg(
    tenant: str,
    series: Sequence[tuple[date, Decimal]],
    budget: Decimal | None,
    *,
    days_in_month: int,
    width: int = 960,
    height: int = 200,
) -> SafeString:
    """Return the month's cumulative spend line against the budget, with a date axis.

    Drawn `width` units wide and scaled to the width of its container (width="100%").
    The x axis is the month: a tick per week and the first and last days labelled; each
    point is the spend at the end of its day. When the spend is under a tenth of the
    budget the y axis is scaled to the spend (else the line would sit on $0) and the
    budget is written above the chart instead of drawn.
    """
    left, right, top, bottom = 70, 24, 22, 30
    plot_w = width - left - right
    plot_h = height - top - bottom
    days = max(days_in_month, 1)
    spent = max([float(v) for _, v in series] + [0.0])
    budget_f = float(budget) if budget is not None else None
    off_scale = budget_f is not None and budget_f > 0 and spent < budget_f / 10
    if off_scale or budget_f is None:
        peak = max(spent * 1.15, 1.0)
    else:
        peak = max(spent, budget_f or 0.0, 1.0)
    label = f"Budget burn-down for {tenant}"
    month = series[0][0].replace(day=1) if series else None
    last = series[-1] if series else None
    desc = (
        (f"{month:%B %Y}: " if month else "")
        + (f"{_usd(last[1])} spent by {last[0]:%Y-%m-%d}" if last else "nothing spent")
        + (f" of a {_usd(budget)} budget" if budget is not None else ", no budget set")
    )

    def x_of(day_end: int) -> float:
        """x of the end of the month's `day_end`-th day (0: the month's start)."""
        return left + day_end / days * plot_w

    def y_of(v: float) -> float:
        return top + plot_h - v / peak * plot_h

    base = top + plot_h
    out = [
        f'<svg class="chart burn-down" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'width="100%" viewBox="0 0 {width} {height}" aria-label="{_a(label)}: {_a(desc)}" '
        ">"
        f"<title>{_a(label)}</title><desc>{_a(desc)}</desc>"
        f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#98a2b3"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="#98a2b3"/>'
        f'<text x="{left - 6}" y="{top + 4}" font-size="12" text-anchor="end" fill="#344054">'
        f"${peak:,.0f}</text>"
        f'<text x="{left - 6}" y="{base + 4}" font-size="12" text-anchor="end" '
        'fill="#344054">$0</text>'
    ]
    # the date axis: a tick at the end of every 7th day and the last day, labelled
    if month is not None:
        weekly = {n for n in range(1, days + 1) if n % 7 == 1}
        ticks = [n for n in sorted(weekly | {days}) if n == days or days - n >= 3]
        for tick in ticks:
            x = x_of(tick)
            anchor = "end" if tick == days else "middle"
            out.append(
                f'<line class="tick" x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" '
                f'stroke="#98a2b3"/><text class="date" x="{x:.1f}" y="{base + 18}" font-size="12" '
                f'text-anchor="{anchor}" fill="#344054">'
                f"{_a(f'{month:%b} {tick}')}</text>"
            )
    if budget is not None and not off_scale:
        by = y_of(float(budget))
        out.append(
            f'<line class="budget" x1="{left}" y1="{by:.1f}" x2="{left + plot_w}" y2="{by:.1f}" '
            f'stroke="#c0362c" stroke-dasharray="4 3" data-tip="budget {_a(_usd(budget))}"/>'
            f'<text x="{left + plot_w}" y="{by - 4:.1f}" font-size="12" text-anchor="end" '
            f'fill="#c0362c">budget {_a(_usd(budget))}</text>'
        )
    elif budget is not None:
        out.append(
            f'<text class="budget" x="{left + plot_w}" y="{top - 8}" font-size="12" '
            f'text-anchor="end" fill="#c0362c">budget {_a(_usd(budget))} '
            "(far above this scale)</text>"
        )
    if series:
        pts = " ".join(f"{x_of(i + 1):.1f},{y_of(float(v)):.1f}" for i, (_, v) in enumerate(series))
        out.append(
            f'<polyline points="{left},{base} {pts}" fill="none" stroke="#2f5bea" '
            f'stroke-width="2"/>'
        )
        for i, (d, v) in enumerate(series):
            out.append(
                f'<circle cx="{x_of(i + 1):.1f}" cy="{y_of(float(v)):.1f}" r="3" fill="#2f5bea" '
                f'data-tip="{d:%Y-%m-%d}: {_a(_usd(v))} spent"/>'
            )
    out.append("</svg>")
    return mark_safe("".join(out))  # noqa: S308 - every value above is escaped
