"""Inter-group planner: Algorithm 1 of the paper (section 4) and the baselines.

`place(job, state)` answers FIT (with a Placement), RETRY (not with the capacity
free now) or INFEASIBLE (never on this cluster), each with a human reason.
`apply_placement` and `remove_job` evolve a ClusterState; all three are pure.

Decisions where the paper is silent (see also the module functions):

* Training nodes. A group's training nodes run every member's training (paper
  section 2). A job that needs FEWER training nodes than the group has is pinned to
  the least-loaded ones with residency room; a job that needs MORE than the group
  has is not a candidate for that group (the paper only scales the rollout pool),
  so it goes to another group or a new one.
* Direct packing candidates: every existing member's rollout-node set of the right
  size, plus the job's count of the group's least-loaded rollout nodes with room.
  Rollout scaling candidates: m = 1..N_R new free rollout nodes plus the N_R - m
  least-loaded group rollout nodes with room. All share the group's training nodes.
* Choice: least marginal $/h; ties prefer direct packing, then fewer new nodes,
  then the lower predicted slowdown of the new job, then the earlier group.
  Candidates are evaluated in that order with a lower bound on the slowdown
  (max(T_cycle, T_load) / T_solo), so most are pruned without simulating.
* Unbounded pools (`GpuType.nodes is None`): when the state has no free node that
  fits, the planner names fresh nodes (`<type>-<n>`) in `Placement.new_nodes`;
  `apply_placement` adds them to the state. Bounded pools use only `state.nodes`
  (build them with `cluster_nodes`).
* Baselines (`random`, `greedy-most-idle`): a group qualifies when it is not full,
  has the job's training nodes with residency room, and enough rollout nodes with
  room (or free ones to add); SLOs are ignored. `random` picks a group and nodes with
  the caller's rng; `greedy-most-idle` the group with the highest idle share
  (1 - summed phase time / (nodes x max(T_cycle, T_load))), then its least-loaded
  nodes. Both open a new group when no group qualifies. `solo-disagg` always opens one.
* Helpers beyond the contract: `empty_state(spec)` / `cluster_nodes(spec)` build the
  nodes of bounded pools, `nodes_needed`, `make_node`, `node_name`,
  `group_cost_per_hour`, and `POLICIES`.
* Join wait: the SLO check is the paper's, on the steady-state worst-case iteration
  time of every member; in addition the NEW job must absorb the wait for its turn in
  the meta-iteration in progress, JOIN_ALLOWANCE_META_ITERATIONS x T_meta spread over
  its iterations (negligible for long jobs, decisive for a job of 2 iterations).
* Clocks (`JobProfile.time_scale`): phase times are profile seconds, and a job's
  runner takes profile / time_scale wall-clock seconds. Round-robin in one group is
  only what the planner predicts when every member runs on the same clock, so a job
  joins (direct packing or rollout scaling, for every policy) only a group whose
  members all have its time_scale (exactly: scales are set, not computed); a real job
  (1) never shares with one emulated at 200x. Traces and the simulator are all 1.
* Residency: the summed host_mem_gb of the members pinned to a node plus the job's
  must not exceed the node's host_mem_gb (equality fits).
* Cordoned (drained) nodes: their members keep running, but no new member is pinned to
  one: they are never free, never a direct-packing or rollout-scaling target, and a
  joining job shares only the group's training nodes that are not cordoned (a group whose
  training nodes are all cordoned admits no one). They still count in the pool's
  capacity, so a job that fits only with them waits (RETRY, the reason says how many are
  drained); a job larger than the capacity (`GpuType.nodes`: up and cordoned nodes, down
  ones not) is INFEASIBLE.
"""

from __future__ import annotations

import random
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from scheduler.model import (
    ClusterSpec,
    ClusterState,
    GpuType,
    Group,
    JobProfile,
    Member,
    Node,
    Placement,
    PlacementResult,
    PlacementStatus,
    Pool,
    Strategy,
)
from scheduler.roundrobin import steady_iteration_times

POLICIES = ("rollmux", "solo-disagg", "random", "greedy-most-idle")
# Meta-iterations a job joining a running group may lose waiting for its turn and
# for the group to settle (measured worst case 1.2 over 3,000 random joins with
# worst-case durations); admission counts them against the joiner's SLO.
JOIN_ALLOWANCE_META_ITERATIONS = 1.5
_EPS = 1e-9


# ---------------------------------------------------------------------------
# Cluster helpers
# ---------------------------------------------------------------------------


