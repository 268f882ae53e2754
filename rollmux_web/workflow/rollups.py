"""Daily rollups of phase records, computed before the records are archived (pure).

The cost engine (reports.selectors.cost_engine) reads a phase record as spans on nodes
(a long-tail migration's hand-over as spans of its own) and cuts them at price changes, at
the report's day buckets and range, and at the membership changes and allocation ends of
the group's nodes. A rollup row sums the busy microseconds of the spans of one (group,
job, nodes, hand-over flag, rollout speed) inside one *elementary segment*: a stretch of a
UTC day that none of those cuts crosses. Read back as one span starting at the segment's
start, it adds the same microseconds to the same keys as the spans it replaces, so the
same report range gives the same figures to the cent (a report's range is whole UTC days;
a job's life starts and ends at membership changes, which are cuts too).

The SLO report's inputs (completed iterations, their own time, their span) and the days a
job ran are summed per job here as well (`SloSummary`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

DAY_US = 86_400_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_us(dt: datetime) -> int:
    return (dt - EPOCH) // timedelta(microseconds=1)


def from_us(t: int) -> datetime:
    return EPOCH + timedelta(microseconds=t)


@dataclass(frozen=True)
class PhaseRow:
    """What a rollup reads of one phase record (times in epoch microseconds)."""

    group_id: int
    job_id: int
    kind: str
    nodes: tuple[str, ...]
    start_us: int
    end_us: int
    tail_released: dict[str, float] | None = None  # node -> seconds after its start
    rollout_speed_factor: float | None = None


@dataclass(frozen=True)
class RollupKey:
    group_id: int
    job_id: int
    kind: str
    nodes: tuple[str, ...]
    counterfactual: bool
    solo_scale: float
    seg_start_us: int
    seg_end_us: int


def spans_of(p: PhaseRow) -> Iterator[tuple[tuple[str, ...], int, int, bool, float]]:
    """The cost engine's spans of a phase: (nodes, start, end, counterfactual, solo scale).

    As `cost_engine._phase_spans` / `_tail_spans`: a rollout that handed nodes over early
    was busy on them only until then, on spans of their own that carry no counterfactual.
    """
    scale = 1.0 / float(p.rollout_speed_factor) if p.rollout_speed_factor else 1.0
    if not p.tail_released:
        yield p.nodes, p.start_us, p.end_us, True, scale
        return
    released = p.tail_released
    yield tuple(n for n in p.nodes if n not in released), p.start_us, p.end_us, True, scale
    for n in p.nodes:
        if n in released:
            end = p.start_us + round(float(released[n]) * 1_000_000)
            yield (n,), p.start_us, min(end, p.end_us), False, 1.0


def _floor_day(t: int) -> int:
    return t - t % DAY_US


def elementary_pieces(a: int, b: int, cuts: Sequence[int]) -> Iterator[tuple[int, int, int]]:
    """Cut [a, b) at `cuts` (sorted) and midnights: (piece length, segment start, segment end)
    where the segment is the stretch between the cuts (and midnights) around the piece."""
    lo = a
    while lo < b:
        day_end = _floor_day(lo) + DAY_US
        i = bisect_right(cuts, lo)
        nxt = min(day_end, cuts[i]) if i < len(cuts) else day_end
        hi = min(b, nxt)
        seg_lo = max(_floor_day(lo), cuts[i - 1]) if i > 0 else _floor_day(lo)
        yield hi - lo, seg_lo, nxt
        lo = hi


def rollup(
    phases: Iterable[PhaseRow],
    cuts_by_group: dict[int, Sequence[int]],
    window: tuple[int, int | None] | None = None,
) -> dict[RollupKey, tuple[int, int]]:
    """Sum the phases' spans per elementary segment: key -> (busy microseconds, phases).

    `window` [lo, hi) (hi None: open; lo and hi UTC midnights): only the spans' parts
    inside it (the closed days of a watermark, or an archived job's days after it); a phase
    is counted only in the window it starts in."""
    out: dict[RollupKey, list[int]] = defaultdict(lambda: [0, 0])
    w_lo, w_hi = window if window is not None else (None, None)
    for p in phases:
        if p.end_us <= p.start_us:
            continue
        cuts = cuts_by_group.get(p.group_id, ())
        for nodes, a0, b0, cf, scale in spans_of(p):
            a = a0 if w_lo is None else max(a0, w_lo)
            b = b0 if w_hi is None else min(b0, w_hi)
            first = a == a0
            for length, s0, s1 in elementary_pieces(a, b, cuts):
                key = RollupKey(p.group_id, p.job_id, p.kind, nodes, cf, scale, s0, s1)
                acc = out[key]
                acc[0] += length
                if first and cf:
                    acc[1] += 1  # the phase counted once, where it starts
                first = False
    return {k: (v[0], v[1]) for k, v in out.items()}


def synthetic_spans(busy_us: int, seg_start_us: int, seg_end_us: int) -> Iterator[tuple[int, int]]:
    """A rollup row as spans starting at its segment's start, none longer than the segment
    (overlapping phase records, which should not happen, make a sum longer than it)."""
    width = max(seg_end_us - seg_start_us, 1)
    left = busy_us
    while left > 0:
        step = min(left, width)
        yield seg_start_us, seg_start_us + step
        left -= step


@dataclass
class SloSummary:
    """A job's SLO inputs (reports.selectors.slo) and the days it ran."""

    iterations: int = 0
    solo_us: int = 0
    had_sync: bool = False
    span_start_us: int | None = None
    span_end_us: int | None = None
    ran_days: list[tuple[date, date]] = field(default_factory=list)


def slo_summary(
    succeeded: Iterable[tuple[int, int, str, int, int]], ran: Iterable[tuple[int, int]]
) -> SloSummary:
    """`succeeded`: (placement, iteration, kind, start, end) of the succeeded phases outside
    profiling runs; `ran`: (start, end) of every started phase."""
    iters: dict[tuple[int, int], dict[str, tuple[int, int]]] = defaultdict(dict)
    for pl, it, kind, s, f in succeeded:
        iters[(pl, it)][kind] = (s, f)
    out = SloSummary()
    done = [p for p in iters.values() if "rollout" in p and "train" in p]
    if done:
        out.iterations = len(done)
        out.solo_us = sum(f - s for p in done for s, f in p.values())
        out.had_sync = any("sync" in p for p in done)
        out.span_start_us = min(p["rollout"][0] for p in done)
        out.span_end_us = max(p["train"][1] for p in done)
    # (each phase's UTC days, as day numbers: a job's ~100 phases span a few distinct ones)
    first = EPOCH.date()
    days = [
        (first + timedelta(days=a), first + timedelta(days=b))
        for a, b in sorted({(s // DAY_US, f // DAY_US) for s, f in ran})
    ]
    merged: list[tuple[date, date]] = []
    for a, b in days:
        if merged and a <= merged[-1][1] + timedelta(days=1):
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    out.ran_days = merged
    return out


def ran_in(ran_days: Iterable[Sequence[str]], start: date, end: date) -> bool:
    """Whether a job that ran on `ran_days` ([first, last] ISO pairs) ran in [start, end]."""
    return any(date.fromisoformat(a) <= end and date.fromisoformat(b) >= start for a, b in ran_days)


def sorted_cuts(times: Iterable[int | None]) -> list[int]:
    return sorted({t for t in times if t is not None})
