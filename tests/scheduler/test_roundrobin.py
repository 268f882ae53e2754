"""The intra-group round-robin scheduler: GroupRuntime and plan_meta_iteration."""

from __future__ import annotations

import json
from functools import partial

import pytest

from scheduler.group_runtime import GroupRuntime
from scheduler.meta_iteration import max_cycle_mean, plan_meta_iteration, steady_iteration_times
from scheduler.model import PhaseKind, Pool
from tests.scheduler import builders
from tests.scheduler.builders import (
    Segment,
    assert_no_node_overlap,
    drive,
    group,
    member,
    runtime_with,
    simulate_round_robin,
    worst_case,
)

R, T = PhaseKind.ROLLOUT, PhaseKind.TRAIN
# The runtime tests' jobs: a few iterations, a loose SLO, a small footprint.
job = partial(builders.job, iterations=4, slo=2.0, mem=100)


def assert_one_phase_each_per_meta_iteration(segments: list[Segment], ids: list[str]) -> None:
    """Between two consecutive rollouts (trainings) of a job, every other job that is
    active throughout runs exactly one rollout (training)."""
    for kind in (R, T):
        order = [
            s.job_id
            for s in sorted(
                (s for s in segments if s.kind is kind),
                key=lambda s: (s.start, s.meta_iteration, ids.index(s.job_id)),
            )
        ]
        counts = {j: order.count(j) for j in ids}
        # Strict cyclic order: the pool runs ids[0], ids[1], ... repeatedly while all remain.
        full = min(counts.values())
        prefix = order[: full * len(ids)]
        for k in range(full):
            assert sorted(prefix[k * len(ids) : (k + 1) * len(ids)]) == sorted(ids), (kind, order)


# --- GroupRuntime ----------------------------------------------------------------


def test_two_jobs_alternate_and_a_training_overlaps_b_rollout() -> None:
    a, b = job("A", 100, 80), job("B", 90, 70)
    members = [member(a), member(b)]
    segs = drive(runtime_with(members), worst_case(members))
    rollouts = [s.job_id for s in sorted(segs, key=lambda s: s.start) if s.kind is R]
    trains = [s.job_id for s in sorted(segs, key=lambda s: s.start) if s.kind is T]
    assert rollouts == ["A", "B"] * 4
    assert trains == ["A", "B"] * 4
    a_train0 = next(s for s in segs if s.job_id == "A" and s.kind is T and s.iteration == 0)
    b_roll0 = next(s for s in segs if s.job_id == "B" and s.kind is R and s.iteration == 0)
    assert a_train0.start == b_roll0.start == 100.0  # A's training overlaps B's rollout
    assert_no_node_overlap(segs)


def test_a_short_job_on_its_own_rollout_node_cannot_lap_a_long_one() -> None:
    # A bare per-node FIFO would run B's short iterations several times inside one
    # of A's: the meta-iteration keeps one rollout and one training of each.
    a, b = job("A", 300, 100, iterations=3), job("B", 20, 20, iterations=3, slo=30)
    members = [member(a, ("r1",)), member(b, ("r2",))]
    segs = drive(runtime_with(members), worst_case(members))
    assert_one_phase_each_per_meta_iteration(segs, ["A", "B"])
    assert_no_node_overlap(segs)
    b_trains = sorted(s.start for s in segs if s.job_id == "B" and s.kind is T)
    # B is paced by A's cycle (400 s), exactly what the planner predicts for it.
    assert b_trains[1] - b_trains[0] == pytest.approx(400.0)


def test_each_member_runs_its_iterations_then_is_reported_done() -> None:
    a, b = job("A", 50, 40, iterations=2), job("B", 30, 30, iterations=5)
    rt = runtime_with([member(a), member(b)])
    done: list[str] = []

    def watch(t: float, r: GroupRuntime) -> GroupRuntime:
        return r

    segs = drive(rt, worst_case([member(a), member(b)]), on_finish=watch)
    assert sum(1 for s in segs if s.job_id == "A") == 4
    assert sum(1 for s in segs if s.job_id == "B") == 10
    assert rt.member_ids() == () and rt.is_idle()
    del done


