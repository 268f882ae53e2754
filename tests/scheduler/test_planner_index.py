"""The planner's index travels with the ClusterState: never stale, shared safely by threads."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest

from scheduler.cluster import empty_state
from scheduler.model import ClusterState, PlacementStatus, Pool
from scheduler.planner import apply_placement, build_index, place, planner_index, remove_job
from scheduler.planner.index import (
    GroupBounds,
    SetView,
    colocated_groups,
    group_bounds,
    group_position,
)
from scheduler.planner.transitions import PoolView, pool_with_returned
from tests.scheduler.builders import cluster_spec, job


def built(n: int) -> ClusterState:
    state = empty_state(cluster_spec(12, 12))
    for i in range(n):
        j = job(f"j{i}", 100 + 37 * (i % 5), 60 + 11 * (i % 3), slo=1.6, mem=300)
        res = place(j, state)
        assert res.placement is not None, res.reason
        state = apply_placement(state, j, res.placement, group_id=f"g{i}")
    return state


def test_transitions_hand_the_next_state_an_index_equal_to_a_fresh_one() -> None:
    state = built(8)
    carried = state.planner_index
    assert carried is planner_index(state)  # built by apply_placement, not recomputed
    fresh = build_index(state)
    assert carried.summaries == fresh.summaries and carried.free == fresh.free
    after, _ = remove_job(state, "j3")
    assert planner_index(after).summaries == build_index(after).summaries
    assert planner_index(after).taken == build_index(after).taken


def test_a_state_changed_by_replace_never_uses_the_old_index() -> None:
    state = built(4)
    held = {x for g in state.groups for x in g.all_nodes}
    free_roll = [n.name for n in state.nodes if n.name not in held and n.pool is Pool.ROLLOUT]
    cordoned = replace(
        state,
        nodes=tuple(replace(n, cordoned=n.name in free_roll) for n in state.nodes),
    )
    assert cordoned.planner_index is state.planner_index  # replace copied it ...
    index = planner_index(cordoned)
    assert index is not state.planner_index  # ... and it was not used
    assert not {n.name for n in index.free[Pool.ROLLOUT]} & set(free_roll)
    assert index.summaries == state.planner_index.summaries  # the groups' summaries reused


def test_threads_placing_on_one_state_get_the_same_answer() -> None:
    state = built(10)
    bare = replace(state, groups=tuple(replace(g) for g in state.groups), planner_index=None)
    newcomer = job("new", 140, 70, slo=1.8, mem=300)
    expected = place(newcomer, built(10))
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: place(newcomer, bare), range(40)))
    assert expected.status is PlacementStatus.FIT
    assert all(r == expected for r in results)
    assert planner_index(bare).is_for(bare)


def test_placements_and_removals_carry_the_free_pools_a_fresh_index_finds() -> None:
    # apply_placement cuts the nodes it takes out of the free pools by their position (no
    # filter of every free node): placements after removals, on a pool with cordoned
    # nodes and on an unbounded one (minted names), leave the pools a fresh index builds
    for spec in (cluster_spec(14, 12), cluster_spec(None, 12)):
        state = empty_state(spec)
        state = replace(
            state,
            nodes=tuple(replace(n, cordoned=i % 5 == 2) for i, n in enumerate(state.nodes)),
        )
        placed = []
        for i in range(14):
            if i % 4 == 3:
                state, _ = remove_job(state, placed.pop(len(placed) // 2))
            j = job(f"j{i}", 100 + 37 * (i % 5), 60 + 11 * (i % 3), slo=1.6, mem=300)
            res = place(j, state)
            if res.placement is None:
                continue
            state = apply_placement(state, j, res.placement, group_id=f"g{i}")
            placed.append(j.id)
            assert planner_index(state).free == build_index(state).free
            # the groups' positions by id are carried too (joins and new groups alike)
            assert planner_index(state).positions == {g.id: k for k, g in enumerate(state.groups)}
        assert len(placed) > 4


def test_nodes_returned_to_a_free_pool_take_their_places_in_state_order() -> None:
    nodes = empty_state(cluster_spec()).nodes
    position = {n.name: i for i, n in enumerate(nodes)}
    rng = random.Random(7)
    for _ in range(200):
        returned = rng.sample(nodes, rng.randint(0, min(5, len(nodes))))
        rest = tuple(n for n in nodes if n not in returned and rng.random() < 0.6)
        out = tuple(pool_with_returned(rest, returned, position))
        # one node at a time, as a removal did before: the same pool
        one_by_one = rest
        for n in returned:
            at = next(
                (k for k, x in enumerate(one_by_one) if position[x.name] > position[n.name]),
                len(one_by_one),
            )
            one_by_one = one_by_one[:at] + (n,) + one_by_one[at:]
        assert out == one_by_one
        assert [position[n.name] for n in out] == sorted(position[n.name] for n in out)


def test_a_placement_into_a_group_id_in_use_or_an_unknown_group_is_refused() -> None:
    # (apply_placement finds groups by id in the positions it carries from state to state)
    state = built(3)
    newcomer = job("new", 140, 70, slo=1.8, mem=300)
    alone = place(newcomer, state, policy="solo-disagg").placement  # a new group's
    joins = place(newcomer, state).placement
    assert alone is not None and alone.group_id is None
    assert joins is not None and joins.group_id is not None
    taken = state.groups[-1].id
    with pytest.raises(ValueError, match="already in use"):
        apply_placement(state, newcomer, alone, group_id=taken)
    with pytest.raises(ValueError, match="unknown group"):
        apply_placement(state, newcomer, replace(joins, group_id="gone"), group_id="x")
    # the state the refusals saw still places the job in a fresh group
    placed = apply_placement(state, newcomer, alone, group_id="fresh")
    assert planner_index(placed).positions == {g.id: k for k, g in enumerate(placed.groups)}


def test_the_count_of_co_located_groups_is_carried_through_placements_and_removals() -> None:
    # (place_with_partners asks it at every new group: a scan of every group there before)
    state = empty_state(cluster_spec(6, 14))
    placed: list[str] = []
    counts, shared = [], 0
    for i in range(16):
        if i % 5 == 4:
            state, _ = remove_job(state, placed.pop(0))  # the oldest first
        j = job(f"j{i}", 100 + 37 * (i % 5), 60 + 11 * (i % 3), slo=1.6, mem=300)
        res = place(j, state, colocated=i % 2 == 0)  # every other job may go co-located
        if res.placement is None:
            continue
        state = apply_placement(state, j, res.placement, group_id=f"g{i}")
        placed.append(j.id)
        counts.append(colocated_groups(planner_index(state)))
        assert counts[-1] == sum(1 for g in state.groups if not g.rollout_nodes)
        assert planner_index(state).colocated == counts[-1]  # carried, not counted again
        shared = max(shared, sum(1 for g in state.groups if g.rollout_nodes))
    assert max(counts) >= 3 and shared >= 2  # both kinds of group were placed
    assert any(b < a for a, b in zip(counts, counts[1:], strict=False))  # and one removed


def test_removals_and_placements_carry_the_groups_positions() -> None:
    # remove_job hands on the positions by id: as they are when the group stays, as a view
    # with the later groups a place earlier when it closes (views on views, copied past a
    # depth); apply_placement adds a new group's. Every position read is the state's
    state = empty_state(cluster_spec(None, None))
    rng = random.Random(5)
    placed: list[str] = []
    group_position(planner_index(state), "none")  # (built on first use, then carried)
    closed = kept = 0
    for i in range(80):
        if i == 40:  # an index built afresh (frozensets): the views change its sets
            state = replace(state, planner_index=None)
            group_position(planner_index(state), "none")
        if placed and rng.random() < 0.45:
            job_id = placed.pop(rng.randrange(len(placed)))
            ids = {g.id for g in state.groups}
            state, _ = remove_job(state, job_id)
            gone = ids - {g.id for g in state.groups}
            closed += bool(gone)
            kept += not gone
            assert all(group_position(planner_index(state), g) is None for g in gone)
        else:
            j = job(f"j{i}", 100 + 37 * (i % 5), 60 + 11 * (i % 3), slo=1.6, mem=300)
            res = place(j, state, policy="solo-disagg" if i % 3 else "rollmux")
            assert res.placement is not None
            state = apply_placement(state, j, res.placement, group_id=f"g{i}")
            placed.append(j.id)
        index = planner_index(state)
        assert index.positions is not None  # carried, not built again
        expected = {g.id: k for k, g in enumerate(state.groups)}
        assert dict(index.positions) == expected
        assert all(group_position(index, g) == k for g, k in expected.items())
        assert group_position(index, "gone") is None
        # the taken nodes and placed jobs too (`SetView`s of those before)
        fresh = build_index(state)
        assert index.taken == fresh.taken and index.job_ids == fresh.job_ids
        assert all(x in index.taken for x in fresh.taken)
        assert not any(n.name in index.taken for n in state.nodes if n.name not in fresh.taken)
        assert not any(f"j{k}" in index.job_ids for k in range(i + 1) if f"j{k}" not in placed)
    assert closed > 9 and kept > 0  # views stacked past their depth, and groups that stay


def test_the_group_bounds_carried_through_transitions_are_those_of_the_summaries() -> None:
    # the transitions hand the child state the parent's `GroupBounds` with the changed
    # group's column replaced, deleted or appended: equal, column by column (NaN: no
    # time_scale), to the bounds built from the child's summaries
    state = built(6)
    group_bounds(planner_index(state))
    rng = random.Random(3)
    placed = [m.job.id for g in state.groups for m in g.members]
    for i in range(24):
        if i % 3 == 2 and placed:
            state, _ = remove_job(state, placed.pop(rng.randrange(len(placed))))
        else:
            j = job(f"n{i}", 90 + 41 * (i % 4), 50 + 13 * (i % 5), slo=1.7, mem=500 + 300 * (i % 3))
            res = place(j, state)
            if res.placement is None:
                continue
            state = apply_placement(state, j, res.placement, group_id=f"n{i}")
            placed.append(j.id)
        index = planner_index(state)
        assert index.bounds is not None  # carried, not built again
        fresh = GroupBounds.of(index.summaries)
        assert np.array_equal(index.bounds.rows, fresh.rows, equal_nan=True)


def test_removals_carry_the_taken_nodes_and_placed_jobs_a_fresh_index_finds() -> None:
    # remove_job hands on the taken nodes and the placed jobs as views less the names it
    # removes (`SetView`, copied past 64 names); a placement makes them sets again
    state = empty_state(cluster_spec(None, None))
    for i in range(80):
        j = job(f"j{i}", 100 + 37 * (i % 5), 60 + 11 * (i % 3), slo=1.6, mem=300)
        res = place(j, state, policy="solo-disagg")
        assert res.placement is not None
        state = apply_placement(state, j, res.placement, group_id=f"g{i}")
    names = {n.name for n in state.nodes} | {f"j{i}" for i in range(80)}
    views = 0
    for i in [*range(0, 80, 2), 81, *range(1, 80, 2)]:
        if i == 81:  # a placement between the removals
            j = job("late", 120, 70, slo=1.6, mem=300)
            res = place(j, state)
            assert res.placement is not None
            state = apply_placement(state, j, res.placement, group_id="late")
            names.add("late")
            continue
        state, _ = remove_job(state, f"j{i}")
        carried, fresh = planner_index(state), build_index(state)
        views += isinstance(carried.taken, SetView)
        assert carried.taken == fresh.taken and carried.job_ids == fresh.job_ids
        assert len(carried.taken) == len(fresh.taken) and set(carried.job_ids) == fresh.job_ids
        assert {x for x in names if x in carried.taken} == set(fresh.taken)
        assert {x for x in names if x in carried.job_ids} == set(fresh.job_ids)
    assert views > 0


def test_removals_carry_free_pools_a_fresh_index_finds_as_views() -> None:
    # remove_job returns the released nodes to the free pools as views of the pools before
    # (`PoolView`, copied past 16 nodes inserted), read by position like the tuples a fresh
    # index builds; a placement taking from a view cuts its nodes out of it
    for spec in (cluster_spec(None, None), cluster_spec(60, 60)):
        state = empty_state(spec)
        for i in range(30):
            j = job(f"j{i}", 100 + 37 * (i % 5), 60 + 11 * (i % 3), slo=1.6, mem=300)
            res = place(j, state, policy="solo-disagg")
            assert res.placement is not None
            state = apply_placement(state, j, res.placement, group_id=f"g{i}")
        rng = random.Random(2)
        order = rng.sample(range(30), 30)
        views = 0
        for step, i in enumerate(order):
            state, _ = remove_job(state, f"j{i}")
            if step % 7 == 6:  # a placement between the removals
                j = job(f"n{step}", 120, 70, slo=1.6, mem=300)
                res = place(j, state, policy="solo-disagg" if step % 2 else "rollmux")
                assert res.placement is not None
                state = apply_placement(state, j, res.placement, group_id=f"n{step}")
            carried, fresh = planner_index(state).free, build_index(state).free
            for pool, nodes in fresh.items():
                got = carried[pool]
                views += isinstance(got, PoolView)
                assert got == nodes and len(got) == len(nodes)
                assert [got[k] for k in range(len(got))] == list(nodes) == list(got)
                if nodes:
                    assert got[-1] == nodes[-1] and got[2:] == nodes[2:]
        assert views > 0
