"""GroupRuntime with a co-located member (issue 14 item 3): no rollout nodes, both phases
on its training nodes, no sync phase, and no one else in its group."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.group_runtime import GroupRuntime, phase_nodes
from scheduler.model import Member, PhaseKind, Pool
from tests.scheduler import builders
from tests.scheduler.builders import assert_no_node_overlap, drive, runtime_with, worst_case

R, T, S = PhaseKind.ROLLOUT, PhaseKind.TRAIN, PhaseKind.SYNC


def colocated(job_id: str = "C", *, t_sync_s: float = 0.0, iterations: int = 3) -> Member:
    job = replace(builders.job(job_id, 30, 20, iterations=iterations), t_sync_s=t_sync_s)
    return Member(job, (), ("t1", "t2"))


def test_a_colocated_member_runs_both_phases_on_its_training_nodes_in_turn() -> None:
    m = colocated(t_sync_s=5.0)  # a weight sync is due on a disaggregated placement
    segs = drive(runtime_with([m]), worst_case([m]))
    assert [(s.kind, s.iteration) for s in segs] == [(R, 0), (T, 0), (R, 1), (T, 1), (R, 2), (T, 2)]
    assert {s.nodes for s in segs} == {("t1", "t2")}
    assert segs[-1].end == pytest.approx(3 * (30 + 20))  # back to back, no sync phase
    assert_no_node_overlap(segs)


def test_the_runtime_snapshot_keeps_a_colocated_member() -> None:
    rt = runtime_with([colocated()])
    (first,) = rt.start_ready()
    rt = GroupRuntime.from_dict(rt.to_dict())
    assert first.nodes == ("t1", "t2")
    rt.finish("C", R)
    (train,) = rt.start_ready()
    assert (train.kind, train.nodes) == (T, ("t1", "t2"))


def test_a_colocated_member_shares_its_group_with_no_one() -> None:
    other = builders.member(builders.job("A", 30, 20), ("r1",), ("t1",))
    rt = runtime_with([other])
    with pytest.raises(ValueError, match="co-located"):
        rt.admit(colocated(), iterations=3)
    rt = runtime_with([colocated()])
    with pytest.raises(ValueError, match="co-located"):
        rt.admit(other, iterations=3)


def test_a_member_needs_training_nodes() -> None:
    rt = GroupRuntime("g", switch_overhead_s=0.0)
    with pytest.raises(ValueError, match="training node"):
        rt.admit(Member(builders.job("X", 1, 1), ("r1",), ()), iterations=1)


def test_phase_nodes_of_a_disaggregated_member() -> None:
    m = builders.member(builders.job("A", 30, 20), ("r1",), ("t1",))
    assert [phase_nodes(m, k) for k in (R, T, S)] == [("r1",), ("t1",), ("r1",)]


# --- long-tail migration (issue 14 item 4): the runtime frees a tail-bound rollout's nodes


def two_on_shared_rollout_nodes() -> GroupRuntime:
    a = builders.member(builders.job("A", 100, 40, iterations=3), ("r1", "r2"), ("t1",))
    b = builders.member(builders.job("B", 100, 40, iterations=3, slo=3.0), ("r2",), ("t1",))
    return runtime_with([a, b])


def test_a_tail_bound_rollout_hands_the_next_members_node_over_and_keeps_its_own() -> None:
    rt = two_on_shared_rollout_nodes()
    (a_roll,) = rt.start_ready()  # B waits: r2 is A's
    assert (a_roll.job_id, a_roll.nodes) == ("A", ("r1", "r2"))
    assert rt.tail_nodes("A") == ("r2",)  # B's rollout node; A keeps r1 for its tail
    assert rt.release_tail("A", ("r2",)) == ("r1",)
    (b_roll,) = rt.start_ready()  # B's head starts on the freed node beside A's tail
    assert (b_roll.job_id, b_roll.kind, b_roll.nodes) == ("B", R, ("r2",))
    assert {p.job_id: p.nodes for p in rt.running()} == {"A": ("r1",), "B": ("r2",)}
    rt = GroupRuntime.from_dict(rt.to_dict())  # the cut survives the snapshot
    assert rt.finish("A", R).freed_nodes == ("r1",)
    with pytest.raises(ValueError):
        rt.release_tail("A", ("r2",))  # no rollout running any more: a replay is refused


def test_a_rollout_keeps_a_node_for_its_tail_and_frees_only_its_own() -> None:
    rt = two_on_shared_rollout_nodes()
    rt.start_ready()
    for nodes in (("r1", "r2"), ("r3",), ()):
        with pytest.raises(ValueError):
            rt.release_tail("A", nodes)
    assert rt.tail_nodes("B") == ()  # B runs no rollout


def test_no_tail_hand_over_without_a_next_member_or_when_co_located() -> None:
    alone = runtime_with([builders.member(builders.job("A", 1, 1), ("r1", "r2"), ("t1",))])
    alone.start_ready()
    assert alone.tail_nodes("A") == ()
    co = runtime_with([colocated()])
    co.start_ready()
    assert co.tail_nodes("C") == ()


def test_a_colocated_group_reads_saturated_with_its_training_nodes_busy() -> None:
    # Both phases run on the training nodes, so their load is the whole iteration: the
    # overview and the group page read "T_load 2.0 min, room left" and a training
    # utilisation of 0.26 for a node busy all the time (QA pass 13, live)
    from scheduler.meta_iteration import group_loads, plan_meta_iteration

    m = colocated(t_sync_s=5.0)
    meta = plan_meta_iteration(builders.group(m), switch_overhead_s=0.0)
    assert group_loads([m]) == {"t1": m.job.t_solo_max_s, "t2": m.job.t_solo_max_s}
    assert meta.t_load == meta.t_cycle == m.job.t_solo_max_s
    assert meta.saturated
    assert meta.utilisation[Pool.TRAIN] == pytest.approx(1.0)
    # (the floor the SLO check and the re-planner take is unchanged: max(t_solo, load))
    assert meta.t_meta == m.job.t_solo_max_s