def node_name(spec: ClusterSpec, pool: Pool, index: int) -> str:
    """Return the conventional name of the `index`-th node of `pool`."""
    gt = spec.gpu_type(pool)
    if spec.rollout.name == spec.train.name:
        return f"{gt.name}-{pool.value}-{index:03d}"
    return f"{gt.name}-{index:03d}"


def make_node(spec: ClusterSpec, pool: Pool, name: str) -> Node:
    """Return a node of `pool` shaped like its GPU type."""
    gt = spec.gpu_type(pool)
    return Node(name, pool, gt.name, gt.gpus_per_node, gt.host_mem_gb, gt.node_price_per_hour)


def cluster_nodes(spec: ClusterSpec) -> tuple[Node, ...]:
    """Return every node of the bounded pools of `spec` (none for an unbounded pool)."""
    out: list[Node] = []
    for pool in (Pool.ROLLOUT, Pool.TRAIN):
        count = spec.gpu_type(pool).nodes
        out.extend(make_node(spec, pool, node_name(spec, pool, i)) for i in range(count or 0))
    return tuple(out)


def empty_state(spec: ClusterSpec) -> ClusterState:
    """Return a state with every node of `spec` free and no groups."""
    return ClusterState(spec=spec, nodes=cluster_nodes(spec))


def nodes_needed(job: JobProfile, spec: ClusterSpec, pool: Pool) -> int:
    """Return how many nodes of `pool` the job's phase needs (GPUs / GPUs per node)."""
    return job.gpus(pool) // spec.gpu_type(pool).gpus_per_node


# ---------------------------------------------------------------------------
# Per-group summaries
# ---------------------------------------------------------------------------


@dataclass
class _Summary:
    """What the planner needs of a group, computed once per (immutable) Group object."""

    group: Group
    load: dict[str, float]  # summed worst-case phase time per node
    mem: dict[str, float]  # summed host memory pinned per node
    t_cycle: float
    t_load: float
    tolerance: float  # min over members of slo_k x T_k^solo: longest iteration all accept
    job_ids: frozenset[str]
    size: int  # members
    n_train: int  # training nodes
    min_train_load: float  # the least-loaded training node's summed phase time
    # the members' common time_scale; None when they have none (an empty group, or a
    # group mixed before the clock rule): such a group admits no one
    time_scale: float | None


def _summarise(group: Group) -> _Summary:
    load: dict[str, float] = dict.fromkeys(group.all_nodes, 0.0)
    mem: dict[str, float] = dict.fromkeys(group.all_nodes, 0.0)
    t_cycle = 0.0
    tolerance = float("inf")
    scale: float | None = group.members[0].job.time_scale if group.members else None
    for m in group.members:
        j = m.job
        if j.time_scale != scale:
            scale = None  # mixed (formed before the clock rule); stays None
        for x in m.rollout_nodes:
            load[x] = load.get(x, 0.0) + j.t_roll_max_s
            mem[x] = mem.get(x, 0.0) + j.host_mem_gb
        for x in m.train_nodes:
            load[x] = load.get(x, 0.0) + j.t_train_max_s
            mem[x] = mem.get(x, 0.0) + j.host_mem_gb
        solo = j.t_solo_max_s
        t_cycle = max(t_cycle, solo)
        tolerance = min(tolerance, j.slo * solo)
    t_load = max(load.values(), default=0.0)
    ids = frozenset(m.job.id for m in group.members)
    min_train = min((load[x] for x in group.train_nodes), default=0.0)
    return _Summary(
        group,
        load,
        mem,
        t_cycle,
        t_load,
        tolerance,
        ids,
        len(group.members),
        len(group.train_nodes),
        min_train,
        scale,
    )


