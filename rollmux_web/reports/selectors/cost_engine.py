"""The cost engine: who pays what for every node-second, in two halves.

`fetch_cost_inputs` reads the rows (allocations, members, jobs, pinned nodes, phases)
from the database; `accumulate` is pure arithmetic over those named rows (exact:
integer microseconds and Decimal money), testable without a database. `cost_lines`
runs both.

Cost split inside a co-execution group (documented on the cost page too):
1. a node costs its GPUs x price (price history) for every second it is allocated
   to the group, busy or idle;
2. each member pays the busy time of its own phases on that node;
3. the node's idle (bubble) time is shared by the members pinned to the node: the idle
   time of each moment evenly by the members present then (a member that has left pays
   nothing of what comes after, so a finished job's line is final; time with no member
   present goes to the node's members in proportion to how long each was one);
4. nothing is rounded here: every line carries its exact amounts (cost_figures rounds).

A job's profiling run (placement strategy `profile`, a group of its own: issue 13) is
billed to the job on lines of its own (stage `profile`), apart from its production run's
(stage `run`): the same arithmetic, keyed by the group's stage as well.

Every amount is GPUs x price x time through the core's `scheduler.costs.allocation_cost`
(`PriceBook.amount`, in Decimal), the arithmetic the simulator uses. The split itself
stays here rather than in `costs.share_node_cost`: a node's allocation here is cut at
price changes and day buckets, and overlapping phase records (which should not happen)
are scaled down to the allocation instead of refused.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import NamedTuple

from rollmux_web.inventory.selectors import PriceBook
from rollmux_web.reports.intervals import clip
from rollmux_web.reports.selectors._time import MICRO, us
from rollmux_web.reports.selectors.cost_fetch import fetch_cost_inputs
from rollmux_web.reports.selectors.cost_figures import (
    HOUR,
    ZERO,
    CostFigures,
    CostLine,
    cents,
    exact_arithmetic,
    hq,
)
from rollmux_web.reports.selectors.cost_rows import (
    STAGES,
    AllocRow,
    CostInputs,
    CostResult,
    CostWindow,
    JobRow,
    MemberRow,
    PhaseSpan,
)
from scheduler.collector import gc_paused

__all__ = [
    "STAGES",
    "AllocRow",
    "CostInputs",
    "CostResult",
    "CostWindow",
    "JobRow",
    "MemberRow",
    "PhaseSpan",
    "accumulate",
    "cost_lines",
    "fetch_cost_inputs",
]

# Every amount of a group that adds up over days is a multiple of 1 / KEPT_DENOMINATOR $
# (or GPU-hour): microseconds x GPUs x a price of four decimals / (10^6 x 3600 x 10^4),
# split evenly by at most 16 members (any n dividing lcm(1..16)); reports.cost_days keeps
# the numerators, exact integers that sum exactly.
KEPT_SPLITS = 720_720  # lcm(1, ..., 16)
KEPT_DENOMINATOR = 36 * 10**12 * KEPT_SPLITS

# --------------------------------------------------------------------------- accumulate


def split_buckets(
    span: tuple[int, int], buckets: Sequence[int]
) -> list[tuple[int, tuple[int, int]]]:
    """Cut a span at bucket boundaries: (bucket index, sub-span) pairs."""
    if not buckets:
        return []
    a, b = span
    out = []
    for i in range(max(0, bisect_right(buckets, a) - 1), len(buckets) - 1):
        lo, hi = buckets[i], buckets[i + 1]
        if lo >= b:
            break
        if hi > a:
            out.append((i, (max(a, lo), min(b, hi))))
    return out


@dataclass
class _Micros:
    """Microseconds per key, before pricing (step 3 and 4 of `accumulate`)."""

    node_info: dict[tuple[int, str], tuple[int, int, int]] = field(default_factory=dict)
    node_meta: dict[int, tuple[int, int]] = field(default_factory=dict)  # node -> gpus, type
    alloc_spans: dict[tuple[int, int], list[tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    alloc: dict[tuple[int, int, int], int] = field(default_factory=lambda: defaultdict(int))
    bucket_alloc: dict[tuple[int, int, int, int], int] = field(
        default_factory=lambda: defaultdict(int)
    )
    busy: dict[tuple[int, int, int, int], int] = field(default_factory=lambda: defaultdict(int))
    bucket_busy: dict[tuple[int, int, int, int, int], int] = field(
        default_factory=lambda: defaultdict(int)
    )
    # (job, stage, price segment) -> microseconds
    cf_roll: dict[tuple[int, str, int], int] = field(default_factory=lambda: defaultdict(int))
    cf_train: dict[tuple[int, str, int], int] = field(default_factory=lambda: defaultdict(int))
    # the co-located counterfactual's training-type time beyond cf_train (a co-located
    # rollout slower than on the rollout type)
    cf_coloc_extra: dict[tuple[int, str, int], int] = field(
        default_factory=lambda: defaultdict(int)
    )
    # (group, node) whose members came or went while it was allocated -> its membership
    # segments (start, end, jobs present); and the phases on it (job, start, end)
    segments: dict[tuple[int, int], list[tuple[int, int, frozenset[int]]]] = field(
        default_factory=dict
    )
    seg_phases: dict[tuple[int, int], list[tuple[int, int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )


def _allocated_time(inputs: CostInputs, w: CostWindow, prices: PriceBook, m: _Micros) -> None:
    """3. allocated time per (group, node), cut at price changes (and buckets)."""
    for gid, nid, name, gpus, tid, a, b in inputs.allocs:
        c = clip(a, b, w.lo, w.hi)
        if not c:
            continue
        m.node_info[(gid, name)] = (nid, gpus, tid)
        m.node_meta[nid] = (gpus, tid)
        m.alloc_spans[(gid, nid)].append(c)
        for seg, t in prices.split_us(tid, *c):
            m.alloc[(gid, nid, seg)] += t
        for bi, piece in split_buckets(c, w.buckets_us):
            for seg, t in prices.split_us(tid, *piece):
                m.bucket_alloc[(bi, gid, nid, seg)] += t


def _candidates(members: list[MemberRow], pinned_placements: set[int]) -> list[MemberRow]:
    """Return the members sharing a node's idle time: those pinned to it (else all)."""
    return [mb for mb in members if mb.placement_id in pinned_placements] or members


