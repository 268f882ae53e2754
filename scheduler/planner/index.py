"""The planner's index of a ClusterState: what every decision reads, computed once per state.

A decision needs, per co-execution group, the summed worst-case phase time and the
pinned host memory of each node, T_cycle, T_load and the SLO tolerance
(`GroupSummary`); and, for the state, its nodes by name and pool, the nodes some
group holds, the jobs placed and the free nodes (`PlannerIndex`). Computing that is
a pass over every group and node, which at 2,000 live jobs costs more than the
decision itself, so the index is an explicit value that travels with the state
(`ClusterState.planner_index`):

* `apply_placement` and `remove_job` build the child state's index from their input's
  (`placed` / `removed`), re-summarising only the group they change;
* `planner_index(state)` returns the state's index when it was built for exactly
  this state's `nodes` and `groups` (checked by identity: a `dataclasses.replace`
  that changes either carries a stale index, which is ignored), else builds one and
  attaches it to the state.

Attaching is the only write: the index is a pure function of the state's own
immutable fields and is never changed after it is built, so two threads planning on
one state (gunicorn threads calling `place`) at worst both build an equal index and
one of them is kept. There is no module-level cache.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler.compiled import python_class
from scheduler.model import ClusterState, Group, Node, Pool

__all__ = [
    "GroupBounds",
    "GroupSummary",
    "NodeIndex",
    "PlannerIndex",
    "build_index",
    "colocated_change",
    "colocated_groups",
    "group_bounds",
    "group_position",
    "planner_index",
]


@python_class  # (held by weak reference: admissible.NoJoins)
@dataclass(frozen=True)
class GroupSummary:
    """What the planner needs of one (immutable) co-execution group."""

    group: Group
    load: Mapping[str, float]  # summed worst-case phase time per node
    mem: Mapping[str, float]  # summed host memory pinned per node
    t_cycle: float  # max over members of T_j^solo
    t_load: float  # summed phase time on the bottleneck node
    tolerance: float  # min over members of slo_k x T_k^solo: longest iteration all accept
    job_ids: frozenset[str]
    size: int  # members
    n_train: int  # training nodes
    min_train_load: float  # the least-loaded training node's summed phase time
    # the members' common time_scale; None when they have none (an empty group, or a
    # group mixed before the clock rule): such a group admits no one
    time_scale: float | None
    # the group's training and rollout nodes, least loaded first (ties by name): what
    # every decision's `least_loaded` filters, sorted once per summary
    train_by_load: tuple[str, ...]
    rollout_by_load: tuple[str, ...]
    # per node some member is pinned to: the largest solo time of its members without a
    # measured switch overhead, and the largest solo time + switch overhead of those with
    # one (-inf: none such). A joiner sharing the node makes each of them switch every
    # round (`algorithm1.switched_bound`)
    switching: Mapping[str, tuple[float, float]]
    # the least over its training nodes of `switching`'s first entry (-inf: a training node
    # without such a member), and whether a member is pinned to every training node: a
    # joiner then shares the node it trains on, whichever (`GroupBounds`)
    train_solo_floor: float
    trains_used: bool
    # the worst-case iteration times of the group with a joiner, by what they read of the
    # joiner and of its nodes (`slo_checks.joined_worst_case`): decisions on later states
    # that keep this group ask again about alike joiners. Filled by the planner (a pure
    # function of the summary's group and the key), bounded, not compared.
    joined_worst: dict[tuple[object, ...], tuple[float, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # what Algorithm 1 finds in the group for a joiner but for its iterations, by the
    # joiner's profile and request (`algorithm1.kept_options`): a job asked about at every
    # departure finds the groups that did not change as they were. Filled by the planner
    # while a memo is open, bounded, not compared.
    joiner_options: dict[object, object] = field(default_factory=dict, compare=False, repr=False)


def summarise(group: Group) -> GroupSummary:
    """Return the planner's summary of `group` (one pass over its members)."""
    load: dict[str, float] = dict.fromkeys(group.all_nodes, 0.0)
    mem: dict[str, float] = dict.fromkeys(group.all_nodes, 0.0)
    t_cycle = 0.0
    tolerance = float("inf")
    scale: float | None = group.members[0].job.time_scale if group.members else None
    switching: dict[str, tuple[float, float]] = {}
    for m in group.members:
        j = m.job
        if j.time_scale != scale:
            scale = None  # mixed (formed before the clock rule); stays None
        for x in m.rollout_nodes:
            load[x] = load.get(x, 0.0) + j.rollout_pool_max_s
            mem[x] = mem.get(x, 0.0) + j.host_mem_gb
        for x in m.train_nodes:
            load[x] = load.get(x, 0.0) + j.t_train_max_s
            mem[x] = mem.get(x, 0.0) + j.host_mem_gb
        solo = j.t_solo_max_s
        t_cycle = max(t_cycle, solo)
        tolerance = min(tolerance, j.slo * solo)
        for x in m.rollout_nodes + m.train_nodes:
            plain, own = switching.get(x, _NONE)
            if j.switch_s is None:
                switching[x] = (max(plain, solo), own)
            else:
                switching[x] = (plain, max(own, solo + j.switch_s))
    return GroupSummary(
        group=group,
        load=load,
        mem=mem,
        t_cycle=t_cycle,
        t_load=max(load.values(), default=0.0),
        tolerance=tolerance,
        job_ids=frozenset(m.job.id for m in group.members),
        size=len(group.members),
        n_train=len(group.train_nodes),
        min_train_load=min((load[x] for x in group.train_nodes), default=0.0),
        time_scale=scale,
        train_by_load=tuple(sorted(group.train_nodes, key=lambda x: (load[x], x))),
        rollout_by_load=tuple(sorted(group.rollout_nodes, key=lambda x: (load[x], x))),
        switching=switching,
        train_solo_floor=min(
            (switching.get(x, _NONE)[0] for x in group.train_nodes), default=float("-inf")
        ),
        trains_used=bool(group.train_nodes) and all(x in switching for x in group.train_nodes),
    )


