"""One planner: the live planning pass places a job as the simulator's rollmux does.

The live pass reads the planner configuration from `rollmux_web.workflow.levers` (the
shipped `PlannerConfig()` unless a setting overrides a field) and places on `snapshot.planner_input()`
(the running members with their progress). The scenario is the core's objective test
(tests/scheduler/test_planner_levers.py) on PostgreSQL: two groups with a free slot, one
whose member runs 5,000 more iterations and one whose member has 10 left; the marginal
$/h objective joins the short one, the expected remaining cost the long one. No
dispatcher runs (the test transaction never commits).
"""

from __future__ import annotations

from typing import Any

import pytest

from rollmux_web.jobs.models import Job
from rollmux_web.quotas.models import SloClass
from rollmux_web.workflow import converters, levers, services, snapshot, sync
from rollmux_web.workflow.models import Placement
from rollmux_web.workflow.services import consolidation
from scheduler.config import DRIFT_HEDGE, PlannerConfig
from scheduler.model import PlacementStatus, Strategy
from scheduler.planner import place
from scheduler.sim.policies import make_policy
from tests.workers.builders import make_job

pytestmark = pytest.mark.django_db


def exact_job(world: Any, name: str, roll: float, train: float, **fields: Any) -> Job:
    """A job whose phases always take their worst case (min = max)."""
    return make_job(  # type: ignore[no-any-return]
        world,
        name=name,
        t_roll_max_s=roll,
        t_roll_min_s=roll,
        t_train_max_s=train,
        t_train_min_s=train,
        **fields,
    )


def placement_of(job: Job) -> Placement:
    return Placement.objects.get(job=job, ended_at__isnull=True)


def two_groups(world: Any) -> tuple[Job, Job, Job]:
    """Place `long` and `short` in groups of their own; queue the newcomer."""
    long = exact_job(world, "long", 600, 300, slo_class=world.bronze, iterations=5000)
    assert services.queue_plan().placed == [long.pk]
    short = exact_job(world, "short", 300, 200, slo_class=world.silver, iterations=20)
    assert services.queue_plan().placed == [short.pk]
    assert placement_of(long).group_id != placement_of(short).group_id
    Job.objects.filter(pk=short.pk).update(iterations_done=10)  # 10 of its 20 left
    slo = SloClass.objects.create(name="relaxed", slowdown=1.8)
    newcomer = exact_job(world, "new", 300, 220, slo_class=slo, iterations=1000)
    return long, short, newcomer


def newcomer_profile(job: Job) -> Any:
    """The newcomer's profile as the pass builds it (its weight-sync time included)."""
    return converters.job_profile(job, t_sync_s=sync.t_sync_s(job, sync.measured_s([job.pk])))


def test_the_live_pass_places_a_job_where_the_simulators_rollmux_does(world: Any) -> None:
    long, short, newcomer = two_groups(world)
    state, progress = snapshot.planner_input()
    assert progress[str(short.pk)].iterations_done == 10
    profile = newcomer_profile(newcomer)
    # the simulator's rollmux adapter, with the simulator's own levers, on the same state
    sim = make_policy("rollmux", seed=0).place(profile, state, progress)
    assert sim.status is PlacementStatus.FIT and sim.placement is not None
    # the levers decide here: the paper's marginal $/h objective would join the short group
    marginal = place(profile, state, progress=progress)
    assert marginal.placement is not None
    assert marginal.placement.group_id == str(placement_of(short).group_id)
    assert sim.placement.group_id == str(placement_of(long).group_id)

    assert services.queue_plan().placed == [newcomer.pk]
    live = placement_of(newcomer)
    assert str(live.group_id) == sim.placement.group_id
    assert live.strategy == sim.placement.strategy.value
    assert tuple(sorted(n.name for n in live.rollout_nodes.all())) == tuple(
        sorted(sim.placement.rollout_nodes)
    )
    assert tuple(sorted(n.name for n in live.train_nodes.all())) == tuple(
        sorted(sim.placement.train_nodes)
    )


def test_the_objective_setting_is_what_the_live_pass_runs(world: Any, settings: Any) -> None:
    settings.ROLLMUX_PLANNER_OBJECTIVE = "marginal"
    long, short, newcomer = two_groups(world)
    assert levers.live_config().admission.objective == "marginal"
    assert services.queue_plan().placed == [newcomer.pk]
    assert placement_of(newcomer).group_id == placement_of(short).group_id


def test_the_live_levers_are_the_simulators_unless_a_setting_says_otherwise(
    settings: Any,
) -> None:
    settings.ROLLMUX_CONSOLIDATION = settings.ROLLMUX_DRIFT_REPLAN = True  # as shipped
    assert levers.live_config() == PlannerConfig()
    settings.ROLLMUX_PLANNER_PRUNE_SATURATED = True
    settings.ROLLMUX_COLOCATED_ON_ARRIVAL = True
    lv = levers.live_config().admission
    assert lv.prune_saturated is True and lv.colocated_on_arrival is True
    assert lv.objective == PlannerConfig().admission.objective


def test_co_location_on_arrival_is_a_setting(world: Any, settings: Any) -> None:
    # A lone job is cheaper alone on its training node (the spec's rollout speed factor
    # 1.0: no H20 node to pay); the simulator's default does not place an arrival so.
    lone = exact_job(world, "lone", 300, 100, slo_class=world.silver, iterations=5)
    state, progress = snapshot.planner_input()
    assert levers.place_job(newcomer_profile(lone), state, progress).strategy is (
        Strategy.NEW_GROUP
    )
    settings.ROLLMUX_COLOCATED_ON_ARRIVAL = True
    result = levers.place_job(newcomer_profile(lone), state, progress)
    assert result.strategy is Strategy.COLOCATED
    assert result.placement is not None and result.placement.rollout_nodes == ()


@pytest.mark.parametrize("replan", [True, False], ids=["drift-re-planning-on", "off"])
def test_the_live_levers_hedge_moves_as_the_replanning_runs_do(settings: Any, replan: bool) -> None:
    # with drift re-planning the simulator's runs hedge every move (PlannerConfig.drift_hedge);
    # the live planner's readers of the levers (moves, the planning pass, the preview)
    # must get the same hedge, and none without it
    settings.ROLLMUX_DRIFT_REPLAN = replan
    settings.ROLLMUX_PLANNER_OBJECTIVE = "marginal"  # a setting still applies beneath it
    hedge = DRIFT_HEDGE if replan else 1.0
    lv = levers.live_config()
    assert lv.drift_hedge == hedge and lv.admission.objective == "marginal"
    assert consolidation.config().drift_hedge == hedge
    assert levers.arrival_policy().drift_hedge == hedge
