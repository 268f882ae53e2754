"""Gantt geometry: lanes, bars, bubbles and ticks, computed from plain rows (pure, no I/O).

The selectors (`reports.selectors.timeline_queries`) fetch the rows; the SVG drawer
(`reports.svg`) draws the result. Neither imports the other, and both import this.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from rollmux_web.formatting import duration, human_bytes, iteration_number, short_ray_id
from rollmux_web.reports.intervals import clip, merge, subtract
from rollmux_web.reports.palette import UNKNOWN_JOB, JobShades, job_colours

BAR_LIMIT = 3000  # above this many phases in the window, sub-pixel bars are aggregated
# The chart is drawn as wide as its card (the page tells the server: static/js/timeline.js),
# one SVG unit to a CSS pixel so its text keeps its size; DEFAULT_WIDTH until it has.
DEFAULT_WIDTH = 1200
MIN_WIDTH = 640  # a narrower card scrolls the chart (static/css/reports.css has the same 640)
MAX_WIDTH = 4000
LANE_H = 22
LANE_GAP = 6
LEFT = 120
RIGHT = 16
TOP = 28
AXIS_H = 26
POOL_HEAD_H = 16  # a pool's title row above its first lane
DELAY_MIN_S = 1.0  # a report later than this after its phase's end is a control-plane delay
FAILED_STATES = ("failed", "lost")
MARKER_MIN_W = 6  # a start marker (a 9 px wedge) is drawn on bars at least this wide
PHASE_KINDS = ("rollout", "sync", "train")  # the legend's order of a job's shades
KIND_NAMES = {"rollout": "rollout", "sync": "weight sync", "train": "training"}
# the values of inventory's PoolKind and workflow's PhaseState this geometry needs (it
# imports no model: tests/reports check the two stay equal)
ROLLOUT_POOL, TRAIN_POOL = "rollout", "train"
RUNNING, SUCCEEDED = "running", "succeeded"
POOL_TITLES = {ROLLOUT_POOL: "Rollout pool", TRAIN_POOL: "Training pool"}
NO_LABEL = "a job"  # a phase whose job has no label (never its id: it may be another tenant's)


class PhaseRow(NamedTuple):
    """One phase record as the chart needs it; times in float epoch seconds."""

    phase_id: int
    job_id: int
    iteration: int
    kind: str
    nodes: tuple[str, ...]
    warm_start: bool | None
    started: float
    finished: float | None
    state: str
    outcome: str = ""  # why a failed or lost phase ended
    profile: bool = False  # a phase of the job's profiling run (placement strategy profile)
    # where Ray ran it (multi-node Ray): inventory node -> Ray node id, -> the GPU ids its
    # workers got; a weight sync's bytes that crossed from the training pool
    ray_node_ids: dict[str, str] | None = None
    gpu_ids: dict[str, list[int]] | None = None
    bytes_moved: int | None = None


class ReportDelay(NamedTuple):
    """A phase whose end reached the controller late: its nodes idle for the control plane."""

    nodes: tuple[str, ...]
    finished: float  # the host's end stamp (epoch seconds)
    reported: float  # when the controller applied it
    recovered: bool  # the report was lost and `reconcile` recovered it


class PreAggregated(NamedTuple):
    """Sub-pixel phases summed by the database per lane (node list) and pixel column."""

    job_id: int  # the job of the column's longest phase (its colour)
    kind: str
    nodes: tuple[str, ...]
    column: int
    busy_s: float
    phases: int


class JobBusy(NamedTuple):
    """A job's busy seconds on a node list (the headline's stand-in for pre-aggregated rows)."""

    job_id: int
    nodes: tuple[str, ...]
    busy_s: float


Spans = dict[str, list[tuple[datetime, datetime | None]]]


@dataclass(frozen=True)
class Lane:
    node: str
    pool: str
    y: float


@dataclass(frozen=True)
class PoolHead:
    """The title row of a pool's lanes ("Rollout pool · 3 nodes")."""

    y: float
    title: str


