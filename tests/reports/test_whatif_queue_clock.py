"""The current queue as a what-if trace: one clock for arrivals and phases (QA pass 14).

An emulated job's phases take profile / time_scale wall-clock seconds, and the queue's
arrivals are wall-clock (submission times): a trace in profile seconds with wall-clock
arrivals simulated a 20x demo queue twenty times too long and too dear, and put a 1x job
and a 20x job on one clock they do not share.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rollmux_web.jobs.models import Job
from rollmux_web.reports.whatif_selectors import queue_trace
from tests.reports.builders import make_job


@pytest.mark.django_db
def test_the_queue_trace_is_in_wall_clock_seconds(world: Any) -> None:
    t0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    fast_job = make_job(
        world,
        name="fast",
        status="running",
        time_scale=20.0,
        t_roll_max_s=300.0,
        t_roll_min_s=200.0,
        t_train_max_s=100.0,
        t_train_min_s=80.0,
    )
    real_job = make_job(
        world,
        name="real",
        status="queued",
        time_scale=1.0,
        t_roll_max_s=300.0,
        t_roll_min_s=200.0,
        t_train_max_s=100.0,
        t_train_min_s=80.0,
    )
    # submitted_at is auto_now_add: set the moments the test means
    Job.objects.filter(pk=fast_job.pk).update(submitted_at=t0)
    Job.objects.filter(pk=real_job.pk).update(submitted_at=t0 + timedelta(seconds=60))
    lines = [json.loads(x) for x in queue_trace(user=world.alice).splitlines()]
    fast, real = sorted(lines, key=lambda x: x["arrival_s"])
    assert real["arrival_s"] == 60.0  # wall-clock seconds after the first submission
    # the 20x job's phases as they run: 300 s of profile take 15 s
    assert (fast["t_roll_max_s"], fast["t_roll_min_s"]) == (15.0, 10.0)
    assert (fast["t_train_max_s"], fast["t_train_min_s"]) == (5.0, 4.0)
    # the 1x job's are its profile's
    assert (real["t_roll_max_s"], real["t_train_max_s"]) == (300.0, 100.0)
