"""The cost engine's reads: the rows of a report range (allocations, members, jobs, pinned
nodes) and its phases as spans: from daily rollups (workflow.rollups: the same spans, summed
per elementary segment) for archived jobs and for every job's days before the rollup
watermark (workflow.services.rollup_days), from raw phase records only from the watermark
on; the engine's figures are the same to the cent on either side of either boundary."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from functools import lru_cache
from itertools import chain
from typing import Any

from django.db.models import Q

from rollmux_web.id_sql import in_ids
from rollmux_web.inventory.models import Cluster, GpuType, PoolKind
from rollmux_web.jobs.models import TERMINAL_STATUSES
from rollmux_web.reports.selectors._sql import (
    NODES_TXT,
    cursor_iter,
    epoch_fields,
    json_key_txt,
    nodes,
    us_fields,
)
from rollmux_web.reports.selectors._time import us
from rollmux_web.reports.selectors.cost_rows import (
    AllocRow,
    CostInputs,
    JobRow,
    MemberRow,
    PhaseSpan,
)
from rollmux_web.workflow.models import (
    NodeAllocation,
    PhaseRecord,
    PhaseRollup,
    Placement,
    Strategy,
    rolled_up_to,
)
from rollmux_web.workflow.rollups import synthetic_spans

# --------------------------------------------------------------------------- fetch


def _pool_types() -> tuple[int | None, int | None]:
    """Return the GPU type ids of the rollout pool and the training pool."""
    kinds = dict(Cluster.objects.order_by("-id").values_list("kind", "gpu_type_id"))
    return kinds.get(PoolKind.ROLLOUT), kinds.get(PoolKind.TRAIN)


def fetch_cost_inputs(
    *,
    tenant_ids: set[int] | None,
    t0: datetime,
    hi_dt: datetime,
    now_us: int,
    only_groups: set[int] | None = None,
    skip_groups: set[int] | None = None,
) -> CostInputs | None:
    """Read the rows of [t0, hi_dt): None when no group was allocated in it.

    1. groups in scope: allocated in the range and (for a researcher) with a visible
    member; 2. their members with their jobs, and the nodes they are pinned to; the
    phases come as a lazy iterator (tens of thousands of rows, read in chunks).
    `only_groups` / `skip_groups` narrow the groups (the stored closed days' caller).
    """
    alloc_qs = NodeAllocation.objects.filter(start__lt=hi_dt).filter(
        Q(end__gt=t0) | Q(end__isnull=True)
    )
    if only_groups is not None:
        alloc_qs = alloc_qs.filter(in_ids("group_id", only_groups))
    if skip_groups:
        alloc_qs = alloc_qs.exclude(group_id__in=skip_groups)
    if tenant_ids is not None:
        alloc_qs = alloc_qs.filter(group__placements__job__tenant_id__in=tenant_ids).distinct()
    ann, native = us_fields(a_us="start", b_us="end")
    cols = ("group_id", "node_id", "node__name", "node__gpus", "node__gpu_type_id")
    allocs = [
        AllocRow._make(r if native else (*r[:5], us(r[5]), None if r[6] is None else us(r[6])))
        for r in (
            alloc_qs.annotate(**ann).values_list(*cols, *ann)
            if native
            else alloc_qs.values_list(*cols, "start", "end")
        )
    ]
    group_ids = {a.group_id for a in allocs}
    if not group_ids:
        return None
    ann, _ = us_fields(c_us="created_at", e_us="ended_at")
    job_cols = ("job__name", "job__tenant_id", "job__tenant__name")
    gpu_cols = ("job__rollout_gpus", "job__train_gpus")
    members: list[MemberRow] = []
    jobs: dict[int, JobRow] = {}
    profile_groups: set[int] = set()
    last_left: dict[int, int] = {}
    for pl_id, gid, jid, strategy, created, ended, status, finished, *job in (
        Placement.objects.filter(in_ids("group_id", group_ids))
        .annotate(**ann)
        .values_list(
            "id",
            "group_id",
            "job_id",
            "strategy",
            *(ann or ("created_at", "ended_at")),
            "job__status",
            "job__finished_at",
            *job_cols,
            *gpu_cols,
        )
    ):
        if not native:
            created, ended = us(created), None if ended is None else us(ended)
        members.append(MemberRow(pl_id, gid, jid, created, now_us if ended is None else ended))
        last_left[jid] = max(last_left.get(jid, 0), now_us if ended is None else ended)
        closed = None
        if status in TERMINAL_STATUSES:
            # (a job marked finished with no end time: its last placement's end)
            closed = us(finished) if finished is not None else last_left[jid]
        jobs[jid] = JobRow(jid, *job, closed_us=closed)  # type: ignore[misc]
        if strategy == Strategy.PROFILE:
            profile_groups.add(gid)
    pinned: dict[int, set[int]] = defaultdict(set)
    for through in (Placement.rollout_nodes.through, Placement.train_nodes.through):
        for pl_id, node_id in through.objects.filter(
            in_ids("placement__group_id", group_ids)
        ).values_list("placement_id", "node_id"):
            pinned[node_id].add(pl_id)
    rollout_type, train_type = _pool_types()
    mark = rolled_up_to()  # read once: the raw rows and the rollups meet there
    return CostInputs(
        allocs=allocs,
        members=members,
        jobs=jobs,
        pinned=pinned,
        type_names=dict(GpuType.objects.values_list("id", "name")),
        rollout_type=rollout_type,
        train_type=train_type,
        phases=chain(
            _phase_spans(group_ids, t0, hi_dt, native=native, mark=mark),
            rollup_spans(group_ids, t0, hi_dt, mark=mark),
        ),
        profile_groups=frozenset(profile_groups),
    )


def _phase_spans(
    group_ids: set[int], t0: datetime, hi_dt: datetime, *, native: bool, mark: datetime | None
) -> Iterator[PhaseSpan]:
    """The raw phase records' spans from the rollup watermark on (its days before are in
    the rollups: `rollup_spans`), all of them when there is none."""
    if mark is None or mark <= t0:
        yield from _raw_spans(group_ids, t0, hi_dt, native=native)
        return
    if mark >= hi_dt:
        return
    lo = us(mark)
    for span in _raw_spans(group_ids, mark, hi_dt, native=native):
        if span.start_us < lo:
            if span.end_us is not None and span.end_us <= lo:
                continue  # a hand-over span that ended before the watermark
            span = span._replace(start_us=lo)
        yield span


def _raw_spans(
    group_ids: set[int], t0: datetime, hi_dt: datetime, *, native: bool
) -> Iterator[PhaseSpan]:
    annotations, (s_col, f_col) = epoch_fields(exact=True)
    # (the two metrics as JSON text: a day of a fleet is ~20,000 phases, whose JSON
    # converters and Django's per-row iterator took longer than the query)
    rows = (
        PhaseRecord.objects.filter(in_ids("group_id", group_ids), started_at__isnull=False)
        .filter(started_at__lt=hi_dt)
        .filter(Q(finished_at__gt=t0) | Q(finished_at__isnull=True))
        .annotate(
            nodes_txt=NODES_TXT,
            released_txt=json_key_txt("tail_released"),
            factor_txt=json_key_txt("rollout_speed_factor"),
            **annotations,
        )
        .values_list("group_id", "job_id", "nodes_txt", s_col, f_col, "released_txt", "factor_txt")
    )
    for gid, jid, raw, s, f, released_txt, factor_txt in cursor_iter(rows):
        factor = _json_scalar(factor_txt)
        released = None if released_txt is None else json.loads(released_txt)
        scale = 1.0 / float(factor) if factor else 1.0
        if native:
            span = PhaseSpan(gid, jid, nodes(raw), s, f, True, scale)
        else:
            a, b = us(s), None if f is None else us(f)
            span = PhaseSpan(gid, jid, nodes(raw), a, b, True, scale)
        if released:
            yield from _tail_spans(span, released)
        else:
            yield span


@lru_cache(maxsize=256)
def _json_scalar(text: str | None) -> Any:
    """A JSON scalar's value from its text (None: absent); phases share a few factors."""
    return None if text is None else json.loads(text)