@dataclass(frozen=True)
class BarRect:
    x: float
    y: float
    w: float


@dataclass(frozen=True)
class PhaseBar:
    """One phase record: one SVG element, with one rectangle per node lane it ran on."""

    phase_id: int | None  # None (and job_id None) for another tenant's job
    job_id: int | None
    kind: str
    fill: str
    rects: tuple[BarRect, ...]
    tip: str
    warm_start: bool | None
    running: bool
    failed: bool = False  # failed or lost: drawn hatched, with a red edge
    profile: bool = False  # the job's profiling run: drawn with a dashed outline
    marker: str = ""  # "warm" or "cold": the start's wedge, drawn on a wide enough bar


@dataclass(frozen=True)
class AggRect:
    """Several sub-pixel phases of one lane merged into one rectangle."""

    x: float
    y: float
    w: float
    fill: str
    opacity: float
    tip: str
    kind: str = ""  # the phase kind of the column's longest phase (its shade)


@dataclass(frozen=True)
class LegendJob:
    """A job's legend entry: its label and the shade of each phase kind drawn for it."""

    label: str
    swatches: tuple[tuple[str, str], ...]  # (kind, fill) in PHASE_KINDS order

    @property
    def kinds_text(self) -> str:
        """Return the kinds the swatches stand for ("rollout, training")."""
        return ", ".join(KIND_NAMES.get(k, k) for k, _ in self.swatches)


@dataclass(frozen=True)
class Bubble:
    x: float
    y: float
    w: float
    tip: str


@dataclass(frozen=True)
class Delay:
    """A control-plane delay on one lane: the phase had ended, the controller did not know."""

    x: float
    y: float
    w: float
    tip: str


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class PoolBubbles:
    """Bubble fraction of one pool now, if each member ran alone, and the share reclaimed."""

    pool: str
    allocated_node_s: float
    busy_node_s: float
    bubble_fraction: float | None
    solo_bubble_fraction: float | None
    reclaimed_share: float | None


@dataclass(frozen=True)
class Timeline:
    title: str
    t0: datetime
    t1: datetime
    width: int
    height: int
    plot_left: int
    plot_right: int
    lanes: tuple[Lane, ...]
    bars: tuple[PhaseBar, ...]
    aggregates: tuple[AggRect, ...]
    bubbles: tuple[Bubble, ...]
    ticks: tuple[Tick, ...]
    phase_count: int
    aggregated_count: int
    legend: tuple[LegendJob, ...]  # the jobs drawn, each with the kinds drawn for it
    headline: tuple[PoolBubbles, ...]
    live: bool  # the window reaches now and the group or job is still running
    empty_message: str = ""
    pool_heads: tuple[PoolHead, ...] = ()
    delays: tuple[Delay, ...] = ()
    kinds: frozenset[str] = frozenset()  # the phase kinds drawn (the legend names sync if any)
    has_failed: bool = False
    has_profile: bool = False  # a profiling run's phase is drawn (the legend names it)
    # the other marks drawn, each named in the legend: "bubble", "delay", "failed",
    # "profile", "warm", "cold" (a legend lists exactly what the chart draws)
    marks: frozenset[str] = frozenset()


def drawn_width(width: int) -> int:
    """Return the width a chart is drawn at: its card's, within MIN_WIDTH..MAX_WIDTH."""
    return max(MIN_WIDTH, min(int(width), MAX_WIDTH))


def _label_w(step: int) -> float:
    """Return the room a tick label of this step needs: its longest format at 11 px
    (about 6.5 px a digit) and a gap; see the formats in `ticks`."""
    if step < 60:
        chars = 8  # HH:MM:SS
    elif step < 3600:
        chars = 5  # HH:MM
    elif step < 86400:
        chars = 16  # YYYY-MM-DD HH:MM (at midnight)
    else:
        chars = 10  # YYYY-MM-DD
    return chars * 6.5 + 14


