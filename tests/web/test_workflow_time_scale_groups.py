"""The live planning pass on PostgreSQL: jobs share a co-execution group only on one clock.

A job's phases take profile / time_scale wall-clock seconds (the emulating runners), so
the planner's profile-time round-robin holds only among jobs of one effective time scale
(`time_scale_of`: the job's own, else the settings default for emulated runners, else 1).
The world has 4 H20 (rollout) and 4 H800 (training) nodes of 8 GPUs. No dispatcher runs:
the test transaction never commits, so the pass's phase dispatch (on commit) never fires;
what is checked is the decision the pass persists, and the submit form's preview of it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from rollmux_web.reports.whatif_selectors import whatif_preview
from rollmux_web.workflow import converters, services, snapshot
from rollmux_web.workflow.models import Placement
from scheduler.planner import place
from tests.workers.builders import twin_job

pytestmark = pytest.mark.django_db


def form_data(**overrides: Any) -> dict[str, Any]:
    """The submit form's cleaned data for the twin's profile."""
    data: dict[str, Any] = {
        "rollout_gpus": 8,
        "train_gpus": 8,
        "t_roll_max_s": 100.0,
        "t_roll_min_s": 100.0,
        "t_train_max_s": 100.0,
        "t_train_min_s": 100.0,
        "host_mem_gb": 300.0,
        "iterations": 50,
        "tenant": "vision",
        "runner": "emulated",
    }
    data.update(overrides)
    return data


def groups_after_pass(*jobs: Any) -> list[int]:
    summary = services.queue_plan()
    assert sorted(summary.placed) == sorted(j.pk for j in jobs)
    return [Placement.objects.get(job=j, ended_at__isnull=True).group_id for j in jobs]


@pytest.mark.parametrize(
    ("a_scale", "b_scale"),
    [(10.0, 10.0), (None, None), (None, 200.0)],
    ids=["both 10", "both the default", "the default and 200 explicitly"],
)
def test_jobs_of_one_effective_time_scale_pack_together(
    world: Any, settings: Any, a_scale: float | None, b_scale: float | None
) -> None:
    settings.ROLLMUX_TIME_SCALE = 200.0
    a = twin_job(world, "a", time_scale=a_scale)
    b = twin_job(world, "b", time_scale=b_scale)
    ga, gb = groups_after_pass(a, b)
    assert ga == gb
    assert Placement.objects.get(job=b).strategy == "direct_packing"


@pytest.mark.parametrize(
    ("a_fields", "b_fields"),
    [
        ({"time_scale": 4.0}, {"time_scale": 10.0}),
        ({"time_scale": None}, {"time_scale": 40.0}),  # the default is 200 here
        # A user's runner runs in real time (1) unless told; an emulated one at the default.
        ({"runner": "tests.workers.user_runners:FlakyRunner"}, {"time_scale": None}),
    ],
    ids=["4 and 10", "the default and 40", "a real runner and an emulated one"],
)
def test_jobs_of_different_time_scales_are_kept_apart(
    world: Any, settings: Any, a_fields: dict[str, Any], b_fields: dict[str, Any]
) -> None:
    settings.ROLLMUX_TIME_SCALE = 200.0
    a = twin_job(world, "a", **a_fields)
    b = twin_job(world, "b", **b_fields)
    assert converters.job_profile(a).time_scale != converters.job_profile(b).time_scale
    ga, gb = groups_after_pass(a, b)
    assert ga != gb
    assert Placement.objects.get(job=b).strategy == "new_group"


def test_a_job_waits_rather_than_join_a_group_on_another_clock(world: Any) -> None:
    # One job's worth of nodes left free after A and C: B fits for free into A's group
    # at A's scale; at another scale it may not, and there is no room for a group of its own.
    a = twin_job(world, "a", time_scale=10.0)
    c = twin_job(world, "c", time_scale=10.0, rollout_gpus=24, train_gpus=24, iterations=5)
    services.queue_plan()
    ga = Placement.objects.get(job=a).group_id
    assert Placement.objects.get(job=c).group_id != ga  # C needs more training nodes
    b = twin_job(world, "b", time_scale=4.0)
    at_a_scale = place(
        replace(converters.job_profile(b), time_scale=10.0), snapshot.cluster_state()
    )
    assert at_a_scale.placement is not None and at_a_scale.placement.group_id == str(ga)
    summary = services.queue_plan()
    assert summary.placed == []
    b.refresh_from_db()
    assert b.status == "queued" and "no existing co-execution group can take it" in b.reason


def test_the_preview_applies_the_same_rule(world: Any, settings: Any) -> None:
    settings.ROLLMUX_TIME_SCALE = 200.0
    a = twin_job(world, "a", time_scale=10.0)
    (ga,) = groups_after_pass(a)
    same = whatif_preview(user=world.alice, data=form_data(time_scale=10.0), slo=3.0)
    assert same.status == "FIT" and same.group == str(ga)
    assert same.strategy == "direct packing"
    other = whatif_preview(user=world.alice, data=form_data(time_scale=4.0), slo=3.0)
    assert other.status == "FIT" and other.group == "" and other.strategy == "new group"
    # No time scale on the form: the emulated runner's default (200), not A's 10.
    default = whatif_preview(user=world.alice, data=form_data(), slo=3.0)
    assert default.group == ""