def _membership_segments(inputs: CostInputs, m: _Micros) -> None:
    """3b. for each (group, node) whose sharing members changed while it was allocated,
    cut its allocation where a member joined or left: (start, end, jobs present).

    A node whose members were all there for the whole allocation (the usual case) needs
    no cutting: its idle time is shared evenly, as before.
    """
    by_group: dict[int, list[MemberRow]] = defaultdict(list)
    for mb in inputs.members:
        by_group[mb.group_id].append(mb)
    for (gid, nid), spans in m.alloc_spans.items():
        cands = _candidates(by_group.get(gid, []), inputs.pinned.get(nid, set()))
        if not cands or all(
            mb.joined_us <= a and mb.left_us >= b for mb in cands for a, b in spans
        ):
            continue
        segs: list[tuple[int, int, frozenset[int]]] = []
        for a, b in spans:
            cuts = sorted(
                {a, b} | {t for mb in cands for t in (mb.joined_us, mb.left_us) if a < t < b}
            )
            for lo, hi in zip(cuts, cuts[1:], strict=False):
                present = frozenset(
                    mb.job_id for mb in cands if mb.joined_us <= lo and mb.left_us >= hi
                )
                segs.append((lo, hi, present))
        m.segments[(gid, nid)] = segs


def _busy_time(
    inputs: CostInputs, w: CostWindow, prices: PriceBook, m: _Micros, *, with_cf: bool
) -> None:
    """4. busy time per (group, node, job) from the phases, and the counterfactuals' time.

    The common case (one price over the range, a phase inside one bucket) is written
    out inline: this loop runs once per phase record and node.
    """
    lo, hi, buckets_us = w.lo, w.hi, w.buckets_us
    last_bucket = len(buckets_us) - 1
    # a GPU type whose price does not change inside the range needs no cutting per phase
    flat = {tid: prices.flat_index(tid, lo, hi) for tid in inputs.type_names}
    rollout_type, train_type = inputs.rollout_type, inputs.train_type
    roll_flat = None if rollout_type is None else flat.get(rollout_type)
    train_flat = None if train_type is None else flat.get(train_type)
    node_info, busy_us, bucket_busy_us = m.node_info, m.busy, m.bucket_busy
    cf_roll_us, cf_train_us = m.cf_roll, m.cf_train
    stage_of = inputs.stage
    segments, seg_phases = m.segments, m.seg_phases
    pieces: Sequence[tuple[int, tuple[int, int]]] = ()
    for gid, jid, phase_nodes, s, f, once, scale in inputs.phases:
        pa = s if s > lo else lo
        pb = hi if f is None or f > hi else f
        if pb <= pa:
            continue
        if buckets_us:
            bi = bisect_right(buckets_us, pa) - 1
            if 0 <= bi < last_bucket and pb <= buckets_us[bi + 1]:
                pieces = ((bi, (pa, pb)),)
            else:
                pieces = split_buckets((pa, pb), buckets_us)
        for name in phase_nodes:
            info = node_info.get((gid, name))
            if info is None:
                continue  # not allocated to this group in the range: costs nothing here
            nid, _gpus, tid = info
            if segments and (gid, nid) in segments:
                seg_phases[(gid, nid)].append((jid, pa, pb))
            one_price = flat.get(tid)
            if one_price is not None:
                busy_us[(gid, nid, jid, one_price)] += pb - pa
                for bi, (a, b) in pieces:
                    bucket_busy_us[(bi, gid, nid, jid, one_price)] += b - a
                continue
            for seg, t in prices.split_us(tid, pa, pb):
                busy_us[(gid, nid, jid, seg)] += t
            for bi, (a, b) in pieces:
                for seg, t in prices.split_us(tid, a, b):
                    bucket_busy_us[(bi, gid, nid, jid, seg)] += t
        # counterfactuals for the same work: alone, the job holds both its pools for
        # the duration of every one of its phases (trace-format.md, "Baselines")
        if with_cf and once:
            stage = stage_of(gid)
            if scale != 1.0:
                _scaled_counterfactuals(inputs, prices, m, (jid, stage), (pa, pb), scale)
                continue
            if roll_flat is not None:
                cf_roll_us[(jid, stage, roll_flat)] += pb - pa
            elif rollout_type is not None:
                for seg, t in prices.split_us(rollout_type, pa, pb):
                    cf_roll_us[(jid, stage, seg)] += t
            if train_flat is not None:
                cf_train_us[(jid, stage, train_flat)] += pb - pa
            elif train_type is not None:
                for seg, t in prices.split_us(train_type, pa, pb):
                    cf_train_us[(jid, stage, seg)] += t