def test_finish_reports_the_next_phase_and_done() -> None:
    rt = runtime_with([member(job("A", 10, 10, iterations=2))])
    (p,) = rt.start_ready()
    assert (p.kind, p.iteration, p.cold, p.switch, p.first_on_pool) == (R, 0, True, False, True)
    res = rt.finish("A", R)
    assert (res.next_kind, res.next_iteration, res.done) == (T, 0, False)
    (p,) = rt.start_ready()
    # Not the first phase after admission, but the first on the training pool.
    assert p.kind is T and not p.cold and p.first_on_pool
    res = rt.finish("A", T)
    assert (res.next_kind, res.next_iteration, res.done) == (R, 1, False)
    (p,) = rt.start_ready()
    assert not p.cold and not p.first_on_pool
    rt.finish("A", R)
    rt.start_ready()
    res = rt.finish("A", T)
    assert res.done and res.next_kind is None and res.freed_nodes == ("t1",)
    assert rt.member_ids() == ()


def test_resumed_job_starts_at_its_checkpoint_iteration() -> None:
    rt = GroupRuntime("g", switch_overhead_s=0)
    rt.admit(member(job("A", 10, 10, iterations=5)), iterations=5, start_iteration=3)
    segs = drive(rt, worst_case([member(job("A", 10, 10))]))
    assert [s.iteration for s in segs] == [3, 3, 4, 4]


def test_admit_rejects_bad_iterations_and_duplicates() -> None:
    rt = runtime_with([member(job("A", 10, 10))])
    with pytest.raises(ValueError, match="already"):
        rt.admit(member(job("A", 10, 10)), iterations=3)
    with pytest.raises(ValueError, match="start_iteration"):
        rt.admit(member(job("B", 10, 10)), iterations=3, start_iteration=3)


def test_finish_without_a_running_phase_is_an_error() -> None:
    rt = runtime_with([member(job("A", 10, 10))])
    with pytest.raises(ValueError, match="no running rollout"):
        rt.finish("A", R)
    rt.start_ready()
    with pytest.raises(ValueError, match="no running train"):
        rt.finish("A", T)


def test_switch_is_flagged_when_a_node_changes_job() -> None:
    a, b = job("A", 10, 10, iterations=2), job("B", 10, 10, iterations=2)
    members = [member(a), member(b)]
    segs = drive(runtime_with(members), worst_case(members))
    first = sorted(segs, key=lambda s: (s.start, s.kind))
    # A's very first rollout lands on a node nobody used: cold, no switch.
    assert first[0].job_id == "A" and first[0].cold and not first[0].switch
    # B's first rollout follows A's on r1: a switch (and cold, its first phase).
    b0 = next(s for s in segs if s.job_id == "B" and s.kind is R and s.iteration == 0)
    assert b0.switch and b0.cold
    # Alone, a job never switches.
    solo = drive(runtime_with([member(job("C", 5, 5))]), worst_case([member(job("C", 5, 5))]))
    assert not any(s.switch for s in solo)


def test_removed_job_drops_its_queue_but_its_running_phase_may_finish() -> None:
    a, b = job("A", 100, 50, iterations=3), job("B", 100, 50, iterations=3)
    rt = runtime_with([member(a), member(b)])
    (pa,) = rt.start_ready()  # A's rollout; B's is queued behind it on r1
    assert pa.job_id == "A"
    assert [q.job_id for q in rt.queued()] == ["B"]
    rt.remove("B")
    assert rt.queued() == ()
    rt.remove("A")  # A is running: the phase may still finish
    res = rt.finish("A", R)
    assert res.removed and res.next_kind is None and rt.is_idle()
    assert rt.start_ready() == []
    with pytest.raises(KeyError):
        rt.remove("A")