_NONE = (float("-inf"), float("-inf"))  # (`GroupSummary.switching` of a node no one uses)


# `GroupBounds.train_mem`'s ranks, and its rows
TRAIN_MEM_RANKS = 4
ROWS = 11 + TRAIN_MEM_RANKS


@dataclass(frozen=True)
class GroupBounds:
    """The summaries' fields Algorithm 1's first cheap bounds read (`algorithm1.candidates`),
    one row each (T_cycle, tolerance, the least-loaded training node's load, the
    least-loaded rollout node's: infinite without one; `GroupSummary.train_solo_floor`,
    and `trains_used` as 1 or 0), then what `GroupOptions`' first steps read (whether
    the group may take anyone at all: members and rollout nodes, 1 or 0; its members; its
    training nodes; whether it is saturated, 1 or 0; its members' time_scale, NaN for
    None; and the k-th least host memory pinned on its training nodes for k =
    1..`TRAIN_MEM_RANKS`, infinite past its training nodes), one column per summary, aligned with `PlannerIndex.summaries`: one
    vectorised pass answers which groups may take a job at all (at 2,000 live jobs a loop
    over the groups per decision was the planner's hot spot; most groups it then looked
    at had no training node with room for the job)."""

    rows: np.ndarray  # shape (ROWS, groups)

    @property
    def t_cycle(self) -> np.ndarray:
        row: np.ndarray = self.rows[0]
        return row

    @property
    def tolerance(self) -> np.ndarray:
        row: np.ndarray = self.rows[1]
        return row

    @property
    def min_train_load(self) -> np.ndarray:
        row: np.ndarray = self.rows[2]
        return row

    @property
    def min_rollout_load(self) -> np.ndarray:
        row: np.ndarray = self.rows[3]
        return row

    @property
    def train_solo_floor(self) -> np.ndarray:
        row: np.ndarray = self.rows[4]
        return row

    @property
    def trains_used(self) -> np.ndarray:
        row: np.ndarray = self.rows[5]
        return row

    @property
    def takes(self) -> np.ndarray:
        """1 where the group may take anyone (members, rollout nodes), else 0."""
        row: np.ndarray = self.rows[6]
        return row

    @property
    def size(self) -> np.ndarray:
        row: np.ndarray = self.rows[7]
        return row

    @property
    def n_train(self) -> np.ndarray:
        row: np.ndarray = self.rows[8]
        return row

    @property
    def saturated(self) -> np.ndarray:
        """1 where T_load >= T_cycle (line 4), else 0."""
        row: np.ndarray = self.rows[9]
        return row

    @property
    def time_scale(self) -> np.ndarray:
        """The members' common time_scale (NaN: None, the group admits no one)."""
        row: np.ndarray = self.rows[10]
        return row

    def train_mem(self, k: int) -> np.ndarray:
        """The k-th least host memory pinned on a group's training nodes (1 <= k <=
        `TRAIN_MEM_RANKS`; infinite where the group has fewer)."""
        row: np.ndarray = self.rows[10 + k]
        return row

    @staticmethod
    def _column(s: GroupSummary) -> tuple[float, ...]:
        least = s.load[s.rollout_by_load[0]] if s.rollout_by_load else float("inf")
        used = 1.0 if s.trains_used else 0.0
        takes = 1.0 if s.size and s.group.rollout_nodes else 0.0
        saturated = 1.0 if s.t_load >= s.t_cycle else 0.0
        scale = math.nan if s.time_scale is None else s.time_scale
        mem = sorted(s.mem.get(x, 0.0) for x in s.group.train_nodes)[:TRAIN_MEM_RANKS]
        mem += [float("inf")] * (TRAIN_MEM_RANKS - len(mem))
        return (
            s.t_cycle, s.tolerance, s.min_train_load, least, s.train_solo_floor, used,
            takes, float(s.size), float(s.n_train), saturated, scale, *mem,
        )  # fmt: skip

    @classmethod
    def of(cls, summaries: tuple[GroupSummary, ...]) -> GroupBounds:
        """Return the bounds of `summaries` (a pass over them)."""
        rows = np.array([cls._column(x) for x in summaries], dtype=float).reshape(-1, ROWS)
        return cls(np.ascontiguousarray(rows.T))

    def replaced(self, i: int, s: GroupSummary) -> GroupBounds:
        """Return the bounds with column `i` now `s`'s."""
        rows = self.rows.copy()
        rows[:, i] = self._column(s)
        return GroupBounds(rows)

    def deleted(self, i: int) -> GroupBounds:
        """Return the bounds without column `i`."""
        return GroupBounds(np.delete(self.rows, i, axis=1))

    def appended(self, s: GroupSummary) -> GroupBounds:
        """Return the bounds with `s`'s column last."""
        return GroupBounds(np.column_stack((self.rows, self._column(s))))