# Memo of _summarise keyed by the identity of the (frozen) Group: apply_placement and
# remove_job rebuild only the group they change, so a decision re-summarises one or
# two groups instead of all of them. Entries die with their Group (weak reference),
# so the memo never outlives the states that hold the groups. It is a pure cache of
# a pure function: results never depend on it.
class _KeyedRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference that knows its memo key (no closure per entry)."""

    __slots__ = ("key",)
    key: int


_SUMMARIES: dict[int, tuple[_KeyedRef, _Summary]] = {}


# The memo is bound as a default so the callback still works at interpreter exit.
def _forget_summary(
    ref: _KeyedRef, memo: dict[int, tuple[_KeyedRef, _Summary]] = _SUMMARIES
) -> None:
    entry = memo.get(ref.key)
    if entry is not None and entry[0] is ref:
        del memo[ref.key]


def _summary(group: Group) -> _Summary:
    key = id(group)
    hit = _SUMMARIES.get(key)
    if hit is not None and hit[0]() is group:
        return hit[1]
    summary = _summarise(group)
    ref = _KeyedRef(group, _forget_summary)
    ref.key = key
    _SUMMARIES[key] = (ref, summary)
    return summary


@dataclass
class _Candidate:
    delta: float
    strategy: Strategy
    new_count: int
    lower_bound: float  # lower bound of the new job's worst-case iteration time
    order: int  # position of the group in state.groups (last tie-break)
    summary: _Summary | None
    rollout: tuple[str, ...]
    train: tuple[str, ...]
    new_nodes: tuple[str, ...]

    def rank(self) -> tuple[float, int, int]:
        return (
            round(self.delta, 6),
            0 if self.strategy is Strategy.DIRECT_PACKING else 1,
            self.new_count,
        )


# ---------------------------------------------------------------------------
# Free nodes
# ---------------------------------------------------------------------------


class _FreePool:
    """Free nodes of one pool that can hold the job's residency, in state order."""

    def __init__(
        self,
        spec: ClusterSpec,
        pool: Pool,
        size: int,
        free: list[Node],
        in_use: Callable[[str], bool],
        mem: float,
    ) -> None:
        self.spec = spec
        self.pool = pool
        self.unbounded = spec.gpu_type(pool).nodes is None
        self.size = size  # nodes of the pool in the state: minted numbering starts there
        self.free_total = len(free)
        self.fit = [n for n in free if n.host_mem_gb + _EPS >= mem]  # free with room
        self.in_use = in_use  # is a name taken: minted names must differ
        self.price = {n.name: n.price_per_hour for n in self.fit}
        self._minted: list[str] = []

    def take(self, count: int) -> list[str] | None:
        """Return the names of the first `count` free nodes that fit, minting if unbounded."""
        names = [n.name for n in self.fit[:count]]
        if len(names) < count:
            if not self.unbounded:
                return None
            gt = self.spec.gpu_type(self.pool)
            i = self.size + len(self._minted)
            while len(self._minted) < count - len(names):
                name = node_name(self.spec, self.pool, i)
                i += 1
                if self.in_use(name) or name in self._minted:
                    continue
                self._minted.append(name)
                self.price[name] = gt.node_price_per_hour
            names += self._minted[: count - len(names)]
        return names

    def cost(self, names: Sequence[str]) -> float:
        return sum(self.price[x] for x in names)


@dataclass
class _NodeIndex:
    """The state's nodes by name and by pool, and the largest host memory per pool."""

    nodes: dict[str, Node]
    by_pool: dict[Pool, list[Node]]
    biggest_mem: dict[Pool, float]
    position: dict[str, int]  # index of each node in state.nodes
    cordoned: dict[Pool, int]  # cordoned nodes per pool


# One-entry memo of _node_index: consecutive decisions share `state.nodes` (it changes
# only when a decision names fresh nodes of an unbounded pool), so most decisions skip
# the pass over every node. Pure cache: results never depend on it.
_NODE_INDEX: list[tuple[tuple[Node, ...], _NodeIndex]] = []


def _node_index(nodes: tuple[Node, ...]) -> _NodeIndex:
    memo = _NODE_INDEX
    if memo and memo[0][0] is nodes:
        return memo[0][1]
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
    index = _NodeIndex(by_name, by_pool, biggest, position, cordoned)
    memo[:] = [(nodes, index)]
    return index


@dataclass
class _Derived:
    """What every decision needs of a state, beyond its groups' summaries."""

    summaries: list[_Summary]  # aligned with state.groups
    taken: set[str]  # nodes some group holds
    job_ids: set[str]  # jobs placed in some group
    free: dict[Pool, list[Node]]  # nodes no group holds and not cordoned, in state order


# Memo of _derive keyed by the identity of the (frozen) state, filled incrementally by
# apply_placement and remove_job from their input state's entry, so a decision on a
# state they built skips the passes over every group and node. Entries die with
# their state (weak reference). Pure cache: results never depend on it.
_DERIVED: dict[int, tuple[weakref.ref[ClusterState], _Derived]] = {}


def _remember(state: ClusterState, derived: _Derived) -> None:
    key = id(state)

    def forget(
        ref: weakref.ref[ClusterState],
        key: int = key,
        memo: dict[int, tuple[weakref.ref[ClusterState], _Derived]] = _DERIVED,
    ) -> None:
        entry = memo.get(key)
        if entry is not None and entry[0] is ref:
            del memo[key]

    _DERIVED[key] = (weakref.ref(state, forget), derived)