def _scaled_counterfactuals(
    inputs: CostInputs,
    prices: PriceBook,
    m: _Micros,
    key: tuple[int, str],
    span: tuple[int, int],
    scale: float,
) -> None:
    """The counterfactuals of a co-located rollout at rollout speed factor 1 / `scale`: on
    dedicated pools both pools for `scale` x its time; co-located, what it took."""
    jid, stage = key
    if inputs.rollout_type is not None:
        for seg, t in prices.split_us(inputs.rollout_type, *span):
            m.cf_roll[(jid, stage, seg)] += round(t * scale)
    if inputs.train_type is not None:
        for seg, t in prices.split_us(inputs.train_type, *span):
            solo = round(t * scale)
            m.cf_train[(jid, stage, seg)] += solo
            m.cf_coloc_extra[(jid, stage, seg)] += t - solo


@dataclass
class _Money:
    """Step 4b: microseconds x price, once per key (Decimal: exact to the cent and beyond)."""

    alloc: dict[tuple[int, int], Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    group: dict[int, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    busy_s: dict[tuple[int, int, int], Decimal] = field(
        default_factory=lambda: defaultdict(Decimal)
    )
    busy: dict[tuple[int, int, int], Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    bucket_alloc: dict[tuple[int, int], dict[int, Decimal]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Decimal))
    )
    bucket_busy: dict[tuple[int, int, int, int], Decimal] = field(
        default_factory=lambda: defaultdict(Decimal)
    )
    # (job, GPU type, stage) -> exact cost
    cf_solo: dict[tuple[int, int, str], Decimal] = field(
        default_factory=lambda: defaultdict(Decimal)
    )
    cf_coloc: dict[tuple[int, int, str], Decimal] = field(
        default_factory=lambda: defaultdict(Decimal)
    )


def _price(inputs: CostInputs, m: _Micros, prices: PriceBook) -> _Money:
    """4b. price every microsecond count once per key."""
    out = _Money()
    for (gid, nid, seg), t in m.alloc.items():
        gpus, tid = m.node_meta[nid]
        amount = prices.amount(tid, seg, t, gpus)
        out.alloc[(gid, nid)] += amount
        out.group[gid] += amount
    for (gid, nid, jid, seg), t in m.busy.items():
        gpus, tid = m.node_meta[nid]
        out.busy[(gid, nid, jid)] += prices.amount(tid, seg, t, gpus)
        out.busy_s[(gid, nid, jid)] += t / MICRO
    # (group, node) -> bucket -> allocated cost: only the buckets a node was allocated in
    for (bi, gid, nid, seg), t in m.bucket_alloc.items():
        gpus, tid = m.node_meta[nid]
        out.bucket_alloc[(gid, nid)][bi] += prices.amount(tid, seg, t, gpus)
    for (bi, gid, nid, jid, seg), t in m.bucket_busy.items():
        gpus, tid = m.node_meta[nid]
        out.bucket_busy[(bi, gid, nid, jid)] += prices.amount(tid, seg, t, gpus)
    roll, train = inputs.rollout_type, inputs.train_type
    for (jid, stage, seg), t in m.cf_roll.items():
        job = inputs.jobs.get(jid)
        if job is not None and roll is not None:
            out.cf_solo[(jid, roll, stage)] += prices.amount(roll, seg, t, job.rollout_gpus)
    for (jid, stage, seg), t in m.cf_train.items():
        job = inputs.jobs.get(jid)
        if job is not None and train is not None:
            part = prices.amount(train, seg, t, job.train_gpus)
            out.cf_solo[(jid, train, stage)] += part
            out.cf_coloc[(jid, train, stage)] += part
    for (jid, stage, seg), t in m.cf_coloc_extra.items():
        job = inputs.jobs.get(jid)
        if job is not None and train is not None:
            out.cf_coloc[(jid, train, stage)] += prices.amount(train, seg, t, job.train_gpus)
    return out


def _idle_weights(
    members: list[MemberRow], pinned_placements: set[int], spans: list[tuple[int, int]]
) -> dict[int, int]:
    """Weight each job by its membership time (microseconds) overlapping the node's allocation."""
    weights: dict[int, int] = defaultdict(int)
    for _pl, _gid, jid, joined, left in _candidates(members, pinned_placements):
        for a, b in spans:
            overlap = min(left, b) - max(joined, a)
            if overlap > 0:
                weights[jid] += overlap
    return {j: w for j, w in weights.items() if w > 0}


def _segment_idle(
    segs: list[tuple[int, int, frozenset[int]]],
    phases: list[tuple[int, int, int]],
    window: tuple[int, int] | None,
    node: tuple[int, int],
    prices: PriceBook,
    weights: dict[int, int],
) -> dict[int, tuple[Decimal, Decimal]]:
    """Return each job's share of a node's idle time in `window` (None: all of it), as
    (cost, seconds): each membership segment's idle time (allocated minus its phases),
    split evenly by the members present; a segment with none goes by `weights`."""
    gpus, tid = node
    out: dict[int, tuple[Decimal, Decimal]] = {}
    wsum = sum(weights.values())
    for a, b, present in segs:
        if window is not None:
            a, b = max(a, window[0]), min(b, window[1])
        if b <= a:
            continue
        per_price: dict[int, int] = defaultdict(int)
        for seg, t in prices.split_us(tid, a, b):
            per_price[seg] += t
        for _jid, pa, pb in phases:
            lo, hi = max(a, pa), min(b, pb)
            if hi > lo:
                for seg, t in prices.split_us(tid, lo, hi):
                    per_price[seg] -= t
        idle = [(seg, max(t, 0)) for seg, t in per_price.items()]
        cost = sum((prices.amount(tid, seg, t, gpus) for seg, t in idle), ZERO)
        sec = Decimal(sum(t for _, t in idle)) / MICRO
        if not (cost or sec):
            continue
        shares = (
            {j: (Decimal(1), len(present)) for j in present}
            if present
            else {j: (Decimal(w), wsum) for j, w in weights.items()}
        )
        for j, (num, den) in shares.items():
            c, s_ = out.get(j, (ZERO, ZERO))
            out[j] = (c + cost * num / den, s_ + sec * num / den)
    return out


@dataclass
class _Shares:
    """Step 5's output: exact cost and GPU-hours per (job, GPU type, busy|idle), and the
    GPU-hours per (job, GPU type, stage, busy|idle) (a group has one stage)."""

    parts: dict[int, dict[tuple[int, int, str], Decimal]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Decimal))
    )  # group -> (job, type, busy|idle) -> exact cost
    hours: dict[tuple[int, int, str, str], Decimal] = field(
        default_factory=lambda: defaultdict(Decimal)
    )
    bucket_job: dict[tuple[int, int, str], Decimal] = field(
        default_factory=lambda: defaultdict(Decimal)
    )  # (bucket, job, busy|idle) -> exact cost
    # CostResult.dirty_groups, tail_groups, uneven_groups (`_additivity`)
    dirty: set[int] = field(default_factory=set)
    tail: set[int] = field(default_factory=set)
    uneven: set[int] = field(default_factory=set)


