"""GroupRuntime with a co-located member (issue 14 item 3): no rollout nodes, both phases
on its training nodes, no sync phase, and no one else in its group."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.group_runtime import GroupRuntime, phase_nodes
from scheduler.model import Member, PhaseKind
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