def _derive(state: ClusterState) -> _Derived:
    """Return the derived view of `state` (memoised)."""
    hit = _DERIVED.get(id(state))
    if hit is not None and hit[0]() is state:
        return hit[1]
    summaries = [_summary(g) for g in state.groups]
    taken: set[str] = set()
    job_ids: set[str] = set()
    for summary in summaries:
        taken.update(summary.load)  # every node of the group
        job_ids.update(summary.job_ids)
    index = _node_index(state.nodes)
    free = {
        pool: [n for n in index.by_pool[pool] if n.name not in taken and not n.cordoned]
        for pool in (Pool.ROLLOUT, Pool.TRAIN)
    }
    derived = _Derived(summaries, taken, job_ids, free)
    _remember(state, derived)
    return derived


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def _infeasible_reason(job: JobProfile, spec: ClusterSpec, index: _NodeIndex) -> str | None:
    if job.slo < 1.0:
        return f"slo must be >= 1.0 (a tolerated slowdown), got {job.slo:g}"
    if job.iterations < 1:
        return f"iterations must be >= 1, got {job.iterations}"
    for name, v in (("t_roll_max_s", job.t_roll_max_s), ("t_train_max_s", job.t_train_max_s)):
        if not v > 0:
            return f"{name} must be > 0, got {v:g}"
    if not job.host_mem_gb > 0:
        return f"host_mem_gb must be > 0, got {job.host_mem_gb:g}"
    for pool, field in ((Pool.ROLLOUT, "rollout_gpus"), (Pool.TRAIN, "train_gpus")):
        gt = spec.gpu_type(pool)
        gpus = job.gpus(pool)
        if gpus < 1:
            return f"{field} must be >= 1, got {gpus}"
        if gpus % gt.gpus_per_node:
            return (
                f"{field}={gpus} is not a multiple of {gt.gpus_per_node} ({gt.name} GPUs per node)"
            )
        need = gpus // gt.gpus_per_node
        if gt.nodes is not None and need > gt.nodes:
            return f"{field}={gpus} needs {need} {gt.name} nodes; " + pool_capacity(spec, pool)
        biggest = max(index.biggest_mem[pool], gt.host_mem_gb)
        if job.host_mem_gb > biggest + _EPS:
            return (
                f"host_mem_gb={job.host_mem_gb:g} exceeds the host memory of every "
                f"{gt.name} node ({biggest:g} GB): residency is impossible"
            )
        pool_nodes = index.by_pool[pool]
        if gt.nodes is not None and len(pool_nodes) >= gt.nodes:
            # Every node the pool's capacity counts is in the state (cordoned ones too):
            # count those big enough for residency.
            big = sum(1 for n in pool_nodes if n.host_mem_gb + _EPS >= job.host_mem_gb)
            if big < need:
                return (
                    f"{field}={gpus} needs {need} {gt.name} nodes with "
                    f">= {job.host_mem_gb:g} GB host memory; the {pool.value} pool has {big}"
                )
    return None


def pool_capacity(spec: ClusterSpec, pool: Pool) -> str:
    """Return what a bounded pool can ever hold, in words, for reasons and field errors."""
    gt = spec.gpu_type(pool)
    nodes = gt.nodes or 0
    text = f"the {pool.value} pool has {nodes} nodes ({nodes * gt.gpus_per_node} GPUs)"
    if gt.nodes_down:
        noun = "node" if gt.nodes_down == 1 else "nodes"
        return f"{text}, not counting {gt.nodes_down} down {noun}"
    return f"{text} in total"


def _retry_reason(
    job: JobProfile, spec: ClusterSpec, pools: dict[Pool, _FreePool], index: _NodeIndex
) -> str:
    parts = []
    for pool in (Pool.ROLLOUT, Pool.TRAIN):
        need = nodes_needed(job, spec, pool)
        fp = pools[pool]
        if fp.unbounded:
            continue
        free, fit = fp.free_total, len(fp.fit)
        if fit < need:
            gt = spec.gpu_type(pool)
            extra = ""
            if free > fit:
                extra = f" ({free} free in all, {fit} with {job.host_mem_gb:g} GB host memory room)"
            cordoned = index.cordoned[pool]
            if cordoned == 1:
                extra += "; 1 drained node takes no new work"
            elif cordoned:
                extra += f"; {cordoned} drained nodes take no new work"
            noun = "node" if need == 1 else "nodes"
            parts.append(f"needs {need} free {gt.name} {noun}, {fit} free{extra}")
    detail = "; ".join(parts) or "no capacity"
    return f"{detail}, and no existing co-execution group can take it now"