def test_member_admitted_mid_run_joins_the_current_meta_iteration() -> None:
    a, b = job("A", 100, 100, iterations=4), job("B", 100, 100, iterations=4)
    c = job("C", 100, 100, iterations=2)
    rt = runtime_with([member(a), member(b)])
    admitted = False

    def admit_c(t: float, r: GroupRuntime) -> GroupRuntime:
        nonlocal admitted
        if t >= 250 and not admitted:
            r.admit(member(c), iterations=2)
            admitted = True
        return r

    segs = drive(rt, worst_case([member(a), member(b), member(c)]), on_finish=admit_c)
    rolls = [s.job_id for s in sorted(segs, key=lambda s: s.start) if s.kind is R]
    # Admitted at t=300 (A's second rollout running): C's rollout is the last of
    # that meta-iteration, after B's, before A's third.
    assert rolls[:6] == ["A", "B", "A", "B", "C", "A"]
    assert_no_node_overlap(segs)


def test_multi_node_phases_are_gang_scheduled_without_deadlock() -> None:
    # C holds two rollout nodes, D and E one each: heads could deadlock on FIFO
    # queues filled in a different order; the global order cannot.
    c = job("C", 200, 100, iterations=3)
    d = job("D", 80, 60, iterations=3)
    e = job("E", 80, 60, iterations=3)
    members = [
        member(c, ("r1", "r2"), ("t1", "t2")),
        member(d, ("r1",), ("t1", "t2")),
        member(e, ("r2",), ("t1", "t2")),
    ]
    segs = drive(runtime_with(members), worst_case(members))
    assert len(segs) == 18
    assert_no_node_overlap(segs)
    assert_one_phase_each_per_meta_iteration(segs, ["C", "D", "E"])


def test_snapshot_round_trips_through_json_mid_run() -> None:
    a, b = job("A", 100, 80, iterations=3), job("B", 90, 70, iterations=3)
    members = [member(a), member(b)]
    plain = drive(runtime_with(members, overhead=2.0), worst_case(members, 2.0))

    def reload(t: float, r: GroupRuntime) -> GroupRuntime:
        snap = json.loads(json.dumps(r.to_dict()))
        r2 = GroupRuntime.from_dict(snap)
        assert r2.to_dict() == r.to_dict()
        return r2

    persisted = drive(
        runtime_with(members, overhead=2.0), worst_case(members, 2.0), on_finish=reload
    )
    assert persisted == plain


# --- plan_meta_iteration ------------------------------------------------------------


def test_a_job_alone_runs_at_its_solo_time() -> None:
    mi = plan_meta_iteration(group(member(job("A", 330, 120))), switch_overhead_s=2.0)
    assert mi.t_cycle == 450 and mi.t_meta == 450
    assert mi.slowdown == {"A": 1.0}
    assert mi.t_load == 330 and mi.bottleneck == "r1" and not mi.saturated
    assert mi.utilisation[Pool.ROLLOUT] == pytest.approx(330 / 450)


def test_two_balanced_jobs_fill_each_others_bubbles() -> None:
    mi = plan_meta_iteration(
        group(member(job("A", 100, 100)), member(job("B", 100, 100))), switch_overhead_s=2.0
    )
    assert mi.t_cycle == 200 and mi.t_load == 200 and mi.saturated
    # Every phase follows the other job's on its node: one 2 s switch per phase.
    assert mi.t_meta == pytest.approx(204.0)
    assert mi.slowdown["A"] == pytest.approx(1.02)
    assert mi.utilisation[Pool.TRAIN] == pytest.approx(200 / 204)


def test_rollout_heavy_pair_on_one_rollout_node_is_bound_by_the_rollout_load() -> None:
    mi = plan_meta_iteration(
        group(member(job("A", 330, 120)), member(job("B", 330, 120))), switch_overhead_s=0.0
    )
    assert mi.t_load == 660 and mi.t_meta == pytest.approx(660)
    assert mi.slowdown["A"] == pytest.approx(660 / 450)
    assert mi.bottleneck == "r1"


