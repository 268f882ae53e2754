"""Roll up every job's closed days, not only archived jobs' (issue 25, pages at size).

A global watermark (`RollupWatermark`, one row: "every phase's time before day D is in
PhaseRollup") moves forward one closed UTC day at a time. Rolling up day D reads the phase
records overlapping [D, D + 1) and writes their rollups clipped to that day
(`rollups.rollup` with a window: the same elementary segments as an archived job's, so
the same figures to the cent), then sets the watermark to D + 1, in one transaction that
holds the watermark's row lock. The cost report and tenant usage (workflow.usage) read
rollups for the days before the watermark and raw rows only from it on.

- Idempotent: a day is rolled up only when the watermark is at it; a crash rolls the
  day's transaction back whole.
- Archiving (services.retention) takes the same row lock and rolls up only its jobs' days
  from the watermark on: a day is never rolled up twice.
- A day is closed once GRACE has passed after its end (a phase's start is stamped when it
  starts, its end when its report comes in: a late report reopens nothing after GRACE).
- A price recorded later with an effective time before the watermark is not applied to
  the rolled-up days (as for archived jobs: docs/operations.md, "Retention and archives").
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Min, Q

from rollmux_web.epoch_sql import epoch_us
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job
from rollmux_web.workflow.models import (
    JobSloSummary,
    PhaseRecord,
    PhaseRollup,
    PhaseState,
    Placement,
    RollupWatermark,
    Strategy,
    rolled_up_to,
)
from rollmux_web.workflow.rollups import from_us, slo_summary, to_us
from rollmux_web.workflow.services.retention import rollup_rows

log = logging.getLogger(__name__)
GRACE = timedelta(hours=1)
DAYS_PER_RUN = 3
SUMMARY_BATCH = 500
PHASE_COLS = (
    "group_id", "job_id", "kind", "node_names", "started_at", "finished_at", "metrics",
)  # fmt: skip


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def last_closed_day(now: datetime) -> date:
    """The day after the last day closed at `now` (the watermark's highest value)."""
    return (now - GRACE).astimezone(UTC).date()


def _first_day() -> date | None:
    """Where a watermark starts: the first day a phase still in the table ran."""
    first = PhaseRecord.objects.filter(started_at__isnull=False).aggregate(t=Min("started_at"))
    return None if first["t"] is None else first["t"].astimezone(UTC).date()


def roll_day(day: date, *, now: datetime) -> int | None:
    """Roll up `day` if the watermark is at it (or absent and `day` is the first): the
    number of rollup rows written, None when it was not the watermark's day."""
    lo, hi = _midnight(day), _midnight(day + timedelta(days=1))
    with transaction.atomic():
        mark = RollupWatermark.objects.select_for_update().filter(pk=1).first()
        if (mark is not None and mark.day != day) or hi > _midnight(last_closed_day(now)):
            return None
        phases = list(
            PhaseRecord.objects.filter(started_at__isnull=False, started_at__lt=hi)
            .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=lo))
            .values(*PHASE_COLS)
        )
        job_ids = {p["job_id"] for p in phases}
        jobs: dict[int, dict[str, Any]] = {
            j["id"]: dict(j)
            for j in Job.objects.filter(pk__in=job_ids).values(
                "id", "tenant_id", "rollout_gpus", "train_gpus"
            )
        }
        rows = rollup_rows(phases, jobs, (to_us(lo), to_us(hi)))
        PhaseRollup.objects.bulk_create(rows, batch_size=2000)
        RollupWatermark.objects.update_or_create(
            pk=1, defaults={"day": day + timedelta(days=1), "updated_at": now}
        )
    log.info("rolled up %s: %d phases into %d rows", day, len(phases), len(rows))
    return len(rows)


def advance(now: datetime, *, max_days: int = DAYS_PER_RUN) -> list[date]:
    """Roll up at most `max_days` closed days from the watermark, then summarise the jobs
    that finished before it (the beat task's body)."""
    done: list[date] = []
    for _ in range(max_days):
        day = RollupWatermark.objects.filter(pk=1).values_list("day", flat=True).first()
        day = day or _first_day()
        if day is None or roll_day(day, now=now) is None:
            break
        done.append(day)
    summarise_jobs()
    return done