def _additivity(
    out: _Shares,
    gid: int,
    cands: list[MemberRow],
    weights: dict[int, int],
    segs: list[tuple[int, int, frozenset[int]]] | None,
    *,
    shrunk: bool,
) -> None:
    """Note whether a node's idle split over this window is the sum of its splits over
    the window's parts (reports.cost_days): each moment's idle time goes evenly to the
    members present then; idle time while none is present (`tail`) goes by membership
    weights, the same split over every part only while every member weighs the same
    (not `uneven`). Dirty: no member weighs (that idle time goes elsewhere), a job pinned
    twice (counted once in a segment, twice by weight), overlapping phases scaled down
    over the window, a tail split unevenly, or an even split by more members than the
    kept amounts' denominator divides by (KEPT_SPLITS)."""
    tail = segs is not None and not all(present for _a, _b, present in segs)
    uneven = len(weights) != len(cands) or len(set(weights.values())) > 1
    if tail:
        out.tail.add(gid)
    if uneven:
        out.uneven.add(gid)
    # (an even split by n is kept exactly only while n divides KEPT_SPLITS)
    sizes = {len(cands)} | {len(present) for _a, _b, present in segs or ()}
    odd = any(n and KEPT_SPLITS % n for n in sizes)
    if (
        shrunk
        or odd
        or not weights
        or len({mb.job_id for mb in cands}) != len(cands)
        or (tail and uneven)
    ):
        out.dirty.add(gid)


