"""The reward curve of a job's page: geometry from plain points (pure), then an SVG string.

The selector (`jobs.selectors.training_curve`) reads the points; `curve_geometry` places
them (axes, ticks, the std band, where a new attempt began) and `curve_svg` draws it, as
the Gantt's timeline/svg pair does. The chart says what it shows in its <title>/<desc>
and its axis labels, so it reads without JavaScript; `data-tip` gives hover tooltips.
Points are placed by their stored 0-based iteration; every label, tooltip and word counts
iterations from 1 (`formatting.iteration_number`), as the Gantt and the training table do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import NamedTuple

from django.utils.safestring import SafeString, mark_safe

from rollmux_web.formatting import iteration_number

WIDTH, HEIGHT = 720, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 40
LINE = "#2f5bea"
BAND = "#dbe4ff"
DOTS_UP_TO = 120  # above this many points the line alone (dots would merge)


class CurvePoint(NamedTuple):
    """One point: an iteration (0-based; the first of a run when averaged), its mean reward,
    its reward std (None: not reported), the attempt that ran it, iterations averaged."""

    iteration: int
    reward_mean: float
    reward_std: float | None
    attempt: int
    iterations: int = 1


@dataclass(frozen=True)
class Tick:
    pos: float  # x or y in SVG units
    label: str


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    tip: str


@dataclass(frozen=True)
class CurveGeometry:
    """Everything `curve_svg` draws, in SVG units."""

    line: str  # the polyline's points
    band: str  # the std band's polygon points ("" when no std was reported)
    dots: tuple[Dot, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    attempts: tuple[Tick, ...]  # x where a later attempt's iterations begin, "attempt N"
    summary: str  # the chart in words (its <desc>)
    iterations: int  # iterations drawn (averaged runs count their iterations)


def _nice_step(span: float, ticks: int) -> float:
    """Return a 1/2/5 x 10^k step that cuts `span` into about `ticks` parts."""
    raw = span / max(ticks, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), 10 * mag)


def metric_text(v: float) -> str:
    """Return a metric's value as the page shows it (4 significant digits)."""
    return f"{v:.4g}" if abs(v) < 100000 else f"{v:,.0f}"


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def curve_geometry(points: list[CurvePoint]) -> CurveGeometry | None:
    """Place the points of a reward curve; None when there is nothing to draw."""
    if not points:
        return None
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    x_lo, x_hi = points[0].iteration, points[-1].iteration
    # the y range covers the band; rewards within [0, 1] get the whole [0, 1] (a share)
    lows = [p.reward_mean - (p.reward_std or 0.0) for p in points]
    highs = [p.reward_mean + (p.reward_std or 0.0) for p in points]
    means = [p.reward_mean for p in points]
    if min(means) >= 0.0 and max(means) <= 1.0:
        y_lo, y_hi = 0.0, 1.0
    else:
        y_lo, y_hi = min(lows), max(highs)
        if y_hi - y_lo < 1e-9:
            y_lo, y_hi = y_lo - 0.5, y_hi + 0.5

    def x_of(it: float) -> float:
        if x_hi == x_lo:
            return LEFT + plot_w / 2
        return round(LEFT + (it - x_lo) / (x_hi - x_lo) * plot_w, 1)

    def y_of(v: float) -> float:
        v = min(max(v, y_lo), y_hi)  # the band is clipped to the axis, never off the chart
        return round(TOP + plot_h - (v - y_lo) / (y_hi - y_lo) * plot_h, 1)

    line = " ".join(f"{x_of(p.iteration)},{y_of(p.reward_mean)}" for p in points)
    band = ""
    if all(p.reward_std is not None for p in points) and len(points) > 1:
        upper = [f"{x_of(p.iteration)},{y_of(h)}" for p, h in zip(points, highs, strict=True)]
        lower = [f"{x_of(p.iteration)},{y_of(lo)}" for p, lo in zip(points, lows, strict=True)]
        band = " ".join(upper + lower[::-1])

    def shown(p: CurvePoint) -> str:
        """Return a point's iterations as a person reads them: "4", or "4-9" averaged."""
        n = iteration_number(p.iteration)
        return f"{n}-{n + p.iterations - 1}" if p.iterations > 1 else str(n)

    dots: tuple[Dot, ...] = ()
    if len(points) <= DOTS_UP_TO:
        dots = tuple(
            Dot(
                x_of(p.iteration),
                y_of(p.reward_mean),
                f"iteration {shown(p)}"
                + (" (mean)" if p.iterations > 1 else "")
                + f": reward {_fmt(p.reward_mean)}"
                + (f" ± {_fmt(p.reward_std)}" if p.reward_std is not None else "")
                + f", attempt {p.attempt}",
            )
            for p in points
        )
    y_step = _nice_step(y_hi - y_lo, 5)
    y_ticks = []
    v = math.ceil(y_lo / y_step) * y_step
    while v <= y_hi + 1e-9:
        y_ticks.append(Tick(y_of(v), _fmt(round(v, 10))))
        v += y_step
    # the axis is labelled with iteration numbers (from 1): nice steps of those numbers
    n_lo, n_hi = iteration_number(x_lo), iteration_number(x_hi)
    offset = n_lo - x_lo
    x_ticks: list[Tick] = []
    if n_hi > n_lo:
        x_step = max(1, int(_nice_step(n_hi - n_lo, 6)))
        n = math.ceil(n_lo / x_step) * x_step
        while n <= n_hi:
            x_ticks.append(Tick(x_of(n - offset), str(n)))
            n += x_step
    else:
        x_ticks.append(Tick(x_of(x_lo), str(n_lo)))
    attempts = tuple(
        Tick(x_of(p.iteration), f"attempt {p.attempt}")
        for prev, p in zip(points, points[1:], strict=False)
        if p.attempt != prev.attempt
    )
    first, last = points[0], points[-1]
    best = max(points, key=lambda p: p.reward_mean)
    count = sum(p.iterations for p in points)
    summary = (
        f"Mean reward over {count} iterations ({n_lo} to "
        f"{iteration_number(last.iteration + last.iterations - 1)}): "
        f"{_fmt(first.reward_mean)} at the first, {_fmt(last.reward_mean)} at the last, "
        f"best {_fmt(best.reward_mean)} (iteration {shown(best)})"
        + (f"; {len(attempts) + 1} attempts, one curve" if attempts else "")
    )
    return CurveGeometry(line, band, dots, tuple(x_ticks), tuple(y_ticks), attempts, summary, count)


