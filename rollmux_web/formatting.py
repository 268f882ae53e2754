"""The one duration formatter of every page, tooltip and chart (seconds in, text out), the
one place an iteration's stored index becomes the number a person reads, and the one
wording of an unknown field.

A duration shows in the unit that reads best for its size: seconds below 2 minutes,
minutes below 2 hours, hours below 3 days, then days. A table column shows every cell
in one unit, that of its longest value (`duration_unit` + `duration_in`), so "3.7 min"
never stands above "105.0 s".
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

UNITS = (("s", 1.0, 120.0), ("min", 60.0, 7200.0), ("h", 3600.0, 259200.0))
DAYS = ("days", 86400.0)
DIGITS = {"s": 1, "min": 1, "h": 2, "days": 1}


def duration_unit(longest_s: float) -> tuple[str, float]:
    """Return (unit, seconds per unit) to show durations up to `longest_s`."""
    for unit, per, below in UNITS:
        if abs(longest_s) < below:
            return unit, per
    return DAYS


def duration_in(seconds: float, unit: str) -> str:
    """Return `seconds` written in `unit` ("s", "min", "h" or "days"), with the unit."""
    per = dict((u, p) for u, p, _ in UNITS).get(unit, DAYS[1])
    return f"{seconds / per:,.{DIGITS.get(unit, 1)}f} {unit}"


def duration(seconds: float) -> str:
    """Return a duration in the unit that reads best for it: "42.0 s", "3.7 min", "2.50 h"."""
    unit, _ = duration_unit(seconds)
    return duration_in(seconds, unit)


def sentence_seconds(seconds: float, fmt: str) -> str:
    """Return seconds in a sentence (no unit): `fmt` (".0f", ".1f") from a second up, two
    significant digits below it (a real runner's 0.066 s and 0.048 s are not both "0.1")."""
    return f"{seconds:.2g}" if abs(seconds) < 1.0 else format(seconds, fmt)


def iteration_number(index: int) -> int:
    """Return the number a person reads for an iteration's stored 0-based index: counted
    from 1, as the Gantt's tooltips, checkpoints (iterations completed) and veRL's and TRL's
    global step count. Pages, htmx fragments, chart labels and the CLI's words show this;
    the API and the exports keep the stored index. A job that has completed `n` iterations
    (`Job.iterations_done`) runs, or resumes at, iteration number `iteration_number(n)`."""
    return index + 1


def short_ray_id(ray_node_id: str) -> str:
    """Return a Ray node id as tooltips show it: its first 8 hex digits and an ellipsis."""
    return ray_node_id[:8] + "…" if len(ray_node_id) > 8 else ray_node_id


def human_bytes(n: int) -> str:
    """Return a byte count in decimal units ("1.2 GB"), as network figures are given."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


# an unknown key is echoed in its error; a 1 MB key is cut short
MAX_REPORTED_KEY = 64


def unknown_key(key: Any, known: Sequence[str], hint: str | None = None) -> tuple[str, list[str]]:
    """Return an unknown key as an error names it (cut short past MAX_REPORTED_KEY) and its
    message: `hint`, else the closest of `known` when one is close
    (difflib.get_close_matches: "time_scal" -> "did you mean time_scale?"), else `known`.
    The one wording of an unknown field: a job spec's (`jobs.spec.unknown_field_errors`)
    and an admin record's (`api.fields.KnownFieldsMixin`)."""
    name = str(key)
    if hint is None:
        close = difflib.get_close_matches(name.lower(), known, n=1)
        hint = f"did you mean {close[0]}?" if close else f"the fields are {', '.join(known)}."
    shown = name if 0 < len(name) <= MAX_REPORTED_KEY else repr(name[:MAX_REPORTED_KEY])
    return shown, [f"Unknown field; {hint}"]
