"""Weight sync (issue 9, agreed interface 2): the third phase kind, its arithmetic, its estimate."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.cluster import empty_state
from scheduler.group_runtime import GroupRuntime
from scheduler.meta_iteration import plan_meta_iteration
from scheduler.model import ClusterSpec, JobProfile, PhaseKind, Strategy
from scheduler.planner import apply_placement, place
from scheduler.sim.engine import simulate
from scheduler.sim.gen import generate_paper, to_jsonl
from scheduler.sim.metrics import summarise
from scheduler.sim.policies import CorePolicy
from scheduler.trace import TraceError, default_cluster, job_to_dict, parse_trace_text
from scheduler.weight_sync import model_bytes, parameters_from_model_name, sync_seconds
from tests.scheduler import builders
from tests.scheduler.builders import (
    assert_no_node_overlap,
    drive,
    group,
    member,
    runtime_with,
    worst_case,
)

R, T, S = PhaseKind.ROLLOUT, PhaseKind.TRAIN, PhaseKind.SYNC
job = partial(builders.job, iterations=3, slo=2.0, mem=100)


def synced(j: JobProfile, seconds: float) -> JobProfile:
    return replace(j, t_sync_s=seconds)


# --- the runtime ------------------------------------------------------------------------


def test_a_sync_follows_every_training_but_the_last_on_the_rollout_nodes() -> None:
    a = member(synced(job("A", 100, 80), 10), ("r1", "r2"), ("t1",))
    segs = drive(runtime_with([a]), worst_case([a]))
    order = [(s.kind, s.iteration) for s in sorted(segs, key=lambda s: s.start)]
    assert order == [(R, 0), (T, 0), (S, 0), (R, 1), (T, 1), (S, 1), (R, 2), (T, 2)]
    for s in segs:
        assert s.nodes == (("t1",) if s.kind is T else ("r1", "r2"))
    # The sync starts when the training ends and the rollout when the sync ends.
    by = {(s.kind, s.iteration): s for s in segs}
    assert by[S, 0].start == by[T, 0].end and by[R, 1].start == by[S, 0].end
    assert by[T, 2].end == pytest.approx(3 * (100 + 80) + 2 * 10)


def test_without_sync_seconds_there_is_no_sync_phase() -> None:
    a, b = member(job("A", 100, 80)), member(job("B", 90, 70))
    segs = drive(runtime_with([a, b]), worst_case([a, b]))
    assert {s.kind for s in segs} == {R, T}


def test_a_sync_is_the_first_half_of_the_members_rollout_turn() -> None:
    # A and B share one rollout node: A's sync waits for B's rollout of the round, and
    # B's next rollout waits for A's sync + rollout (the pool order holds).
    a = member(synced(job("A", 100, 100), 20))
    b = member(synced(job("B", 60, 60), 5))
    segs = drive(runtime_with([a, b]), worst_case([a, b]))
    assert_no_node_overlap(segs)
    on_r1 = [(s.job_id, s.kind) for s in sorted(segs, key=lambda s: s.start) if "r1" in s.nodes]
    assert on_r1[:6] == [("A", R), ("B", R), ("A", S), ("A", R), ("B", S), ("B", R)]
    for s in segs:
        if s.kind is S:
            nxt = next(x for x in segs if x.job_id == s.job_id and x.kind is R and x.start >= s.end)
            assert nxt.start == s.end  # nothing runs between a job's sync and its rollout


def test_the_snapshot_round_trips_in_the_middle_of_a_sync() -> None:
    a = member(synced(job("A", 100, 80), 10))
    rt = runtime_with([a])
    for kind in (R, T):
        (start,) = rt.start_ready()
        assert start.kind is kind
        rt.finish("A", kind)
    (sync,) = rt.start_ready()
    assert (sync.kind, sync.iteration, sync.nodes) == (S, 0, ("r1",))
    again = GroupRuntime.from_dict(json.loads(json.dumps(rt.to_dict())))
    assert again.running()[0].kind is S
    result = again.finish("A", S)
    assert (result.next_kind, result.next_iteration) == (R, 1)
    assert [p.kind for p in again.start_ready()] == [R]


# --- the arithmetic ---------------------------------------------------------------------


def test_sync_counts_in_the_solo_time_and_on_the_rollout_side() -> None:
    a = synced(job("A", 300, 100), 30)
    assert a.t_solo_max_s == 430 and a.rollout_pool_max_s == 330
    mi = plan_meta_iteration(group(member(a)), switch_overhead_s=0.0)
    assert mi.t_cycle == 430 and mi.node_load == {"r1": 330, "t1": 100}


@settings(max_examples=60, deadline=None)
@given(
    phases=st.lists(
        st.tuples(st.integers(20, 300), st.integers(20, 300), st.integers(0, 60)),
        min_size=1,
        max_size=4,
    ),
    rollout=st.lists(st.sampled_from([("r1",), ("r2",), ("r1", "r2")]), min_size=4, max_size=4),
    overhead=st.sampled_from([0.0, 2.0]),
)
def test_plan_meta_iteration_predicts_the_runtime_with_sync(
    phases: list[tuple[int, int, int]], rollout: list[tuple[str, ...]], overhead: float
) -> None:
    members = [
        member(synced(job(f"j{i}", float(r), float(t), iterations=60), float(s)), rollout[i])
        for i, (r, t, s) in enumerate(phases)
    ]
    segs = drive(runtime_with(members, overhead=overhead), worst_case(members, overhead))
    assert_no_node_overlap(segs)
    mi = plan_meta_iteration(group(*members), switch_overhead_s=overhead)
    for m in members:
        ends = sorted(s.end for s in segs if s.job_id == m.job.id and s.kind is T)
        # the runtime's long-run pace over 24 iterations (a multiple of every period)
        measured = (ends[-1] - ends[-25]) / 24
        # never optimistic, and equal on nearly every group: in 8 of 3,000 random groups
        # (2026-12-01) the plan came out 0.07-0.14% above the runtime's steady pace (e.g.
        # 724 s against 723 s), a difference not yet located; admission stays on the safe side
        predicted = mi.iteration_time[m.job.id]
        assert measured * (1 - 1e-6) <= predicted <= measured * 1.005


def test_a_long_sync_moves_a_joiner_off_the_shared_rollout_node() -> None:
    spec = builders.cluster_spec(4, 4, overhead=0.0)
    first = builders.job("A", 300, 100, slo=1.3)  # T_solo 400, window 520
    state = empty_state(spec)
    res = place(first, state)
    assert res.placement is not None
    state = apply_placement(state, first, res.placement, group_id="g")
    (a_roll,) = res.placement.rollout_nodes
    joiner = builders.job("B", 100, 250, slo=1.3)
    packed = place(joiner, state)
    assert packed.strategy is Strategy.DIRECT_PACKING and packed.placement is not None
    assert packed.placement.rollout_nodes == (a_roll,)  # 300 + 100 fits A's cycle
    # With 150 s of sync the shared rollout node would carry 300 + 100 + 150 = 550 s per
    # meta-iteration, beyond A's 520 s window: B gets a rollout node of its own and
    # still shares A's training node (T_meta = max(T_cycle 500, loads 300/250/350)).
    synced_joiner = synced(joiner, 150)
    scaled = place(synced_joiner, state)
    assert scaled.strategy is Strategy.ROLLOUT_SCALING and scaled.placement is not None
    assert a_roll not in scaled.placement.rollout_nodes
    assert scaled.predicted_slowdown == pytest.approx({"A": 500 / 400, "B": 1.0})


# --- the trace field and the simulator --------------------------------------------------


def test_the_trace_reads_an_optional_sync_field() -> None:
    base = job_to_dict(job("A", 100, 80))
    assert "t_sync_s" not in base  # a job without sync writes a plain v1 line
    (plain,) = parse_trace_text(json.dumps(base))
    assert plain.t_sync_s == 0.0
    (with_sync,) = parse_trace_text(json.dumps({**base, "t_sync_s": 6.5}))
    assert with_sync.t_sync_s == 6.5 and job_to_dict(with_sync)["t_sync_s"] == 6.5
    with pytest.raises(TraceError, match="field 't_sync_s'"):
        parse_trace_text(json.dumps({**base, "t_sync_s": -1}))
    with pytest.raises(ValueError, match="t_sync_s"):
        synced(plain, float("nan"))


def test_the_simulator_runs_sync_phases_and_counts_them_in_the_solo_time() -> None:
    jobs = [
        replace(j, iterations=min(j.iterations, 12), t_sync_s=8.0)
        for j in generate_paper(3, jobs=6, window_h=2.0)
    ]
    spec = default_cluster()
    run = simulate(jobs, spec, CorePolicy("rollmux", seed=3), seed=3, record_phases=True)
    figures = summarise(run)
    assert figures["completed"] == len(jobs)
    syncs = [p for p in run.phases if p.kind is S]
    assert len(syncs) == sum(j.iterations - 1 for j in jobs)
    assert all(p.end_s - p.start_s == pytest.approx(8.0, abs=2.0 + 1e-9) for p in syncs)
    record = run.jobs[jobs[0].id]
    n = jobs[0].iterations
    assert record.solo_iteration_s == pytest.approx(
        (sum(record.roll) + sum(record.train) + (n - 1) * 8.0) / n
    )
    # The JSONL round trip keeps the field, so a trace with sync simulates the same.
    again = parse_trace_text(to_jsonl(jobs))
    assert [j.t_sync_s for j in again] == [8.0] * len(jobs)


def test_solo_runtime_syncs_exactly_like_the_group_runtime() -> None:
    class WithGroupRuntime(CorePolicy):
        def runtime(self, group_id: str, spec: ClusterSpec, *, colocated: bool = False) -> Any:
            return GroupRuntime(group_id, switch_overhead_s=spec.switch_overhead_s)

    jobs = [
        replace(j, iterations=min(j.iterations, 6), t_sync_s=5.0)
        for j in generate_paper(4, jobs=4, window_h=1.0)
    ]
    spec = default_cluster()
    fast = simulate(jobs, spec, CorePolicy("solo-disagg", seed=1), seed=1, record_phases=True)
    core = simulate(jobs, spec, WithGroupRuntime("solo-disagg", seed=1), seed=1, record_phases=True)

    def key(phases: list[Any]) -> list[tuple[Any, ...]]:
        return [(p.job_id, p.kind, p.iteration, p.nodes, p.start_s, p.end_s) for p in phases]

    assert key(fast.phases) == key(core.phases)
    assert any(p.kind is S for p in fast.phases)


# --- the estimate -----------------------------------------------------------------------


def test_sync_seconds_send_one_copy_across_then_broadcast_in_the_pool() -> None:
    weights = model_bytes(7e9)  # bf16: 14 GB
    assert weights == 14e9
    # 14 GB over the paper's 20 Gbps link between the pools: 5.6 s.
    assert sync_seconds(weights) == pytest.approx(5.6)
    # Two rollout nodes add one copy over the 400 Gbps fabric inside the pool.
    assert sync_seconds(weights, rollout_nodes=2) == pytest.approx(5.6 + 0.28)
    assert sync_seconds(weights, cross_pool_gbps=100.0, overhead_s=1.0) == pytest.approx(2.12)
    with pytest.raises(ValueError, match="cross_pool_gbps"):
        sync_seconds(weights, cross_pool_gbps=0.0)
    with pytest.raises(ValueError, match="dtype"):
        model_bytes(7e9, dtype="fp4")


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("qwen2.5-7b", 7e9),
        ("Qwen2.5-14B-Instruct", 14e9),
        ("llama-3.1-8b", 8e9),
        ("gpt2-124m", 124e6),
        ("RH-M", None),
        ("", None),
    ],
)
def test_parameter_counts_come_from_the_model_name(name: str, parameters: float | None) -> None:
    assert parameters_from_model_name(name) == parameters