# ---------------------------------------------------------------------------
# place
# ---------------------------------------------------------------------------


def place(
    job: JobProfile,
    state: ClusterState,
    *,
    policy: str = "rollmux",
    max_group_size: int = 5,
    rng: random.Random | None = None,
) -> PlacementResult:
    """Place `job` on `state` with `policy`; see the module docstring for the rules."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    if policy == "random" and rng is None:
        raise ValueError("policy 'random' needs an rng (the core never uses global random)")
    if max_group_size < 1:
        raise ValueError(f"max_group_size must be >= 1, got {max_group_size}")
    spec = state.spec
    index = _node_index(state.nodes)
    reason = _infeasible_reason(job, spec, index)
    if reason is not None:
        return PlacementResult(PlacementStatus.INFEASIBLE, reason)
    derived = _derive(state)
    if job.id in derived.job_ids:
        raise ValueError(f"job {job.id!r} is already placed in a co-execution group")
    summaries = derived.summaries
    taken = derived.taken

    def in_use(name: str) -> bool:
        return name in index.nodes or name in taken

    pools = {
        pool: _FreePool(
            spec, pool, len(index.by_pool[pool]), derived.free[pool], in_use, job.host_mem_gb
        )
        for pool in (Pool.ROLLOUT, Pool.TRAIN)
    }
    n_roll = nodes_needed(job, spec, Pool.ROLLOUT)
    n_train = nodes_needed(job, spec, Pool.TRAIN)

    if policy == "solo-disagg":
        best = _new_group_candidate(job, pools, n_roll, n_train)
    elif policy == "rollmux":
        best = _rollmux(
            job,
            summaries,
            index.nodes,
            pools,
            n_roll,
            n_train,
            max_group_size,
            spec.switch_overhead_s,
        )
    else:
        best = _baseline(
            job,
            summaries,
            index.nodes,
            pools,
            n_roll,
            n_train,
            max_group_size,
            policy,
            rng,
            spec.switch_overhead_s,
        )
    if best is None:
        return PlacementResult(PlacementStatus.RETRY, _retry_reason(job, spec, pools, index))
    cand, slowdown = best
    group = cand.summary.group if cand.summary else None
    placement = Placement(
        job_id=job.id,
        strategy=cand.strategy,
        group_id=group.id if group else None,
        rollout_nodes=cand.rollout,
        train_nodes=cand.train,
        new_nodes=cand.new_nodes,
    )
    where = f"group {group.id}" if group else "a new co-execution group"
    text = {
        Strategy.DIRECT_PACKING: f"direct packing into {where}",
        Strategy.ROLLOUT_SCALING: f"rollout scaling of {where} (+{cand.new_count} rollout nodes)",
        Strategy.NEW_GROUP: f"isolated in {where}",
    }[cand.strategy]
    return PlacementResult(
        PlacementStatus.FIT,
        f"{text}: +${cand.delta:.2f}/h, predicted slowdown {slowdown[job.id]:.2f}x",
        placement,
        cand.delta,
        slowdown,
    )


def _new_group_candidate(
    job: JobProfile, pools: dict[Pool, _FreePool], n_roll: int, n_train: int
) -> tuple[_Candidate, dict[str, float]] | None:
    roll = pools[Pool.ROLLOUT].take(n_roll)
    train = pools[Pool.TRAIN].take(n_train)
    if roll is None or train is None:
        return None
    delta = pools[Pool.ROLLOUT].cost(roll) + pools[Pool.TRAIN].cost(train)
    cand = _Candidate(
        delta,
        Strategy.NEW_GROUP,
        n_roll + n_train,
        job.t_solo_max_s,
        1 << 30,
        None,
        tuple(roll),
        tuple(train),
        tuple(roll + train),
    )
    return cand, {job.id: 1.0}


def _least_loaded(
    names: Iterable[str], s: _Summary, job: JobProfile, nodes: dict[str, Node]
) -> list[str]:
    """Return the group's nodes among `names` that may take the job: not cordoned and
    with residency room, least loaded first."""
    mem = job.host_mem_gb
    room = [
        x
        for x in names
        if not (n := nodes[x]).cordoned and s.mem.get(x, 0.0) + mem <= n.host_mem_gb + _EPS
    ]
    room.sort(key=lambda x: (s.load.get(x, 0.0), x))
    return room


def _rollmux(
    job: JobProfile,
    summaries: list[_Summary],
    nodes: dict[str, Node],
    pools: dict[Pool, _FreePool],
    n_roll: int,
    n_train: int,
    max_group_size: int,
    switch: float,
) -> tuple[_Candidate, dict[str, float]] | None:
    solo = job.t_solo_max_s
    own_tol = job.slo * solo
    t_train = job.t_train_max_s
    scale = job.time_scale
    cands: list[_Candidate] = []
    for order, s in enumerate(summaries):
        # 1. Skip empty, full and saturated groups (Algorithm 1, line 4), and groups
        #    with too few training nodes.
        if not s.size or s.size >= max_group_size or s.n_train < n_train:
            continue
        if s.t_load >= s.t_cycle:
            continue
        # 2. Cheap SLO lower bounds: the cycle can only grow, and the job's training
        #    lands at least on the least-loaded training node.
        tol = min(s.tolerance, own_tol) + _EPS
        t_cycle = max(s.t_cycle, solo)
        if t_cycle > tol or s.min_train_load + t_train > tol:
            continue
        g = s.group
        # 3. Training nodes: the least loaded with residency room.
        trains = _least_loaded(g.train_nodes, s, job, nodes)[:n_train]
        if len(trains) < n_train:
            continue
        bound = max(t_cycle, s.t_load, max(s.load[x] for x in trains) + t_train)
        if bound > tol:
            continue
        # Groups on another clock (time_scale) take no one; checked this late because
        # the bounds above drop most groups and this loop is the planner's hot path.
        if s.time_scale != scale:
            continue
        rooms = _least_loaded(g.rollout_nodes, s, job, nodes)
        room_set = set(rooms)
        # 4. Direct packing: an existing member's rollout nodes, or the least loaded.
        options: list[tuple[str, ...]] = []
        for m in g.members:
            if len(m.rollout_nodes) == n_roll and set(m.rollout_nodes) <= room_set:
                options.append(tuple(sorted(m.rollout_nodes)))
        if len(rooms) >= n_roll:
            options.append(tuple(sorted(rooms[:n_roll])))
        for rs in dict.fromkeys(options):
            lb = max(bound, max(s.load[x] for x in rs) + job.t_roll_max_s)
            if lb <= tol:
                cands.append(
                    _Candidate(0.0, Strategy.DIRECT_PACKING, 0, lb, order, s, rs, tuple(trains), ())
                )
        # 5. Rollout scaling: m new free rollout nodes + the least-loaded group ones.
        for m_new in range(1, n_roll + 1):
            keep = n_roll - m_new
            if len(rooms) < keep:
                continue
            fresh = pools[Pool.ROLLOUT].take(m_new)
            if fresh is None:
                break
            kept = rooms[:keep]
            lb = max(bound, max((s.load[x] for x in kept), default=0.0) + job.t_roll_max_s)
            if lb > tol:
                continue
            cands.append(
                _Candidate(
                    pools[Pool.ROLLOUT].cost(fresh),
                    Strategy.ROLLOUT_SCALING,
                    m_new,
                    lb,
                    order,
                    s,
                    tuple(kept) + tuple(fresh),
                    tuple(trains),
                    tuple(fresh),
                )
            )
    new = _new_group_candidate(job, pools, n_roll, n_train)
    if new is not None:
        cands.append(new[0])
    cands.sort(key=lambda c: (c.rank(), c.lower_bound, c.order))
    best: tuple[_Candidate, dict[str, float]] | None = None
    best_time = float("inf")
    for c in cands:
        if best is not None:
            if c.rank() > best[0].rank():
                break
            if c.lower_bound >= best_time - _EPS:
                break
        if c.summary is None:
            assert new is not None
            return new if best is None else best
        slow = _check_slo(c.summary.group, job, c.rollout, c.train, switch)
        if slow is None:
            continue
        t = slow[job.id] * solo
        if t < best_time - _EPS:
            best, best_time = (c, slow), t
    return best


def _check_slo(
    group: Group, job: JobProfile, rollout: tuple[str, ...], train: tuple[str, ...], switch: float
) -> dict[str, float] | None:
    """Return every member's predicted slowdown in G + job, or None if an SLO breaks."""
    members = group.members + (Member(job, rollout, train),)
    times = steady_iteration_times(members, switch_overhead_s=switch)
    t_cycle = max(m.job.t_solo_max_s for m in members)
    load: dict[str, float] = {}
    for m in members:
        for x in m.rollout_nodes:
            load[x] = load.get(x, 0.0) + m.job.t_roll_max_s
        for x in m.train_nodes:
            load[x] = load.get(x, 0.0) + m.job.t_train_max_s
    floor = max(t_cycle, max(load.values()))
    out: dict[str, float] = {}
    for m, t in zip(members, times, strict=True):
        t = max(t, floor)
        if t > m.job.slo * m.job.t_solo_max_s + _EPS:
            return None
        out[m.job.id] = t / m.job.t_solo_max_s
    # The joiner also waits for its turn in the meta-iteration in progress (see
    # scheduler.roundrobin): spread over its iterations, that must fit its SLO too.
    n = job.iterations
    t_new = out[job.id] * job.t_solo_max_s
    if t_new * (n + JOIN_ALLOWANCE_META_ITERATIONS) / n > job.slo * job.t_solo_max_s + _EPS:
        return None
    return out