@dataclass(frozen=True)
class NodeIndex:
    """The state's nodes by name and by pool, and the largest host memory per pool."""

    nodes: Mapping[str, Node]
    by_pool: Mapping[Pool, tuple[Node, ...]]
    biggest_mem: Mapping[Pool, float]
    position: Mapping[str, int]  # index of each node in state.nodes
    cordoned: Mapping[Pool, int]  # cordoned nodes per pool
    prices: Mapping[str, float]  # hourly price of each node by name
    mem_sorted: Mapping[Pool, tuple[float, ...]]  # the pool's host memories, ascending


def index_nodes(nodes: tuple[Node, ...]) -> NodeIndex:
    """Return the index of a state's node tuple (one pass)."""
    by_name: dict[str, Node] = {}
    by_pool: dict[Pool, list[Node]] = {Pool.ROLLOUT: [], Pool.TRAIN: []}
    biggest = {Pool.ROLLOUT: 0.0, Pool.TRAIN: 0.0}
    position: dict[str, int] = {}
    cordoned = {Pool.ROLLOUT: 0, Pool.TRAIN: 0}
    for i, n in enumerate(nodes):
        by_name[n.name] = n
        position[n.name] = i
        by_pool[n.pool].append(n)
        if n.host_mem_gb > biggest[n.pool]:
            biggest[n.pool] = n.host_mem_gb
        if n.cordoned:
            cordoned[n.pool] += 1
    return NodeIndex(
        nodes=by_name,
        by_pool={p: tuple(v) for p, v in by_pool.items()},
        biggest_mem=biggest,
        position=position,
        cordoned=cordoned,
        prices={n.name: n.price_per_hour for n in nodes},
        mem_sorted={p: tuple(sorted(n.host_mem_gb for n in v)) for p, v in by_pool.items()},
    )


