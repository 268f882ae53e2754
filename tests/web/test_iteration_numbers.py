"""Iteration numbers a person reads count from 1 on every surface (the Gantt's tooltips, the
job page's training table, the reward curve, the CLI); the API keeps the stored 0-based
index (`rollmux_web.formatting.iteration_number` is the one place that adds 1)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.template import Context, Template
from django.utils import timezone

from rollmux_web.formatting import iteration_number
from rollmux_web.workflow.services.training_metrics import iteration_metrics_record
from tests.reports.builders import allocate, alternate, make_group, make_job, place

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 10, tzinfo=UTC)
M = timedelta(minutes=1)


def test_iteration_numbers_count_from_1_and_the_template_filter_says_the_same() -> None:
    assert [iteration_number(i) for i in (0, 7)] == [1, 8]
    tpl = Template("{% load report_tags %}[{{ a|iteration_number }}][{{ b|iteration_number }}]")
    assert tpl.render(Context({"a": 7, "b": None})) == "[8][]"


def test_the_training_tables_latest_iteration_is_the_gantts_last_phase_number(
    client_as: Any, world: Any
) -> None:
    # three iterations (stored 0, 1, 2), each with its rollout, training and metrics
    job = make_job(world, name="numbered")
    g = make_group(created=T0, released=T0 + 60 * M)
    allocate(g, "h20-0", T0, T0 + 60 * M)
    allocate(g, "h800-0", T0, T0 + 60 * M)
    pl = place(g, job, rollout=["h20-0"], train=["h800-0"], joined=T0)
    alternate(
        pl, start=T0, iterations=3, roll_min=10, train_min=10,
        roll_nodes=["h20-0"], train_nodes=["h800-0"],
    )  # fmt: skip
    for it in range(3):
        iteration_metrics_record(
            job_id=job.pk, placement_id=pl.pk, iteration=it, now=timezone.now(),
            metrics={"reward_mean": 0.1 * (it + 1), "loss": 1.0},
        )  # fmt: skip
    alice = client_as("alice")
    page = alice.get(f"/jobs/{job.pk}/").content.decode()
    table = re.search(r'<table id="training-latest">.*?</table>', page, re.S)
    assert table is not None
    latest = re.search(r"<tbody><tr><td>(\d+) <span", table.group(0))
    assert latest is not None
    gantt = alice.get(f"/timeline/jobs/{job.pk}/").content.decode()
    numbers = [int(n) for n in re.findall(r"iteration (\d+) · (?:rollout|train)", gantt)]
    assert numbers and max(numbers) == 3  # the Gantt counts from 1
    assert int(latest.group(1)) == max(numbers) == 3
    # the live partial (the page's htmx poll) says the same
    live = alice.get(f"/jobs/{job.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert re.search(
        r'<table id="training-latest">.*?<td>3 <span class="muted">\(latest\)', live, re.S
    )
    # the curve's caption and axis say the same numbers
    assert "Mean reward over 3 iterations (1 to 3)" in page
    assert "(iteration 3)" in page  # the best reward's
    # the API keeps the stored 0-based index
    rows = alice.get(f"/api/v1/jobs/{job.pk}/metrics/").json()["results"]
    assert [r["iteration"] for r in rows] == [0, 1, 2]


def test_a_resubmitted_jobs_reason_names_the_iteration_it_resumes_at_counted_from_1(
    world: Any,
) -> None:
    from rollmux_web.workflow.services.departures import (
        job_fail_or_resubmit,
        job_resubmit_node_down,
    )

    # 3 iterations done (the Gantt's #1-#3): it resumes at the fourth
    job = make_job(world, name="resumer", iterations=6, iterations_done=3)
    assert job_resubmit_node_down(job, "h800-0", timezone.now())
    job.refresh_from_db()
    assert job.reason == "resubmitted: node h800-0 went down; resumes at iteration 4"
    job_fail_or_resubmit(job, "boom", timezone.now())
    job.refresh_from_db()
    assert job.reason.endswith(", resumes at iteration 4: boom"), job.reason
