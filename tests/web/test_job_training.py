"""A job's training metrics on its page (the reward curve, server-rendered SVG), in
`rollmux describe` and as a Prometheus gauge."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rollmux_web.jobs.curve import CurvePoint, curve_geometry, curve_svg
from rollmux_web.jobs.models import JobStatus
from rollmux_web.jobs.selectors import training_curve
from tests.workers.builders import make_job, record_curve

pytestmark = pytest.mark.django_db


def test_a_curve_of_rewards_in_0_1_spans_0_1_and_marks_each_new_attempt() -> None:
    points = [CurvePoint(i, 0.1 * i, 0.05, 1 if i < 4 else 2) for i in range(8)]
    geo = curve_geometry(points)
    assert geo is not None
    assert [t.label for t in geo.y_ticks] == ["0", "0.2", "0.4", "0.6", "0.8", "1"]
    assert [t.label for t in geo.attempts] == ["attempt 2"]
    assert len(geo.line.split()) == 8 and len(geo.dots) == 8
    # stored iterations 0-7 read as 1-8 (as the Gantt counts): axis, tooltips, words
    assert [t.label for t in geo.x_ticks] == ["2", "4", "6", "8"]
    assert geo.dots[0].tip.startswith("iteration 1: reward 0 ± 0.05, attempt 1")
    assert "over 8 iterations (1 to 8)" in geo.summary and "(iteration 8)" in geo.summary
    assert geo.band  # every point has a std: the band is drawn
    assert (
        "0 at the first, 0.7 at the last" in geo.summary and "2 attempts, one curve" in geo.summary
    )
    svg = curve_svg(geo)
    assert svg.startswith("<svg") and "<desc>Mean reward over 8 iterations" in svg
    assert curve_geometry([]) is None


def test_a_curve_with_rewards_outside_0_1_is_scaled_to_them() -> None:
    geo = curve_geometry([CurvePoint(0, -3.0, None, 1), CurvePoint(10, 5.0, None, 1)])
    assert geo is not None and not geo.band  # no std reported: no band
    labels = [float(t.label) for t in geo.y_ticks]
    assert min(labels) >= -3.0 and max(labels) <= 5.0 and len(labels) >= 3


def test_a_long_jobs_curve_is_averaged_by_the_database_into_a_bounded_number_of_points(
    world: Any,
) -> None:
    job = make_job(world, runner="toy-rl", iterations=60)
    record_curve(job, [[0.0] * 20, [1.0] * 40])
    points = training_curve(job=job, max_points=10)
    assert len(points) == 10
    assert [p.iterations for p in points] == [6] * 10
    assert points[0].reward_mean == 0.0 and points[-1].reward_mean == 1.0
    assert points[0].attempt == 1 and points[-1].attempt == 2
    geo = curve_geometry(points)
    assert geo is not None  # an averaged run reads as its iteration numbers, from 1
    assert geo.dots[0].tip.startswith("iteration 1-6 (mean): reward 0")
    assert "over 60 iterations (1 to 60)" in geo.summary
    assert len(training_curve(job=job)) == 60  # under the limit: every iteration


def test_the_job_page_draws_the_reward_curve_across_attempts(client_as: Any, world: Any) -> None:
    job = make_job(world, runner="toy-rl", iterations=10)
    record_curve(job, [[0.1, 0.2, 0.3], [0.3, 0.5, 0.6, 0.8]])
    html = client_as("bob").get(f"/jobs/{job.pk}/").content.decode()
    svg = re.search(r'<svg class="chart reward-curve".*?</svg>', html, re.S)
    assert svg is not None, "the curve is in the page itself, not drawn by JavaScript"
    assert svg.group(0).count('class="point"') == 7
    assert "attempt 2" in svg.group(0)
    assert "Mean reward over 7 iterations (1 to 7): 0.1 at the first, 0.8 at the last" in html
    latest = re.search(r'<table id="training-latest">.*?</table>', html, re.S)
    assert latest is not None and 'data-metric="loss">0.2<' in latest.group(0)


def test_a_job_without_training_metrics_has_no_training_section(client_as: Any, world: Any) -> None:
    job = make_job(world)
    html = client_as("alice").get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="training"' not in html


def test_a_running_jobs_latest_reward_is_a_gauge_per_running_job(client: Any, world: Any) -> None:
    running = make_job(world, name="rl", status=JobStatus.RUNNING, runner="toy-rl")
    record_curve(running, [[0.2, 0.7]])
    done = make_job(world, name="done", status=JobStatus.COMPLETED, runner="toy-rl")
    record_curve(done, [[0.9]])
    make_job(world, name="emulated", status=JobStatus.RUNNING)  # reports no reward
    body = client.get("/metrics").content.decode()
    samples = {
        (s.labels["job"], s.labels["tenant"]): s.value
        for family in text_string_to_metric_families(body)
        if family.name == "rollmux_job_reward_mean"
        for s in family.samples
    }
    assert samples == {(str(running.pk), "vision"): 0.7}