def _predicted(
    group: Group | None,
    job: JobProfile,
    rollout: tuple[str, ...],
    train: tuple[str, ...],
    switch: float,
) -> dict[str, float]:
    members = (group.members if group else ()) + (Member(job, rollout, train),)
    times = steady_iteration_times(members, switch_overhead_s=switch)
    return {m.job.id: t / m.job.t_solo_max_s for m, t in zip(members, times, strict=True)}


def _baseline(
    job: JobProfile,
    summaries: list[_Summary],
    nodes: dict[str, Node],
    pools: dict[Pool, _FreePool],
    n_roll: int,
    n_train: int,
    max_group_size: int,
    policy: str,
    rng: random.Random | None,
    switch: float,
) -> tuple[_Candidate, dict[str, float]] | None:
    """Place by the paper's simulation baselines: capacity and residency only, no SLO."""
    feasible: list[tuple[float, _Summary, list[str], list[str], int]] = []
    for order, s in enumerate(summaries):
        g = s.group
        if not g.members or len(g.members) >= max_group_size or len(g.train_nodes) < n_train:
            continue
        if s.time_scale != job.time_scale:
            continue
        trains = _least_loaded(g.train_nodes, s, job, nodes)
        rolls = _least_loaded(g.rollout_nodes, s, job, nodes)
        if len(trains) < n_train:
            continue
        short = max(0, n_roll - len(rolls))
        if short and pools[Pool.ROLLOUT].take(short) is None:
            continue
        busy = sum(s.load.values())
        t_meta = max(s.t_cycle, s.t_load)
        idle = 1.0 - busy / (len(s.load) * t_meta) if t_meta > 0 else 1.0
        feasible.append((idle, s, rolls, trains, order))
    if not feasible:
        return _new_group_candidate(job, pools, n_roll, n_train)
    if policy == "random":
        assert rng is not None
        _, s, rolls, trains, order = feasible[rng.randrange(len(feasible))]
        trains = rng.sample(trains, n_train)
        rolls = rng.sample(rolls, min(n_roll, len(rolls)))
    else:
        _, s, rolls, trains, order = max(feasible, key=lambda f: (f[0], -f[4]))
        trains = trains[:n_train]
        rolls = rolls[:n_roll]
    fresh = pools[Pool.ROLLOUT].take(n_roll - len(rolls)) or []
    strategy = Strategy.ROLLOUT_SCALING if fresh else Strategy.DIRECT_PACKING
    rollout = tuple(rolls) + tuple(fresh)
    cand = _Candidate(
        pools[Pool.ROLLOUT].cost(fresh),
        strategy,
        len(fresh),
        0.0,
        order,
        s,
        rollout,
        tuple(trains),
        tuple(fresh),
    )
    slow = _predicted(s.group, job, rollout, tuple(trains), switch)
    return cand, slow


