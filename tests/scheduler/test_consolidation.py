"""Consolidation on departure and the expected-remaining-cost model (issue 14 items 1-2)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.cluster import empty_state
from scheduler.config import PlannerConfig
from scheduler.model import ClusterSpec, ClusterState, GpuType, JobProfile, Member
from scheduler.planner import apply_placement, place, remove_job
from scheduler.planner.consolidation import (
    apply_move,
    best_move,
    may_move_within_budget,
    model_billions,
    plan_consolidation,
    restart_seconds,
)
from scheduler.planner.objective import (
    JobProgress,
    expected_meta_s,
    expected_solo_s,
    members_remaining_cost,
)

SPEC = ClusterSpec(GpuType("H20", 1.85, 8, 2048, 8), GpuType("H800", 5.28, 8, 2048, 8), 2.0)

# The rules these cases were written for: consolidation on Algorithm 1's admission options
# (marginal $/h, saturation prune, no co-located strategy, no lone-tail value), no hedge.
RULES = PlannerConfig().with_(
    objective="marginal",
    prune_saturated=True,
    colocated=False,
    lone_tail=False,
    lone_tail_moves=False,
    replan__enabled=False,
)


def job(
    job_id: str, roll: float, train: float, *, slo: float = 1.5, iterations: int = 200
) -> JobProfile:
    return JobProfile(
        id=job_id,
        arrival_s=0.0,
        iterations=iterations,
        rollout_gpus=8,
        train_gpus=8,
        t_roll_max_s=roll,
        t_train_max_s=train,
        host_mem_gb=400,
        slo=slo,
    )


X = job("x", 200, 100)
Y = job("y", 100, 200)
Z = job("z", 100, 200)


def after_y_left() -> ClusterState:
    """x and y pack into one group; z cannot join them (its training would break the
    cycle) and opens its own; then y leaves, so x and z each hold a half-idle group."""
    state = empty_state(SPEC)
    for i, j in enumerate((X, Y, Z)):
        res = place(j, state)
        assert res.placement is not None
        state = apply_placement(state, j, res.placement, group_id=f"g{i}")
    assert len(state.groups) == 2 and len(state.groups[0].members) == 2
    return remove_job(state, "y")[0]


def progress(now_done: int, *, moves: int = 0) -> dict[str, JobProgress]:
    return {j: JobProgress(0.0, now_done, moves) for j in ("x", "z")}


def test_a_departure_merges_the_two_half_idle_groups_and_saves_a_group_of_nodes() -> None:
    state = after_y_left()
    moves = plan_consolidation(state, "g0", now=100 * 300.0, progress=progress(100), config=RULES)
    assert len(moves) == 1
    move = moves[0]
    # one member joins the other's group by direct packing: one H20 + one H800 node
    # ($57.04/h) freed for the ~8.3 h left, less the restart on the merged group
    assert 350 < move.saving_usd < 480
    assert move.restart_s == pytest.approx(197.0)
    assert "saves $" in move.reason and move.from_group in move.reason
    merged = apply_move(state, move)
    assert len(merged.groups) == 1
    assert {m.job.id for m in merged.groups[0].members} == {"x", "z"}
    assert len(merged.groups[0].all_nodes) == 2
    # (apply_move looks in the move's source group first, and finds the job anywhere)
    for wrong in ("gone", move.placement.group_id or ""):
        assert apply_move(state, replace(move, from_group=wrong)) == merged


def test_no_move_when_the_jobs_are_almost_done_and_the_restart_would_not_pay() -> None:
    state = after_y_left()
    assert (
        plan_consolidation(state, "g0", now=199 * 300.0, progress=progress(199), config=RULES) == []
    )


def test_no_move_breaks_a_mover_s_slo_over_its_whole_run() -> None:
    state = after_y_left()
    # Both have run 100 of 200 iterations but took 63,000 s for them (slowed before):
    # the rest at 300 s plus the join allowance and the 197 s restart exceeds
    # 1.5 x 200 x their expected solo time = 90,000 s (their phases are exact, so the
    # reference has no spread to discount), for either mover.
    budget = 1.5 * 200 * expected_solo_s(X)
    assert budget < 63_000 + 197 + 101.5 * 300
    assert plan_consolidation(state, "g0", now=63_000.0, progress=progress(100), config=RULES) == []
    # with 8,000 s less behind them the same move fits
    assert plan_consolidation(state, "g0", now=55_000.0, progress=progress(100), config=RULES)


def test_a_job_moves_at_most_max_moves_times() -> None:
    state = after_y_left()
    assert (
        plan_consolidation(state, "g0", now=30_000.0, progress=progress(100, moves=2), config=RULES)
        == []
    )
    more = RULES.with_(max_moves_per_job=3)
    assert plan_consolidation(
        state, "g0", now=30_000.0, progress=progress(100, moves=2), config=more
    )


def test_best_move_of_an_unplaced_or_finished_job_is_none() -> None:
    state = after_y_left()
    assert best_move(state, "nobody", now=0.0, progress={}, config=RULES) is None
    done = {"x": JobProgress(0.0, 200), "z": JobProgress(0.0, 0)}
    assert best_move(state, "x", now=0.0, progress=done, config=RULES) is None


@pytest.mark.parametrize(
    ("model", "gpus", "billions", "seconds"),
    [
        ("qwen2.5-7b-8k", 8, 7.0, 197.0),
        ("qwen2.5-32b-4k", 16, 32.0, 419.0),
        ("qwen2.5-14b", 16, 14.0, 197.0 + 7 * (419 - 197) / 25),
        ("qwen2.5-3b-16k", 8, 3.0, 197.0),  # below the measured range: clipped
        ("BL-L", 32, 32.0, 419.0),  # no size in the name: inferred from the GPUs
        ("", 16, 14.0, 197.0 + 7 * (419 - 197) / 25),
    ],
)
def test_restart_time_is_a_function_of_model_size(
    model: str, gpus: int, billions: float, seconds: float
) -> None:
    j = replace(X, model=model, train_gpus=gpus)
    assert model_billions(j) == billions
    assert restart_seconds(j) == pytest.approx(seconds)


def test_expected_remaining_cost_releases_each_node_when_its_last_member_leaves() -> None:
    short = replace(job("a", 100, 100, iterations=10), t_roll_min_s=50.0, t_train_min_s=50.0)
    long = job("b", 100, 100, iterations=30)
    price = {"r1": 3600.0, "r2": 3600.0, "t1": 3600.0}  # $1 per node-second
    alone = members_remaining_cost(
        [Member(short, ("r1",), ("t1",))], price, {}, switch_overhead_s=0
    )
    # expected durations: 75 + 75 = 150 s per iteration, 10 iterations, 2 nodes
    assert alone == pytest.approx(2 * 10 * 150.0)
    pair = [Member(short, ("r1",), ("t1",)), Member(long, ("r2",), ("t1",))]
    cost = members_remaining_cost(pair, price, {}, switch_overhead_s=0)
    # 10 meta-iterations of both (r1 released), then `long` alone at 200 s for 20 more
    t_pair = expected_meta_s(pair, switch_overhead_s=0)
    assert t_pair >= 200.0
    first = 10 * t_pair
    assert cost == pytest.approx(first + 2 * (first + 20 * 200.0))
    # progress counts: `long` 20 iterations in has 10 left, as many as `short`
    done = {"b": JobProgress(0.0, 20)}
    assert members_remaining_cost(pair, price, done, switch_overhead_s=0) == pytest.approx(
        3 * first
    )
    # a restart delays the release of the mover's nodes
    delayed = members_remaining_cost(pair, price, done, switch_overhead_s=0, extra_s={"a": 50.0})
    assert delayed == pytest.approx(3 * first + 2 * 50.0)


def tight_alone() -> tuple[ClusterState, float]:
    """A long job with SLO 1.003 alone in its group; return the state and its expected
    solo iteration (270 s)."""
    tight = replace(
        job("t", 200, 100, slo=1.003, iterations=1000), t_roll_min_s=150, t_train_min_s=90
    )
    state = empty_state(SPEC)
    res = place(tight, state)
    assert res.placement is not None
    return apply_placement(state, tight, res.placement, group_id="g0"), expected_solo_s(tight)


def test_a_tight_slo_job_alone_goes_co_located_when_its_measured_slack_pays_the_restart() -> None:
    """The statistical budget (rule 4): a long job with SLO 1.003 alone in its group has
    0.003 x 1000 x 270 s = 810 s of slack over its run; co-located, its remaining
    iterations take exactly its own drawn phases, so the 197 s restart fits. The margin
    rule (expected solo / 1.01) refuses any move of such a job."""
    state, e = tight_alone()
    # 400 iterations done alone: their drawn solo seconds, and the same time elapsed
    done = {"t": JobProgress(0.0, 400, 0, solo_s_done=400 * e)}
    cfg = RULES.with_(colocated=True, objective="expected")
    move = best_move(state, "t", now=400 * e, progress=done, config=cfg)
    assert move is not None and not move.placement.rollout_nodes  # co-located
    margin_rule = cfg.with_(budget_z=None)
    assert best_move(state, "t", now=400 * e, progress=done, config=margin_rule) is None
    # a restart longer than the slack left breaks the SLO: no move
    slow = cfg.with_(restart_s=lambda j: 1000.0)
    assert best_move(state, "t", now=400 * e, progress=done, config=slow) is None
    # 700 s behind its own solo pace already: the 197 s restart no longer fits either
    behind = {"t": JobProgress(0.0, 400, 0, solo_s_done=400 * e - 700)}
    assert best_move(state, "t", now=400 * e, progress=behind, config=cfg) is None


def test_within_budget_tells_a_mover_no_destination_keeps_its_slo_before_it_is_placed() -> None:
    """`may_move_within_budget`: False only when no destination could keep the mover's SLO
    (`best_move` then answers None): the tight job of the case above fits co-located, not
    in a group (its worst-case solo time plus the join allowance breaks it), and once it
    is 700 s behind, nowhere."""
    state, e = tight_alone()
    t = state.groups[0].members[0].job
    cfg = RULES.with_(colocated=True, objective="expected")
    done = JobProgress(0.0, 400, 0, solo_s_done=400 * e)
    behind = JobProgress(0.0, 400, 0, solo_s_done=400 * e - 700)
    factor = SPEC.train.rollout_speed_factor
    assert may_move_within_budget(t, done, 400 * e, 600, 197.0, cfg, colocated_factor=factor)
    assert not may_move_within_budget(t, done, 400 * e, 600, 197.0, cfg)  # a group only
    assert not may_move_within_budget(t, behind, 400 * e, 600, 197.0, cfg, colocated_factor=factor)
    assert best_move(state, "t", now=400 * e, progress={"t": behind}, config=cfg) is None
    # a loose SLO fits a group too, co-located option or not
    loose = replace(t, slo=1.5)
    assert may_move_within_budget(loose, done, 400 * e, 600, 197.0, cfg)


def test_a_member_left_alone_is_valued_co_located_after_its_wait() -> None:
    """The expected remaining cost with `lone_restart_s`: x (100 iterations left) and z
    (10 left) share one H20 and one H800 node; once z leaves, x is alone and is valued
    as consolidation treats it: its group for the ski-rental wait, then its H800 node
    co-located after the restart (cheaper than both nodes for 90 more iterations)."""
    state = empty_state(SPEC)
    for j in (X, Z):
        res = place(j, state)
        assert res.placement is not None
        state = apply_placement(state, j, res.placement, group_id="g0")
    (group,) = state.groups
    assert len(group.all_nodes) == 2
    price = {n.name: n.price_per_hour for n in state.nodes}
    prog = {"x": JobProgress(0.0, 100), "z": JobProgress(0.0, 190)}
    plain = members_remaining_cost(group.members, price, prog, switch_overhead_s=2.0)
    lone = members_remaining_cost(
        group.members, price, prog, switch_overhead_s=2.0, lone_restart_s=lambda j: 197.0
    )
    meta = expected_meta_s(group.members, switch_overhead_s=2.0)
    e = expected_solo_s(X)
    wait = 197.0 * 42.24 / 14.8  # rent: the H20 node; buy: the restart on the H800 node
    t10 = 10 * meta
    by_hand = (14.8 * (t10 + wait) + 42.24 * (t10 + wait + 197.0 + (90 - wait / e) * e)) / 3600
    assert lone == pytest.approx(by_hand)
    assert lone < plain
    # a job alone now is valued as it stands (consolidation decides its move itself)
    alone = members_remaining_cost(
        group.members[:1], price, prog, switch_overhead_s=2.0, lone_restart_s=lambda j: 197.0
    )
    assert alone == pytest.approx(
        members_remaining_cost(group.members[:1], price, prog, switch_overhead_s=2.0)
    )


def test_under_drift_re_planning_a_move_must_also_fit_a_run_that_shrinks() -> None:
    """The drift hedge (PlannerConfig.drift_hedge): a tight job 50 iterations into
    its 1000 has 0.003 x 1000 x 270 s = 810 s of slack, enough for a 400 s restart; were
    its remaining run 0.4 x as long (the strongest decreasing template's end), the
    slack would be 0.003 x (50 + 950 x 0.4) x 270 s = 348 s, and the move is refused."""
    state, e = tight_alone()
    done = {"t": JobProgress(0.0, 50, 0, solo_s_done=50 * e)}
    cfg = RULES.with_(colocated=True, objective="expected", restart_s=lambda j: 400.0)
    assert best_move(state, "t", now=50 * e, progress=done, config=cfg) is not None
    hedged = cfg.with_(replan__enabled=True, hedge=0.4)
    assert best_move(state, "t", now=50 * e, progress=done, config=hedged) is None
    # a 150 s restart fits even the shrunk run's slack
    cheap = hedged.with_(restart_s=lambda j: 150.0)
    assert best_move(state, "t", now=50 * e, progress=done, config=cheap) is not None


def test_a_re_placed_job_is_valued_on_the_run_it_carries_whatever_its_progress_says() -> None:
    """A job re-placed (a consolidation move, a resume) carries its remaining run in its
    profile's iterations; the expected-cost ranking must not subtract its iterations done
    a second time (it did: a mover 90% in looked ten times shorter to a group it joined)."""
    rules = PlannerConfig().with_(colocated=False)  # joins against new groups only
    rng = random.Random(1)
    compared = 0
    for _ in range(150):
        state = empty_state(SPEC)
        for i in range(rng.randint(1, 4)):
            a = job(
                f"a{i}",
                rng.choice((50, 100, 200, 300)),
                rng.choice((50, 100, 200, 300)),
                iterations=rng.choice((20, 100, 400)),
                slo=rng.choice((1.5, 2.0, 3.0)),
            )
            res = place(a, state, config=rules)
            assert res.placement is not None
            state = apply_placement(state, a, res.placement, group_id=f"g{i}")
        total = rng.choice((100, 400))
        done = int(total * rng.choice((0.5, 0.9)))
        w = job(
            "w",
            rng.choice((50, 100, 200, 300)),
            rng.choice((50, 100, 200, 300)),
            iterations=total,
            slo=rng.choice((1.5, 2.0, 3.0)),
        )
        rest = replace(w, iterations=total - done)
        moved = place(rest, state, config=rules, progress={"w": JobProgress(0.0, done)})
        fresh = place(rest, state, config=rules, progress={})
        assert (moved.status, moved.placement) == (fresh.status, fresh.placement)
        compared += moved.placement is not None and moved.placement.group_id is not None
    assert compared > 50  # most of the cases were a join, where the ranking reads progress