def _share_nodes(
    inputs: CostInputs,
    m: _Micros,
    money: _Money,
    prices: PriceBook,
    buckets_us: Sequence[int],
) -> _Shares:
    """5. busy cost to the phases' jobs, each node's idle cost among the members pinned to it."""
    out = _Shares()
    by_group: dict[int, list[MemberRow]] = defaultdict(list)
    for mb in inputs.members:
        by_group[mb.group_id].append(mb)
    busy_by_node: dict[tuple[int, int], list[int]] = defaultdict(list)
    for gid, nid, jid in money.busy_s:
        busy_by_node[(gid, nid)].append(jid)
    for (gid, nid), spans in m.alloc_spans.items():
        gpus, tid = m.node_meta[nid]
        total_alloc = money.alloc[(gid, nid)]
        alloc_sec = sum(b - a for a, b in spans) / MICRO
        jobs_busy = busy_by_node.get((gid, nid), [])
        busy_sum = sum((money.busy[(gid, nid, j)] for j in jobs_busy), Decimal(0))
        busy_sec_sum = sum((money.busy_s[(gid, nid, j)] for j in jobs_busy), Decimal(0))
        # phases overlapping on one node (should not happen) must not charge more than
        # the allocation: scale busy down so busy + idle = allocated, always
        # (x * 1 is x exactly: the usual case skips the multiplication)
        shrink = total_alloc / busy_sum if busy_sum > total_alloc and busy_sum > 0 else None
        shrink_s = alloc_sec / busy_sec_sum if busy_sec_sum > alloc_sec and busy_sec_sum else None
        gparts = out.parts[gid]
        stage = inputs.stage(gid)
        for j in jobs_busy:
            cost, sec = money.busy[(gid, nid, j)], money.busy_s[(gid, nid, j)]
            gparts[(j, tid, "busy")] += cost if shrink is None else cost * shrink
            out.hours[(j, tid, stage, "busy")] += (
                (sec if shrink_s is None else sec * shrink_s) * gpus / HOUR
            )
        idle_cost = total_alloc - min(busy_sum, total_alloc)
        idle_sec = alloc_sec - min(busy_sec_sum, alloc_sec)
        cands = _candidates(by_group.get(gid, []), inputs.pinned.get(nid, set()))
        weights = _idle_weights(by_group.get(gid, []), inputs.pinned.get(nid, set()), spans)
        segs = m.segments.get((gid, nid))
        _additivity(
            out, gid, cands, weights, segs, shrunk=shrink is not None or shrink_s is not None
        )
        if not weights and jobs_busy:
            weights = {j: 1 for j in jobs_busy}
        wsum = sum(weights.values())
        if segs is not None:
            # members came or went: each moment's idle time to the members present then
            phases = m.seg_phases.get((gid, nid), [])
            node = (gpus, tid)
            for j, (c, sec) in _segment_idle(segs, phases, None, node, prices, weights).items():
                gparts[(j, tid, "idle")] += c
                out.hours[(j, tid, stage, "idle")] += sec * gpus / HOUR
        else:
            for j, wt in weights.items():
                gparts[(j, tid, "idle")] += idle_cost * wt / wsum
                out.hours[(j, tid, stage, "idle")] += idle_sec * wt / wsum * gpus / HOUR
        if buckets_us:
            for bi, b_alloc in sorted(money.bucket_alloc.get((gid, nid), {}).items()):
                if not b_alloc:
                    continue
                b_busy = {j: money.bucket_busy.get((bi, gid, nid, j), ZERO) for j in jobs_busy}
                for j, v in b_busy.items():
                    out.bucket_job[(bi, j, "busy")] += v
                if segs is not None:
                    day = (buckets_us[bi], buckets_us[bi + 1])
                    for j, (c, _sec) in _segment_idle(
                        segs, m.seg_phases.get((gid, nid), []), day, (gpus, tid), prices, weights
                    ).items():
                        out.bucket_job[(bi, j, "idle")] += c
                    continue
                b_idle = b_alloc - min(sum(b_busy.values(), ZERO), b_alloc)
                for j, wt in weights.items():
                    out.bucket_job[(bi, j, "idle")] += b_idle * wt / wsum
    return out


