"""A job's measured warm and cold starts, as the planner reads them (workflow/starts.py)."""

from __future__ import annotations

from typing import Any

import pytest

from rollmux_web.workflow.models import PhaseRecord
from rollmux_web.workflow.starts import measured_starts
from tests.reports.builders import make_group, make_job, now, phase, place

pytestmark = pytest.mark.django_db


def ran(world: Any, runner: str, time_scale: float) -> int:
    """A job that ran a cold start (12 s set-up, 3 s restore) and two warm ones (0.5 and
    0.7 s reload): return its id."""
    t0 = now()
    job = make_job(world, name=runner, runner=runner, time_scale=time_scale)
    pl = place(make_group(created=t0), job, rollout=["h20-0"], train=["h800-0"], joined=t0)
    timings = [(False, 12.0, 3.0), (True, 0.0, 0.5), (True, 0.0, 0.7)]
    for i, (warm, setup_s, load_s) in enumerate(timings):
        rec = phase(
            pl, iteration=i, kind="rollout", nodes=["h20-0"], start=t0, minutes=1, warm=warm
        )
        PhaseRecord.objects.filter(pk=rec.pk).update(setup_s=setup_s, load_s=load_s, work_s=55.0)
    return job.pk


def test_a_real_runners_switch_is_its_median_warm_reload_and_its_restart_its_cold_start(
    world: Any,
) -> None:
    job_id = ran(world, "hf-grpo", 1.0)
    measured = measured_starts([job_id])[job_id]
    assert measured.switch_s == pytest.approx(0.6)  # median of 0.5 and 0.7
    assert measured.restart_s == pytest.approx(15.0)  # set-up + restore of the cold start


@pytest.mark.parametrize("runner", ["emulated", "toy-rl"])
def test_an_emulating_runner_keeps_the_constants(world: Any, runner: str) -> None:
    # its set-up is wall-clock time the time scale would magnify (12 s x 200 = 2,400 s)
    job_id = ran(world, runner, 200.0)
    assert job_id not in measured_starts([job_id])
