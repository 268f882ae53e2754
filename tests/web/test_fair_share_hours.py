"""Fair share's closed hours kept in the database (issue 25): a fresh process reads the
stored hours, not the usage window's phase records, and gets the same floats as the
plain sum; hours straddling the window's edges and the closed/open boundary, a changed
half-life and the beat's idempotence."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from rollmux_web.inventory.models import Node
from rollmux_web.jobs.models import JobStatus
from rollmux_web.workflow import fairshare
from rollmux_web.workflow.models import ExecutionGroup, FairShareHour, PhaseRecord, Placement
from rollmux_web.workflow.services import fair_share_hours
from tests.workers.builders import make_job

pytestmark = pytest.mark.django_db

HALF_LIFE = 3 * 3600.0  # a window of 30 hours


@pytest.fixture
def usage(world, settings):
    """Phases over the window's 30 hours and past it, some straddling an hour's start (an
    hour is that of a phase's end), on one or two GPU types, one still running."""
    settings.ROLLMUX_FAIR_SHARE_HALF_LIFE_S = HALF_LIFE
    job = make_job(world, status=JobStatus.COMPLETED)
    placement = Placement.objects.create(
        job=job, group=ExecutionGroup.objects.create(), strategy="new_group"
    )
    now = timezone.now().replace(minute=58, second=30, microsecond=0)
    ends = (60, 1500, 4000, 5390, 7300, 20000, 50000, 100000, 107990, 108030, 120000)
    for i, ago in enumerate(ends):
        end = now - timedelta(seconds=ago)
        length = 600 + 37 * i + (3000 if i % 3 == 0 else 0)  # some start an hour earlier
        PhaseRecord.objects.create(
            job=job,
            group=placement.group,
            placement=placement,
            iteration=i,
            kind="train",
            node_names=["h800-0"] if i % 2 else ["h800-0", "h20-0"],
            queued_at=end - timedelta(seconds=length),
            started_at=end - timedelta(seconds=length),
            finished_at=end,
            state="succeeded",
        )
    PhaseRecord.objects.filter(job=job, iteration=0).update(finished_at=None, state="running")
    fairshare.clear_usage_cache()
    yield now
    fairshare.clear_usage_cache()


def _fresh(at):
    """A fresh process's read: nothing kept in memory."""
    fairshare.clear_usage_cache()
    return fairshare.usage_gpu_s(at)


def _raw(at):
    """The same read with nothing stored either (the plain window's sums)."""
    stored = list(FairShareHour.objects.values_list("key", "hour", "tenants", "sums"))
    FairShareHour.objects.all().delete()
    try:
        return _fresh(at)
    finally:
        FairShareHour.objects.bulk_create(
            FairShareHour(key=k, hour=h, tenants=n, sums=s) for k, h, n, s in stored
        )


def test_a_fresh_process_reads_the_stored_hours_and_gets_the_same_usage(usage, monkeypatch):
    now = usage
    written = fair_share_hours.keep(now)
    assert written == FairShareHour.objects.count() >= 25  # 28 closed hours, a few empty
    assert fair_share_hours.keep(now) == 0  # idempotent: stored once
    windows = []
    real = fairshare._hour_sums
    monkeypatch.setattr(
        fairshare,
        "_hour_sums",
        lambda lo, hi, node, **kw: windows.append((lo, hi)) or real(lo, hi, node, **kw),
    )
    # the stored hours read at later times (hours closed since, the window's start moving
    # across a phase's hour) are the plain sum to the last bit
    for later in (0, 1, 95, 1800, 3 * 3600 + 5, 8 * 3600):
        at = now + timedelta(seconds=later)
        windows.clear()
        got = _fresh(at)
        # no whole-window read: only the first hour, the hours closed since and the open
        # ones (at most FILL_HOURS hours each)
        assert windows and all(
            hi is None or hi - lo <= timedelta(hours=fairshare.FILL_HOURS) for lo, hi in windows
        )
        assert all(hi is not None or at - lo <= timedelta(hours=3) for lo, hi in windows)
        want = _raw(at)
        assert got == want and set(got["vision"]) == {"H800", "H20"}, later
        assert got == fairshare.usage_gpu_s(at)  # (and the in-memory hours after it)


def test_hours_out_of_the_window_and_of_another_key_are_dropped(usage, settings):
    now = usage
    fair_share_hours.keep(now)
    first = FairShareHour.objects.order_by("hour").first()
    later = now + timedelta(hours=5)
    fair_share_hours.keep(later)  # 5 more hours closed, the first 5 out of the window
    hours = list(FairShareHour.objects.order_by("hour").values_list("hour", flat=True))
    assert hours[0] > first.hour and hours[0] >= later - timedelta(seconds=10 * HALF_LIFE)
    assert len(set(FairShareHour.objects.values_list("key", flat=True))) == 1
    assert _fresh(later) == _raw(later)

    # another half-life (or node set): the stored hours are not read, and the beat
    # replaces them
    settings.ROLLMUX_FAIR_SHARE_HALF_LIFE_S = 2 * 3600.0
    assert _fresh(later) == _raw(later)
    Node.objects.filter(name="h20-0").update(gpus=4)
    fresh = _fresh(later)
    assert fresh == _raw(later)
    fair_share_hours.keep(later)
    assert {fairshare.closed_hours()[0]} == set(FairShareHour.objects.values_list("key", flat=True))
    assert _fresh(later) == fresh
