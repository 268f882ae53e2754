"""The SLO page's labels (QA): a job still running has no outcome yet, only one so far;
the profile column says it is at the job's speed (wall-clock, like every time there)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from rollmux_web.jobs.models import JobStatus
from tests.reports.builders import allocate, alternate, make_group, make_job, place

T0 = datetime(2026, 3, 10, tzinfo=UTC)


def ran(world: Any, name: str, status: str) -> None:
    job = make_job(world, name=name, status=status)
    g = make_group(created=T0)
    n = "0" if status == JobStatus.RUNNING else "1"
    allocate(g, f"h20-{n}", T0, None)
    allocate(g, f"h800-{n}", T0, None)
    pl = place(g, job, rollout=[f"h20-{n}"], train=[f"h800-{n}"], joined=T0)
    alternate(
        pl,
        start=T0,
        iterations=2,
        roll_min=10,
        train_min=10,
        roll_nodes=[f"h20-{n}"],
        train_nodes=[f"h800-{n}"],
    )


@pytest.mark.django_db
def test_a_running_job_is_met_so_far_and_a_completed_one_met(world: Any, client_as: Any) -> None:
    ran(world, "still-going", JobStatus.RUNNING)
    ran(world, "done", JobStatus.COMPLETED)
    html = client_as("alice").get("/reports/slo/?start=2026-03-10&end=2026-03-10").content.decode()
    going = re.search(r">still-going</a>(.*?)</tr>", html, re.S)
    done = re.search(r">done</a>(.*?)</tr>", html, re.S)
    assert going and done
    assert "yes so far (running)" in going.group(1)
    assert '<span class="ok">yes</span>' in done.group(1) and "so far" not in done.group(1)
    assert "Profile (at its speed)" in html