def _tail_spans(span: PhaseSpan, released: dict[str, float]) -> Iterator[PhaseSpan]:
    """A rollout that migrated its tail (long-tail migration) was busy on the nodes it
    handed over only until then (`tail_released`: node -> seconds after its start)."""
    gid, jid, names, s, f, _, scale = span
    kept = tuple(n for n in names if n not in released)
    # the counterfactuals count the phase once, over its whole length (the kept span's, or
    # an empty-node span's when it kept none)
    yield PhaseSpan(gid, jid, kept, s, f, True, scale)
    for n in names:
        if n in released:
            end = s + round(float(released[n]) * 1_000_000)
            yield PhaseSpan(gid, jid, (n,), s, end if f is None else min(end, f), False)


def rollup_spans(
    group_ids: set[int], t0: datetime, hi_dt: datetime, *, mark: datetime | None
) -> Iterator[PhaseSpan]:
    """The archived phases of these groups in [t0, hi_dt), as spans (from their rollups).

    A rollup row is the busy time of one elementary segment (workflow.rollups): read as a
    span from the segment's start it adds the same microseconds to the same keys as the
    phase records it replaces (a job is archived whole; the watermark's days before it).
    """
    qs = PhaseRollup.objects.filter(
        in_ids("group_id", group_ids), seg_start__lt=hi_dt, seg_end__gt=t0
    )
    # the days from the watermark on: only archived jobs' (the others' are raw rows; a
    # day rolled up after `mark` was read is still read raw)
    after = Q(job__archive__isnull=False)
    if mark is None or mark < hi_dt:  # (a range before the watermark takes every row:
        # without the join to archives PostgreSQL reads the groups' rows by index)
        qs = qs.filter(after if mark is None else Q(seg_start__lt=mark) | after)
    # (the segment's ends as epoch microseconds and its node list as text, parsed once per
    # distinct list: a month's ~56,000 rows at a fleet's size spent more in the driver's
    # datetime and JSON parsing than in the query)
    ann, native = us_fields(a_us="seg_start", b_us="seg_end")
    a_col, b_col = ("a_us", "b_us") if native else ("seg_start", "seg_end")
    rows = qs.annotate(nodes_txt=NODES_TXT, **ann).values_list(
        "group_id", "job_id", "nodes_txt", a_col, b_col, "busy_us", "counterfactual",
        "solo_scale",
    )  # fmt: skip
    for gid, jid, raw, a, b, busy, once, scale in cursor_iter(rows):
        names = nodes(raw)
        a_us, b_us = (a, b) if native else (us(a), us(b))
        for s, f in synthetic_spans(busy, a_us, b_us):
            yield PhaseSpan(gid, jid, names, s, f, once, scale)