def _lines(
    inputs: CostInputs, money: _Money, shares: _Shares, tenant_ids: set[int] | None
) -> list[CostLine]:
    """6-7. exact amounts per (job, GPU type, stage): a line per visible tenant's job, type
    and stage (its profiling run's apart from its production run's)."""
    exact_parts: dict[tuple[int, int, str, str], Decimal] = defaultdict(Decimal)
    line_groups: dict[tuple[int, int, str], set[int]] = defaultdict(set)
    for gid, gparts in shares.parts.items():
        stage = inputs.stage(gid)
        for (jid, tid, kind), v in gparts.items():
            exact_parts[(jid, tid, stage, kind)] += v
            line_groups[(jid, tid, stage)].add(gid)
    lines = []
    for jid, tid, stage in sorted(set(line_groups) | set(money.cf_solo)):
        job = inputs.jobs.get(jid)
        if job is None or (tenant_ids is not None and job.tenant_id not in tenant_ids):
            continue
        busy_h = shares.hours.get((jid, tid, stage, "busy"), ZERO)
        idle_h = shares.hours.get((jid, tid, stage, "idle"), ZERO)
        lines.append(
            CostLine(
                tenant_id=job.tenant_id,
                tenant=job.tenant,
                job_id=jid,
                job_name=job.name,
                gpu_type=inputs.type_names.get(tid, str(tid)),
                stage=stage,
                group_ids=sorted(line_groups.get((jid, tid, stage), ())),
                closed_us=job.closed_us,
                busy_gpu_hours=hq(busy_h),
                idle_gpu_hours=hq(idle_h),
                exact=CostFigures(
                    busy_gpu_hours=busy_h,
                    idle_gpu_hours=idle_h,
                    busy_cost=exact_parts.get((jid, tid, stage, "busy"), ZERO),
                    idle_cost=exact_parts.get((jid, tid, stage, "idle"), ZERO),
                    solo_disagg_cost=money.cf_solo.get((jid, tid, stage), ZERO),
                    colocated_cost=money.cf_coloc.get((jid, tid, stage), ZERO),
                ),
            )
        )
    # a job's profiling run first (it ran first), then its production run, by GPU type
    lines.sort(
        key=lambda ln: (ln.tenant, ln.job_name, ln.job_id, STAGES.index(ln.stage), ln.gpu_type)
    )
    return lines