def _due(mark: datetime, limit: int) -> list[int]:
    """Return the first `limit` finished jobs, by (finished_at, id), that ended before the
    watermark `mark` with every phase ended before it too, not summarised nor archived.

    Candidates are walked in that order a chunk at a time and their late phases looked up
    for the chunk only: as one query with NOT EXISTS, PostgreSQL checked every candidate's
    phases (~80,000 jobs' at a fleet's size) before sorting and keeping 500 (10-20 s)."""
    base = Job.objects.filter(
        status__in=TERMINAL_STATUSES,
        finished_at__lt=mark,
        slo_summary__isnull=True,
        archive__isnull=True,
    ).order_by("finished_at", "id")
    out: list[int] = []
    after: tuple[Any, int] | None = None
    while len(out) < limit:
        qs = base
        if after is not None:
            qs = qs.filter(Q(finished_at__gt=after[0]) | Q(finished_at=after[0], id__gt=after[1]))
        chunk = list(qs.values_list("id", "finished_at")[: 2 * limit])
        if not chunk:
            break
        ids = [jid for jid, _ in chunk]
        # (a job with a phase that never ended, or ended after the watermark, waits)
        late = set(
            PhaseRecord.objects.filter(job_id__in=ids, started_at__isnull=False)
            .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=mark))
            .values_list("job_id", flat=True)
        )
        out.extend(jid for jid in ids if jid not in late)
        after = (chunk[-1][1], chunk[-1][0])
    return out[:limit]


def summarise_jobs(*, limit: int = SUMMARY_BATCH) -> int:
    """Keep the SLO inputs (`JobSloSummary`) of at most `limit` finished jobs whose phases
    all ended before the watermark (not archived: ArchivedJob keeps theirs). Safe to run
    twice: a job summarised already is skipped, and one summary is one row."""
    mark = rolled_up_to()
    if mark is None:
        return 0
    ids = _due(mark, limit)
    profile_pl = set(
        Placement.objects.filter(job_id__in=ids, strategy=Strategy.PROFILE).values_list(
            "id", flat=True
        )
    )
    by_job: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    # (times as epoch microseconds from the database: a batch is ~50,000 phase records,
    # whose timestamps took longer to parse than the query; `to_us` elsewhere)
    times = {"s_us": epoch_us("started_at"), "f_us": epoch_us("finished_at")}
    exact = connection.vendor == "postgresql"
    phases = PhaseRecord.objects.filter(job_id__in=ids, started_at__isnull=False)
    cols = ("job_id", "placement_id", "iteration", "kind", "state")
    if exact:
        rows_us: Iterable[tuple[Any, ...]] = phases.annotate(**times).values_list(
            *cols, "s_us", "f_us"
        )
    else:
        rows_us = (
            (*row, to_us(a), None if b is None else to_us(b))
            for *row, a, b in phases.values_list(*cols, "started_at", "finished_at")
        )
    for row in rows_us:
        by_job[row[0]].append(row[1:])
    rows = []
    for jid in ids:
        mine = by_job.get(jid, [])
        s = slo_summary(
            (
                (pl, it, kind, a, b)
                for pl, it, kind, state, a, b in mine
                if state == PhaseState.SUCCEEDED and b is not None and pl not in profile_pl
            ),
            ((a, b) for *_, a, b in mine),
        )
        rows.append(
            JobSloSummary(
                job_id=jid,
                iterations_measured=s.iterations,
                solo_us=s.solo_us,
                had_sync=s.had_sync,
                span_start=None if s.span_start_us is None else from_us(s.span_start_us),
                span_end=None if s.span_end_us is None else from_us(s.span_end_us),
                ran_days=[[a.isoformat(), b.isoformat()] for a, b in s.ran_days],
                first_day=s.ran_days[0][0] if s.ran_days else None,
                last_day=s.ran_days[-1][1] if s.ran_days else None,
            )
        )
    JobSloSummary.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


__all__ = ["advance", "last_closed_day", "roll_day", "summarise_jobs"]
