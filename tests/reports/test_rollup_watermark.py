"""Rollups of every job's closed days and finished jobs' SLO inputs (issue 25, pages at
size): the cost report, its lines,
the SLO report, job outcomes and tenant usage give the same figures, to the cent, whichever
side of the rollup watermark a range falls on, and archiving after the watermark moved
rolls no day up twice.

The world is test_retention's: members coming and going, a price change in the middle of a
day, phases across midnight, a long-tail hand-over, a co-located rollout at a rollout speed
factor, a profiling run, a failed phase, random microseconds.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest

from rollmux_web.reports import cost_days
from rollmux_web.workflow.models import (
    JobSloSummary,
    PhaseRecord,
    PhaseRollup,
    RollupWatermark,
    rolled_up_to,
)
from rollmux_web.workflow.services import retention, rollup_days
from tests.reports.test_retention import NOW, T, _close, _snapshot, build_world

# watermarks to compare at: inside the first days (the price change's day is 2026-01-06),
# after group A's busy days, past every phase
MARKS = [date(2026, 1, 6), date(2026, 1, 7), date(2026, 1, 9), date(2026, 2, 5), date(2026, 4, 1)]


def _advance_to(mark: date) -> None:
    """Move the rollup watermark to `mark`, keeping the closed days' cost amounts as the
    beat does (reports.cost_days): the reports compared then read the kept days."""
    while True:
        current = RollupWatermark.objects.filter(pk=1).values_list("day", flat=True).first()
        if current is not None and current >= mark:
            assert current == mark
            cost_days.keep_days(NOW, max_days=10_000)
            return
        assert rollup_days.advance(NOW, max_days=1), "the watermark did not move"


def _assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert after.keys() == before.keys()
    for key in before:
        _close(before[key], after[key], str(key))


@pytest.mark.django_db
def test_reports_either_side_of_the_rollup_watermark_equal_the_raw_reports(
    world: Any, settings: Any, tmp_path: Any
) -> None:
    settings.ROLLMUX_ARCHIVE_URI = str(tmp_path / "archive")
    jobs = build_world(world)
    before = _snapshot(world, jobs)
    raw = PhaseRecord.objects.count()
    assert rolled_up_to() is None
    for mark in MARKS:
        _advance_to(mark)
        assert PhaseRollup.objects.filter(day__lt=mark).exists()
        assert not PhaseRollup.objects.filter(day__gte=mark).exists()
        _assert_same(before, _snapshot(world, jobs))
    assert PhaseRecord.objects.count() == raw  # rolling up deletes nothing
    # every job finished before April: its SLO inputs kept (the SLO report compared above
    # read them, not its phases)
    assert set(JobSloSummary.objects.values_list("job_id", flat=True)) == {
        j.pk for j in jobs.values()
    }
    # archiving now: the days before the watermark are rolled up already, none twice
    rolled = PhaseRollup.objects.count()
    settings.ROLLMUX_ARCHIVE_BATCH_PHASES = 20
    for ids in retention.eligible_batches(NOW, max_batches=100):
        retention.archive_jobs(ids, now=NOW)
    assert PhaseRecord.objects.count() < raw
    assert PhaseRollup.objects.count() == rolled  # every archived phase ended before April
    _assert_same(before, _snapshot(world, jobs))
    # the watermark moves on past the archived days: still the same figures
    _advance_to(date(2026, 4, 20))
    _assert_same(before, _snapshot(world, jobs))
    lines = before[("cost", "finance", date(2026, 1, 1), date(2026, 2, 28))]["lines"]
    assert {ln["job"] for ln in lines} >= {"a1", "a2", "a3", "b1", "p1"}


@pytest.mark.django_db
def test_archiving_before_the_watermark_then_advancing_rolls_each_day_once(
    world: Any, settings: Any, tmp_path: Any
) -> None:
    settings.ROLLMUX_ARCHIVE_URI = str(tmp_path / "archive")
    jobs = build_world(world)
    before = _snapshot(world, jobs)
    _advance_to(date(2026, 1, 7))  # part of the archived jobs' days rolled up already
    for ids in retention.eligible_batches(NOW, max_batches=100):
        retention.archive_jobs(ids, now=NOW)
    _assert_same(before, _snapshot(world, jobs))
    _advance_to(date(2026, 3, 1))
    _assert_same(before, _snapshot(world, jobs))


@pytest.mark.django_db
def test_a_day_is_rolled_up_once_and_only_when_closed(world: Any) -> None:
    build_world(world)
    first = rollup_days.advance(NOW, max_days=1)
    assert first == [(T + timedelta(hours=20)).date()]
    n = PhaseRollup.objects.count()
    assert n > 0
    # the same day again (a task run twice): nothing written, the watermark stays
    assert rollup_days.roll_day(first[0], now=NOW) is None
    assert PhaseRollup.objects.count() == n
    # a day that has not closed (GRACE after its end) is not rolled up
    today = rollup_days.last_closed_day(NOW)
    RollupWatermark.objects.filter(pk=1).update(day=today)
    assert rollup_days.advance(NOW) == []
    assert rollup_days.roll_day(today, now=NOW) is None


@pytest.mark.django_db
def test_a_job_with_a_phase_that_never_ended_gets_no_summary_and_blocks_no_other(
    world: Any,
) -> None:
    jobs = build_world(world)
    # b1 finished first of all, but one of its phases never reported its end
    PhaseRecord.objects.filter(pk=PhaseRecord.objects.filter(job=jobs["b1"]).first().pk).update(
        finished_at=None
    )
    _advance_to(date(2026, 4, 1))
    JobSloSummary.objects.all().delete()
    for _ in range(len(jobs)):
        rollup_days.summarise_jobs(limit=1)  # one job a run: b1 must not fill the batch
    done = set(JobSloSummary.objects.values_list("job_id", flat=True))
    assert done == {j.pk for n, j in jobs.items() if n != "b1"}
    assert rollup_days.summarise_jobs(limit=1) == 0


@pytest.mark.django_db
def test_summaries_walk_past_waiting_jobs_and_equal_the_phases_own_sums(world: Any) -> None:
    from rollmux_web.workflow.models import PhaseState, Placement, Strategy
    from rollmux_web.workflow.rollups import slo_summary, to_us

    jobs = build_world(world)
    # the three jobs that finished first wait (a phase never reported its end): a batch of
    # one walks past them chunk by chunk (its candidates are read two at a time)
    first = sorted(jobs.values(), key=lambda j: (j.finished_at, j.pk))[:3]
    for job in first:
        PhaseRecord.objects.filter(pk=PhaseRecord.objects.filter(job=job).first().pk).update(
            finished_at=None
        )
    _advance_to(date(2026, 4, 1))
    JobSloSummary.objects.all().delete()
    assert rollup_days.summarise_jobs(limit=1) == 1
    later = set(jobs.values()) - set(first)
    assert set(JobSloSummary.objects.values_list("job_id", flat=True)) == {
        min(later, key=lambda j: (j.finished_at, j.pk)).pk
    }
    while rollup_days.summarise_jobs(limit=2):
        pass
    kept = {s.job_id: s for s in JobSloSummary.objects.all()}
    assert set(kept) == {j.pk for j in later}
    # each summary is its phases' own (datetimes converted in Python, not in the database)
    for job in later:
        profile = set(
            Placement.objects.filter(job=job, strategy=Strategy.PROFILE).values_list(
                "pk", flat=True
            )
        )
        rows = list(
            PhaseRecord.objects.filter(job=job, started_at__isnull=False).values_list(
                "placement_id", "iteration", "kind", "state", "started_at", "finished_at"
            )
        )
        want = slo_summary(
            (
                (pl, it, kind, to_us(a), to_us(b))
                for pl, it, kind, state, a, b in rows
                if state == PhaseState.SUCCEEDED and pl not in profile
            ),
            ((to_us(a), to_us(b)) for *_, a, b in rows),
        )
        got = kept[job.pk]
        assert (got.iterations_measured, got.solo_us, got.had_sync) == (
            want.iterations,
            want.solo_us,
            want.had_sync,
        )
        assert got.span_start is None or to_us(got.span_start) == want.span_start_us
        assert got.span_end is None or to_us(got.span_end) == want.span_end_us
        # the days it ran: each phase's UTC (start day, end day), overlapping or adjacent
        # spans merged
        merged: list[list[Any]] = []
        for a, b in sorted((s.date(), f.date()) for *_, s, f in rows):
            if merged and a <= merged[-1][1] + timedelta(days=1):
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        assert [tuple(d) for d in got.ran_days] == [
            (a.isoformat(), b.isoformat()) for a, b in merged
        ]
        assert want.ran_days == [tuple(m) for m in merged]
