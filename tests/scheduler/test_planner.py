"""Table-driven tests of the inter-group planner (Algorithm 1) and its baselines."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import pytest

from scheduler.cluster import empty_state
from scheduler.model import (
    ClusterSpec,
    ClusterState,
    JobProfile,
    Placement,
    PlacementResult,
    PlacementStatus,
    Pool,
    Strategy,
)
from scheduler.planner import apply_placement, place, remove_job
from tests.scheduler.builders import cluster_spec as spec
from tests.scheduler.builders import job

FIT, RETRY, INFEASIBLE = PlacementStatus.FIT, PlacementStatus.RETRY, PlacementStatus.INFEASIBLE
DIRECT, SCALING, NEW = Strategy.DIRECT_PACKING, Strategy.ROLLOUT_SCALING, Strategy.NEW_GROUP


def build(cluster: ClusterSpec, jobs: list[JobProfile], *, max_group_size: int = 5) -> ClusterState:
    """Place and apply `jobs` one by one with rollmux, as arrivals would."""
    state = empty_state(cluster)
    for i, j in enumerate(jobs):
        res = place(j, state, max_group_size=max_group_size)
        assert res.status is FIT, (j.id, res.reason)
        assert res.placement is not None
        state = apply_placement(state, j, res.placement, group_id=f"g{i}")
    return state


def group_of(state: ClusterState, job_id: str) -> str:
    return next(g.id for g in state.groups for m in g.members if m.job.id == job_id)


def cordon(state: ClusterState, names: Iterable[str]) -> ClusterState:
    """Return `state` with the named nodes cordoned (the inventory's "drained")."""
    names = set(names)
    return replace(
        state,
        nodes=tuple(replace(n, cordoned=True) if n.name in names else n for n in state.nodes),
    )


def cordoned_names(state: ClusterState) -> set[str]:
    return {n.name for n in state.nodes if n.cordoned}


# What a case cordons after the existing jobs are placed: a function of the built state.
def _rollout_of(job_id: str) -> Callable[[ClusterState], Iterable[str]]:
    def pick(state: ClusterState) -> Iterable[str]:
        return next(m.rollout_nodes for g in state.groups for m in g.members if m.job.id == job_id)

    return pick


def _train_of(job_id: str, first_only: bool = False) -> Callable[[ClusterState], Iterable[str]]:
    def pick(state: ClusterState) -> Iterable[str]:
        nodes = next(m.train_nodes for g in state.groups for m in g.members if m.job.id == job_id)
        return nodes[:1] if first_only else nodes

    return pick


def _free(pool: Pool, count: int) -> Callable[[ClusterState], Iterable[str]]:
    def pick(state: ClusterState) -> Iterable[str]:
        held = {x for g in state.groups for x in g.all_nodes}
        return [n.name for n in state.nodes if n.pool is pool and n.name not in held][:count]

    return pick


@dataclass(frozen=True)
class Case:
    name: str
    existing: list[JobProfile]
    job: JobProfile
    status: PlacementStatus
    strategy: Strategy | None = None
    joins: str | None = None  # id of an existing job whose group it must join
    reason: str = ""  # substring of the reason
    cluster: ClusterSpec = field(default_factory=spec)
    policy: str = "rollmux"
    max_group_size: int = 5
    check: Callable[[ClusterState, PlacementResult], None] | None = None
    cordon: Callable[[ClusterState], Iterable[str]] | None = None  # nodes drained after building


def _shares_training_node_with_a(state: ClusterState, res: PlacementResult) -> None:
    assert res.placement is not None
    a = next(m for g in state.groups for m in g.members if m.job.id == "A")
    assert res.placement.train_nodes == a.train_nodes
    assert not set(res.placement.rollout_nodes) & set(a.rollout_nodes)
    assert res.marginal_cost_per_hour == pytest.approx(8 * 1.85)
    assert res.predicted_slowdown["A"] <= 1.2 and res.predicted_slowdown["B"] <= 1.2


def _slowdown_reported_for_every_member(state: ClusterState, res: PlacementResult) -> None:
    assert set(res.predicted_slowdown) == {"A", "B"}
    assert res.predicted_slowdown["A"] == pytest.approx(1.02)
    assert res.marginal_cost_per_hour == 0.0


def _two_new_rollout_nodes(state: ClusterState, res: PlacementResult) -> None:
    assert res.placement is not None
    assert len(res.placement.new_nodes) == 2
    assert res.marginal_cost_per_hour == pytest.approx(2 * 8 * 1.85)


def _pinned_to_one_training_node(state: ClusterState, res: PlacementResult) -> None:
    assert res.placement is not None
    assert len(res.placement.train_nodes) == 1 and len(res.placement.rollout_nodes) == 1
    c = state.groups[0].members[0]
    assert set(res.placement.train_nodes) < set(c.train_nodes)


def _minted(state: ClusterState, res: PlacementResult) -> None:
    assert res.placement is not None
    assert res.placement.new_nodes == ("H20-000", "H800-000")
    after = apply_placement(state, job("A", 100, 100), res.placement, group_id="g")
    assert {n.name for n in after.nodes} == {"H20-000", "H800-000"}


def _random_ignores_slo(state: ClusterState, res: PlacementResult) -> None:
    assert res.predicted_slowdown["A"] > 1.0  # A's SLO (1.0) is broken: baselines ignore it


def _greedy_picks_the_idle_group(state: ClusterState, res: PlacementResult) -> None:
    assert res.placement is not None
    assert res.placement.group_id == group_of(state, "IDLE")


def _lower_slowdown_wins_tie(state: ClusterState, res: PlacementResult) -> None:
    assert res.predicted_slowdown["N"] == pytest.approx(min(res.predicted_slowdown.values()))


def _scales_beside_the_drained_rollout_nodes(state: ClusterState, res: PlacementResult) -> None:
    assert res.placement is not None
    a = next(m for g in state.groups for m in g.members if m.job.id == "A")
    assert res.placement.train_nodes == a.train_nodes  # the training node is not drained
    assert len(res.placement.new_nodes) == 1


def _own_training_node(state: ClusterState, res: PlacementResult) -> None:
    assert res.placement is not None
    assert res.placement.group_id is None
    assert not set(res.placement.train_nodes) & {x for g in state.groups for x in g.train_nodes}


def _apart_from_every_existing_job(state: ClusterState, res: PlacementResult) -> None:
    assert res.placement is not None
    assert res.placement.group_id is None
    held = {x for g in state.groups for x in g.all_nodes}
    assert not set(res.placement.rollout_nodes + res.placement.train_nodes) & held
    assert res.predicted_slowdown == {res.placement.job_id: 1.0}


def _pinned_to_the_training_node_still_up(state: ClusterState, res: PlacementResult) -> None:
    assert res.placement is not None
    c = next(m for g in state.groups for m in g.members if m.job.id == "C")
    assert res.placement.train_nodes == c.train_nodes[1:]


CASES = [
    Case(
        "two rollout-heavy jobs share one training node",
        [job("A", 330, 120, slo=1.2)],
        job("B", 330, 120, slo=1.2),
        FIT,
        SCALING,
        joins="A",
        check=_shares_training_node_with_a,
    ),
    Case(
        "direct packing is chosen when it is free",
        [job("A", 100, 100)],
        job("B", 100, 100),
        FIT,
        DIRECT,
        joins="A",
        check=_slowdown_reported_for_every_member,
    ),
    Case(
        "rollout scaling for a rollout-heavy job when packing would break an SLO",
        [job("A", 300, 100, rollout_gpus=16, slo=1.2)],
        job("B", 250, 50, rollout_gpus=16, slo=1.7),
        FIT,
        SCALING,
        joins="A",
        check=_two_new_rollout_nodes,
    ),
    Case(
        "a job whose memory fits no node is INFEASIBLE",
        [],
        job("A", 100, 100, mem=4096),
        INFEASIBLE,
        reason="host_mem_gb=4096 exceeds the host memory of every H20 node",
    ),
    Case(
        "GPUs not a multiple of the node size are INFEASIBLE",
        [],
        job("A", 100, 100, train_gpus=12),
        INFEASIBLE,
        reason="train_gpus=12 is not a multiple of 8",
    ),
    Case(
        "more GPUs than the pool has in total are INFEASIBLE",
        [],
        job("A", 100, 100, rollout_gpus=80),
        INFEASIBLE,
        reason="the rollout pool has 8 nodes (64 GPUs) in total",
    ),
    Case(
        "job larger than the rollout pool is INFEASIBLE",
        [job("A", 100, 100)],
        job("B", 100, 100, rollout_gpus=128),
        INFEASIBLE,
        reason="rollout_gpus=128 needs 16 H20 nodes; the rollout pool has 8 nodes (64 GPUs)",
    ),
    Case(
        "training demand above the training pool is INFEASIBLE",
        [job("A", 100, 100)],
        job("B", 100, 100, train_gpus=72),
        INFEASIBLE,
        reason="train_gpus=72 needs 9 H800 nodes; the train pool has 8 nodes (64 GPUs)",
    ),
    Case(
        "a job as large as the whole pool is not INFEASIBLE",
        [],
        job("A", 100, 100, rollout_gpus=64, train_gpus=64),
        FIT,
        NEW,
    ),
    Case(
        "a pool with down nodes names them in the INFEASIBLE reason",
        [],
        job("A", 100, 100, rollout_gpus=64),
        INFEASIBLE,
        reason="the rollout pool has 6 nodes (48 GPUs), not counting 2 down nodes",
        cluster=spec(6, 8, roll_down=2),
    ),
    Case(
        "the baselines refuse a job larger than the pool too",
        [job("A", 100, 100)],
        job("B", 100, 100, train_gpus=72),
        INFEASIBLE,
        reason="the train pool has 8 nodes",
        policy="greedy-most-idle",
    ),
    Case(
        "an slo below 1 is INFEASIBLE",
        [],
        job("A", 100, 100, slo=0.9),
        INFEASIBLE,
        reason="slo must be >= 1.0",
    ),
    Case(
        "a full pool gives RETRY",
        [job("A", 100, 100, slo=1.0)],
        job("B", 100, 100, slo=1.0),
        RETRY,
        reason="needs 1 free H20 node, 0 free",
        cluster=spec(1, 1),
    ),
    Case(
        "free nodes without host memory room give RETRY, not a broken residency",
        [job("A", 100, 100, mem=1500)],
        job("B", 100, 100, mem=1000),
        RETRY,
        cluster=spec(1, 2),
        reason="needs 1 free H20 node, 0 free",
    ),
    Case(
        "an existing member's SLO blocks a placement",
        [job("A", 50, 50, slo=1.2)],
        job("B", 150, 30, slo=2.0),
        FIT,
        NEW,
    ),
    Case(
        "the new job's own SLO blocks a placement",
        [job("A", 300, 300, slo=2.0)],
        job("B", 50, 50, slo=1.5),
        FIT,
        NEW,
    ),
    Case(
        "max group size is respected",
        [job("A", 10, 10, slo=3), job("B", 10, 10, slo=3)],
        job("C", 10, 10, slo=3),
        FIT,
        NEW,
        max_group_size=2,
    ),
    Case(
        "a saturated group is skipped",
        [job("A", 100, 100, slo=2), job("B", 100, 100, slo=2)],
        job("C", 10, 10, slo=30),
        FIT,
        NEW,
    ),
    Case(
        "residency: a node's host memory is never overcommitted",
        [job("A", 100, 100, mem=1500)],
        job("B", 100, 100, mem=1000),
        FIT,
        NEW,
    ),
    Case(
        "a job needing more training nodes than the group has gets its own group",
        [job("A", 200, 200)],
        job("B", 100, 100, train_gpus=16),
        FIT,
        NEW,
    ),
    Case(
        "a job needing fewer training nodes is pinned to the least-loaded one",
        [job("C", 400, 200, rollout_gpus=16, train_gpus=16, slo=1.5)],
        job("D", 200, 100, slo=2.2),
        FIT,
        DIRECT,
        joins="C",
        check=_pinned_to_one_training_node,
    ),
    Case(
        "an unbounded pool names fresh nodes",
        [],
        job("A", 100, 100),
        FIT,
        NEW,
        cluster=spec(None, None),
        check=_minted,
    ),
    Case(
        "solo-disagg never shares even when packing is free",
        [job("A", 100, 100)],
        job("B", 100, 100),
        FIT,
        NEW,
        policy="solo-disagg",
    ),
    Case(
        "random packs capacity-first and ignores SLOs",
        [job("A", 100, 100, slo=1.0)],
        job("B", 100, 100),
        FIT,
        DIRECT,
        joins="A",
        policy="random",
        check=_random_ignores_slo,
    ),
    Case(
        "greedy-most-idle picks the group with the most idle time",
        [
            job("BUSY1", 100, 100, slo=2),
            job("BUSY2", 100, 100, slo=2),
            job("IDLE", 100, 100, slo=1.0),
        ],
        job("N", 100, 100),
        FIT,
        DIRECT,
        joins="IDLE",
        policy="greedy-most-idle",
        check=_greedy_picks_the_idle_group,
    ),
    Case(
        "baselines open a new group when no group has room",
        [job("A", 100, 100, mem=2000)],
        job("B", 100, 100, mem=2000),
        FIT,
        NEW,
        policy="greedy-most-idle",
    ),
    Case(
        "no direct packing onto a drained rollout node",
        [job("A", 100, 100)],
        job("B", 100, 100),
        FIT,
        SCALING,
        joins="A",
        cordon=_rollout_of("A"),
        check=_scales_beside_the_drained_rollout_nodes,
    ),
    Case(
        "no sharing of drained training nodes",
        [job("A", 330, 120, slo=1.2)],
        job("B", 330, 120, slo=1.2),
        FIT,
        NEW,
        cordon=_train_of("A"),
        check=_own_training_node,
    ),
    Case(
        "a group with one drained training node pins a joiner to the other",
        [job("C", 400, 200, rollout_gpus=16, train_gpus=16, slo=1.5)],
        job("D", 200, 100, slo=2.2),
        FIT,
        DIRECT,
        joins="C",
        cordon=_train_of("C", first_only=True),
        check=_pinned_to_the_training_node_still_up,
    ),
    Case(
        "a drained free node is never given to a new group",
        [],
        job("A", 100, 100),
        FIT,
        NEW,
        cluster=spec(2, 2),
        cordon=_free(Pool.ROLLOUT, 1),
    ),
    Case(
        "a job that fits only on drained nodes waits and says so",
        [job("A", 100, 100, slo=1.0)],
        job("B", 100, 100, rollout_gpus=16),
        RETRY,
        reason="needs 2 free H20 nodes, 1 free; 1 drained node takes no new work",
        cluster=spec(3, 2),
        cordon=_free(Pool.ROLLOUT, 1),
    ),
    Case(
        "random never packs onto a drained rollout node",
        [job("A", 100, 100, slo=1.0)],
        job("B", 100, 100),
        FIT,
        SCALING,
        joins="A",
        policy="random",
        cordon=_rollout_of("A"),
    ),
    Case(
        "greedy-most-idle opens a new group rather than share drained training nodes",
        [job("A", 100, 100)],
        job("B", 100, 100),
        FIT,
        NEW,
        policy="greedy-most-idle",
        cordon=_train_of("A"),
    ),
    Case(
        "among free placements the lower predicted slowdown wins",
        [job("X", 100, 100, slo=3.0), job("Y", 300, 300, slo=3.0), job("Z", 301, 300, slo=3.0)],
        job("N", 100, 100, slo=3.0),
        FIT,
        DIRECT,
        joins="X",
        check=_lower_slowdown_wins_tie,
    ),
    # Clocks: a job's phases take profile / time_scale wall-clock seconds, so profile
    # time is a common clock only for jobs of one time_scale. Each case below packs
    # (for free or by rollout scaling) when the scales are equal; see the controls.
    Case(
        "jobs with different time scales never share a group: direct packing",
        [job("A", 100, 100, time_scale=10)],
        job("B", 100, 100, time_scale=4),
        FIT,
        NEW,
        check=_apart_from_every_existing_job,
    ),
    Case(
        "jobs with different time scales never share a group: rollout scaling (QA F1)",
        [job("C", 200, 60, rollout_gpus=16, time_scale=4)],
        job("B", 200, 100, time_scale=10),
        FIT,
        NEW,
        check=_apart_from_every_existing_job,
    ),
    Case(
        "jobs with different time scales never share a group: a real job beside an emulated one",
        [job("A", 330, 120, slo=1.2, time_scale=200)],
        job("B", 330, 120, slo=1.2),
        FIT,
        NEW,
        check=_apart_from_every_existing_job,
    ),
    Case(
        "jobs with different time scales never share a group: the group of the job's scale wins",
        # Both groups take B for free with the same slowdown; R's is the earlier one.
        [job("R", 100, 100, slo=3.0), job("A", 100, 100, slo=3.0, time_scale=200)],
        job("B", 100, 100, slo=3.0, time_scale=200),
        FIT,
        DIRECT,
        joins="A",
    ),
    Case(
        "jobs with different time scales never share a group: baselines too",
        [job("A", 100, 100, time_scale=10)],
        job("B", 100, 100, time_scale=4),
        FIT,
        NEW,
        policy="greedy-most-idle",
        check=_apart_from_every_existing_job,
    ),
    Case(
        "jobs of one time scale still pack: direct packing",
        [job("A", 100, 100, time_scale=10)],
        job("B", 100, 100, time_scale=10),
        FIT,
        DIRECT,
        joins="A",
    ),
    Case(
        "jobs of one time scale still pack: rollout scaling",
        [job("C", 200, 60, rollout_gpus=16, time_scale=4)],
        job("B", 200, 100, time_scale=4),
        FIT,
        SCALING,
        joins="C",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_planner_case(case: Case) -> None:
    state = build(case.cluster, case.existing, max_group_size=max(case.max_group_size, 1))
    if case.cordon is not None:
        state = cordon(state, case.cordon(state))
        assert cordoned_names(state), "the case cordons nothing"
    rng = random.Random(7)
    res = place(case.job, state, policy=case.policy, max_group_size=case.max_group_size, rng=rng)
    assert res.status is case.status, res.reason
    assert case.reason in res.reason
    if case.status is FIT:
        assert res.placement is not None
        placed_on = set(res.placement.rollout_nodes) | set(res.placement.train_nodes)
        assert not placed_on & cordoned_names(state), "a new job was placed on a drained node"
        if case.strategy is not None:
            assert res.strategy is case.strategy, res.reason
        if case.joins is not None:
            assert res.placement.group_id == group_of(state, case.joins)
        else:
            assert case.strategy is not NEW or res.placement.group_id is None
        assert case.job.id in res.predicted_slowdown
    else:
        assert res.placement is None
    if case.check is not None:
        case.check(state, res)


@pytest.mark.parametrize(
    ("a_slo", "joins"), [(1.2, False), (2.0, True)], ids=["A strict", "A tolerant"]
)
def test_only_the_existing_members_slo_decides_whether_b_joins(a_slo: float, joins: bool) -> None:
    # B alone would be fine in A's group (its own slowdown is ~1.1x); A's would be
    # 180/100 = 1.8x. A strict A keeps B out, a tolerant A lets it pack for free.
    state = build(spec(), [job("A", 50, 50, slo=a_slo)])
    res = place(job("B", 150, 30, slo=2.0), state)
    assert res.placement is not None
    assert (res.placement.group_id == group_of(state, "A")) is joins
    if joins:
        assert res.predicted_slowdown["A"] == pytest.approx(1.8, abs=0.05)


def test_the_same_state_gives_the_same_decision() -> None:
    state = build(spec(), [job("A", 100, 100), job("B", 300, 120), job("C", 200, 100, slo=2.0)])
    first = place(job("N", 120, 100, slo=2.0), state)
    assert all(place(job("N", 120, 100, slo=2.0), state) == first for _ in range(3))


def test_rollout_scaling_adds_the_fewest_new_rollout_nodes() -> None:
    # A is pinned to r0, C to r1, both share t0. B needs two rollout nodes: packing
    # on r0 would break A's SLO, so B keeps the light r1 and adds ONE new node.
    cluster = spec()
    state = empty_state(cluster)
    a = job("A", 300, 100, slo=1.2)
    c = job("C", 50, 50, slo=8.0)
    state = apply_placement(
        state,
        a,
        Placement("A", NEW, None, ("H20-000",), ("H800-000",), ("H20-000", "H800-000")),
        group_id="g",
    )
    state = apply_placement(
        state,
        c,
        Placement("C", SCALING, "g", ("H20-001",), ("H800-000",), ("H20-001",)),
        group_id="g",
    )
    res = place(job("B", 200, 50, rollout_gpus=16, slo=1.7), state)
    assert res.status is FIT and res.strategy is SCALING, res.reason
    assert res.placement is not None and res.placement.group_id == "g"
    assert len(res.placement.new_nodes) == 1 and "H20-001" in res.placement.rollout_nodes
    assert res.marginal_cost_per_hour == pytest.approx(8 * 1.85)
    assert all(res.predicted_slowdown[j.id] <= j.slo for j in (a, c))


def test_random_needs_an_rng_and_unknown_policies_are_rejected() -> None:
    state = empty_state(spec())
    with pytest.raises(ValueError, match="rng"):
        place(job("A", 1, 1), state, policy="random")
    with pytest.raises(ValueError, match="unknown policy"):
        place(job("A", 1, 1), state, policy="fifo")


def test_placing_an_already_placed_job_is_an_error() -> None:
    state = build(spec(), [job("A", 100, 100)])
    with pytest.raises(ValueError, match="already placed"):
        place(job("A", 100, 100), state)


# --- apply_placement / remove_job -------------------------------------------------------


def test_remove_job_releases_nodes_no_member_uses_and_empties_groups() -> None:
    state = build(spec(), [job("A", 330, 120, slo=1.2), job("B", 330, 120, slo=1.2)])
    assert len(state.groups) == 1
    b_roll = next(m.rollout_nodes for m in state.groups[0].members if m.job.id == "B")
    state, released = remove_job(state, "B")
    assert released == b_roll  # its own rollout node; the shared training node stays
    assert len(state.groups) == 1 and len(state.groups[0].all_nodes) == 2
    state, released = remove_job(state, "A")
    assert len(released) == 2 and state.groups == ()
    with pytest.raises(KeyError):
        remove_job(state, "A")


def test_apply_rejects_a_node_held_by_another_group() -> None:
    state = build(spec(), [job("A", 100, 100, slo=1.0)])
    taken = state.groups[0].rollout_nodes
    bad = Placement("B", NEW, None, taken, ("H800-007",), taken + ("H800-007",))
    with pytest.raises(ValueError, match="belongs to group"):
        apply_placement(state, job("B", 100, 100), bad, group_id="g9")


def test_apply_rejects_joining_a_group_on_another_clock() -> None:
    state = build(spec(), [job("A", 100, 100, time_scale=10)])
    g = state.groups[0]
    bad = Placement("B", DIRECT, g.id, g.rollout_nodes, g.train_nodes)
    with pytest.raises(ValueError, match="time_scale 4; group 'g0' runs time_scale 10"):
        apply_placement(state, job("B", 100, 100, time_scale=4), bad, group_id=g.id)


def test_a_group_mixed_before_the_clock_rule_admits_no_one() -> None:
    # A snapshot may hold a group formed before the rule (the live planner rebuilds
    # groups from the database): it keeps running, but no scale is its scale.
    same = build(spec(), [job("A", 330, 120, slo=1.2), job("B", 330, 120, slo=1.2)])
    newcomer = job("N", 330, 120, slo=1.2)
    assert place(newcomer, same).strategy is SCALING  # the control: one clock, N joins
    g = same.groups[0]
    b = g.members[1]
    mixed = replace(g, members=(g.members[0], replace(b, job=replace(b.job, time_scale=10.0))))
    state = replace(same, groups=(mixed,))
    for scale in (1.0, 10.0):
        res = place(replace(newcomer, time_scale=scale), state)
        assert res.strategy is NEW, (scale, res.reason)


@pytest.mark.parametrize("bad", [0.0, -4.0, float("nan"), float("inf")])
def test_a_time_scale_that_is_not_a_positive_number_is_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match="'A': time_scale must be a finite number > 0"):
        job("A", 100, 100, time_scale=bad)


def test_apply_rejects_a_broken_residency() -> None:
    state = build(spec(), [job("A", 100, 100, mem=1500)])
    g = state.groups[0]
    bad = Placement("B", DIRECT, g.id, g.rollout_nodes, g.train_nodes)
    with pytest.raises(ValueError, match="residency broken"):
        apply_placement(state, job("B", 100, 100, mem=1000), bad, group_id=g.id)


def test_apply_rejects_a_cordoned_node() -> None:
    state = cordon(empty_state(spec(2, 2)), ["H20-000"])
    bad = Placement("A", NEW, None, ("H20-000",), ("H800-000",), ("H20-000", "H800-000"))
    with pytest.raises(ValueError, match="cordoned"):
        apply_placement(state, job("A", 100, 100), bad, group_id="g")


def test_a_drained_node_keeps_its_members_and_is_not_free_once_released() -> None:
    cluster = spec(1, 1)
    state = build(cluster, [job("A", 100, 100, slo=1.0)])
    state = cordon(state, state.groups[0].all_nodes)
    # A keeps its nodes while they are drained; nothing else gets them.
    assert state.groups[0].members[0].job.id == "A"
    waiting = place(job("B", 100, 100, slo=1.0), state)
    assert waiting.status is RETRY and "drained" in waiting.reason
    state, released = remove_job(state, "A")
    assert set(released) == {"H20-000", "H800-000"}
    assert place(job("B", 100, 100, slo=1.0), state).status is RETRY
    # Brought back up, the nodes are free again.
    up = replace(state, nodes=tuple(replace(n, cordoned=False) for n in state.nodes))
    assert place(job("B", 100, 100, slo=1.0), up).status is FIT


def test_released_nodes_are_free_for_the_next_job() -> None:
    cluster = spec(1, 1)
    state = build(cluster, [job("A", 100, 100, slo=1.0)])
    assert place(job("B", 100, 100, slo=1.0), state).status is RETRY
    state, _ = remove_job(state, "A")
    assert place(job("B", 100, 100, slo=1.0), state).status is FIT


def test_too_few_big_enough_nodes_is_infeasible_when_every_node_is_up() -> None:
    cluster = spec(2, 2)
    state = empty_state(cluster)
    small = replace(state.nodes[0], host_mem_gb=1024)
    state = replace(state, nodes=(small,) + state.nodes[1:])
    res = place(job("A", 100, 100, mem=1500, rollout_gpus=16), state)
    assert res.status is INFEASIBLE
    assert "needs 2 H20 nodes with >= 1500 GB host memory; the rollout pool has 1" in res.reason
    # With a node down (missing from the state) it may come back bigger: not now only.
    down = replace(state, nodes=state.nodes[1:])
    assert place(job("A", 100, 100, mem=1500, rollout_gpus=16), down).status is RETRY


def test_a_job_with_few_iterations_must_also_absorb_its_join_wait() -> None:
    # Steady state, B runs at A's 800 s cycle (1.1x its worst-case solo 727 s): fine
    # for a long job. A 2-iteration job would also pay its wait for a turn in the
    # meta-iteration in progress over only two iterations, so it gets its own group.
    state = build(spec(), [job("A", 700, 100, slo=2.0)])
    long_b = place(job("B", 600, 127, slo=1.2, iterations=200), state)
    short_b = place(job("B", 600, 127, slo=1.2, iterations=2), state)
    assert long_b.strategy in (DIRECT, SCALING) and long_b.placement is not None
    assert long_b.placement.group_id == group_of(state, "A")
    assert short_b.strategy is NEW