# ---------------------------------------------------------------------------
# State transitions
# ---------------------------------------------------------------------------


def apply_placement(
    state: ClusterState, job: JobProfile, placement: Placement, *, group_id: str
) -> ClusterState:
    """Return `state` with `job` placed; `group_id` names a new group (ignored when joining).

    Raises ValueError when the placement uses a node another group holds or a cordoned
    node, names an unknown group, joins a group on another clock (time_scale), or breaks
    residency on a node.
    """
    spec = state.spec
    derived = _derive(state)
    known = _node_index(state.nodes).nodes
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
    if job.id in derived.job_ids:
        raise ValueError(f"job {job.id!r} is already placed in a co-execution group")
    target = placement.group_id
    position = -1
    own: set[str] = set()
    if target is not None:
        for i, summary in enumerate(derived.summaries):
            if summary.group.id == target:
                position, own = i, set(summary.load)
                break
        else:
            raise ValueError(f"unknown group {target!r}")
        scale = derived.summaries[position].time_scale
        if scale != job.time_scale:
            theirs = "mixed time_scales" if scale is None else f"time_scale {scale:g}"
            raise ValueError(
                f"job {job.id!r} has time_scale {job.time_scale:g}; group {target!r} runs "
                f"{theirs} (a group's members share one clock)"
            )
    for name in wanted:
        if name in derived.taken and name not in own:
            holder = next(x.group.id for x in derived.summaries if name in x.load)
            raise ValueError(f"node {name!r} belongs to group {holder!r}, not to {target!r}")
    member = Member(job, tuple(placement.rollout_nodes), tuple(placement.train_nodes))
    summaries = list(derived.summaries)
    if target is None:
        if any(x.group.id == group_id for x in derived.summaries):
            raise ValueError(f"group id {group_id!r} is already in use")
        group = Group(group_id, member.rollout_nodes, member.train_nodes, (member,))
        _check_residency(group, {x: node(x) for x in group.all_nodes})
        groups = state.groups + (group,)
        summaries.append(_summary(group))
    else:
        g = state.groups[position]
        rollout = g.rollout_nodes + tuple(
            x for x in member.rollout_nodes if x not in g.rollout_nodes
        )
        train = g.train_nodes + tuple(x for x in member.train_nodes if x not in g.train_nodes)
        group = Group(g.id, rollout, train, g.members + (member,))
        _check_residency(group, {x: node(x) for x in group.all_nodes})
        groups = state.groups[:position] + (group,) + state.groups[position + 1 :]
        summaries[position] = _summary(group)
    child = replace(state, nodes=state.nodes + tuple(added), groups=groups)
    newly = set(wanted)
    free = {p: [n for n in v if n.name not in newly] for p, v in derived.free.items()}
    _remember(child, _Derived(summaries, derived.taken | newly, derived.job_ids | {job.id}, free))
    return child