def ticks(t0: datetime, t1: datetime, left: float, plot_w: float) -> tuple[Tick, ...]:
    """Return at most 8 time-axis ticks on round steps (a second to a year), spaced so that
    their labels do not overlap at this width."""
    span = (t1 - t0).total_seconds()
    if span <= 0:
        return ()
    steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600]
    week = 604800
    steps += [43200, 86400, 172800, week, 2 * week, 4 * week, 13 * week, 26 * week, 52 * week]
    step = next(
        (s for s in steps if span / s <= 8 and plot_w * s / span >= _label_w(s)),
        week * math.ceil(span / (8 * week)),  # over years: whole weeks, 8 ticks
    )
    first = math.ceil(t0.timestamp() / step) * step
    out = []
    t = first
    while t <= t1.timestamp():
        dt = datetime.fromtimestamp(t, tz=UTC)
        x = left + (t - t0.timestamp()) / span * plot_w
        # times as HH:MM[:SS]; a date (the product's one format, YYYY-MM-DD) at midnight
        fmt = "%H:%M:%S" if step < 60 else ("%H:%M" if step < 86400 else "%Y-%m-%d")
        if step >= 3600 and step < 86400 and dt.hour == 0:
            fmt = "%Y-%m-%d %H:%M"
        out.append(Tick(x=round(x, 1), label=dt.strftime(fmt)))
        t += step
    return tuple(out)


@dataclass
class _Frame:
    """The window's scale: epoch seconds to x pixels."""

    w0: float
    w1: float
    scale: float
    now_ts: float

    def x(self, t: float) -> float:
        return LEFT + (t - self.w0) * self.scale


def _pool_of_kind(kind: str) -> str:
    # rollouts and weight syncs run on the rollout pool (sync: its nodes receive)
    return ROLLOUT_POOL if kind in ("rollout", "sync") else TRAIN_POOL


def _lanes(
    rows: Sequence[PhaseRow], pre: Sequence[PreAggregated], pools: dict[str, str]
) -> tuple[tuple[Lane, ...], tuple[PoolHead, ...], float]:
    """Return one lane per node under its pool's title row, rollout pool first (a node of
    unknown pool by phase kind), and the y below the last lane."""
    for r in rows:
        for n in r.nodes:
            pools.setdefault(n, _pool_of_kind(r.kind))
    for p in pre:
        for n in p.nodes:
            pools.setdefault(n, _pool_of_kind(p.kind))
    order = {ROLLOUT_POOL: 0, TRAIN_POOL: 1}
    names = sorted(pools, key=lambda n: (order.get(pools[n], 2), n))
    lanes: list[Lane] = []
    heads: list[PoolHead] = []
    y = float(TOP)
    for n in names:
        pool = str(pools[n])
        if not lanes or lanes[-1].pool != pool:
            count = sum(1 for m in names if str(pools[m]) == pool)
            title = POOL_TITLES.get(pool, f"{pool} pool")
            heads.append(PoolHead(y=y, title=f"{title} · {count} node{'s' if count != 1 else ''}"))
            y += POOL_HEAD_H
        lanes.append(Lane(node=n, pool=pool, y=y))
        y += LANE_H + LANE_GAP
    return tuple(lanes), tuple(heads), y


def _phase_tip(row: PhaseRow, label: str, now_ts: float, *, hidden: bool) -> str:
    """Return a bar's tooltip; iterations counted from 1, as on the job page."""
    _pid, _jid, it, kind, nodes, warm, s, f, state, outcome, profile = row[:11]
    took = f - s if f is not None else now_ts - s
    start_kind = "start unknown" if warm is None else ("warm start" if warm else "cold start")
    ended = ""
    if state in FAILED_STATES:
        # why it failed names the job's own runner and error: not for another tenant's job
        ended = f" · {state}"
        if outcome and not hidden:
            ended = f" · {outcome}" if outcome.startswith(state) else f"{ended}: {outcome}"
    stage = " · profiling run" if profile else ""
    return (
        f"{label}{stage}{'' if hidden else f' · iteration {iteration_number(it)}'} · {kind} · "
        f"{duration(took)}{' (running)' if f is None else ''}{ended} · {start_kind}"
        f" · {', '.join(nodes)}{'' if hidden else ray_words(row)}"
    )