@exact_arithmetic
def accumulate(
    inputs: CostInputs,
    window: CostWindow,
    prices: PriceBook,
    *,
    tenant_ids: set[int] | None,
    with_cf: bool,
) -> CostResult:
    """Return the exact cost lines of [window.lo, window.hi) from the rows (pure).

    3. allocated time per node and price, 3b. the membership segments of nodes whose
    members changed; 4. busy time per node, job and price (and the
    counterfactuals'), 4b. priced once per key; 5. idle cost shared among the members
    pinned to each node; 6-7. lines for visible tenants, group totals in cents and, with
    buckets, each (bucket, tenant)'s exact cost.
    """
    m = _Micros()
    _allocated_time(inputs, window, prices, m)
    _membership_segments(inputs, m)
    _busy_time(inputs, window, prices, m, with_cf=with_cf)
    money = _price(inputs, m, prices)
    shares = _share_nodes(inputs, m, money, prices, window.buckets_us)
    per_bucket: dict[tuple[int, int, str], Decimal] = defaultdict(Decimal)
    for (bi, jid, kind), v in shares.bucket_job.items():
        job = inputs.jobs.get(jid)
        if job is not None and (tenant_ids is None or job.tenant_id in tenant_ids):
            per_bucket[(bi, job.tenant_id, kind)] += v
    return CostResult(
        lines=_lines(inputs, money, shares, tenant_ids),
        group_costs={gid: cents(exact) for gid, exact in money.group.items()},
        group_exact=dict(money.group),
        per_bucket_tenant=dict(per_bucket),
        dirty_groups=shares.dirty,
        tail_groups=shares.tail,
        uneven_groups=shares.uneven,
    )


