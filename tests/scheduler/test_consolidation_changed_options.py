"""Consolidation rule 9: on unbounded pools a departure asks the jobs alone elsewhere only
when a group that changed since the caller's previous pass is an option for them."""

from __future__ import annotations

from scheduler.cluster import empty_state
from scheduler.model import ClusterSpec, ClusterState, GpuType
from scheduler.planner import apply_placement, place, remove_job
from scheduler.planner.consolidation import plan_consolidation
from tests.scheduler.test_consolidation import RULES, SPEC, X, Y, Z, job, progress

UNBOUNDED = ClusterSpec(
    GpuType("H20", 1.85, 8, 2048, None), GpuType("H800", 5.28, 8, 2048, None), 2.0
)


def placed(spec: ClusterSpec) -> tuple[ClusterState, ClusterState]:
    """x and y share g0, z is alone in g2; return the state before y left and after."""
    state = empty_state(spec)
    for i, j in enumerate((X, Y, Z)):
        res = place(j, state)
        assert res.placement is not None
        state = apply_placement(state, j, res.placement, group_id=f"g{i}")
    assert [len(g.members) for g in state.groups] == [2, 1]
    return state, remove_job(state, "y")[0]


def plan(state: ClusterState, group_id: str, since: ClusterState | None) -> list[str]:
    moves = plan_consolidation(
        state, group_id, now=100 * 300.0, progress=progress(100), config=RULES, since=since
    )
    return [m.job_id for m in moves]


def test_a_departure_that_changed_none_of_their_options_asks_no_job_alone() -> None:
    _, after = placed(UNBOUNDED)
    # every candidate of rule 7 moves when asked (x and z merge) ...
    assert len(plan(after, "g0", None)) == 1
    # ... but a departure from a group that emptied, nothing else changed since the last
    # pass: the two jobs alone have the options they had then, and are not asked
    assert plan(after, "g7", since=after) == []


def test_a_job_whose_own_group_changed_is_asked() -> None:
    before, after = placed(UNBOUNDED)
    # y left g0 since the last pass: x is asked (and z, g0 being a changed option for it)
    assert len(plan(after, "g7", since=before)) == 1


def test_a_changed_group_no_job_alone_could_join_asks_none_of_them() -> None:
    _, after = placed(UNBOUNDED)
    slow = job("w", 3000, 3000)  # its cycle is far beyond x's and z's SLO windows
    res = place(slow, after)
    assert res.placement is not None and res.placement.group_id is None
    with_w = apply_placement(after, slow, res.placement, group_id="g9")
    # only g9 is new since the last pass, and it passes neither job's first checks
    assert plan(with_w, "g7", since=after) == []
    assert len(plan(with_w, "g7", None)) == 1  # asked, they would merge


def test_rule_9_is_off_on_a_bounded_cluster_and_by_its_lever() -> None:
    _, after = placed(SPEC)  # bounded pools: a departure frees nodes others may use
    assert len(plan(after, "g7", since=after)) == 1
    _, after = placed(UNBOUNDED)
    off = RULES.with_(changed_options_only=False)
    moves = plan_consolidation(
        after, "g7", now=100 * 300.0, progress=progress(100), config=off, since=after
    )
    assert len(moves) == 1