def test_train_mux_shares_one_training_node_without_slowdown() -> None:
    # The paper's Train Mux: D x2 + E on separate rollout nodes share one H800 node.
    d1, d2, e = job("D1", 330, 120), job("D2", 330, 120), job("E", 768, 130)
    g = group(member(d1, ("r1",)), member(d2, ("r2",)), member(e, ("r3",)))
    mi = plan_meta_iteration(g, switch_overhead_s=0.0)
    assert mi.t_cycle == 898 and mi.t_load == 768 and not mi.saturated
    assert mi.t_meta == pytest.approx(898)
    assert mi.slowdown["E"] == pytest.approx(1.0)
    assert mi.slowdown["D1"] == pytest.approx(898 / 450)


def test_plan_never_predicts_below_the_paper_closed_form() -> None:
    c = job("C", 10, 100)
    d = job("D", 100, 10)
    mi = plan_meta_iteration(group(member(c), member(d)), switch_overhead_s=1.0)
    assert mi.t_meta >= max(mi.t_cycle, mi.t_load)


def test_plan_matches_the_runtime_driven_with_worst_case_durations() -> None:
    members = [
        member(job("C", 200, 100, iterations=30), ("r1", "r2"), ("t1",)),
        member(job("D", 80, 60, iterations=30), ("r1",), ("t1",)),
        member(job("E", 120, 30, iterations=30), ("r2",), ("t1",)),
    ]
    mi = plan_meta_iteration(group(*members), switch_overhead_s=2.0)
    segs = drive(runtime_with(members, overhead=2.0), worst_case(members, 2.0))
    for m in members:
        ends = sorted(s.end for s in segs if s.job_id == m.job.id and s.kind is T)
        measured = (ends[-1] - ends[-5]) / 4
        assert measured == pytest.approx(mi.iteration_time[m.job.id])


def test_simulate_round_robin_accepts_drawn_durations() -> None:
    ms = [member(job("A", 100, 100)), member(job("B", 100, 100))]
    fin = simulate_round_robin(
        ms, switch_overhead_s=0.0, meta_iterations=3, roll_s=[50, 50], train_s=[50, 50]
    )
    assert fin[0] == [100.0, 200.0, 300.0]
    assert fin[1] == [150.0, 250.0, 350.0]


def test_meta_iteration_length_is_exact_even_when_the_start_is_misleading() -> None:
    # Over the first 10 meta-iterations j0 seems to run at its solo pace (310 s);
    # in steady state round robin locks both jobs to j1's cycle (330 s).
    j0 = member(job("j0", 250, 60), ("r1",), ("t1", "t2"))
    j1 = member(job("j1", 260, 70), ("r2",), ("t1",))
    early = simulate_round_robin([j0, j1], switch_overhead_s=0.0, meta_iterations=10)[0]
    assert (early[9] - early[5]) / 4 == pytest.approx(310.0)
    assert steady_iteration_times([j0, j1], switch_overhead_s=0.0) == [330.0, 330.0]


def test_karp_maximum_cycle_mean_of_a_small_max_plus_matrix() -> None:
    neg = float("-inf")
    # Cycles: 0->0 mean 1; 1->2->1 mean (4 + 2) / 2 = 3.
    a = [[1.0, neg, neg], [neg, neg, 2.0], [neg, 4.0, neg]]
    assert max_cycle_mean(a) == pytest.approx(3.0)


def test_a_profile_is_written_as_dataclasses_asdict_writes_it_and_read_back() -> None:
    # profile_to_dict reads the fields one by one (asdict cost a planning pass's writer
    # 50 us a member): the same dict, every field set, and the same profile back
    from dataclasses import asdict, replace

    from scheduler.model import profile_from_dict, profile_to_dict

    job = replace(
        builders.job("p", 100, 60, slo=1.4, mem=300, iterations=7, roll_min=80, train_min=50),
        tenant="vision", model="Qwen2.5-7B", priority=3, time_scale=10.0, t_sync_s=4.5,
        observed_solo_s=150.0, trend_shape=(1.2, 1.0, 0.8), switch_s=3.0, restart_s=40.0,
    )  # fmt: skip
    assert profile_to_dict(job) == asdict(job)
    assert profile_from_dict(json.loads(json.dumps(profile_to_dict(job)))) == job
