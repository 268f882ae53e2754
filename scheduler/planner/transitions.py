"""State transitions: a job joins (`apply_placement`) or leaves (`remove_job`) a group.

Both are pure: they return a new ClusterState, and the new state carries the
planner's index built from the input's (only the changed group is re-summarised;
see scheduler.planner.index), so the next decision skips the pass over every group.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import overload

from scheduler.cluster import make_node
from scheduler.model import ClusterState, Group, JobProfile, Member, Node, Placement, Pool
from scheduler.planner.index import (
    PlannerIndex,
    colocated_change,
    group_position,
    index_nodes,
    planner_index,
    positions_with,
    positions_without,
    set_with,
    set_without,
    summarise,
)
from scheduler.planner.slo_checks import EPS


def apply_placement(
    state: ClusterState, job: JobProfile, placement: Placement, *, group_id: str
) -> ClusterState:
    """Return `state` with `job` placed; `group_id` names a new group (ignored when joining).

    Raises ValueError when the placement uses a node another group holds or a cordoned
    node, names an unknown group, joins a group on another clock (time_scale), or breaks
    residency on a node.
    """
    spec = state.spec
    index = planner_index(state)
    known = index.node_index.nodes
    added: list[Node] = []
    for name in placement.new_nodes:
        if name not in known:
            pool = Pool.ROLLOUT if name in placement.rollout_nodes else Pool.TRAIN
            added.append(make_node(spec, pool, name))
    extra = {n.name: n for n in added}

    def node(name: str) -> Node:
        n = known.get(name) or extra.get(name)
        if n is None:
            raise ValueError(f"placement of {job.id!r} uses unknown node {name!r}")
        return n

    wanted = placement.rollout_nodes + placement.train_nodes
    for name in wanted:
        if node(name).cordoned:
            raise ValueError(f"placement of {job.id!r} uses cordoned (drained) node {name!r}")
    if job.id in index.job_ids:
        raise ValueError(f"job {job.id!r} is already placed in a co-execution group")
    target = placement.group_id
    position = -1
    own: set[str] = set()
    # (the groups' positions by id, carried from state to state: `group_position`)
    at = group_position(index, target if target is not None else group_id)
    if target is not None:
        if at is None:
            raise ValueError(f"unknown group {target!r}")
        position, own = at, set(index.summaries[at].load)
        scale = index.summaries[position].time_scale
        if scale != job.time_scale:
            theirs = "mixed time_scales" if scale is None else f"time_scale {scale:g}"
            raise ValueError(
                f"job {job.id!r} has time_scale {job.time_scale:g}; group {target!r} runs "
                f"{theirs} (a group's members share one clock)"
            )
    for name in wanted:
        if name in index.taken and name not in own:
            holder = next(x.group.id for x in index.summaries if name in x.load)
            raise ValueError(f"node {name!r} belongs to group {holder!r}, not to {target!r}")
    member = Member(job, tuple(placement.rollout_nodes), tuple(placement.train_nodes))
    summaries = list(index.summaries)
    if target is None:
        if at is not None:
            raise ValueError(f"group id {group_id!r} is already in use")
        group = Group(group_id, member.rollout_nodes, member.train_nodes, (member,))
        check_residency(group, {x: node(x) for x in group.all_nodes})
        groups = state.groups + (group,)
        summaries.append(summarise(group))
    else:
        g = state.groups[position]
        rollout = g.rollout_nodes + tuple(
            x for x in member.rollout_nodes if x not in g.rollout_nodes
        )
        train = g.train_nodes + tuple(x for x in member.train_nodes if x not in g.train_nodes)
        group = Group(g.id, rollout, train, g.members + (member,))
        check_residency(group, {x: node(x) for x in group.all_nodes})
        groups = state.groups[:position] + (group,) + state.groups[position + 1 :]
        summaries[position] = summarise(group)
    nodes = state.nodes + tuple(added) if added else state.nodes
    newly = set(wanted)
    bounds = index.bounds
    if bounds is not None:
        bounds = (
            bounds.appended(summaries[-1])
            if target is None
            else bounds.replaced(position, summaries[position])
        )
    positions = index.positions
    if target is None and positions is not None:
        positions = positions_with(positions, group_id, len(summaries) - 1)
    colocated = index.colocated
    if colocated is not None:
        colocated += colocated_change(None if target is None else state.groups[position], group)
    child_index = PlannerIndex(
        nodes=nodes,
        groups=groups,
        node_index=index_nodes(nodes) if added else index.node_index,
        summaries=tuple(summaries),
        taken=set_with(index.taken, newly),
        job_ids=set_with(index.job_ids, (job.id,)),
        free=_free_without(index, newly),
        bounds=bounds,
        positions=positions,
        colocated=colocated,
    )
    return replace(state, nodes=nodes, groups=groups, planner_index=child_index)


def _free_without(index: PlannerIndex, names: set[str]) -> dict[Pool, Sequence[Node]]:
    """Return the index's free pools less the nodes named in `names` (a placement's).

    A free pool is in state order (`PlannerIndex.free`), so each free node taken is found
    by bisection on its position and cut out, rather than the pools (thousands of nodes)
    filtered for every placement; a name that is not free (a group's node, a minted one)
    leaves them as they are. With names not unique in the state (positions ambiguous) the
    pools are filtered."""
    nodes = index.node_index
    if len(nodes.nodes) != len(index.nodes):
        return {p: tuple(n for n in v if n.name not in names) for p, v in index.free.items()}
    free: dict[Pool, Sequence[Node]] = dict(index.free)
    position = nodes.position
    key = _position_of(position)
    for x in names:
        n = nodes.nodes.get(x)
        if n is None or n.cordoned or x in index.taken:
            continue  # not in a free pool
        held = free[n.pool]
        pool_nodes = held.materialised() if isinstance(held, PoolView) else tuple(held)
        at = bisect.bisect_left(pool_nodes, position[x], key=key)
        if at < len(pool_nodes) and pool_nodes[at].name == x:
            free[n.pool] = pool_nodes[:at] + pool_nodes[at + 1 :]
    return free


def check_residency(group: Group, nodes: dict[str, Node]) -> None:
    """Raise ValueError when the members pinned to a node need more host memory than it has."""
    mem: dict[str, float] = {}
    for m in group.members:
        for x in m.rollout_nodes + m.train_nodes:
            mem[x] = mem.get(x, 0.0) + m.job.host_mem_gb
    for x, used in mem.items():
        if used > nodes[x].host_mem_gb + EPS:
            raise ValueError(
                f"residency broken on node {x!r}: {used:g} GB pinned, "
                f"{nodes[x].host_mem_gb:g} GB host memory"
            )


# the nodes a `PoolView` holds inserted before it is copied
_POOL_INSERTS = 16


class PoolView(Sequence[Node]):
    """A free pool (`base`, a tuple in state order) with a few nodes inserted at their
    places: a removal's child state's free pool (`pool_with_returned`), read by position
    as a tuple is (a decision scans a free pool from its start and takes a few nodes;
    copying a pool of thousands at every removal, where a consolidation pass removes a job
    per candidate, was a few percent of a pass at size). `materialised()` is the tuple."""

    __slots__ = ("_at", "_base", "_inserts")

    def __init__(self, base: tuple[Node, ...], inserts: list[tuple[int, int, Node]]) -> None:
        # inserts: (the base position it goes before, its state position, the node), sorted
        self._base, self._inserts = base, inserts
        self._at = [b + k for k, (b, _, _) in enumerate(inserts)]  # places in the view

    def __len__(self) -> int:
        return len(self._base) + len(self._inserts)

    @overload
    def __getitem__(self, i: int) -> Node: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Node, ...]: ...

    def __getitem__(self, i: int | slice) -> Node | tuple[Node, ...]:
        if isinstance(i, slice):
            return self.materialised()[i]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        k = bisect.bisect_left(self._at, i)
        if k < len(self._at) and self._at[k] == i:
            return self._inserts[k][2]
        return self._base[i - k]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.materialised())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PoolView):
            return self.materialised() == other.materialised()
        if isinstance(other, tuple):
            return self.materialised() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def materialised(self) -> tuple[Node, ...]:
        """Return the pool as a tuple (one list copy, an insert per node: C-level)."""
        out = list(self._base)
        for at, (_, _, n) in zip(self._at, self._inserts, strict=True):
            out.insert(at, n)
        return tuple(out)


def pool_with_returned(
    pool_nodes: Sequence[Node], returned: Sequence[Node], position: Mapping[str, int]
) -> Sequence[Node]:
    """Return the free pool `pool_nodes` (in state order) with the nodes `returned` (none
    of them in it) each inserted at its place in that order, as a `PoolView` of the pool
    before (a tuple, or a view whose inserts the new ones join), copied past
    `_POOL_INSERTS` nodes inserted: the pool may hold thousands of nodes (a sort of it
    per removal was the consolidation's hot spot, and a copy per removal still a few
    percent of it: best_move removes a job per candidate)."""
    if isinstance(pool_nodes, PoolView):
        base, inserts = pool_nodes._base, list(pool_nodes._inserts)
    else:
        base, inserts = tuple(pool_nodes), []
    key = _position_of(position)
    inserts += [
        (bisect.bisect_left(base, position[n.name], key=key), position[n.name], n) for n in returned
    ]
    inserts.sort(key=lambda e: (e[0], e[1]))
    view = PoolView(base, inserts)
    return view.materialised() if len(inserts) > _POOL_INSERTS else view


def _position_of(position: Mapping[str, int]) -> Callable[[Node], int]:
    """Return the key that orders nodes as the state does (by their position in it)."""

    def key(n: Node) -> int:
        return position[n.name]

    return key


def remove_job(
    state: ClusterState, job_id: str, *, group_id: str | None = None
) -> tuple[ClusterState, tuple[str, ...]]:
    """Return `state` without `job_id` and the nodes released (no member uses them any more).

    A group left without members releases all its nodes and disappears. `group_id`, the
    job's group when the caller knows it, spares the search for it.
    """
    index = planner_index(state)
    if job_id not in index.job_ids:
        raise KeyError(f"job {job_id!r} is in no co-execution group")
    at = group_position(index, group_id) if group_id is not None else None
    if at is not None and job_id in index.summaries[at].job_ids:
        i = at
    else:
        i = next(k for k, x in enumerate(index.summaries) if job_id in x.job_ids)
    g = state.groups[i]
    members = tuple(m for m in g.members if m.job.id != job_id)
    used: set[str] = set()
    for m in members:
        used.update(m.rollout_nodes)
        used.update(m.train_nodes)
    released = tuple(x for x in g.all_nodes if x not in used)
    summaries = list(index.summaries)
    group: Group | None = None
    if members:
        group = Group(
            g.id,
            tuple(x for x in g.rollout_nodes if x in used),
            tuple(x for x in g.train_nodes if x in used),
            members,
        )
        groups = state.groups[:i] + (group,) + state.groups[i + 1 :]
        summaries[i] = summarise(group)
        bounds = index.bounds.replaced(i, summaries[i]) if index.bounds is not None else None
    else:
        groups = state.groups[:i] + state.groups[i + 1 :]
        del summaries[i]
        bounds = index.bounds.deleted(i) if index.bounds is not None else None
    nodes = index.node_index
    free: dict[Pool, Sequence[Node]] = dict(index.free)
    back: dict[Pool, list[Node]] = {}
    for x in released:
        n = nodes.nodes[x]
        if not n.cordoned:  # a released cordoned node stays out of the free pool
            back.setdefault(n.pool, []).append(n)
    for pool, returned in back.items():
        free[pool] = pool_with_returned(free[pool], returned, nodes.position)
    child_index = PlannerIndex(
        nodes=state.nodes,
        groups=groups,
        node_index=nodes,
        summaries=tuple(summaries),
        # (views of the sets before: `SetView`)
        taken=set_without(index.taken, released),
        job_ids=set_without(index.job_ids, (job_id,)),
        free=free,
        bounds=bounds,
        # a group that keeps members keeps its place, and so does every other group; one
        # that closes moves the later ones a place earlier
        positions=index.positions
        if group is not None
        else positions_without(index.positions, i, g.id),
        colocated=None if index.colocated is None else index.colocated + colocated_change(g, group),
    )
    return replace(state, groups=groups, planner_index=child_index), released


def update_job(state: ClusterState, job: JobProfile) -> ClusterState:
    """Return `state` with its member `job.id` planned as `job` from now: the same nodes
    and place in its group's order, new estimates (a drift re-plan that learned them and
    keeps the job where it is). Raises KeyError when the job is in no group."""
    index = planner_index(state)
    if job.id not in index.job_ids:
        raise KeyError(f"job {job.id!r} is in no co-execution group")
    i = next(k for k, x in enumerate(index.summaries) if job.id in x.job_ids)
    g = state.groups[i]
    group = replace(
        g, members=tuple(replace(m, job=job) if m.job.id == job.id else m for m in g.members)
    )
    groups = state.groups[:i] + (group,) + state.groups[i + 1 :]
    summaries = list(index.summaries)
    summaries[i] = summarise(group)
    bounds = index.bounds.replaced(i, summaries[i]) if index.bounds is not None else None
    child_index = replace(index, groups=groups, summaries=tuple(summaries), bounds=bounds)
    return replace(state, groups=groups, planner_index=child_index)
