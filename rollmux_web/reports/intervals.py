"""Interval arithmetic shared by the chart geometry and the cost engine (pure, no I/O)."""

from __future__ import annotations

from typing import Any


def clip(a: Any, b: Any, lo: Any, hi: Any) -> tuple[Any, Any] | None:
    """Return [a, b) (b None = open) clipped to [lo, hi), or None when they do not meet."""
    end = hi if b is None else min(b, hi)
    start = max(a, lo)
    return (start, end) if end > start else None


def merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Return the union of intervals as sorted, disjoint intervals."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def subtract(
    outer: list[tuple[float, float]], inner: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Return the parts of `outer` (merged) not covered by `inner` (merged)."""
    gaps = []
    j = 0
    for a, b in outer:
        cur = a
        while j < len(inner) and inner[j][1] <= cur:
            j += 1
        k = j
        while k < len(inner) and inner[k][0] < b:
            if inner[k][0] > cur:
                gaps.append((cur, inner[k][0]))
            cur = max(cur, inner[k][1])
            k += 1
        if cur < b:
            gaps.append((cur, b))
    return gaps
