"""A job's measured warm and cold starts, as the planner reads them (workflow/starts.py)."""

from __future__ import annotations

from typing import Any

import pytest

from rollmux_web.workflow.models import PhaseRecord, Placement
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


def test_the_moves_clock_leaves_out_an_emulated_jobs_set_up_and_load(world: Any) -> None:
    # an emulated job's SLO clock runs at its time scale, but not its hosts' start-up: 16.2
    # wall-clock seconds of set-up and load (12 + 3 + 0.5 + 0.7) x 200 would be 3,240 s of
    # its budget (services.consolidation.move_state subtracts these before scaling)
    from rollmux_web.workflow.services.consolidation import _platform_seconds

    job_id = ran(world, "emulated", 200.0)
    t0 = now()
    profiling = Placement.objects.create(
        job_id=job_id, group=make_group(created=t0), strategy="profile", attempt=2
    )
    rec = phase(profiling, iteration=0, kind="rollout", nodes=["h20-1"], start=t0, minutes=1)
    PhaseRecord.objects.filter(pk=rec.pk).update(setup_s=30.0, load_s=1.0)  # not production
    assert _platform_seconds([job_id]) == {str(job_id): pytest.approx(16.2)}
    assert _platform_seconds([]) == {}
