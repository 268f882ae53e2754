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
