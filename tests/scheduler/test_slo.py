"""The distribution-aware SLO check (scheduler.slo) and the SLO probability (scheduler.stochastic)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from scheduler.cluster import empty_state
from scheduler.config import ALGORITHM1, PlannerConfig
from scheduler.model import ClusterState, JobProfile, PhaseKind, Strategy
from scheduler.planner import apply_placement, place
from scheduler.slo import check_group, expected_profile, expected_solo_s
from scheduler.stochastic import duration_model, slo_probabilities
from tests.scheduler.builders import cluster_spec, job, member

# A long job whose actual phases sit close to their maximum (90-100%), and a short one
# whose phases vary from half their maximum: on worst-case durations B fits in A's
# bubbles (B's window 1.5 x 290 = 435 s >= A's 400 s cycle, the join wait included),
# but A's actual cycle (~380 s) is more than 1.5 x B's actual solo time (~217.5 s).
LONG = job("A", 300, 100, slo=1.5, roll_min=270, train_min=90)
SHORT = job("B", 90, 200, slo=1.5, roll_min=45, train_min=100)
# B's shape with phases that vary like A's (90-100% of their maximum).
ALIKE = job("C", 90, 200, slo=1.5, roll_min=81, train_min=180)


def with_first(first: JobProfile) -> ClusterState:
    state = empty_state(cluster_spec(4, 4, overhead=0.0))
    res = place(first, state)
    assert res.placement is not None
    return apply_placement(state, first, res.placement, group_id="g")


def test_expected_solo_time_is_the_distribution_mean_or_the_observed_one() -> None:
    assert expected_solo_s(SHORT) == pytest.approx(67.5 + 150)
    assert expected_solo_s(replace(SHORT, t_sync_s=5.0)) == pytest.approx(222.5)
    assert expected_solo_s(replace(SHORT, observed_solo_s=260.0)) == 260.0
    exact = expected_profile(job("X", 100, 50), margin=0.03)
    assert (exact.t_roll_max_s, exact.t_train_max_s) == (100, 50)  # never above the max
    with pytest.raises(ValueError, match="observed_solo_s"):
        replace(SHORT, observed_solo_s=0.0)


def test_a_short_member_is_not_packed_when_the_long_ones_actual_cycle_breaks_its_slo() -> None:
    state = with_first(LONG)
    # The paper's worst-case check alone would pack B into A's group ...
    paper = place(SHORT, state, config=ALGORITHM1.with_(slo_margin=None))
    assert paper.strategy is Strategy.DIRECT_PACKING
    # ... where B would feel ~380 / 217.5 = 1.75x > 1.5: the expected check refuses.
    check = check_group(
        (member(LONG, ("r1",), ("t1",)), member(SHORT, ("r1",), ("t1",))), switch_overhead_s=0.0
    )
    assert check.worst_s == (400.0, 400.0) and check.held == (True, False)
    ours = place(SHORT, state)
    assert ours.strategy is Strategy.NEW_GROUP  # sharing the training node only fails too


def test_a_member_whose_phases_vary_like_the_long_ones_still_shares() -> None:
    state = with_first(LONG)
    res = place(ALIKE, state)
    assert res.strategy is Strategy.DIRECT_PACKING
    # Exact phases: the expected check is the worst-case one.
    exact_state = with_first(job("A", 300, 100, slo=1.5))
    assert place(job("E", 90, 200, slo=1.5), exact_state).strategy is Strategy.DIRECT_PACKING


def test_an_observed_mean_replaces_the_profile_in_the_check() -> None:
    state = with_first(LONG)
    # B has run and its mean solo iteration was 285 s (close to its 290 s max).
    learned = replace(SHORT, observed_solo_s=285.0)
    assert place(learned, state).strategy is Strategy.DIRECT_PACKING


# --- the probability ----------------------------------------------------------------------


def test_a_job_alone_meets_its_slo_with_certainty() -> None:
    p = slo_probabilities([member(SHORT)], switch_overhead_s=2.0)
    assert p == {"B": 1.0}
    res = place(SHORT, empty_state(cluster_spec(4, 4)))
    assert res.slo_probability == {"B": 1.0}


def test_the_probability_falls_for_the_member_whose_actual_ratio_is_lower() -> None:
    risky = slo_probabilities(
        [member(LONG, ("r1",), ("t1",)), member(SHORT, ("r2",), ("t1",))], switch_overhead_s=0.0
    )
    assert risky["A"] == 1.0  # A sets the cycle: its own draws are on both sides
    assert risky["B"] < 0.01  # ~380 s against 1.5 x ~217.5 s, whatever B draws
    alike = ALIKE
    safe = slo_probabilities(
        [member(LONG, ("r1",), ("t1",)), member(alike, ("r2",), ("t1",))], switch_overhead_s=0.0
    )
    assert safe["C"] > 0.99
    # Deterministic by default; an injected rng gives its own sample.
    assert risky == slo_probabilities(
        [member(LONG, ("r1",), ("t1",)), member(SHORT, ("r2",), ("t1",))], switch_overhead_s=0.0
    )
    other = slo_probabilities(
        [member(LONG, ("r1",), ("t1",)), member(alike, ("r2",), ("t1",))],
        switch_overhead_s=0.0,
        rng=np.random.default_rng(7),
    )
    assert other["C"] > 0.99


def test_few_remaining_iterations_make_a_borderline_member_less_certain() -> None:
    a = job("A", 300, 100, slo=1.2, roll_min=150, train_min=50)
    b = job("B", 200, 150, slo=1.2, roll_min=100, train_min=75)
    members = [member(a, ("r1",), ("t1",)), member(b, ("r2",), ("t1",))]
    many = slo_probabilities(members, switch_overhead_s=0.0, remaining_iterations={"B": 1000})
    few = slo_probabilities(members, switch_overhead_s=0.0, remaining_iterations={"B": 3})
    assert 0.0 < few["B"] < 1.0
    assert abs(many["B"] - 0.5) > abs(few["B"] - 0.5)  # the mean over 1000 is all but sure


def test_a_fit_carries_each_members_probability_and_a_floor_can_refuse() -> None:
    state = with_first(LONG)
    res = place(ALIKE, state)
    assert res.placement is not None and set(res.slo_probability) == {"A", "C"}
    assert all(0.99 < p <= 1.0 for p in res.slo_probability.values())
    strict = place(
        ALIKE, state, config=ALGORITHM1.with_(min_slo_probability=1.01)
    )  # nothing shared passes
    assert strict.strategy is Strategy.NEW_GROUP


def test_observed_phases_are_fitted_and_give_quantiles() -> None:
    model = duration_model(SHORT)
    assert model.source == "profile" and model.mean_solo_s == pytest.approx(217.5, rel=1e-6)
    assert model.quantile(PhaseKind.ROLLOUT, 0.75) == pytest.approx(45 + 0.75 * 45, rel=1e-6)
    seen = duration_model(SHORT, observed_rollout_s=[80, 85, 90], observed_train_s=[100, 100])
    assert seen.source == "observed"
    assert seen.quantile(PhaseKind.ROLLOUT, 0.5) == pytest.approx(85.0, rel=1e-3)
    assert seen.quantile(PhaseKind.TRAIN, 0.9) == pytest.approx(100.0, rel=1e-6)
    with pytest.raises(ValueError, match="q must be"):
        seen.quantile(PhaseKind.TRAIN, 1.5)
    with pytest.raises(ValueError, match="observed durations"):
        duration_model(SHORT, observed_rollout_s=[100, -1])
    # A group built from observed models uses them.
    p = slo_probabilities(
        [member(LONG, ("r1",), ("t1",)), member(SHORT, ("r2",), ("t1",))],
        switch_overhead_s=0.0,
        models={
            "B": duration_model(SHORT, observed_rollout_s=[88, 90], observed_train_s=[198, 200])
        },
    )
    assert p["B"] > 0.99  # B runs near its max after all: 288 s solo, 1.5 x 288 >= 400


def test_the_profile_moments_are_scipys() -> None:
    from scheduler.stochastic import _moments, _uniform_moments

    model = duration_model(SHORT)
    assert _uniform_moments(45, 90) == pytest.approx(_moments(model.rollout), rel=1e-6)
    assert _uniform_moments(100, 200) == pytest.approx(_moments(model.train), rel=1e-6)


# --- the tight-SLO rule (docs/results.md, section 11) --------------------------------------

# A job with a tight SLO (1.05: slack under admission.tight_slack) whose rollout varies
# little (280-300 s), and two looser partners with the same expected phases (40 s) but
# different spreads: 5-75 s (the group's worst case, 375 s, is over T's expected window
# 1.05 x 350 = 367.5 s) and 35-45 s (360 s, within it).
TIGHT = job("T", 300, 60, slo=1.05, roll_min=280)
WIDE = job("W", 75, 75, slo=10.0, roll_min=5, train_min=5)
NARROW = job("N", 45, 45, slo=10.0, roll_min=35, train_min=35)


def test_a_tight_slo_member_refuses_a_partner_whose_spread_breaks_it() -> None:
    pair = (member(TIGHT, ("r1",), ("t1",)), member(WIDE, ("r1",), ("t1",)))
    # expected + 3% admits the pair (T at 350 s against 367.5 s) ...
    assert check_group(pair, switch_overhead_s=0.0).ok
    # ... the rule does not: T's worst case (375 s) is over its expected window
    check = check_group(pair, switch_overhead_s=0.0, tight_slack=0.1)
    assert check.worst_s[0] > TIGHT.slo * expected_solo_s(TIGHT)
    assert check.held == (False, True)
    # a looser member (slack 0.05 is not under 0.04) is not held to it
    assert check_group(pair, switch_overhead_s=0.0, tight_slack=0.04).ok


def test_a_tight_slo_member_accepts_a_partner_whose_spread_is_small() -> None:
    pair = (member(TIGHT, ("r1",), ("t1",)), member(NARROW, ("r1",), ("t1",)))
    check = check_group(pair, switch_overhead_s=0.0, tight_slack=0.1)
    assert check.ok and check.worst_s[0] <= TIGHT.slo * expected_solo_s(TIGHT)
    # alone, a tight member whose worst case is over its expected window still fits
    wide_own = job("V", 300, 60, slo=1.05, roll_min=200)
    assert check_group((member(wide_own),), switch_overhead_s=0.0, tight_slack=0.1).ok


def test_the_planner_keeps_a_newcomer_out_of_a_tight_members_group() -> None:
    shipped = PlannerConfig()
    assert shipped.admission.tight_slack > TIGHT.slo - 1.0
    state = with_first(TIGHT)
    assert place(NARROW, state, config=shipped).strategy is Strategy.DIRECT_PACKING
    assert place(WIDE, state, config=shipped).strategy is not Strategy.DIRECT_PACKING
    # without the rule the wide newcomer joins
    off = shipped.with_(tight_slack=0.0)
    assert place(WIDE, state, config=off).strategy is Strategy.DIRECT_PACKING


def test_with_phase_times_is_replace_of_the_phase_times_only() -> None:
    # the planner's hot path copies profiles this way (no __post_init__): the same profile
    # as dataclasses.replace, and nothing but phase times may be set through it
    base = replace(job("a", 100.0, 50.0), t_roll_min_s=60.0, switch_s=3.0)
    times = {"t_roll_max_s": 80.0, "t_roll_min_s": 80.0, "t_train_max_s": 40.0}
    copied = base.with_phase_times(**times)
    assert copied == replace(base, **times) and copied is not base
    assert base.t_roll_max_s == 100.0  # the original is untouched
    with pytest.raises(ValueError, match="switch_s"):
        base.with_phase_times(switch_s=1.0)