def ray_words(row: PhaseRow) -> str:
    """Return " · on Ray node 1a2b3c4d… (GPUs 0, 1) · moved 1.2 GB": where Ray ran the
    phase, per inventory node, and a weight sync's bytes ("" when nothing is recorded)."""
    parts = []
    for n in row.nodes:
        rid = (row.ray_node_ids or {}).get(n)
        gpus = (row.gpu_ids or {}).get(n)
        if rid is None and gpus is None:
            continue
        where = f"Ray node {short_ray_id(rid)}" if rid else "Ray node ?"
        if gpus:
            where += f" (GPU{'s' if len(gpus) != 1 else ''} {', '.join(str(g) for g in gpus)})"
        parts.append(f"{n} on {where}" if len(row.nodes) > 1 else f"on {where}")
    if row.bytes_moved is not None:
        parts.append(f"moved {human_bytes(row.bytes_moved)}")
    return "".join(f" · {p}" for p in parts)


def _bars(
    rows: Sequence[PhaseRow],
    frame: _Frame,
    lane_y: dict[str, float],
    colours: dict[int, JobShades],
    labels: dict[int, str],
    *,
    aggregate: bool,
    busy: dict[str, list[tuple[float, float]]],
    agg_cols: dict[str, dict[int, dict[tuple[int, str], float]]],
    masked: frozenset[int],
    drawn: dict[int, set[str]],
) -> tuple[list[PhaseBar], int]:
    """Return a bar per phase (and how many went to `agg_cols` instead: narrower than a
    pixel when aggregating); every phase's busy span is added to `busy` per node, and the
    kind of every bar to `drawn` per job."""
    bars: list[PhaseBar] = []
    aggregated = 0
    w0, w1, scale, now_ts = frame.w0, frame.w1, frame.scale, frame.now_ts
    for row in rows:
        pid, jid, _it, kind, nodes, warm, s, f, state, _outcome, profile = row[:11]
        a = max(s, w0)
        b = min(f if f is not None else max(now_ts, s), w1)
        if b < a:
            b = a
        for n in nodes:
            busy[n].append((a, b))
        x = LEFT + (a - w0) * scale
        w = (b - a) * scale
        if aggregate and w < 1.0:
            aggregated += 1
            col = int((a - w0) * scale)
            for n in nodes:
                agg_cols[n][col][(jid, kind)] += b - a
            continue
        rects = tuple(
            BarRect(x=round(x, 2), y=lane_y[n] + 2, w=round(max(w, 0.6), 2))
            for n in nodes
            if n in lane_y
        )
        hidden = jid in masked
        marker = ""
        if warm is not None and rects and rects[0].w >= MARKER_MIN_W:
            marker = "warm" if warm else "cold"
        drawn[jid].add(kind)
        bars.append(
            PhaseBar(
                phase_id=None if hidden else pid,
                job_id=None if hidden else jid,
                kind=kind,
                fill=colours.get(jid, UNKNOWN_JOB).of(kind),
                rects=rects,
                tip=_phase_tip(row, labels.get(jid, NO_LABEL), now_ts, hidden=hidden),
                warm_start=warm,
                running=f is None or state == RUNNING,
                failed=state in FAILED_STATES,
                profile=profile,
                marker=marker,
            )
        )
    return bars, aggregated