class DayAmount(NamedTuple):
    """A (group, job, GPU type)'s exact amounts over a window (`group_amounts`)."""

    group_id: int
    job_id: int
    tenant_id: int
    gpu_type_id: int
    stage: str
    has_parts: bool  # the line lists the group (it has a busy or idle part in it)
    figures: CostFigures


@exact_arithmetic
def group_amounts(
    inputs: CostInputs, window: CostWindow, prices: PriceBook
) -> tuple[list[DayAmount], dict[int, Decimal], _Shares]:
    """The engine's exact amounts over `window` per group, job, GPU type and stage (its
    lines before they are summed over groups), each group's allocated cost, and the groups
    whose idle split may not add up over days (`_Shares.dirty`, `tail`, `uneven`): what a closed
    day keeps (reports.cost_days). The same steps as `accumulate`, keyed by group."""
    inputs.by_group = True
    m = _Micros()
    _allocated_time(inputs, window, prices, m)
    _membership_segments(inputs, m)
    _busy_time(inputs, window, prices, m, with_cf=True)
    money = _price(inputs, m, prices)
    shares = _share_nodes(inputs, m, money, prices, ())
    keys: set[tuple[int, int, str]] = set()  # (job, type, "stage#group")
    parts: dict[tuple[int, int, str], dict[str, Decimal]] = defaultdict(dict)
    for gid, gparts in shares.parts.items():
        stage = inputs.stage(gid)
        for (jid, tid, kind), v in gparts.items():
            parts[(jid, tid, stage)][kind] = v
    keys.update(parts, money.cf_solo, money.cf_coloc)
    out = []
    for jid, tid, key in sorted(keys):
        job = inputs.jobs.get(jid)
        if job is None:
            continue
        stage, _, group = key.partition("#")
        got = parts.get((jid, tid, key), {})
        out.append(
            DayAmount(
                group_id=int(group),
                job_id=jid,
                tenant_id=job.tenant_id,
                gpu_type_id=tid,
                stage=stage,
                has_parts=bool(got) or (jid, tid, key) in parts,
                figures=CostFigures(
                    busy_gpu_hours=shares.hours.get((jid, tid, key, "busy"), ZERO),
                    idle_gpu_hours=shares.hours.get((jid, tid, key, "idle"), ZERO),
                    busy_cost=got.get("busy", ZERO),
                    idle_cost=got.get("idle", ZERO),
                    solo_disagg_cost=money.cf_solo.get((jid, tid, key), ZERO),
                    colocated_cost=money.cf_coloc.get((jid, tid, key), ZERO),
                ),
            )
        )
    return out, dict(money.group), shares


@gc_paused()
def cost_lines(
    *,
    tenant_ids: set[int] | None,
    t0: datetime,
    t1: datetime,
    now: datetime,
    prices: PriceBook,
    buckets: Sequence[datetime] = (),
    counterfactuals: bool | None = None,
    only_groups: set[int] | None = None,
    skip_groups: set[int] | None = None,
) -> CostResult:
    """Compute cost lines over [t0, t1) from the rows (allocations, placements, phase records
    and rollups); also per (bucket, tenant) costs when buckets are given. The report reads
    closed days' stored amounts first (`cost_stored.cost_lines`), this for the rest."""
    hi_dt = min(t1, now)
    if hi_dt <= t0:
        return CostResult()
    with_cf = not buckets if counterfactuals is None else counterfactuals  # none for burn-down
    # integer microseconds since the epoch: exact, and much cheaper than Decimal per phase
    window = CostWindow(
        lo=us(t0), hi=us(hi_dt), now_us=us(now), buckets_us=[us(b) for b in buckets]
    )
    inputs = fetch_cost_inputs(
        tenant_ids=tenant_ids,
        t0=t0,
        hi_dt=hi_dt,
        now_us=window.now_us,
        only_groups=only_groups,
        skip_groups=skip_groups,
    )
    if inputs is None:
        return CostResult()
    return accumulate(inputs, window, prices, tenant_ids=tenant_ids, with_cf=with_cf)
