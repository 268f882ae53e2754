"""Gantt queries: a group's or a job's phases in a window, handed to `reports.timeline`."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import F, Q

from rollmux_web.accounts.access import member_hidden, member_label, visible_tenant_ids
from rollmux_web.inventory.models import Node
from rollmux_web.jobs.models import Job
from rollmux_web.reports.selectors._sql import NODES_TXT, epoch, epoch_fields, nodes
from rollmux_web.reports.selectors._time import now_or, parse_window
from rollmux_web.reports.timeline import (
    BAR_LIMIT,
    DEFAULT_WIDTH,
    DELAY_MIN_S,
    LEFT,
    RIGHT,
    JobBusy,
    PhaseRow,
    PreAggregated,
    ReportDelay,
    Spans,
    Timeline,
    build_timeline,
    drawn_width,
)
from rollmux_web.workflow.access import group_get_for_user, group_member_refs, job_get_for_user
from rollmux_web.workflow.models import (
    ArchivedJob,
    ExecutionGroup,
    NodeAllocation,
    PhaseRecord,
    Placement,
    Strategy,
)


def group_window(
    group: ExecutionGroup, *, now: datetime | None = None
) -> tuple[datetime, datetime]:
    """Return the group's whole life: first allocation or phase to release (or now)."""
    first_alloc = (
        NodeAllocation.objects.filter(group=group).order_by("start").values_list("start", flat=True)
    ).first()
    first_phase = (
        PhaseRecord.objects.filter(group=group, started_at__isnull=False)
        .order_by("started_at")
        .values_list("started_at", flat=True)
        .first()
    )
    starts = [t for t in (first_alloc, first_phase, group.created_at) if t is not None]
    t0 = min(starts)
    t1 = group.released_at if group.released_at is not None else now_or(now)
    last = (
        PhaseRecord.objects.filter(group=group, finished_at__isnull=False)
        .order_by("-finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )
    if last is not None and last > t1:
        t1 = last
    if t1 <= t0:
        t1 = t0 + timedelta(minutes=1)
    return t0, t1


def job_window(job: Job, *, now: datetime | None = None) -> tuple[datetime, datetime]:
    """Return the job's whole life: its first phase start (or submission) to its end (or now)."""
    first = (
        PhaseRecord.objects.filter(job=job, started_at__isnull=False)
        .order_by("started_at")
        .values_list("started_at", flat=True)
        .first()
    )
    last = (
        PhaseRecord.objects.filter(job=job, finished_at__isnull=False)
        .order_by("-finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )
    t0 = first or job.submitted_at
    t1 = now_or(now) if not job.is_terminal else (last or job.finished_at or now_or(now))
    if last and last > t1:
        t1 = last
    if t1 <= t0:
        t1 = t0 + timedelta(minutes=1)
    return t0, t1


def phase_rows(flt: Q, t0: datetime | None, t1: datetime | None) -> list[PhaseRow]:
    """Query only the phases overlapping the window (uses the (group, started_at) index).

    Times come back as float epoch seconds.
    """
    qs = PhaseRecord.objects.filter(flt, started_at__isnull=False)
    if t1 is not None:
        qs = qs.filter(started_at__lt=t1)
    if t0 is not None:
        qs = qs.filter(Q(finished_at__gt=t0) | Q(finished_at__isnull=True))
    annotations, (s_col, f_col) = epoch_fields(exact=False)
    rows = (
        qs.annotate(nodes_txt=NODES_TXT, **annotations)
        .order_by("started_at", "id")
        .values_list(
            "id",
            "job_id",
            "iteration",
            "kind",
            "nodes_txt",
            "warm_start",
            s_col,
            f_col,
            "state",
            "outcome",
            "placement__strategy",
            "metrics__tail_released",
            "ray_node_ids",
            "gpu_ids",
            "bytes_moved",
        )
    )
    if annotations:
        out = [
            PhaseRow._make(
                (*r[:4], nodes(r[4]), *r[5:10], r[10] == Strategy.PROFILE, r[12] or None)
                + (r[13] or None, r[14])
            )
            for r in rows
        ]
    else:
        out = [
            PhaseRow._make(
                (
                    *r[:4],
                    nodes(r[4]),
                    r[5],
                    epoch(r[6], exact=False),
                    epoch(r[7], exact=False),
                    *r[8:10],
                    r[10] == Strategy.PROFILE,
                    r[12] or None,
                    r[13] or None,
                    r[14],
                )
            )
            for r in rows
        ]
    released = [r[11] for r in rows]
    if not any(released):
        return out
    return [cut for row, rel in zip(out, released, strict=True) for cut in tail_cut(row, rel)]


def tail_cut(row: PhaseRow, released: dict[str, float] | None) -> list[PhaseRow]:
    """Return the row as drawn: a rollout that migrated its tail (long-tail migration)
    held the nodes it handed over only until then (`tail_released`: node -> seconds after
    its start), so it is one bar on the nodes it kept and a shorter one on each other."""
    if not released:
        return [row]
    kept = tuple(n for n in row.nodes if n not in released)
    out = [row._replace(nodes=kept)] if kept else []
    for n in row.nodes:
        if n in released:
            end = row.started + float(released[n])
            if row.finished is not None:
                end = min(end, row.finished)
            out.append(row._replace(nodes=(n,), finished=end))
    return out


def report_delays(flt: Q, t0: datetime, t1: datetime) -> list[ReportDelay]:
    """Return the phases in the window whose end reached the controller late: recovered by
    reconcile after a lost report, or applied over DELAY_MIN_S after the host's end stamp
    (the workflow records both: PhaseRecord.reported_at, .recovered)."""
    late = Q(recovered=True) | Q(reported_at__gt=F("finished_at") + timedelta(seconds=DELAY_MIN_S))
    rows = (
        PhaseRecord.objects.filter(flt, finished_at__isnull=False, reported_at__isnull=False)
        .filter(finished_at__lt=t1, reported_at__gt=t0)
        .filter(late)
        .annotate(nodes_txt=NODES_TXT)
        .values_list("nodes_txt", "finished_at", "reported_at", "recovered")
    )
    return [
        ReportDelay(nodes(raw), f.timestamp(), max(r, f).timestamp(), bool(rec))
        for raw, f, r, rec in rows
        if f is not None and r is not None
    ]


def window_is_live(active: bool, t1: datetime, now: datetime) -> bool:
    """Return whether a chart shows the present: its object still runs and the window
    reaches now (a zoomed past window is history: no "now", no polling)."""
    return active and t1 >= now - timedelta(seconds=1)


def group_labels(user: Any, group: ExecutionGroup) -> tuple[dict[int, str], frozenset[int]]:
    """Return each member's label for this viewer (`accounts.access.member_label`) and the
    members shown without identity (other tenants' jobs)."""
    viewer = visible_tenant_ids(user)
    refs = group_member_refs([group.pk]).get(group.pk, {})
    labels = {jid: member_label(ref, viewer) for jid, ref in refs.items()}
    return labels, frozenset(jid for jid, ref in refs.items() if member_hidden(ref, viewer))


def group_timeline(
    *,
    user: Any,
    group_id: int,
    start: str | None = None,
    end: str | None = None,
    width: int = DEFAULT_WIDTH,
    now: datetime | None = None,
    group: ExecutionGroup | None = None,
) -> Timeline:
    """Return the Gantt geometry of a group: one lane per node, one bar per phase record.

    `group`, if given, is the row the caller already checked with `group_get_for_user`.
    """
    if group is None or group.pk != group_id:
        group = group_get_for_user(user=user, group_id=group_id)
    now_ = now_or(now)
    t0, t1 = parse_window(start, end, default=lambda: group_window(group, now=now_))
    # 1. lanes: every node ever allocated to the group, rollout pool first
    pools: dict[str, str] = {}
    alloc_by_node: Spans = defaultdict(list)
    for name, kind, a, b in NodeAllocation.objects.filter(group=group).values_list(
        "node__name", "node__cluster__kind", "start", "end"
    ):
        pools[name] = kind
        alloc_by_node[name].append((a, b))
    rows, pre, sums = _group_phase_rows(group.pk, t0, t1, width)
    labels, masked = group_labels(user, group)
    # a member present in the window whose phases were archived: its busy time is gone
    # from the rows, so the allocations alone would read as idle (100% bubble)
    archived = (
        Placement.objects.filter(group=group, created_at__lt=t1, job__archive__isnull=False)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=t0))
        .exists()
    )
    return build_timeline(
        title=f"Group {group.pk}",
        rows=rows,
        pre_aggregated=pre,
        pre_job_sums=sums,
        pools=pools,
        alloc_by_node=alloc_by_node,
        labels=labels,
        masked=masked,
        t0=t0,
        t1=t1,
        width=width,
        now=now_,
        live=window_is_live(group.released_at is None, t1, now_),
        with_headline=True,
        delays=report_delays(Q(group_id=group.pk), t0, t1),
        archived=archived,
    )


def job_timeline(
    *,
    user: Any,
    job_id: int,
    start: str | None = None,
    end: str | None = None,
    width: int = DEFAULT_WIDTH,
    now: datetime | None = None,
) -> Timeline:
    """Return the Gantt geometry of one job: its phases on the nodes they ran on."""
    job = job_get_for_user(user=user, job_id=job_id)
    now_ = now_or(now)
    t0, t1 = parse_window(start, end, default=lambda: job_window(job, now=now_))
    rows = phase_rows(Q(job_id=job.pk), t0, t1)
    node_names = {n for r in rows for n in r.nodes}
    pools = dict(Node.objects.filter(name__in=node_names).values_list("name", "cluster__kind"))
    return build_timeline(
        title=f"Job {job.name}",
        rows=rows,
        pools=pools,
        alloc_by_node={},
        labels={job.pk: job.name},
        t0=t0,
        t1=t1,
        width=width,
        now=now_,
        live=window_is_live(not job.is_terminal, t1, now_),
        with_headline=False,
        delays=report_delays(Q(job_id=job.pk), t0, t1),
        archived=not rows and ArchivedJob.objects.filter(job_id=job.pk).exists(),
    )


def _group_phase_rows(
    group_id: int, t0: datetime, t1: datetime, width: int
) -> tuple[list[PhaseRow], list[PreAggregated], list[JobBusy]]:
    """Return a group's phases in the window: rows to draw, and pre-aggregated short ones.

    With many phases in the window (PostgreSQL), phases shorter than a pixel are
    summed per lane and pixel column in the database (coloured by the column's
    longest phase), and per job and lane for the headline, so a group with 10,000
    phases sends back at most lanes x columns sums instead of every row; the others
    come back one row per phase as usual.
    """
    flt = Q(group_id=group_id)
    if connection.vendor != "postgresql":
        return phase_rows(flt, t0, t1), [], []
    count = (
        PhaseRecord.objects.filter(flt, started_at__isnull=False, started_at__lt=t1)
        .filter(Q(finished_at__gt=t0) | Q(finished_at__isnull=True))
        .count()
    )
    if count <= BAR_LIMIT:
        return phase_rows(flt, t0, t1), [], []
    plot_w = drawn_width(width) - LEFT - RIGHT
    px = (t1 - t0).total_seconds() / plot_w
    pixel = timedelta(seconds=px)
    rows = phase_rows(
        flt & (Q(finished_at__isnull=True) | Q(finished_at__gte=F("started_at") + pixel)), t0, t1
    )
    table = PhaseRecord._meta.db_table
    clipped = "EXTRACT(EPOCH FROM LEAST(finished_at, %s) - GREATEST(started_at, %s))"
    where = f"""
        FROM {table}
        WHERE group_id = %s AND started_at IS NOT NULL AND started_at < %s
          AND finished_at > %s AND finished_at < started_at + %s"""
    where_params: list[Any] = [group_id, t1, t0, pixel]
    with connection.cursor() as cur:
        # one sum per lane and pixel column, coloured by its longest phase
        cur.execute(
            f"""
            SELECT node_names::text,
                   floor((EXTRACT(EPOCH FROM GREATEST(started_at, %s)) - %s) / %s)::int,
                   sum({clipped}), count(*),
                   (array_agg(job_id ORDER BY finished_at - started_at DESC))[1],
                   (array_agg(kind ORDER BY finished_at - started_at DESC))[1]
            {where}
            GROUP BY 1, 2
            """,  # noqa: S608 - the table name is the model's own, every value a parameter
            [t0, t0.timestamp(), px, t1, t0, *where_params],
        )
        pre = [
            PreAggregated(jid, kind, nodes(raw), int(col), float(busy), int(n))
            for raw, col, busy, n, jid, kind in cur.fetchall()
        ]
        # busy time per job and node list, for the bubble headline
        cur.execute(
            f"SELECT node_names::text, job_id, sum({clipped}) {where} GROUP BY 1, 2",  # noqa: S608
            [t1, t0, *where_params],
        )
        sums = [JobBusy(jid, nodes(raw), float(busy)) for raw, jid, busy in cur.fetchall()]
    return rows, pre, sums
