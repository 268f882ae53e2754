"""Drift re-planning decisions (scheduler.replan): forecast, project, decide."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from scheduler.cluster import empty_state
from scheduler.planner import apply_placement, place, update_job
from scheduler.planner.consolidation import partners_keep_slo, restart_seconds
from scheduler.planner.objective import JobProgress
from scheduler.replan import (
    MIN_OBSERVED,
    SHORT_RUN,
    SHRINK_MEAN,
    Decision,
    Outlook,
    Trend,
    assess,
    decide,
    fit_trend,
    headroom,
    move_profile,
    observed_outlook,
    planned_outlook,
    project,
    remaining_slo,
    young_profile,
)
from scheduler.sim.engine import simulate
from scheduler.sim.metrics import replan_bound
from scheduler.sim.policies import make_policy
from scheduler.sim.records import JobRecord
from scheduler.slo import check_group
from scheduler.trace import default_cluster
from tests.scheduler.builders import cluster_spec, job, member

SWITCH = 2.0


def test_a_trend_is_found_only_where_the_durations_drift() -> None:
    rng = np.random.default_rng(7)
    n = 60
    noise = rng.uniform(0.9, 1.1, n)
    flat = fit_trend(100.0 * noise)
    assert not flat.drifts and flat.level == pytest.approx(float(np.mean(100.0 * noise)))
    # increasing 1.5 over a 200-iteration run, observed for its first 60 iterations
    grow = 100.0 * (1.0 + 1.5 * np.arange(n) / 199) * noise
    up = fit_trend(grow)
    assert up.slope == pytest.approx(100.0 * 1.5 / 199, rel=0.25)
    assert up.at(139) == pytest.approx(250.0, rel=0.1)  # the run's last iteration
    # decreasing 1.5: the speed model follows 1 / (1 + a p) and never reaches zero
    shrink = 100.0 / (1.0 + 1.5 * np.arange(n) / 199) * noise
    down = fit_trend(shrink)
    assert down.rate_slope > 0 and down.slope == 0
    assert down.at(139) == pytest.approx(40.0, rel=0.15)
    assert down.at(10_000) > 0
    # too few observations: flat, whatever they show
    assert not fit_trend([100.0, 120.0, 140.0, 160.0][: MIN_OBSERVED - 1]).drifts


def test_a_trend_mean_over_a_stretch_is_its_average_forecast() -> None:
    line = Trend(100.0, slope=2.0)
    assert line.mean(0, 10) == pytest.approx(110.0)
    speed = Trend(100.0, rate_slope=0.0001)
    exact = float(np.mean([speed.at(x) for x in np.linspace(0, 50, 2001)]))
    assert speed.mean(0, 50) == pytest.approx(exact, rel=1e-3)
    assert Trend(80.0).mean(3, 9) == 80.0


def _pair() -> tuple[list, dict[str, Outlook]]:
    # A (300 + 100 s) sets a 400 s cycle; B (90 + 200 s) hides in its bubbles: 400 / 290
    # = 1.38 of B's solo time, within its 1.5.
    a = job("A", 300, 100, slo=2.0, iterations=120)
    b = job("B", 90, 200, slo=1.5, iterations=120)
    members = [member(a, ("r1",), ("t1",)), member(b, ("r2",), ("t1",))]
    flat = {
        "A": planned_outlook(a, remaining=100, elapsed_s=20 * 402.0, done=20),
        "B": planned_outlook(b, remaining=100, elapsed_s=20 * 402.0, done=20),
    }
    return members, flat


def test_without_drift_the_projection_agrees_with_the_admission_check() -> None:
    members, flat = _pair()
    checked = check_group(members, switch_overhead_s=SWITCH)
    assert checked.ok
    for k, m in enumerate(members):
        p = project(members, flat, m.job.id, switch_overhead_s=SWITCH, extra_s=0.0)
        assert p.holds
        steady = (p.total_s - flat[m.job.id].elapsed_s) / 100
        assert steady == pytest.approx(checked.expected_s[k], rel=1e-6)
    verdict = assess(members, flat, "A", switch_overhead_s=SWITCH, restart_s=300.0)
    assert not verdict.move and not verdict.broken


def test_a_member_whose_phases_grow_moves_before_it_breaks_its_partner() -> None:
    members, flat = _pair()
    # A grows to 2.5x over its run (slope 1.5 x 300 / 119 s per iteration on its rollout)
    f = 1 + 1.5 * 20 / 119
    grown = replace(
        flat["A"],
        roll=Trend(300 * f, slope=300 * 1.5 / 119),
        train=Trend(100 * f, slope=100 * 1.5 / 119),
    )
    outlooks = {**flat, "A": grown}
    verdict = assess(members, outlooks, "A", switch_overhead_s=SWITCH, restart_s=300.0)
    assert verdict.move and "other member" in verdict.reason
    assert verdict.broken == ("B",)
    # B, checked at its own boundary, is not the one to go: A breaks it, and A will move
    assert not assess(members, outlooks, "B", switch_overhead_s=SWITCH, restart_s=300.0).move
    # B alone holds: A's growth was the cause
    assert project(members[1:], outlooks, "B", switch_overhead_s=SWITCH).holds


def test_a_shrinking_member_moves_on_its_own_account_but_never_when_alone() -> None:
    members, flat = _pair()
    # B shrinks to 0.4x (decreasing 1.5) while A keeps the 400 s cycle
    f = 1 + 1.5 * 20 / 119
    roll, train = (
        Trend(90 / f, rate_slope=1.5 / 119 / 90),
        Trend(200 / f, rate_slope=1.5 / 119 / 200),
    )
    outlooks = {**flat, "B": replace(flat["B"], roll=roll, train=train)}
    verdict = assess(members, outlooks, "B", switch_overhead_s=SWITCH, restart_s=300.0)
    assert verdict.move and "past its SLO" in verdict.reason
    alone = assess(members[1:], outlooks, "B", switch_overhead_s=SWITCH, restart_s=300.0)
    assert not alone.move
    # a restart larger than what is left of its budget: moving cannot save it
    assert not assess(members, outlooks, "B", switch_overhead_s=SWITCH, restart_s=1e6).move


def test_the_moving_profile_carries_the_forecast_and_what_is_left_of_the_budget() -> None:
    base = job("A", 300, 100, slo=1.5, iterations=120, roll_min=200, train_min=80)
    grown = Outlook(base, Trend(250.0, slope=1.0), Trend(90.0), 100, 20 * 330.0, 20 * 330.0, 20)
    moved = move_profile(grown, base, restart_s=300.0)
    # the largest forecast rollout (250 + 100 s) x the profile's max / mean (300 / 250)
    assert moved.t_roll_max_s == pytest.approx(350.0 * 1.2)
    assert moved.t_roll_min_s == pytest.approx(250.0 * 0.8)
    assert moved.observed_solo_s == pytest.approx(300.0 + 90.0)
    # 1.5 x (6600 + 100 x 390) - 6600 - 300 over 100 x 390
    left = (1.5 * (6600 + 39000) - 6600 - 300) / 39000
    assert headroom(grown, restart_s=300.0) == pytest.approx(left)
    assert moved.slo == pytest.approx(min(1.5, left))
    late = Outlook(base, Trend(250.0), Trend(90.0), 10, 200 * 520.0, 200 * 330.0, 200)
    assert headroom(late, restart_s=300.0) < 1.0
    assert remaining_slo(late, restart_s=300.0) == 1.0


def test_an_outlook_needs_matching_observations() -> None:
    base = job("A", 300, 100)
    with pytest.raises(ValueError, match="as many observed rollouts as trainings"):
        observed_outlook(base, [1.0, 2.0], [1.0], remaining=3, elapsed_s=0.0)
    seen = observed_outlook(base, [250.0] * 10, [90.0] * 10, remaining=5, elapsed_s=3400.0)
    assert seen.solo_done_s == pytest.approx(3400.0) and seen.done == 10


def test_a_job_planned_anew_in_place_keeps_its_nodes_and_admission_sees_it() -> None:
    # B (300 + 100 s) alone; A (90 + 200 s) hides in its bubbles, but not once B is planned
    # at 60 + 20 s (it shrank): A would set the cycle, 290 s, past B's 1.2 x 80 s.
    spec = cluster_spec()
    b = job("B", 300, 100, slo=1.2, iterations=100)
    state = empty_state(spec)
    res = place(b, state)
    assert res.placement is not None
    state = apply_placement(state, b, res.placement, group_id="g1")
    a = job("A", 90, 200, slo=1.5, iterations=100)
    joined = place(a, state)
    assert joined.placement is not None and joined.placement.group_id == "g1"
    shrunk = replace(b, t_roll_max_s=60, t_roll_min_s=60, t_train_max_s=20, t_train_min_s=20)
    after = update_job(state, shrunk)
    (group,) = after.groups
    assert group.members[0].job == shrunk and group.all_nodes == state.groups[0].all_nodes
    refused = place(a, after)
    assert refused.placement is not None and refused.placement.group_id != "g1"
    with pytest.raises(KeyError, match="in no co-execution group"):
        update_job(after, replace(a, id="nobody"))


def test_the_decision_learns_a_drifting_job_in_place_and_moves_the_one_that_must_go() -> None:
    members, flat = _pair()
    # nothing drifts and nobody is behind: not even a projection
    quiet = decide(
        members, flat, "A", members[0].job, recent_solo_s=400, slowdown_so_far=1.0,
        switch_overhead_s=SWITCH,
    )  # fmt: skip
    assert quiet == Decision(False)
    a = flat["A"]
    slight = replace(a, roll=Trend(300.0, slope=0.05), train=Trend(100.0, slope=0.01))
    stay = decide(
        members, {**flat, "A": slight}, "A", members[0].job, recent_solo_s=400,
        slowdown_so_far=1.0, switch_overhead_s=SWITCH,
    )  # fmt: skip
    assert not stay.move and stay.profile is not None  # learned, kept in place
    assert stay.profile.t_roll_max_s > members[0].job.t_roll_max_s
    grown = replace(a, roll=Trend(340.0, slope=3.8), train=Trend(113.0, slope=1.26))
    go = decide(
        members, {**flat, "A": grown}, "A", members[0].job, recent_solo_s=450,
        slowdown_so_far=1.0, switch_overhead_s=SWITCH,
    )  # fmt: skip
    assert go.move and go.restart_s > 0 and go.profile is not None
    assert go.profile.slo <= members[0].job.slo


def test_the_oracle_bound_is_a_run_alone_from_the_first_checkpoint() -> None:
    profile = job("S", 100, 100, slo=1.1, iterations=4)
    record = JobRecord(profile=profile, roll=[100.0] * 4, train=[100.0] * 4)
    assert replan_bound(record) is None  # has not run
    record.admitted_s, record.first_boundary_s = 0.0, 300.0  # its first iteration: 300 s
    # its partners moved away at its first checkpoint: 300 + 3 x 200 over 4 x 200
    assert replan_bound(record) == pytest.approx(900.0 / 800.0)
    assert replan_bound(record) > profile.slo  # no re-plan could have kept this one
    # itself moved out: one restart more
    moved = replan_bound(record, restart=True)
    assert moved == pytest.approx((900.0 + restart_seconds(profile)) / 800.0)
    record.first_boundary_s = 200.0  # alone at its own pace: nothing lost yet
    assert replan_bound(record) == pytest.approx(1.0)


def test_a_short_job_is_planned_stricter_for_its_whole_run() -> None:
    short = job("S", 300, 100, slo=1.2, iterations=10)
    young = young_profile(short)
    assert young is not None and young.slo == 1.0  # 1.2 x 0.61, held at 1
    assert young_profile(replace(short, slo=2.0)).slo == pytest.approx(2.0 * SHRINK_MEAN)  # type: ignore[union-attr]
    assert young_profile(replace(short, iterations=SHORT_RUN + 1)) is None
    # In a run: S (20 iterations, first) would hide in the bubbles of N (arriving 10 s
    # later: a 400 s cycle, 1.38 x S's solo time, within S's 1.5), and the static planner
    # packs them; re-planning keeps S to itself (for its whole run), since S's run is
    # over before a trend of it could show.
    s = job("S", 90, 200, slo=1.5, iterations=20)
    newcomer = replace(job("N", 300, 100, slo=2.0, iterations=20), arrival_s=10.0)
    spec = default_cluster()
    static = simulate([s, newcomer], spec, make_policy("rollmux", seed=1), seed=1)
    assert static.jobs["S"].group_id == static.jobs["N"].group_id
    replan = simulate(
        [s, newcomer],
        spec,
        make_policy("rollmux", seed=1),
        seed=1,
        replan_drift=True,
    )
    assert replan.jobs["S"].group_id != replan.jobs["N"].group_id
    # and at its own admission: S arriving 10 s after N joins N's group in the static run,
    # not when re-planning (its run would be over before a re-plan could help it)
    late = [replace(newcomer, arrival_s=0.0), replace(s, arrival_s=10.0)]
    static = simulate(late, spec, make_policy("rollmux", seed=1), seed=1)
    assert static.jobs["S"].group_id == static.jobs["N"].group_id
    replan = simulate(
        late,
        spec,
        make_policy("rollmux", seed=1),
        seed=1,
        replan_drift=True,
    )
    assert replan.jobs["S"].group_id != replan.jobs["N"].group_id


@pytest.mark.parametrize("shape", [(1.4, 1.0, 0.6), (0.6, 1.0, 1.4)], ids=["shrinks", "grows"])
def test_a_trending_pace_setter_is_checked_over_its_run_not_at_its_mean(
    shape: tuple[float, ...],
) -> None:
    # A (300 + 100 s) sets the cycle and B hides in its bubbles: at A's mean A runs at its
    # own pace (402 s of 400), within a tight 1.03. A that shrinks (or grows) runs below B's
    # pace at one end of its run, where B sets it: over its run A is slowed by 4.7%.
    a = job("A", 300, 100, slo=1.03, iterations=120)
    b = job("B", 90, 200, slo=1.5, iterations=120)
    flat = check_group(
        [member(a, ("r1",), ("t1",)), member(b, ("r2",), ("t1",))], switch_overhead_s=SWITCH
    )
    assert flat.ok and flat.expected_s[0] == pytest.approx(402.0)
    trending = replace(a, trend_shape=shape)
    checked = check_group(
        [member(trending, ("r1",), ("t1",)), member(b, ("r2",), ("t1",))], switch_overhead_s=SWITCH
    )
    assert not checked.held[0]
    assert checked.expected_s[0] > 1.03 * 400.0
    # B sees A at the larger of its mean and its load now: a shrinking A is 1.4x now
    if shape[0] > 1.0:
        assert checked.expected_s[1] > flat.expected_s[1]
    else:
        assert checked.expected_s[1] == flat.expected_s[1] and checked.held[1]
    # alone, a trending job is never slowed
    assert check_group([member(trending, ("r1",), ("t1",))], switch_overhead_s=SWITCH).ok


def test_the_moving_profile_of_a_trending_job_carries_its_shape() -> None:
    base = job("A", 300, 100, slo=1.5, iterations=120, roll_min=200, train_min=80)
    grown = Outlook(base, Trend(250.0, slope=1.0), Trend(90.0), 90, 0.0, 0.0, 30)
    shape = move_profile(grown, base, restart_s=0.0).trend_shape
    assert shape is not None and len(shape) == 3
    assert shape[0] < 1.0 < shape[2] and sum(shape) / 3 == pytest.approx(1.0)
    # the pieces' forecast: rollout 250 + 15 / 45 / 75 s ahead, training 90
    assert shape[0] == pytest.approx((265 + 90) / (295 + 90))
    flat = Outlook(base, Trend(250.0), Trend(90.0), 90, 0.0, 0.0, 30)
    assert move_profile(flat, base, restart_s=0.0).trend_shape is None


def test_a_move_into_a_group_keeps_its_members_slo_restart_included() -> None:
    # B (300 + 100 s, exact) runs alone at its own pace, 100 of 120 iterations done; A
    # (90 + 200 s) would hide in its bubbles. B's whole-run budget (SLO 1.006: 248 s of
    # slack) absorbs A's switches, not a 300 s restart of A on B's training node.
    spec = cluster_spec()
    b = job("B", 300, 100, slo=1.006, iterations=120)
    state = empty_state(spec)
    res = place(b, state)
    assert res.placement is not None
    state = apply_placement(state, b, res.placement, group_id="g1")
    progress = {"B": JobProgress(0.0, 100, 0, solo_s_done=100 * 400.0)}
    now = 100 * 400.0
    a = job("A", 90, 200, slo=1.5, iterations=50)
    joined = place(a, state, progress=progress)
    assert joined.placement is not None and joined.placement.group_id == "g1"
    (group,) = state.groups
    assert set(joined.placement.train_nodes) & set(group.members[0].train_nodes)
    assert partners_keep_slo(group, joined, 0.0, now=now, progress=progress)
    assert not partners_keep_slo(group, joined, 300.0, now=now, progress=progress)