@dataclass(frozen=True)
class PlannerIndex:
    """Everything a decision reads of one state, built for its `nodes` and `groups`."""

    nodes: tuple[Node, ...]  # the very tuple of the state it was built for
    groups: tuple[Group, ...]  # likewise
    node_index: NodeIndex
    summaries: tuple[GroupSummary, ...]  # aligned with `groups`
    # nodes some group holds, and jobs placed in some group (a frozenset, or after a
    # transition a `SetView` of the one before)
    taken: AbstractSet[str]
    job_ids: AbstractSet[str]
    # no group holds them, not cordoned; state order (a tuple, or after a removal a
    # `transitions.PoolView` of the one before)
    free: Mapping[Pool, Sequence[Node]]
    # the summaries' cheap bounds as arrays (`group_bounds`: built on first use, then
    # carried to the child states by the transitions)
    bounds: GroupBounds | None = None
    # each group's position in `summaries` by group id (`group_position`: built on first use,
    # then carried to the child states by `apply_placement` and `remove_job`)
    positions: Mapping[str, int] | None = None
    # how many groups have no rollout nodes (co-located: `colocated_groups`, built on first
    # use, then carried to the child states by the transitions)
    colocated: int | None = None

    def is_for(self, state: ClusterState) -> bool:
        """Return True when this index was built for `state`'s nodes and groups."""
        return self.nodes is state.nodes and self.groups is state.groups


def _assemble(
    nodes: tuple[Node, ...],
    groups: tuple[Group, ...],
    node_index: NodeIndex,
    summaries: tuple[GroupSummary, ...],
) -> PlannerIndex:
    taken: set[str] = set()
    job_ids: set[str] = set()
    for s in summaries:
        taken.update(s.load)  # every node of the group
        job_ids.update(s.job_ids)
    free = {
        pool: tuple(n for n in node_index.by_pool[pool] if n.name not in taken and not n.cordoned)
        for pool in (Pool.ROLLOUT, Pool.TRAIN)
    }
    return PlannerIndex(
        nodes=nodes,
        groups=groups,
        node_index=node_index,
        summaries=summaries,
        taken=frozenset(taken),
        job_ids=frozenset(job_ids),
        free=free,
    )


def build_index(state: ClusterState) -> PlannerIndex:
    """Return a fresh index of `state` (a pass over every group and node), ignoring any
    index it carries."""
    summaries = tuple(summarise(g) for g in state.groups)
    return _assemble(state.nodes, state.groups, index_nodes(state.nodes), summaries)


def _summaries(groups: tuple[Group, ...], old: PlannerIndex | None) -> tuple[GroupSummary, ...]:
    """Summarise `groups`, reusing `old`'s summary of every group object it holds."""
    if old is None:
        return tuple(summarise(g) for g in groups)
    known = {id(s.group): s for s in old.summaries}  # `old` keeps its groups alive
    out = []
    for g in groups:
        hit = known.get(id(g))
        out.append(hit if hit is not None and hit.group is g else summarise(g))
    return tuple(out)


def group_bounds(index: PlannerIndex) -> GroupBounds:
    """Return the index's `GroupBounds`, built and attached on first use (like
    `planner_index`'s one write: a pure function of the index's own summaries)."""
    if index.bounds is None:
        object.__setattr__(index, "bounds", GroupBounds.of(index.summaries))
    assert index.bounds is not None
    return index.bounds


def group_position(index: PlannerIndex, group_id: str) -> int | None:
    """Return the position of group `group_id` in the index's summaries (None: no such
    group); the map is built on first use and attached (like `group_bounds`)."""
    if index.positions is None:
        positions = {x.group.id: k for k, x in enumerate(index.summaries)}
        object.__setattr__(index, "positions", positions)
    assert index.positions is not None
    return index.positions.get(group_id)


# the names a `SetView` changes before it is copied
_VIEW_CHANGES = 64


class SetView(AbstractSet[str]):
    """A frozenset `base` less a few of its names (`removed`) and with a few more (`added`,
    none of them in `base`): a transition's child state's taken nodes and placed jobs,
    read by membership (copying thousands of names at every removal and placement, where
    a consolidation pass removes a job per candidate, was a few percent of a pass at
    size). `frozen()` is the set as a frozenset."""

    __slots__ = ("added", "base", "removed")

    def __init__(self, base: frozenset[str], removed: frozenset[str], added: frozenset[str]):
        self.base, self.removed, self.added = base, removed, added

    def __contains__(self, x: object) -> bool:
        return x in self.added or (x in self.base and x not in self.removed)

    def __iter__(self) -> Iterator[str]:
        removed = self.removed
        yield from (x for x in self.base if x not in removed)
        yield from self.added

    def __len__(self) -> int:
        return len(self.base) - len(self.removed) + len(self.added)

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> frozenset[Any]:
        return frozenset(it)  # (the mixins' `|`, `-`, ... answer a frozenset)

    def frozen(self) -> frozenset[str]:
        """Return the set as a frozenset (C-level copies)."""
        return (self.base - self.removed) | self.added


def _parts(names: AbstractSet[str]) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    if isinstance(names, SetView):
        return names.base, names.removed, names.added
    return frozenset(names), frozenset(), frozenset()


