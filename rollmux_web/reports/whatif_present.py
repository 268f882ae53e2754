"""What-if comparison, presentation: the policies side by side, as a table and bar charts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollmux_web.formatting import duration_in, duration_unit
from rollmux_web.reports.palette import policy_colour


@dataclass
class PolicyRow:
    name: str
    colour: str
    metrics: dict[str, Any]


@dataclass
class WhatIfComparison:
    rows: list[PolicyRow]
    ratios: dict[str, float]
    charts: list[tuple[str, list[tuple[str, float, str]], str, str]]  # title, items, unit, fmt
    # the cost ratios compare like with like only when every policy finished the same jobs
    same_jobs: bool = True
    finished: list[tuple[str, str]] = field(default_factory=list)  # (policy, "48 of 50")
    infeasible: list[tuple[str, list[str]]] = field(default_factory=list)  # (policy, job ids)
    never_started: list[tuple[str, list[str]]] = field(default_factory=list)


def finished_sets(rows: list[PolicyRow]) -> dict[str, Any]:
    """Return whether the policies finished the same jobs (`scheduler.sim.metrics.same_jobs`),
    each one's count, and the jobs each could not place (infeasible) or never started, by
    trace id."""
    from scheduler.sim.metrics import left_out, same_jobs

    finished = [
        (r.name, f"{r.metrics.get('completed', 0):,} of {r.metrics.get('jobs', 0):,}") for r in rows
    ]
    infeasible = [(r.name, x) for r in rows if (x := left_out(r.metrics, ("infeasible",)))]
    never = [(r.name, x) for r in rows if (x := left_out(r.metrics, ("never_started",)))]
    return {
        "same_jobs": same_jobs({r.name: r.metrics for r in rows}),
        "finished": finished,
        "infeasible": infeasible,
        "never_started": never,
    }


# the charts: (metric key, title, unit, format, scale applied to the value), in the units the
# side-by-side table uses
COMPARED = (
    ("total_cost_usd", "Total cost", "", "${:,.0f}", 1.0),
    ("avg_cost_per_hour_usd", "Average cost per hour", "", "${:,.2f}/h", 1.0),
    ("slo_attainment", "SLO attainment (durations as drawn)", "", "{:.1%}", 1.0),
    ("mean_slowdown", "Mean slowdown", "", "{:.2f}×", 1.0),
    ("makespan_h", "Makespan", "", "", 3600.0),  # durations: unit picked from the values
    ("mean_queue_delay_s", "Mean queue delay", "", "", 1.0),
)


def _pairs(value: dict[str, Any], fmt: Any = str) -> str:
    return " · ".join(f"{str(k).replace('_', ' ')} {fmt(v)}" for k, v in value.items())


def _pct(x: Any) -> str:
    return f"{float(x):.1%}"


# (label, how to show a policy's figures, or for a duration (metric key, seconds per value):
# the row is then in one unit, that of its longest value, as a column of a table is in
# `formatting`); the metric keys are the simulator's (`--json`)
TABLE: tuple[tuple[str, Any], ...] = (
    ("Jobs completed", lambda m: f"{m.get('completed', 0):,} of {m.get('jobs', 0):,}"),
    ("Total cost", lambda m: f"${m['total_cost_usd']:,.0f}"),
    ("Average cost per hour", lambda m: f"${m['avg_cost_per_hour_usd']:,.2f}/h"),
    ("Makespan", ("makespan_h", 3600.0)),
    ("Peak GPUs", lambda m: _pairs(m["peak_gpus"], lambda v: f"{v:,}")),
    ("SLO attainment (durations as drawn)", lambda m: _pct(m["slo_attainment"])),
    ("SLO attainment (planned, worst case)", lambda m: _pct(m["slo_attainment_vs_profile"])),
    ("Mean slowdown", lambda m: f"{m['mean_slowdown']:.2f}×"),
    ("p99 slowdown", lambda m: f"{m['p99_slowdown']:.2f}×"),
    ("Bubble fraction", lambda m: _pairs(m["bubble_fraction"], _pct)),
    ("Admissions", lambda m: _pairs(m["admissions"])),
    ("Decision latency", lambda m: _pairs(m["decision_latency_ms"], lambda v: f"{v:,.2f} ms")),
    ("Mean queue delay", ("mean_queue_delay_s", 1.0)),
    ("Jobs that waited", lambda m: f"{m['jobs_that_waited']:,}"),
    ("Iterations completed", lambda m: f"{m['iterations_completed']:,}"),
    ("Iterations per dollar", lambda m: f"{m['iterations_per_dollar']:.4f}"),
    ("Infeasible jobs", lambda m: f"{len(m['infeasible']):,}"),
    ("Jobs never started", lambda m: f"{len(m['never_started']):,}"),
)


def table(cmp: WhatIfComparison) -> list[tuple[str, list[str]]]:
    """Return the side-by-side table: a labelled row per figure, one formatted cell per policy
    (a figure a policy did not report shows as a dash)."""
    out = []
    for label, show in TABLE:
        if isinstance(show, tuple):
            show = _duration_cells(cmp, *show)
        cells = []
        for row in cmp.rows:
            try:
                cells.append(show(row.metrics))
            except (KeyError, TypeError, ValueError, AttributeError):
                cells.append("—")
        if any(c != "—" for c in cells):
            out.append((label, cells))
    return out


def _duration_cells(cmp: WhatIfComparison, key: str, scale: float) -> Any:
    """Return how to show a duration metric in the unit of the row's longest value."""
    longest = 0.0
    for row in cmp.rows:
        try:
            longest = max(longest, abs(float(row.metrics[key]) * scale))
        except (KeyError, TypeError, ValueError):
            continue
    unit, _ = duration_unit(longest)
    return lambda m: duration_in(float(m[key]) * scale, unit)


def compare(result: dict[str, Any]) -> WhatIfComparison:
    """Return the policies side by side and the bar charts to draw from a simulator result."""
    from scheduler.sim.policies import ordered

    policies = result.get("policies") or {}
    names = ordered(list(policies))  # the report's order; then any name it does not know
    names += [name for name in policies if name not in names]
    rows = [PolicyRow(name, policy_colour(name), policies[name]) for name in names]
    charts = []
    for key, title, unit, fmt, scale in COMPARED:
        items = [
            (r.name, float(r.metrics[key]) * scale, r.colour)
            for r in rows
            if isinstance(r.metrics.get(key), int | float)
        ]
        if items and not fmt:  # a duration in seconds: the unit that reads best
            unit, per = duration_unit(max(v for _, v, _ in items))
            items = [(name, v / per, colour) for name, v, colour in items]
            fmt = "{:,.1f}"
        if items:
            charts.append((title, items, unit, fmt))
    return WhatIfComparison(
        rows=rows, ratios=dict(result.get("ratios") or {}), charts=charts, **finished_sets(rows)
    )