def _check_residency(group: Group, nodes: dict[str, Node]) -> None:
    mem: dict[str, float] = {}
    for m in group.members:
        for x in m.rollout_nodes + m.train_nodes:
            mem[x] = mem.get(x, 0.0) + m.job.host_mem_gb
    for x, used in mem.items():
        if used > nodes[x].host_mem_gb + _EPS:
            raise ValueError(
                f"residency broken on node {x!r}: {used:g} GB pinned, "
                f"{nodes[x].host_mem_gb:g} GB host memory"
            )


def remove_job(state: ClusterState, job_id: str) -> tuple[ClusterState, tuple[str, ...]]:
    """Return `state` without `job_id` and the nodes released (no member uses them any more).

    A group left without members releases all its nodes and disappears.
    """
    derived = _derive(state)
    if job_id not in derived.job_ids:
        raise KeyError(f"job {job_id!r} is in no co-execution group")
    i = next(k for k, x in enumerate(derived.summaries) if job_id in x.job_ids)
    g = state.groups[i]
    members = tuple(m for m in g.members if m.job.id != job_id)
    used: set[str] = set()
    for m in members:
        used.update(m.rollout_nodes)
        used.update(m.train_nodes)
    released = tuple(x for x in g.all_nodes if x not in used)
    summaries = list(derived.summaries)
    if members:
        group = Group(
            g.id,
            tuple(x for x in g.rollout_nodes if x in used),
            tuple(x for x in g.train_nodes if x in used),
            members,
        )
        groups = state.groups[:i] + (group,) + state.groups[i + 1 :]
        summaries[i] = _summary(group)
    else:
        groups = state.groups[:i] + state.groups[i + 1 :]
        del summaries[i]
    child = replace(state, groups=groups)
    index = _node_index(state.nodes)
    free = {p: list(v) for p, v in derived.free.items()}
    back = False
    for x in released:
        n = index.nodes[x]
        if not n.cordoned:  # a released cordoned node stays out of the free pool
            free[n.pool].append(n)
            back = True
    if back:
        for nodes in free.values():
            nodes.sort(key=lambda n: index.position[n.name])
    gone = set(released)
    _remember(child, _Derived(summaries, derived.taken - gone, derived.job_ids - {job_id}, free))
    return child, released


def group_cost_per_hour(group: Group, nodes: dict[str, Node]) -> float:
    """Return Cost(G): the summed hourly price of the group's nodes."""
    return sum(nodes[x].price_per_hour for x in group.all_nodes)


def gpu_type_of(spec: ClusterSpec, pool: Pool) -> GpuType:
    """Return the GPU type of `pool` (convenience for callers formatting reasons)."""
    return spec.gpu_type(pool)