def _a(value: object) -> str:
    return escape(str(value), quote=True)


def curve_svg(geo: CurveGeometry) -> SafeString:
    """Return the reward curve as an SVG chart (scaled to its container's width)."""
    base = HEIGHT - BOTTOM
    right = WIDTH - RIGHT
    out = [
        f'<svg class="chart reward-curve" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'width="100%" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'aria-label="Reward curve: {_a(geo.summary)}">'
        f"<title>Reward curve</title><desc>{_a(geo.summary)}</desc>"
    ]
    for t in geo.y_ticks:
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{right}" y1="{t.pos}" y2="{t.pos}" '
            f'stroke="#eef0f3"/><text class="y-tick" x="{LEFT - 6}" y="{t.pos + 4}" '
            f'font-size="11" text-anchor="end" fill="#667085">{_a(t.label)}</text>'
        )
    for t in geo.x_ticks:
        out.append(
            f'<line x1="{t.pos}" x2="{t.pos}" y1="{base}" y2="{base + 4}" stroke="#98a2b3"/>'
            f'<text class="x-tick" x="{t.pos}" y="{base + 16}" font-size="11" '
            f'text-anchor="middle" fill="#667085">{_a(t.label)}</text>'
        )
    out.append(
        f'<line x1="{LEFT}" y1="{base}" x2="{right}" y2="{base}" stroke="#98a2b3"/>'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base}" stroke="#98a2b3"/>'
        f'<text x="{(LEFT + right) / 2}" y="{HEIGHT - 6}" font-size="11" text-anchor="middle" '
        f'fill="#475467">iteration</text>'
        f'<text x="12" y="{(TOP + base) / 2}" font-size="11" text-anchor="middle" fill="#475467" '
        f'transform="rotate(-90 12 {(TOP + base) / 2})">mean reward</text>'
    )
    for t in geo.attempts:
        out.append(
            f'<line class="attempt" x1="{t.pos}" x2="{t.pos}" y1="{TOP}" y2="{base}" '
            f'stroke="#6941c6" stroke-dasharray="4 3" data-tip="{_a(t.label)} from here"/>'
            f'<text x="{t.pos + 3}" y="{TOP + 10}" font-size="10" fill="#6941c6">'
            f"{_a(t.label)}</text>"
        )
    if geo.band:
        out.append(
            f'<polygon class="band" points="{geo.band}" fill="{BAND}" fill-opacity="0.7" '
            'stroke="none"><title>± one standard deviation</title></polygon>'
        )
    out.append(
        f'<polyline class="reward" points="{geo.line}" fill="none" stroke="{LINE}" '
        'stroke-width="2"/>'
    )
    for d in geo.dots:
        out.append(
            f'<circle class="point" cx="{d.x}" cy="{d.y}" r="2.5" fill="{LINE}" '
            f'data-tip="{_a(d.tip)}"/>'
        )
    out.append("</svg>")
    return mark_safe("".join(out))  # noqa: S308 - every value above is escaped or numeric