def _aggregates(
    agg_cols: dict[str, dict[int, dict[tuple[int, str], float]]],
    lane_y: dict[str, float],
    scale: float,
    colours: dict[int, JobShades],
    labels: dict[int, str],
    drawn: dict[int, set[str]],
) -> list[AggRect]:
    """Merge runs of neighbouring pixel columns of one lane with the same job, kind and shade
    (each run's job and kind added to `drawn`: its rectangle has their shade)."""
    out: list[AggRect] = []
    for n, cols in agg_cols.items():
        y = lane_y[n] + 2
        run: list[Any] | None = None  # [start col, end col, key, opacity bucket, seconds]
        for col in sorted(cols):
            per_job = cols[col]
            key = max(per_job, key=lambda k: per_job[k])
            secs = sum(per_job.values())
            opacity = min(1.0, max(0.25, round(secs * scale * 4) / 4))
            if run and run[1] == col - 1 and run[2] == key and run[3] == opacity:
                run[1] = col
                run[4] += secs
                continue
            if run:
                out.append(_agg_rect(run, y, colours, labels))
            run = [col, col, key, opacity, secs]
            drawn[key[0]].add(key[1])
        if run:
            out.append(_agg_rect(run, y, colours, labels))
    return out


def _agg_rect(
    run: list[Any], y: float, colours: dict[int, JobShades], labels: dict[int, str]
) -> AggRect:
    c0, c1, (jid, kind), opacity, secs = run
    return AggRect(
        x=float(LEFT + c0),
        y=y,
        w=float(c1 - c0 + 1),
        fill=colours.get(jid, UNKNOWN_JOB).of(kind),
        opacity=opacity,
        tip=f"{c1 - c0 + 1} px of short phases, mostly {labels.get(jid, NO_LABEL)} {kind};"
        f" busy {duration(secs)}",
        kind=kind,
    )


def _bubbles(
    lanes: Sequence[Lane],
    alloc_by_node: Spans,
    busy: dict[str, list[tuple[float, float]]],
    frame: _Frame,
    now: datetime,
    *,
    min_w: float,
) -> list[Bubble]:
    """Return the bubbles: allocated to the group but idle (none on a job's own chart)."""
    out: list[Bubble] = []
    if not alloc_by_node:
        return out
    w0, w1 = frame.w0, frame.w1
    for lane in lanes:
        outer = merge(
            [
                (max(a.timestamp(), w0), min((b or now).timestamp(), w1))
                for a, b in alloc_by_node.get(lane.node, [])
                if (b or now).timestamp() > w0 and a.timestamp() < w1
            ]
        )
        for a, b in subtract(outer, merge(busy.get(lane.node, []))):
            w = (b - a) * frame.scale
            if w >= min_w:
                out.append(
                    Bubble(
                        x=round(frame.x(a), 2),
                        y=lane.y + 2,
                        w=round(w, 2),
                        tip=f"bubble on {lane.node}: idle {duration(b - a)}",
                    )
                )
    return out


def _delays(
    delays: Sequence[ReportDelay], lane_y: dict[str, float], frame: _Frame, *, min_w: float
) -> list[Delay]:
    """Return a mark per lane over each control-plane delay (phase end to its late report)."""
    out: list[Delay] = []
    for nodes, finished, reported, recovered in delays:
        a, b = max(finished, frame.w0), min(reported, frame.w1)
        w = (b - a) * frame.scale
        if w < min_w:
            continue
        why = "its report was lost; reconcile recovered it" if recovered else "its report came late"
        for n in nodes:
            if n in lane_y:
                out.append(
                    Delay(
                        x=round(frame.x(a), 2),
                        y=lane_y[n] + 2,
                        w=round(w, 2),
                        tip=f"control-plane delay on {n}: {duration(reported - finished)} between "
                        f"a phase's end and the controller learning of it ({why})",
                    )
                )
    return out