def _view(base: frozenset[str], removed: frozenset[str], added: frozenset[str]) -> AbstractSet[str]:
    if not removed and not added:
        return base
    if len(removed) + len(added) > _VIEW_CHANGES:
        return (base - removed) | added
    return SetView(base, removed, added)


def set_without(names: AbstractSet[str], removed: Iterable[str]) -> AbstractSet[str]:
    """Return `names` (a frozenset or a `SetView`) less `removed` (each of them in it)."""
    gone = frozenset(removed)
    if not gone:
        return names
    base, out, added = _parts(names)
    return _view(base, out | (gone - added), added - gone)


def set_with(names: AbstractSet[str], added: Iterable[str]) -> AbstractSet[str]:
    """Return `names` (a frozenset or a `SetView`) with `added` (in it already or not)."""
    new = frozenset(added)
    base, out, more = _parts(names)
    return _view(base, out - new, more | (new - base))


# the removals a `positions_without` view stacks before its positions are copied
_VIEW_DEPTH = 8


class _PositionsWithout(Mapping[str, int]):
    """Groups' positions by id after the group at `at` (`gone`) closed: the later ones one
    place earlier. A view, read through to the positions before (a removal's child state
    is asked for a position seldom, and copying them was a pass over every group)."""

    __slots__ = ("_at", "_base", "_gone", "depth")

    def __init__(self, base: Mapping[str, int], at: int, gone: str) -> None:
        self._base, self._at, self._gone = base, at, gone
        self.depth: int = base.depth + 1 if isinstance(base, _PositionsWithout) else 1

    def __getitem__(self, group_id: str) -> int:
        if group_id == self._gone:
            raise KeyError(group_id)
        k = self._base[group_id]
        return k - 1 if k > self._at else k

    def __iter__(self) -> Iterator[str]:
        return (g for g in self._base if g != self._gone)

    def __len__(self) -> int:
        return len(self._base) - 1

    def copied(self) -> dict[str, int]:
        """Return the positions as a dict (one pass over them)."""
        at, gone = self._at, self._gone
        base = self._base.copied() if isinstance(self._base, _PositionsWithout) else self._base
        return {g: k - 1 if k > at else k for g, k in base.items() if g != gone}


def positions_without(
    positions: Mapping[str, int] | None, at: int, gone: str
) -> Mapping[str, int] | None:
    """Return `positions` (None: not built) after the group `gone` at position `at` closed."""
    if positions is None:
        return None
    view = _PositionsWithout(positions, at, gone)
    return view.copied() if view.depth > _VIEW_DEPTH else view


def positions_with(positions: Mapping[str, int], group_id: str, at: int) -> dict[str, int]:
    """Return `positions` with the new group `group_id` at position `at`, as a dict."""
    base = positions.copied() if isinstance(positions, _PositionsWithout) else positions
    return {**base, group_id: at}


def colocated_groups(index: PlannerIndex) -> int:
    """Return how many of the index's groups have no rollout nodes (co-located jobs alone on
    their training nodes); counted on first use and attached (like `group_bounds`)."""
    if index.colocated is None:
        count = sum(1 for x in index.summaries if not x.group.rollout_nodes)
        object.__setattr__(index, "colocated", count)
    assert index.colocated is not None
    return index.colocated


def colocated_change(old: Group | None, new: Group | None) -> int:
    """Return how `colocated_groups` changes when group `old` becomes `new` (None: no such
    group, before it opens or after it closes)."""
    return (new is not None and not new.rollout_nodes) - (old is not None and not old.rollout_nodes)


def planner_index(state: ClusterState) -> PlannerIndex:
    """Return the index of `state`: the one it carries if built for it, else a new one.

    A new one reuses what the carried index still describes (the summaries of the
    groups it shares with the state, the node index when the nodes are the same) and
    is attached to the state, so later decisions on it skip the work.
    """
    old = state.planner_index
    if not isinstance(old, PlannerIndex):
        fresh = build_index(state)
    elif old.is_for(state):
        return old
    else:
        nodes = old.node_index if old.nodes is state.nodes else index_nodes(state.nodes)
        fresh = _assemble(state.nodes, state.groups, nodes, _summaries(state.groups, old))
    # The one write: a frozen ClusterState gets the index derived from its own fields
    # (see the module docstring for why this is safe across threads).
    object.__setattr__(state, "planner_index", fresh)
    return fresh
