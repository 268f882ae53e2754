"""The current queue as a what-if trace: every job there now (QA pass 14).

A trace's phases are profile seconds (the planner's clock and the submit form's preview's);
a queued job arrived its wall-clock seconds after the first submission, a second clock (an
emulated job's profile runs time_scale times faster), and later in the simulation than now,
when it already waits.
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
def test_the_queue_trace_has_every_job_now_in_submission_order(world: Any) -> None:
    t0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    # an emulated job at 20x, the same profile phases for both
    spec = dict(
        time_scale=20.0, t_roll_max_s=300.0, t_roll_min_s=200.0, t_train_max_s=100.0,
        t_train_min_s=80.0,
    )  # fmt: skip
    first_job = make_job(
        world,
        name="first",
        status="running",
        **spec,
    )
    queued_job = make_job(
        world,
        name="queued",
        status="queued",
        **spec,
    )
    # submitted_at is auto_now_add: set the moments the test means
    Job.objects.filter(pk=first_job.pk).update(submitted_at=t0)
    Job.objects.filter(pk=queued_job.pk).update(submitted_at=t0 + timedelta(seconds=60))
    lines = [json.loads(x) for x in queue_trace(user=world.alice).splitlines()]
    first, queued = lines  # in submission order
    assert (first["id"], queued["id"]) == (f"job-{first_job.pk}", f"job-{queued_job.pk}")
    # both are there now: the queued job does not arrive later (it was at 60 s, the wall
    # clock, against phases on its profile clock, twenty times faster)
    assert first["arrival_s"] == queued["arrival_s"] == 0.0
    # the phases stay the profile's (the clock the planner and the preview count in)
    assert (first["t_roll_max_s"], first["t_train_max_s"]) == (300.0, 100.0)
    assert (queued["t_roll_max_s"], queued["t_train_max_s"]) == (300.0, 100.0)