def build_timeline(
    *,
    title: str,
    rows: list[PhaseRow],
    pre_aggregated: Sequence[PreAggregated] = (),
    pre_job_sums: Sequence[JobBusy] = (),
    pools: dict[str, str],
    alloc_by_node: Spans,
    labels: dict[int, str],
    t0: datetime,
    t1: datetime,
    width: int,
    now: datetime,
    live: bool,
    with_headline: bool,
    masked: frozenset[int] = frozenset(),
    delays: Sequence[ReportDelay] = (),
    archived: bool = False,
) -> Timeline:
    """Return the chart geometry of phase rows in [t0, t1) drawn `width` pixels wide.

    1. lanes per node; 2. a bar per phase (sub-pixel ones merged per lane and pixel
    column when there are over BAR_LIMIT); 3. bubbles: allocated but idle; 4. the
    headline's bubble fractions per pool; 5. control-plane delays; 6. the legend: the
    jobs, phase kinds and marks drawn, nothing else. Jobs in `masked` (other tenants')
    are drawn under their label only: no phase id, job id or iteration.

    `archived`: the phases of a member present in the window went to the archive
    (retention), so an allocated node with no phase drawn may have been busy: no
    bubbles and no headline are drawn, and an empty chart says where its phases went.
    """
    if archived:
        alloc_by_node, with_headline = {}, False
    width = drawn_width(width)
    lanes, heads, bottom = _lanes(rows, pre_aggregated, pools)
    lane_y = {ln.node: ln.y for ln in lanes}
    plot_w = width - LEFT - RIGHT
    w0 = t0.timestamp()
    scale = plot_w / (t1 - t0).total_seconds()
    frame = _Frame(w0=w0, w1=t1.timestamp(), scale=scale, now_ts=now.timestamp())
    colours = job_colours(
        labels.keys()
        | {r.job_id for r in rows}
        | {p.job_id for p in pre_aggregated}
        | {p.job_id for p in pre_job_sums}
    )
    pre_count = sum(p.phases for p in pre_aggregated)
    aggregate = len(rows) + pre_count > BAR_LIMIT
    busy: dict[str, list[tuple[float, float]]] = defaultdict(list)
    # lane -> column -> (job, kind) -> busy seconds
    agg_cols: dict[str, dict[int, dict[tuple[int, str], float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    for p in pre_aggregated:
        cs = w0 + p.column / scale
        for n in p.nodes:
            agg_cols[n][p.column][(p.job_id, p.kind)] += p.busy_s
            busy[n].append((cs, cs + p.busy_s))
    drawn: dict[int, set[str]] = defaultdict(set)  # job -> the phase kinds drawn in its shades
    bars, aggregated = _bars(
        rows,
        frame,
        lane_y,
        colours,
        labels,
        aggregate=aggregate,
        busy=busy,
        agg_cols=agg_cols,
        masked=masked,
        drawn=drawn,
    )
    aggregates = _aggregates(agg_cols, lane_y, scale, colours, labels, drawn)
    bubbles = _bubbles(lanes, alloc_by_node, busy, frame, now, min_w=1.0 if aggregate else 0.5)
    delay_marks = _delays(delays, lane_y, frame, min_w=0.5)
    headline: tuple[PoolBubbles, ...] = ()
    if with_headline:
        # the database's per-job sums stand in for the short phases in the headline
        pseudo = [
            PhaseRow(0, s.job_id, 0, "", s.nodes, None, w0, w0 + s.busy_s, SUCCEEDED, "")
            for s in pre_job_sums
        ]
        headline = bubble_headline(rows + pseudo, pools, alloc_by_node, t0, t1, now)
    marks = {b.marker for b in bars if b.marker}
    marks |= {"failed"} if any(b.failed for b in bars) else set()
    marks |= {"profile"} if any(b.profile for b in bars) else set()
    marks |= {"bubble"} if bubbles else set()
    marks |= {"delay"} if delay_marks else set()
    return Timeline(
        title=title,
        t0=t0,
        t1=t1,
        width=width,
        height=int(bottom) + AXIS_H,
        plot_left=LEFT,
        plot_right=width - RIGHT,
        lanes=lanes,
        bars=tuple(bars),
        aggregates=tuple(aggregates),
        bubbles=tuple(bubbles),
        ticks=ticks(t0, t1, LEFT, plot_w),
        phase_count=len(rows) + pre_count,
        aggregated_count=aggregated + pre_count,
        legend=_legend(colours, labels, drawn),
        headline=headline,
        live=live,
        empty_message=""
        if rows or pre_aggregated
        else "Its phases in this window went to the archive."
        if archived
        else "No phase ran in this window.",
        pool_heads=heads,
        delays=tuple(delay_marks),
        kinds=frozenset(r.kind for r in rows) | frozenset(p.kind for p in pre_aggregated),
        has_failed="failed" in marks,
        has_profile="profile" in marks,
        marks=frozenset(marks),
    )


def _legend(
    colours: dict[int, JobShades], labels: dict[int, str], drawn: dict[int, set[str]]
) -> tuple[LegendJob, ...]:
    """Return a legend entry per job with something drawn, a swatch per kind drawn for it
    (a member with no phase in the window, or a kind it did not run, is not listed)."""
    return tuple(
        LegendJob(
            label=labels.get(jid, NO_LABEL),
            swatches=tuple((k, shades.of(k)) for k in PHASE_KINDS if k in drawn[jid])
            + tuple((k, shades.of(k)) for k in sorted(drawn[jid] - set(PHASE_KINDS))),
        )
        for jid, shades in colours.items()
        if drawn.get(jid)
    )


def bubble_headline(
    rows: Sequence[PhaseRow],
    pools: dict[str, str],
    alloc_by_node: Spans,
    t0: datetime,
    t1: datetime,
    now: datetime,
) -> tuple[PoolBubbles, ...]:
    """Return bubble fractions per pool now and if each member ran alone on dedicated pools.

    Alone, a job keeps its own rollout and training nodes for its whole iteration, so
    its rollout nodes idle during its training and vice versa: allocated node-seconds
    = its nodes per pool x (its rollout time + its training time), busy the same as now.
    """
    alloc_s: dict[str, float] = defaultdict(float)
    for n, spans in alloc_by_node.items():
        for a, b in spans:
            c = clip(a, b or now, t0, t1)
            if c:
                alloc_s[pools.get(n, "")] += (c[1] - c[0]).total_seconds()
    busy_s: dict[str, float] = defaultdict(float)
    job_time: dict[int, float] = defaultdict(float)  # phase seconds (both kinds) in window
    job_nodes: dict[tuple[int, str], set[str]] = defaultdict(set)
    lo, hi, now_ts = t0.timestamp(), t1.timestamp(), now.timestamp()
    for row in rows:
        jid, nodes, s, f = row.job_id, row.nodes, row.started, row.finished
        d = min(hi, now_ts if f is None else f) - max(lo, s)
        if d <= 0:
            continue
        job_time[jid] += d
        for n in nodes:
            pool = pools.get(n, "")
            busy_s[pool] += d
            job_nodes[(jid, pool)].add(n)
    out = []
    for pool in (ROLLOUT_POOL, TRAIN_POOL):
        alloc = alloc_s.get(pool, 0.0)
        busy = min(busy_s.get(pool, 0.0), alloc) if alloc else busy_s.get(pool, 0.0)
        solo_alloc = sum(len(job_nodes.get((jid, pool), ())) * t for jid, t in job_time.items())
        frac = (alloc - busy) / alloc if alloc > 0 else None
        solo_frac = (solo_alloc - busy_s.get(pool, 0.0)) / solo_alloc if solo_alloc > 0 else None
        reclaimed = None
        if solo_alloc > 0 and alloc > 0:
            solo_idle = solo_alloc - busy_s.get(pool, 0.0)
            now_idle = alloc - busy
            reclaimed = max(0.0, 1 - now_idle / solo_idle) if solo_idle > 0 else None
        out.append(
            PoolBubbles(
                pool=str(pool),
                allocated_node_s=alloc,
                busy_node_s=busy,
                bubble_fraction=frac,
                solo_bubble_fraction=solo_frac,
                reclaimed_share=reclaimed,
            )
        )
    return tuple(out)
