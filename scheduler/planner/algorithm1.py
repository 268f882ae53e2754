"""Algorithm 1 of the paper (section 4): place a job at the least marginal cost.

The paper's SCHEDULE(j, {G_i}) (paper-notes.md section 4; its lines 4 and 7 are the
notes' reconstruction), numbered as the notes number it:

    1  SCHEDULE(j, {G_i}):
    2    Δ* ← ∞; G* ← None; P* ← None
    3    for G in {G_i}:
    4       if T_G^load ≥ T_G^cycle: continue                    # skip saturated groups
    5       for P_j in GENERATEPLACEMENTS(G):                    # direct packing + rollout scaling
    6          if j.mem_req ≥ min_{node∈P_j} node.mem_avail: continue      # residency
    7          if ∃k∈G∪{j}: T_k^co-exec(G∪{(j,P_j)}) > SLO_k·T_k^solo: continue  # SLO
    8          Δ ← Cost(G∪{(j,P_j)}) − Cost(G)
    9          if Δ < Δ*: (Δ*,G*,P*) ← (Δ,G,P_j)
   10    Δ ← Cost({j},{})                                        # a new (isolated) group
   11    if Δ < Δ*: (Δ*,G*,P*) ← (Δ,{j},{})
   12    return G*, P*

Here: `GroupOptions` is lines 3-4 plus cheap lower bounds of line 7 and the choice
of training nodes, and GENERATEPLACEMENTS (line 5) for one group: its direct packings
and rollout scalings, which already respect residency (line 6: only nodes with room
are offered) and carry Δ (line 8: the price of the free nodes they take);
`candidates` asks it of every group; `new_group_candidate` is line 10;
`choose` runs lines 7, 9 and 11 over the candidates in cost order, simulating a
meta-iteration (`check_slo`) only for those that can still win. The decisions where
the paper is silent are listed in scheduler.planner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.cluster import node_name
from scheduler.model import ClusterSpec, JobProfile, Member, Node, Pool, Strategy
from scheduler.planner.index import TRAIN_MEM_RANKS, GroupBounds, GroupSummary
from scheduler.planner.memo import keeping
from scheduler.planner.slo_checks import (
    EPS,
    JOIN_ALLOWANCE_META_ITERATIONS,
    check_slo,
    join_window_holds,
    profile_shape,
)
from scheduler.slo import (
    DEFAULT_SLO_MARGIN,
    DEFAULT_TIGHT_SLACK,
)
from scheduler.stochastic import slo_probabilities

# The position of a new group in the last tie-break: after every existing group.
NEW_GROUP_ORDER = 1 << 30


class FreePool:
    """Free nodes of one pool that can hold the job's residency, in state order.

    The free nodes are scanned for room only as far as the decision asks (`take`); a
    decision takes a few nodes of a pool that may have thousands free, so building the
    whole list (`fit`, `price`) is left to the callers that need it.
    """

    def __init__(
        self,
        *,
        spec: ClusterSpec,
        pool: Pool,
        size: int,
        free: Sequence[Node],
        in_use: Callable[[str], bool],
        mem: float,
    ) -> None:
        self.spec = spec
        self.pool = pool
        self.unbounded = spec.gpu_type(pool).nodes is None
        self.size = size  # nodes of the pool in the state: minted numbering starts there
        self.free_total = len(free)
        self.in_use = in_use  # is a name taken: minted names must differ
        self._free = free
        self._mem = mem
        self._scanned = 0  # free nodes looked at so far
        self._head: list[Node] = []  # the free nodes with room among them, in order
        self.minted_price: dict[str, float] = {}  # names minted for an unbounded pool
        self._taken_price: dict[str, float] = {}  # every name `take` returned
        self._minted: list[str] = []
        # `take`'s answer per count: a function of the count alone (the fitting nodes'
        # prefix, then the minted names' prefix, both only ever extended), and every
        # joinable group of a decision asks for the same few counts
        self._takes: dict[int, tuple[str, ...] | None] = {}
        self._priced: dict[int, tuple[tuple[str, ...], float] | None] = {}  # `take_priced`'s

    def _fitting(self, count: int) -> list[Node]:
        """Return the first `count` free nodes with room (fewer when there are not so many)."""
        free, mem, head = self._free, self._mem, self._head
        while len(head) < count and self._scanned < len(free):
            n = free[self._scanned]
            self._scanned += 1
            if n.host_mem_gb + EPS >= mem:
                head.append(n)
        return head[:count]

    @property
    def fit(self) -> list[Node]:
        """The free nodes with room for the job's residency, in state order."""
        free, mem = self._free, self._mem
        if self._scanned < len(free):  # the rest at once
            self._head += [n for n in free[self._scanned :] if n.host_mem_gb + EPS >= mem]
            self._scanned = len(free)
        return list(self._head)

    @property
    def price(self) -> dict[str, float]:
        """The hourly price of every node this pool may offer (free with room, minted)."""
        return {n.name: n.price_per_hour for n in self.fit} | self.minted_price

    def take(self, count: int) -> list[str] | None:
        """Return the names of the first `count` free nodes that fit, minting if unbounded."""
        if count in self._takes:
            kept = self._takes[count]
            return None if kept is None else list(kept)
        names = self._take(count)
        self._takes[count] = None if names is None else tuple(names)
        return names

    def _take(self, count: int) -> list[str] | None:
        nodes = self._fitting(count)
        for n in nodes:
            self._taken_price[n.name] = n.price_per_hour
        names = [n.name for n in nodes]
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
                self.minted_price[name] = gt.node_price_per_hour
                self._taken_price[name] = gt.node_price_per_hour
            names += self._minted[: count - len(names)]
        return names

    def cost(self, names: Sequence[str]) -> float:
        """Return the summed hourly price of `names` (nodes this pool offered)."""
        return sum(self._taken_price[x] for x in names)

    def take_priced(self, count: int) -> tuple[tuple[str, ...], float] | None:
        """Return `take(count)` and its `cost`, kept per count: rollout scaling asks both
        for every joinable group of a decision."""
        if count not in self._priced:
            names = self.take(count)
            self._priced[count] = None if names is None else (tuple(names), self.cost(names))
        return self._priced[count]


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One placement P_j of Algorithm 1 (line 5 or 10) with what ranks it."""

    strategy: Strategy
    delta: float  # marginal $/h: the price of the nodes it takes from the free pool
    new_count: int  # nodes it takes from the free pool
    lower_bound: float  # lower bound of the new job's worst-case iteration time
    order: int  # position of the group in state.groups (last tie-break)
    summary: GroupSummary | None  # the group joined; None for a new group
    rollout: tuple[str, ...]
    train: tuple[str, ...]
    new_nodes: tuple[str, ...]

    def rank(self) -> tuple[float, int, int]:
        """Return the cost order: least $/h, then direct packing, then fewer new nodes."""
        return (
            round(self.delta, 6),
            0 if self.strategy is Strategy.DIRECT_PACKING else 1,
            self.new_count,
        )


# A chosen candidate and every member's predicted slowdown in the resulting group.
Choice = tuple[Candidate, dict[str, float]]


@dataclass(frozen=True, kw_only=True)
class Request:
    """What every step of one decision reads: the job, its node counts, the free pools."""

    job: JobProfile
    n_roll: int
    n_train: int
    nodes: Mapping[str, Node]  # the state's nodes by name
    pools: Mapping[Pool, FreePool]
    switch_overhead_s: float
    max_group_size: int
    prune_saturated: bool = True  # line 4; False leaves the SLO check alone to decide
    slo_margin: float | None = DEFAULT_SLO_MARGIN  # scheduler.slo; None: worst case alone
    # tight-SLO members: worst case against the expected solo window (scheduler.slo); 0: never
    tight_slack: float = DEFAULT_TIGHT_SLACK
    # refuse a placement that gives a member a lower probability of meeting its SLO
    # (scheduler.stochastic); None: not checked
    min_slo_probability: float | None = None
    # the hourly price of every node of the state by name (PlannerIndex's); None: read
    # from `nodes`
    node_prices: Mapping[str, float] | None = None
    # the state's summaries' cheap bounds as arrays (PlannerIndex's `group_bounds`), for
    # `candidates` to skip the groups they rule out in one pass; None: checked one by one
    bounds: GroupBounds | None = None
    # the largest host memory of a training node of the state (NodeIndex's `biggest_mem`),
    # for `candidates` to skip the groups whose training nodes cannot all have room for
    # the job; None: not checked up front
    train_mem_max: float | None = None


def least_loaded(
    names: Iterable[str], s: GroupSummary, job: JobProfile, nodes: Mapping[str, Node]
) -> list[str]:
    """Return the group's nodes among `names` that may take the job: not cordoned and
    with residency room (line 6), least loaded first."""
    mem = job.host_mem_gb
    room = [
        x
        for x in names
        if not (n := nodes[x]).cordoned and s.mem.get(x, 0.0) + mem <= n.host_mem_gb + EPS
    ]
    room.sort(key=lambda x: (s.load.get(x, 0.0), x))
    return room


# The relative slack a lower bound of a group's iteration time gives up before it rules
# a join out: the recursion it bounds (scheduler.meta_iteration) sums the same phases in
# another order and over many rounds, so the two may differ in their last bits.
BOUND_SLACK = 1e-9


def ruled_out(job: JobProfile, t: float, tolerance: float) -> bool:
    """Return True when `t`, a lower bound of the job's worst-case iteration time in a
    group, rules the join out: past the group's SLO window with the job (`tolerance`,
    EPS included: `GroupOptions.tolerance`) or the job's own with its join allowance
    (`join_window_holds`). Both checks are monotone: what a lower bound fails, the
    check (`check_slo`) fails."""
    return t > tolerance or not join_window_holds(job, t)


def switched_bound(
    s: GroupSummary, job: JobProfile, nodes: Iterable[str], default_s: float
) -> float:
    """Return a lower bound of the worst-case iteration time of G + `job` when the job is
    pinned to `nodes` of the group (-inf: none is shared), less `BOUND_SLACK`.

    Every member runs one rollout and one training per meta-iteration, one after the
    other; a phase whose node ran another member's phase last starts with a switch
    (scheduler.meta_iteration). On a node two members share, each phase follows the other
    member's, so each of them (the job too) switches at least once per meta-iteration:
    the meta-iteration is at least its solo time plus its switch overhead
    (`GroupSummary.switching`; `default_s`: the overhead of a member with none measured).
    """
    bound = float("-inf")
    shared = False
    switching = s.switching
    for x in nodes:
        hit = switching.get(x)
        if hit is not None:
            shared = True
            bound = max(bound, hit[0] + default_s, hit[1])
    if not shared:
        return bound
    bound = max(bound, job.t_solo_max_s + job.switch_overhead(default_s))
    return bound - bound * BOUND_SLACK


def switched_floor(req: Request, b: GroupBounds) -> np.ndarray:
    """Return, per group of `b`, a lower bound of `switched_bound` for the job of `req`
    (one training node at least), whichever of the group's training nodes it gets: the
    least of theirs (`GroupBounds.train_solo_floor`) plus the switch overhead, and the
    job's own solo time plus its switch overhead where every training node is shared
    (`GroupBounds.trains_used`); less `BOUND_SLACK` (-inf: no bound)."""
    job, sw = req.job, req.switch_overhead_s
    own = np.where(b.trains_used > 0.0, job.t_solo_max_s + job.switch_overhead(sw), -np.inf)
    floor = np.maximum(b.train_solo_floor + sw, own)
    with np.errstate(invalid="ignore"):  # (-inf - -inf: the branch not taken)
        out: np.ndarray = np.where(np.isneginf(floor), floor, floor - floor * BOUND_SLACK)
    return out


def _with_room(
    ordered: tuple[str, ...], s: GroupSummary, mem: float, nodes: Mapping[str, Node], limit: int
) -> list[str]:
    """Return `least_loaded` of a group's nodes from their presorted order
    (`GroupSummary.train_by_load` / `rollout_by_load`): the same filter, the order kept,
    at most `limit` of them."""
    room: list[str] = []
    smem = s.mem
    for x in ordered:
        n = nodes[x]
        if not n.cordoned and smem.get(x, 0.0) + mem <= n.host_mem_gb + EPS:
            room.append(x)
            if len(room) >= limit:
                break
    return room


# Entries a group's summary keeps of its joiners' options (`kept_options`).
JOINER_OPTIONS_LIMIT = 256


class JoinerKey:
    """What `kept_options` reads of a decision's job and request but the job's iterations
    and the state's nodes and free pools, as a key whose hash is computed once per
    decision (every group of the decision is looked up with it)."""

    __slots__ = ("_hash", "value")

    def __init__(self, req: Request) -> None:
        self.value = (
            profile_shape(req.job),
            req.n_roll,
            req.n_train,
            req.switch_overhead_s,
            req.max_group_size,
            req.prune_saturated,
        )
        self._hash = hash(self.value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JoinerKey) and (self is other or self.value == other.value)


class GroupOptions:
    """What one group offers a joiner (lines 4-5), but what reads the joiner's iterations.

    The steps, in order: skip empty, full and saturated groups, groups with too few
    training nodes (the paper scales only the rollout pool) and co-located groups
    (scheduler.planner.colocated); the cheap lower bounds of line 7 (the cycle can only
    grow, and the job's training lands at least on the least-loaded training node); the
    training nodes, the least loaded with residency room, and the bound they give; the
    switches the job's training nodes make (`switched_bound`: most joins that pass the
    bounds before fail here, not after a recursion); the group's clock (`time_scale`).
    Then the direct packings (Δ = 0: an existing member's rollout-node set of the job's
    size, or the job's count of the least-loaded rollout nodes with room) and the rollout
    scalings (m = 1..N_R new free rollout nodes plus the N_R - m least-loaded group
    rollout nodes with room, training nodes shared), each with its lower bound.

    Kept: the three bounds `ruled_out` is asked about (`firsts`; None when the group
    cannot take the joiner whatever its iterations), the window (`tolerance`), the
    training nodes chosen, each candidate's nodes and lower bound (`direct`:
    rollout nodes; `scaling`: new nodes and the group's nodes kept), and the state's nodes
    of the group read (`nodes`: their room and cordons). `candidates` asks `ruled_out` at
    the job's iterations and takes the new nodes from the request's free pool.

    `early` (a decision that keeps nothing: the live planner's) stops at the first bound
    `ruled_out` rejects for the request's job, so a group it rules out costs no more;
    such options hold for that job's iterations only and are not kept (`kept_options`
    makes them whole).
    """

    __slots__ = (
        "direct",
        "firsts",
        "names",
        "nodes",
        "scaling",
        "tolerance",
        "trains",
    )

    def __init__(self, s: GroupSummary, req: Request, *, early: bool = False) -> None:
        # the state's nodes of the group, which `holds` compares by identity (none for
        # `early` options: they are never kept, so never asked whether they hold)
        self.names = () if early else s.group.all_nodes
        self.nodes = tuple([req.nodes.get(x) for x in self.names])
        self.firsts: tuple[float, float, float] | None = None
        self.tolerance = 0.0
        self.trains: tuple[str, ...] = ()
        self.direct: list[tuple[tuple[str, ...], float]] = []
        self.scaling: list[tuple[int, tuple[str, ...], float]] = []
        # (no `Candidate` is kept here: a candidate names its summary, which keeps these
        # options, and that cycle outlived its group while the simulator pauses the
        # cyclic collector: `candidates` makes them at each ask)
        job = req.job
        solo = job.t_solo_max_s
        t_train = job.t_train_max_s
        # the steps (the class docstring), `ruled_out` asked only when `early`
        if not s.size or s.size >= req.max_group_size or s.n_train < req.n_train:
            return
        if not s.group.rollout_nodes:  # a co-located group
            return
        if req.prune_saturated and s.t_load >= s.t_cycle:
            return
        # (the job's own window also carries its join allowance: `ruled_out`)
        tol = min(s.tolerance, job.slo * solo) + EPS
        t_cycle = max(s.t_cycle, solo)
        first = max(t_cycle, s.min_train_load + t_train)
        if early and ruled_out(job, first, tol):
            return
        trains = _with_room(s.train_by_load, s, job.host_mem_gb, req.nodes, req.n_train)
        if len(trains) < req.n_train:
            return
        bound = max(t_cycle, s.t_load, max(s.load[x] for x in trains) + t_train)
        if early and ruled_out(job, bound, tol):
            return
        switched = switched_bound(s, job, trains, req.switch_overhead_s)
        if early and ruled_out(job, switched, tol):
            return
        # groups on another clock take no one (checked this late: the bounds before drop
        # most groups, and this runs for every group of every decision)
        if s.time_scale != job.time_scale:
            return
        self.firsts = (first, bound, switched)
        self.tolerance = tol
        self.trains = tuple(trains)
        rooms = _with_room(
            s.rollout_by_load, s, job.host_mem_gb, req.nodes, len(s.group.rollout_nodes)
        )
        # the direct packings' rollout nodes and bounds
        n_roll = req.n_roll
        room_set = set(rooms)
        options: list[tuple[str, ...]] = []
        for m in s.group.members:
            if len(m.rollout_nodes) == n_roll and set(m.rollout_nodes) <= room_set:
                options.append(tuple(sorted(m.rollout_nodes)))
        if len(rooms) >= n_roll:
            options.append(tuple(sorted(rooms[:n_roll])))
        for rs in dict.fromkeys(options):
            lb = max(bound, max(s.load[x] for x in rs) + job.rollout_pool_max_s)
            self.direct.append((rs, lb))
        # the rollout scalings' counts of new nodes, the group's nodes kept, and bounds
        for m_new in range(1, n_roll + 1):
            keep = n_roll - m_new
            if len(rooms) < keep:
                continue
            kept = tuple(rooms[:keep])
            lb = max(bound, max((s.load[x] for x in kept), default=0.0) + job.rollout_pool_max_s)
            self.scaling.append((m_new, kept, lb))

    def holds(self, req: Request) -> bool:
        """Return True when the state's nodes of the group are those read (by identity)."""
        nodes = req.nodes
        return all(nodes.get(x) is n for x, n in zip(self.names, self.nodes, strict=True))

    def candidates(self, req: Request, s: GroupSummary, order: int) -> list[Candidate]:
        """Return the group's candidates for the job of `req` (the group at `order`): those
        its iterations' bounds leave, the new nodes from the request's free pool."""
        firsts = self.firsts
        if firsts is None:
            return []
        job, tol = req.job, self.tolerance
        first, bound, switched = firsts
        if (
            ruled_out(job, first, tol)
            or ruled_out(job, bound, tol)
            or ruled_out(job, switched, tol)
        ):
            return []
        trains = self.trains
        out = [
            Candidate(
                strategy=Strategy.DIRECT_PACKING,
                delta=0.0,
                new_count=0,
                lower_bound=lb,
                order=order,
                summary=s,
                rollout=rs,
                train=trains,
                new_nodes=(),
            )
            for rs, lb in self.direct
            if not ruled_out(job, lb, tol)
        ]
        free = req.pools[Pool.ROLLOUT]
        for m_new, kept, lb in self.scaling:
            taken = free.take_priced(m_new)
            if taken is None:
                break
            if ruled_out(job, lb, tol):
                continue
            fresh, delta = taken
            out.append(
                Candidate(
                    strategy=Strategy.ROLLOUT_SCALING,
                    delta=delta,
                    new_count=m_new,
                    lower_bound=lb,
                    order=order,
                    summary=s,
                    rollout=kept + fresh,
                    train=trains,
                    new_nodes=fresh,
                )
            )
        return out


def kept_options(req: Request, s: GroupSummary, key: JoinerKey) -> GroupOptions:
    """Return the group's `GroupOptions` for the joiner `key` of `req`, kept on its summary
    (`GroupSummary.joiner_options`) while the state's nodes of the group are the same."""
    kept = s.joiner_options
    options = kept.get(key)
    if not isinstance(options, GroupOptions) or not options.holds(req):
        options = GroupOptions(s, req)
        if len(kept) < JOINER_OPTIONS_LIMIT or key in kept:
            kept[key] = options
    return options


def new_group_candidate(req: Request) -> Choice | None:
    """Return the isolated group of line 10 (None when the free pools cannot hold it)."""
    job = req.job
    roll = req.pools[Pool.ROLLOUT].take(req.n_roll)
    train = req.pools[Pool.TRAIN].take(req.n_train)
    if roll is None or train is None:
        return None
    cand = Candidate(
        strategy=Strategy.NEW_GROUP,
        delta=req.pools[Pool.ROLLOUT].cost(roll) + req.pools[Pool.TRAIN].cost(train),
        new_count=req.n_roll + req.n_train,
        lower_bound=job.t_solo_max_s,
        order=NEW_GROUP_ORDER,
        summary=None,
        rollout=tuple(roll),
        train=tuple(train),
        new_nodes=tuple(roll + train),
    )
    return cand, {job.id: 1.0}


def candidates(req: Request, summaries: Sequence[GroupSummary]) -> list[Candidate]:
    """Return GENERATEPLACEMENTS over every group (lines 3-6), unranked."""
    out: list[Candidate] = []
    job = req.job
    solo, t_train = job.t_solo_max_s, job.t_train_max_s
    slo_solo = job.slo * solo
    orders: Iterable[int] = range(len(summaries))
    b = req.bounds
    vectorised = b is not None and len(b.t_cycle) == len(summaries)
    if b is not None and vectorised:
        # `GroupOptions`' cheap bounds, vectorised (the same floating-point operations):
        # only the groups they keep are looked at
        tol_v = np.minimum(b.tolerance, slo_solo) + EPS
        cycle, least = np.maximum(b.t_cycle, solo), b.min_train_load + t_train
        keep = (cycle <= tol_v) & (least <= tol_v)
        # ... and the joiner's window with its join allowance (`join_window_holds`,
        # elementwise: the same operations in the same order)
        n = job.iterations
        keep &= np.maximum(cycle, least) * (n + JOIN_ALLOWANCE_META_ITERATIONS) / n <= (
            slo_solo + EPS
        )
        # ... and `GroupOptions`' first step (members, size, training nodes, rollout nodes,
        # saturation), the same comparisons of the same numbers
        keep &= (b.takes > 0.0) & (b.size < req.max_group_size) & (b.n_train >= req.n_train)
        if req.prune_saturated:
            keep &= b.saturated == 0.0
        if req.train_mem_max is not None and req.n_train >= 1:
            # ... and its step 3's room (`_with_room`): the job needs n_train training nodes
            # each with `pinned + its memory <= the node's + EPS`, so the n_train-th least
            # pinned (the `TRAIN_MEM_RANKS`-th for more) must fit the largest node so
            # (sums and comparisons round monotonically): a group past that has none
            k = min(req.n_train, TRAIN_MEM_RANKS)
            keep &= b.train_mem(k) + job.host_mem_gb <= req.train_mem_max + EPS
        if req.n_train >= 1:
            # ... and `switched_bound`, whichever training nodes the job gets
            switched = switched_floor(req, b)
            keep &= (switched <= tol_v) & (
                switched * (n + JOIN_ALLOWANCE_META_ITERATIONS) / n <= slo_solo + EPS
            )
        free = req.pools[Pool.ROLLOUT]
        if not free.unbounded and free.take(req.n_roll) is None:
            # no rollout scaling onto new nodes only (the pool has too few): every candidate
            # keeps a group rollout node, so its bound is at least the least-loaded one's
            # load plus the job's rollout (a group past that yields none; a waiting job's
            # decision on a full pool skips them all here)
            keep &= b.min_rollout_load + job.rollout_pool_max_s <= tol_v
        orders = np.flatnonzero(keep).tolist()
    # With a memo open, what a group offers the joiner but for its iterations is kept on
    # the group's summary (`kept_options`): a job asked about departure after departure
    # finds the groups that did not change as they were (the same candidates)
    key = JoinerKey(req) if keeping() and req.n_roll >= 1 and req.n_train >= 1 else None
    for order in orders:
        s = summaries[order]
        # the options' cheap bounds first, inline: they drop most groups (the loop runs
        # over every group for every decision); `GroupOptions` checks them again (the
        # vectorised pass made the same comparisons already)
        if not vectorised:
            tol = min(s.tolerance, slo_solo) + EPS
            if max(s.t_cycle, solo) > tol or s.min_train_load + t_train > tol:
                continue
        options = kept_options(req, s, key) if key is not None else GroupOptions(s, req, early=True)
        out += options.candidates(req, s, order)
    return out


def choose(req: Request, summaries: Sequence[GroupSummary]) -> Choice | None:
    """Return Algorithm 1's choice for the job (None: nothing fits now).

    Candidates are tried in rank order (least $/h, direct packing first, fewer new
    nodes), then by the lower bound of the job's iteration time, then by group
    position. Among candidates of the best rank the job's lowest predicted iteration
    time wins; the lower bounds stop the search as soon as no later candidate can.
    """
    job = req.job
    cands = candidates(req, summaries)
    new = new_group_candidate(req)
    if new is not None:
        cands.append(new[0])
    cands.sort(key=lambda c: (c.rank(), c.lower_bound, c.order))
    best: Choice | None = None
    best_time = float("inf")
    for c in cands:
        if best is not None:
            if c.rank() > best[0].rank():
                break
            if c.lower_bound >= best_time - EPS:
                break
        if c.summary is None:  # the new group (line 11): SLO 1.0x by construction
            assert new is not None
            return new if best is None else best
        slow = check_slo(
            c.summary.group,
            job,
            c.rollout,
            c.train,
            switch_overhead_s=req.switch_overhead_s,
            slo_margin=req.slo_margin,
            tight_slack=req.tight_slack,
        )
        if slow is None:  # line 7: pruned (the paper's "infinite cost")
            continue
        if req.min_slo_probability is not None:
            members = c.summary.group.members + (Member(job, c.rollout, c.train),)
            p = slo_probabilities(members, switch_overhead_s=req.switch_overhead_s)
            if min(p.values()) < req.min_slo_probability:
                continue
        t = slow[job.id] * job.t_solo_max_s
        if t < best_time - EPS:
            best, best_time = (c, slow), t
    return best
