"""rollmux's issue-14 admission levers: the expected-cost objective and the saturation prune."""

from __future__ import annotations

import pytest

from scheduler.cluster import empty_state
from scheduler.model import ClusterSpec, ClusterState, GpuType, JobProfile, Strategy
from scheduler.planner import apply_placement, place
from scheduler.planner.objective import JobProgress
from tests.scheduler.builders import job

SPEC = ClusterSpec(GpuType("H20", 1.85, 8, 2048, 8), GpuType("H800", 5.28, 8, 2048, 8), 2.0)


def placed(jobs: list[JobProfile]) -> ClusterState:
    state = empty_state(SPEC)
    for i, j in enumerate(jobs):
        res = place(j, state)
        assert res.placement is not None
        state = apply_placement(state, j, res.placement, group_id=f"g{i}")
    return state


def test_the_expected_cost_objective_rides_a_long_lived_group_instead_of_holding_a_short_one() -> (
    None
):
    # Two groups have a free slot (Δ = $0/h either way). Algorithm 1 breaks the tie by
    # the newcomer's slowdown and joins the short-cycle group g1, whose only member has
    # 10 iterations left: its two nodes are then held for the newcomer's whole life.
    # g0's member runs 5,000 more 900 s iterations, so the newcomer rides nodes that
    # are paid anyway: the expected remaining cost barely moves.
    long = job("long", 600, 300, slo=2.0, iterations=5000)
    short = job("short", 300, 200, slo=1.5, iterations=20)  # too short to share with `long`
    state = placed([long, short])
    assert len(state.groups) == 2
    newcomer = job("new", 300, 220, slo=1.8, iterations=1000)
    progress = {"long": JobProgress(0.0, 0), "short": JobProgress(0.0, 10)}
    marginal = place(newcomer, state, progress=progress)
    expected = place(newcomer, state, objective="expected", progress=progress)
    assert marginal.placement is not None and expected.placement is not None
    assert marginal.strategy is Strategy.DIRECT_PACKING and marginal.placement.group_id == "g1"
    assert expected.strategy is Strategy.DIRECT_PACKING and expected.placement.group_id == "g0"
    # with the short member far from its end, g1 is the cheaper choice by both measures
    fresh = {"long": JobProgress(0.0, 4990), "short": JobProgress(0.0, 0)}
    again = place(newcomer, state, objective="expected", progress=fresh)
    assert again.placement is not None and again.placement.group_id == "g1"


def test_without_the_saturation_prune_a_third_small_job_scales_onto_the_idle_training_node() -> (
    None
):
    # The docs' case (results.md section 3): two identical small jobs packed on one
    # rollout node saturate it (T_load 228 >= T_cycle 174), so line 4 skips the group
    # and the third opens a new one, although rollout scaling onto the half-idle
    # training node is admissible and cheaper.
    small = [job(f"s{i}", 114, 60, slo=1.78) for i in range(3)]
    state = placed(small[:2])
    assert len(state.groups) == 1
    pruned = place(small[2], state)
    assert pruned.strategy is Strategy.NEW_GROUP
    unpruned = place(small[2], state, prune_saturated=False)
    assert unpruned.strategy is Strategy.ROLLOUT_SCALING
    assert unpruned.marginal_cost_per_hour < pruned.marginal_cost_per_hour
    assert max(unpruned.predicted_slowdown.values()) <= 1.78


def test_an_unknown_objective_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="objective 'cheapest'"):
        place(job("a", 100, 100), empty_state(SPEC), objective="cheapest")


def colocated_spec(factor: float) -> ClusterSpec:
    train = GpuType("H800", 5.28, 8, 2048, 8, rollout_speed_factor=factor)
    return ClusterSpec(GpuType("H20", 1.85, 8, 2048, 8), train, 2.0)


def test_a_lone_job_goes_co_located_when_that_is_cheapest_and_no_one_joins_it() -> None:
    spec = colocated_spec(1.0)
    lone = job("lone", 300, 100, slo=1.2)
    res = place(lone, empty_state(spec), colocated=True)
    assert res.strategy is Strategy.COLOCATED and res.placement is not None
    assert res.placement.rollout_nodes == () and len(res.placement.train_nodes) == 1
    assert res.marginal_cost_per_hour == pytest.approx(8 * 5.28)  # one H800 node, no H20
    assert res.predicted_slowdown == {"lone": pytest.approx(1.0)}
    state = apply_placement(empty_state(spec), lone, res.placement, group_id="g0")
    # an identical job would pack into a disaggregated group of `lone`; it cannot
    # join a co-located one (its training nodes run lone's rollouts too)
    twin = place(job("twin", 300, 100, slo=1.2), state, colocated=False)
    assert twin.strategy is Strategy.NEW_GROUP
    # the same objective with the expected-cost ranking
    assert place(lone, empty_state(spec), colocated=True, objective="expected").strategy is (
        Strategy.COLOCATED
    )


def test_a_slower_rollout_on_the_training_type_can_break_the_slo_of_co_location() -> None:
    spec = colocated_spec(1.5)
    # rollout-heavy: (1.5 x 300 + 100) / 400 = 1.375 > SLO 1.2 -> a new group instead
    assert place(job("a", 300, 100, slo=1.2), empty_state(spec), colocated=True).strategy is (
        Strategy.NEW_GROUP
    )
    # within SLO 1.5 it is admissible, and cheaper than a new group per hour
    res = place(job("b", 300, 100, slo=1.5), empty_state(spec), colocated=True)
    assert res.strategy is Strategy.COLOCATED
    assert res.predicted_slowdown["b"] == pytest.approx(1.375)
