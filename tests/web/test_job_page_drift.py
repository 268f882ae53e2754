"""The job page's drift alert is for live jobs: an ended job that ran past its estimates
says so quietly (QA: a completed job showed the red 'drifting' alert)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from rollmux_web.jobs.models import JobStatus
from tests.reports.builders import allocate, alternate, make_group, make_job, place

T0 = datetime(2026, 3, 10, tzinfo=UTC)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "alert", "note"),
    [(JobStatus.RUNNING, True, False), (JobStatus.COMPLETED, False, True)],
)
def test_the_drift_alert_is_shown_while_the_job_runs_only(
    world: Any, client_as: Any, status: str, alert: bool, note: bool
) -> None:
    # estimates: rollout at most 600 s; its 3 rollouts took 20 min each (1200 s)
    job = make_job(world, name="long", status=status, iterations=3)
    g = make_group(created=T0)
    allocate(g, "h20-0", T0, None)
    allocate(g, "h800-0", T0, None)
    pl = place(g, job, rollout=["h20-0"], train=["h800-0"], joined=T0)
    alternate(
        pl,
        start=T0,
        iterations=3,
        roll_min=20,
        train_min=5,
        roll_nodes=["h20-0"],
        train_nodes=["h800-0"],
    )
    html = client_as("alice").get(f"/jobs/{job.pk}/").content.decode()
    assert ('id="job-drift"' in html) is alert
    assert ('id="job-drift-past"' in html) is note
    assert "rollout: mean 1200.0 s over its last 3 phases, above its worst case 600.0 s" in html


@pytest.mark.django_db
@pytest.mark.parametrize(("roll_min", "drifting"), [(10.5, False), (11.5, True)])
def test_drift_needs_more_than_the_tolerance_above_the_worst_case(
    world: Any, roll_min: float, drifting: bool
) -> None:
    # QA: a just-profiled job (min = max = its one profile) was flagged at +0.04 % from its
    # dispatch overhead. Rollout at most 600 s (10 min); ROLLMUX_DRIFT_TOLERANCE is 10 %.
    from rollmux_web.jobs.selectors import job_drift

    job = make_job(world, name="near", status=JobStatus.RUNNING, iterations=3)
    g = make_group(created=T0)
    pl = place(g, job, rollout=["h20-0"], train=["h800-0"], joined=T0)
    alternate(
        pl, start=T0, iterations=3, roll_min=roll_min, train_min=5,
        roll_nodes=["h20-0"], train_nodes=["h800-0"],
    )  # fmt: skip
    assert [d.kind for d in job_drift(job=job)] == (["rollout"] if drifting else [])


@pytest.mark.django_db
def test_the_hosts_set_up_does_not_count_as_drift(world: Any) -> None:
    # QA: 30 s into the demo a job was listed as drifting (+29 %) on its first, cold rollout,
    # whose time includes creating its workers (the host's load_s); it finished at 0.86x its
    # profile. The page counts a phase's own time, as the drift re-plan does.
    from rollmux_web.jobs.selectors import jobs_drift
    from rollmux_web.workflow.models import PhaseRecord

    job = make_job(world, name="cold", status=JobStatus.RUNNING, iterations=3)
    g = make_group(created=T0)
    pl = place(g, job, rollout=["h20-0"], train=["h800-0"], joined=T0)
    alternate(
        pl, start=T0, iterations=3, roll_min=10, train_min=5,
        roll_nodes=["h20-0"], train_nodes=["h800-0"],
    )  # fmt: skip
    first = PhaseRecord.objects.get(job=job, kind="rollout", iteration=0)
    first.finished_at = first.started_at + (first.finished_at - first.started_at) * 3  # 30 min
    first.save(update_fields=["finished_at"])
    assert [d.kind for d in jobs_drift([job])[job.pk]] == ["rollout"]  # (30 + 10 + 10) / 3
    PhaseRecord.objects.filter(pk=first.pk).update(metrics={"load_s": 20 * 60.0})
    assert jobs_drift([job])[job.pk] == []  # its own 10 min: at its worst case


@pytest.mark.django_db
def test_only_each_kinds_last_phases_count_for_drift(world: Any) -> None:
    # the window is taken in the database (issue 25: the overview asks for 200 running
    # jobs' drift, each with hundreds of phases): older slow phases count for nothing
    from datetime import timedelta

    from rollmux_web.jobs.selectors import DRIFT_WINDOW, jobs_drift
    from tests.reports.builders import phase

    jobs = []
    for name, slow_first in (("recovered", True), ("slowed", False)):
        job = make_job(world, name=name, status=JobStatus.RUNNING, iterations=8)
        g = make_group(created=T0)
        pl = place(g, job, rollout=[], train=[], joined=T0)
        t = T0
        for i in range(8):
            slow = (i < 8 - DRIFT_WINDOW) == slow_first
            phase(pl, iteration=i, kind="rollout", nodes=[], start=t, minutes=20 if slow else 9)
            phase(
                pl, iteration=i, kind="train", nodes=[], start=t + timedelta(minutes=20), minutes=5
            )
            t += timedelta(minutes=30)
        jobs.append(job)
    drift = jobs_drift(jobs)
    assert drift[jobs[0].pk] == []
    assert [(d.kind, d.recent_mean_s, d.window) for d in drift[jobs[1].pk]] == [
        ("rollout", 1200.0, DRIFT_WINDOW)
    ]


@pytest.mark.django_db
def test_a_sub_second_drift_reads_as_two_different_times(world: Any, client_as: Any) -> None:
    # QA pass 12: a real hf-grpo job (llama-0.1M, profiled at a 0.048 s rollout) read
    # "rollout: mean 0.1 s over its last 3 phases, above its worst case 0.1 s (+38%)": two
    # equal-looking times said to differ by 38 %. Sub-second times keep two significant digits.
    job = make_job(
        world, name="tiny", status=JobStatus.COMPLETED, iterations=3,
        t_roll_max_s=0.048, t_roll_min_s=0.048, t_train_max_s=0.12, t_train_min_s=0.12,
    )  # fmt: skip
    g = make_group(created=T0)
    pl = place(g, job, rollout=["h20-0"], train=["h800-0"], joined=T0)
    alternate(
        pl, start=T0, iterations=3, roll_min=0.066 / 60, train_min=0.1 / 60,
        roll_nodes=["h20-0"], train_nodes=["h800-0"],
    )  # fmt: skip
    html = client_as("alice").get(f"/jobs/{job.pk}/").content.decode()
    assert (
        "rollout: mean 0.066 s over its last 3 phases, above its worst case 0.048 s (+38%)" in html
    )
