"""Intra-group scheduler: the round-robin meta-iteration (paper section 3).

Two things live here and share one set of rules:

* `GroupRuntime`, the event-driven state machine that BOTH the simulator and the
  live (Celery) controller drive: `admit`, `start_ready`, `finish`, `remove`.
* `plan_meta_iteration`, the constant-cost planning simulation Algorithm 1 runs on a
  candidate group with worst-case (max) phase durations.

Round-robin rule (how it deviates from a bare per-node FIFO, and why)
--------------------------------------------------------------------
Every node has a queue, and a phase starts only when ALL its nodes are idle and it is
at the head of each of their queues (multi-node phases are gang-scheduled). The
queues are ordered by a global key ``(meta_iteration, admission index)`` rather than
by arrival time, and the head of a pool must be the smallest key of *every* member
that still has a phase to run on that pool (not only the ones already queued). With
one rollout node and one training node this is exactly the paper's FIFO behaviour
(Roll_A -> Roll_B on the rollout pool, Train_A -> Train_B on the training pool, A's
training overlapping B's rollout). With members pinned to *different* rollout nodes
a bare FIFO would let a short job lap a long one (two of its iterations inside one
of the long job's), which breaks "every member runs exactly one rollout and one
training per meta-iteration" and makes the long job's training wait behind phases
the planner never accounted for. The key order keeps the meta-iteration exact and
the planner's prediction honest. It cannot deadlock: ordering every future phase by
``(meta_iteration, rollout before training, admission index)`` is a topological
order of all constraints (job order, pool order, node order), so its first element
can always start once the phases running now finish.

API notes (beyond the contract)
-------------------------------
* ``admit(member, iterations=N, start_iteration=k)``: N is the job's TOTAL
  iteration count; it runs iterations k..N-1 (a resubmitted job resumes at k).
* ``PhaseStart`` also carries ``meta_iteration`` (the group round) and
  ``first_on_pool`` (first phase of the job on that pool since admission: its
  training state loads cold there even though ``cold`` is only the first phase).
* ``FinishResult`` fields: job_id, kind, iteration, freed_nodes, done, removed,
  next_kind, next_iteration. ``finish`` raises ValueError for a phase that is not
  running; ``remove`` raises KeyError for an unknown job.
* ``queued()`` returns QueuedPhase records in start order; ``node_queues()`` the
  per-node view; ``last_job(node)`` who ran last (warm-start bookkeeping).
* ``simulate_round_robin`` and ``steady_iteration_times`` expose the planning
  recursion (used by the planner; the simulator may use it for drawn durations).

A member admitted mid-run joins the meta-iteration in progress: its rollout is the
last rollout of the current meta-iteration that has started (so it can start at
once if its nodes are idle) and its training the last training of that
meta-iteration. The planner's guarantee is on the steady-state iteration time (the paper's
T_co-exec); the joiner's first meta-iteration can wait for its turn (measured worst
case over 3,000 random joins with worst-case durations: 1.2 x T_meta in total),
which only shows in the mean of jobs with very few iterations; the planner adds
that allowance to the joiner's SLO check (planner.JOIN_ALLOWANCE_META_ITERATIONS).

`plan_meta_iteration` computes the same schedule with the max-plus recursion
``start = max(job's previous phase finished, its nodes free, previous phase of the
pool order started)`` and takes its exact growth rate per meta-iteration: the
recursion is run until it turns periodic (x(r) = x(r-c) + c*T_meta for every state
variable, usually within a few rounds), with Karp's maximum cycle mean of the
round's max-plus matrix as the fallback. Measuring a fixed window instead
under-estimated T_meta by up to 10% on long transients. The paper's closed form
max(T_cycle, T_load) (+ switch overhead) is a lower bound of it, equal in the
common cases and exceeded (in ~2% of random multi-node groups) when phases on
different rollout nodes cannot all hide in the bottleneck's bubbles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from scheduler.model import Group, JobProfile, Member, PhaseKind, Pool

# Default number of meta-iterations simulate_round_robin runs.
PLAN_META_ITERATIONS = 10


# ---------------------------------------------------------------------------
# Planning: one meta-iteration with worst-case durations
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MetaIteration:
    """Predicted steady state of a co-execution group with worst-case durations."""

    t_cycle: float  # max_j T_j^solo
    t_load: float  # summed phase time on the bottleneck node
    t_meta: float  # steady-state meta-iteration length (switch overhead included)
    iteration_time: dict[str, float]  # per member, switch overhead included
    slowdown: dict[str, float]  # iteration_time / t_solo_max_s
    utilisation: dict[Pool, float]  # busy phase time / (nodes x t_meta) per pool
    saturated: bool  # t_load >= t_cycle: Algorithm 1 skips the group
    bottleneck: str  # node with the largest summed phase time ("" if no members)
    node_load: dict[str, float] = field(default_factory=dict)  # summed phase time per node


def group_loads(members: Sequence[Member]) -> dict[str, float]:
    """Return the summed worst-case phase time per node of the members pinned to it."""
    load: dict[str, float] = {}
    for m in members:
        for n in m.rollout_nodes:
            load[n] = load.get(n, 0.0) + m.job.t_roll_max_s
        for n in m.train_nodes:
            load[n] = load.get(n, 0.0) + m.job.t_train_max_s
    return load


def simulate_round_robin(
    members: Sequence[Member],
    *,
    switch_overhead_s: float,
    meta_iterations: int = PLAN_META_ITERATIONS,
    roll_s: Sequence[float] | None = None,
    train_s: Sequence[float] | None = None,
) -> list[list[float]]:
    """Return each member's training finish times over `meta_iterations` rounds.

    All members start at t=0 on idle nodes, in the order given (admission order),
    and follow the round-robin rule of this module. Durations default to the
    worst case; the switch overhead is added to a phase whenever one of its nodes
    last ran another job.
    """
    n = len(members)
    roll = [m.job.t_roll_max_s for m in members] if roll_s is None else list(roll_s)
    train = [m.job.t_train_max_s for m in members] if train_s is None else list(train_s)
    index: dict[str, int] = {}
    rnodes: list[list[int]] = []
    tnodes: list[list[int]] = []
    for m in members:
        rnodes.append([index.setdefault(x, len(index)) for x in m.rollout_nodes])
        tnodes.append([index.setdefault(x, len(index)) for x in m.train_nodes])
    free = [0.0] * len(index)
    last = [-1] * len(index)
    done = [0.0] * n  # finish of each member's previous phase
    roll_prev_start = 0.0
    train_prev_start = 0.0
    out: list[list[float]] = [[] for _ in range(n)]
    sw = switch_overhead_s
    for _ in range(meta_iterations):
        for j in range(n):
            start = max(done[j], roll_prev_start)
            switch = False
            for x in rnodes[j]:
                if free[x] > start:
                    start = free[x]
                if last[x] != j and last[x] >= 0:
                    switch = True
            end = start + roll[j] + (sw if switch else 0.0)
            for x in rnodes[j]:
                free[x] = end
                last[x] = j
            done[j] = end
            roll_prev_start = start
        for j in range(n):
            start = max(done[j], train_prev_start)
            switch = False
            for x in tnodes[j]:
                if free[x] > start:
                    start = free[x]
                if last[x] != j and last[x] >= 0:
                    switch = True
            end = start + train[j] + (sw if switch else 0.0)
            for x in tnodes[j]:
                free[x] = end
                last[x] = j
            done[j] = end
            train_prev_start = start
            out[j].append(end)
    return out


_NEG = float("-inf")


def round_matrix(members: Sequence[Member], switch_overhead_s: float) -> list[list[float]]:
    """Return the max-plus matrix A of one steady meta-iteration: x(r+1) = A (x) x(r).

    The state x holds, per node, when it is next free; per member, when its
    previous phase finished; and the start of the last rollout and the last
    training (the pool order). A steady round runs every member's rollout then
    training in admission order with the same switch pattern each round (a phase
    switches when the previous user of one of its nodes, wrapping around the round,
    is another member), so one symbolic pass through the recursion gives A.
    """
    n = len(members)
    index: dict[str, int] = {}
    phases: list[tuple[int, list[int], float]] = []  # (member, node indices, duration)
    for kind in (PhaseKind.ROLLOUT, PhaseKind.TRAIN):
        for j, m in enumerate(members):
            xs = [index.setdefault(x, len(index)) for x in m.nodes(kind.pool)]
            phases.append((j, xs, m.job.phase_max_s(kind)))
    n_nodes = len(index)
    users: list[list[int]] = [[] for _ in range(n_nodes)]
    for j, xs, _ in phases:
        for x in xs:
            users[x].append(j)
    # Previous user of each node for the k-th phase, wrapping around the round.
    seen: list[int] = [-1] * n_nodes
    for j, xs, _ in phases:
        for x in xs:
            seen[x] = j  # after the loop: the last user of each node in a round
    size = n_nodes + n + 2
    roll_v, train_v = n_nodes + n, n_nodes + n + 1

    def unit(i: int) -> list[float]:
        row = [_NEG] * size
        row[i] = 0.0
        return row

    free = [unit(x) for x in range(n_nodes)]
    done = [unit(n_nodes + j) for j in range(n)]
    prev_start = {PhaseKind.ROLLOUT: unit(roll_v), PhaseKind.TRAIN: unit(train_v)}
    for k, (j, xs, dur) in enumerate(phases):
        kind = PhaseKind.ROLLOUT if k < n else PhaseKind.TRAIN
        switch = any(seen[x] != j for x in xs)
        start = [max(a, b) for a, b in zip(done[j], prev_start[kind], strict=True)]
        for x in xs:
            start = [max(a, b) for a, b in zip(start, free[x], strict=True)]
        d = dur + (switch_overhead_s if switch else 0.0)
        end = [a + d for a in start]
        for x in xs:
            free[x] = end
            seen[x] = j
        done[j] = end
        prev_start[kind] = start
    return free + done + [prev_start[PhaseKind.ROLLOUT], prev_start[PhaseKind.TRAIN]]


def max_cycle_mean(a: Sequence[Sequence[float]]) -> float:
    """Return the maximum cycle mean of the max-plus matrix `a` (Karp's algorithm).

    It is the asymptotic growth per step of x(r+1) = a (x) x(r): here the
    steady-state meta-iteration length, exact whatever the transient.
    """
    m = np.asarray(a, dtype=float)
    size = m.shape[0]
    # d[k, v]: heaviest walk of exactly k edges ending in v, from any start.
    d = np.full((size + 1, size), -np.inf)
    d[0] = 0.0
    for k in range(size):
        d[k + 1] = (m + d[k][None, :]).max(axis=1)
    last = d[size]
    reach = np.isfinite(last)
    if not reach.any():
        return _NEG
    ks = np.arange(size)[:, None]
    with np.errstate(invalid="ignore"):
        # A walk length k with no walk (-inf) gives +inf and never wins the min.
        means = (last[None, reach] - d[:size, reach]) / (size - ks)
    return float(means.min(axis=0).max())


# Rounds the numeric recursion may run looking for its periodic regime before the
# exact (slower) Karp computation takes over, and the periods it looks for.
_MAX_ROUNDS = 40
_MAX_PERIOD = 4


def periodic_meta_length(members: Sequence[Member], switch_overhead_s: float) -> float | None:
    """Run the round recursion numerically until it turns periodic; return T_meta.

    A max-plus linear system is periodic for ever once x(r) = x(r-c) + c * lambda
    for every state variable, so detecting that is exact. Returns None when no
    period shows up within _MAX_ROUNDS rounds.
    """
    n = len(members)
    index: dict[str, int] = {}
    rnodes = [[index.setdefault(x, len(index)) for x in m.rollout_nodes] for m in members]
    tnodes = [[index.setdefault(x, len(index)) for x in m.train_nodes] for m in members]
    roll = [m.job.t_roll_max_s for m in members]
    train = [m.job.t_train_max_s for m in members]
    free = [0.0] * len(index)
    last = [-1] * len(index)
    done = [0.0] * n
    roll_start = train_start = 0.0
    sw = switch_overhead_s
    history: list[list[float]] = []
    for _ in range(_MAX_ROUNDS):
        for nodes_of, dur, is_roll in ((rnodes, roll, True), (tnodes, train, False)):
            prev = roll_start if is_roll else train_start
            for j in range(n):
                start = done[j] if done[j] > prev else prev
                switch = False
                for x in nodes_of[j]:
                    if free[x] > start:
                        start = free[x]
                    if last[x] != j and last[x] >= 0:
                        switch = True
                end = start + dur[j] + (sw if switch else 0.0)
                for x in nodes_of[j]:
                    free[x] = end
                    last[x] = j
                done[j] = end
                prev = start
            if is_roll:
                roll_start = prev
            else:
                train_start = prev
        state = free + done
        state.append(roll_start)
        state.append(train_start)
        history.append(state)
        r = len(history) - 1
        for c in range(1, _MAX_PERIOD + 1):
            if r - c < 1:  # the first round's switch pattern is not the steady one
                break
            old = history[r - c]
            shift = state[0] - old[0]
            tol = 1e-9 * max(1.0, abs(state[0]))
            if all(abs(a - b - shift) <= tol for a, b in zip(state, old, strict=True)):
                return shift / c
    return None


def steady_iteration_times(members: Sequence[Member], *, switch_overhead_s: float) -> list[float]:
    """Return each member's steady-state worst-case iteration time in the group.

    Round robin locks every member to the same pace (one rollout and one training
    per meta-iteration), so all of them get the meta-iteration length: the growth
    rate of the round recursion, found exactly by running it until it is periodic,
    or by Karp's maximum cycle mean when the transient is long.
    """
    if len(members) == 1:
        return [members[0].job.t_solo_max_s]
    t_meta = periodic_meta_length(members, switch_overhead_s)
    if t_meta is None:
        t_meta = max_cycle_mean(round_matrix(members, switch_overhead_s))
    return [t_meta] * len(members)


def plan_meta_iteration(group: Group, *, switch_overhead_s: float) -> MetaIteration:
    """Simulate one round-robin meta-iteration of `group` with worst-case durations.

    T_cycle and T_load follow the paper; the per-member iteration time comes from
    the round-robin recursion in steady state (see the module docstring), never
    below max(T_cycle, T_load).
    """
    members = group.members
    load = group_loads(members)
    if not members:
        return MetaIteration(0.0, 0.0, 0.0, {}, {}, {Pool.ROLLOUT: 0.0, Pool.TRAIN: 0.0}, False, "")
    t_cycle = max(m.job.t_solo_max_s for m in members)
    bottleneck = max(sorted(load), key=lambda x: load[x])
    t_load = load[bottleneck]
    floor = max(t_cycle, t_load)
    times = steady_iteration_times(members, switch_overhead_s=switch_overhead_s)
    iteration_time = {m.job.id: max(t, floor) for m, t in zip(members, times, strict=True)}
    t_meta = max(iteration_time.values())
    slowdown = {m.job.id: iteration_time[m.job.id] / m.job.t_solo_max_s for m in members}
    utilisation: dict[Pool, float] = {}
    for pool in (Pool.ROLLOUT, Pool.TRAIN):
        nodes = set(group.nodes(pool))
        for m in members:
            nodes.update(m.nodes(pool))
        busy = sum(load.get(x, 0.0) for x in nodes)
        utilisation[pool] = busy / (len(nodes) * t_meta) if nodes and t_meta > 0 else 0.0
    return MetaIteration(
        t_cycle=t_cycle,
        t_load=t_load,
        t_meta=t_meta,
        iteration_time=iteration_time,
        slowdown=slowdown,
        utilisation=utilisation,
        saturated=t_load >= t_cycle,
        bottleneck=bottleneck,
        node_load=load,
    )


# ---------------------------------------------------------------------------
# Runtime: the state machine the simulator and the live controller drive
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseStart:
    """A phase `start_ready` started: run it now on exactly `nodes`."""

    job_id: str
    kind: PhaseKind
    iteration: int
    nodes: tuple[str, ...]
    switch: bool  # some node last ran a different job: warm-start switch overhead applies
    cold: bool  # first phase after admission: state is loaded cold
    meta_iteration: int = 0  # the group's round this phase belongs to
    first_on_pool: bool = False  # the job's first phase on this pool since admission


@dataclass(frozen=True)
class RunningPhase:
    """A phase that started and has not finished yet."""

    job_id: str
    kind: PhaseKind
    iteration: int
    nodes: tuple[str, ...]
    meta_iteration: int = 0


@dataclass(frozen=True)
class QueuedPhase:
    """A phase whose job is ready for it, waiting for its turn and its nodes."""

    job_id: str
    kind: PhaseKind
    iteration: int
    nodes: tuple[str, ...]
    meta_iteration: int = 0


@dataclass(frozen=True)
class FinishResult:
    """What `finish` did: the nodes it freed and the job's next step."""

    job_id: str
    kind: PhaseKind
    iteration: int
    freed_nodes: tuple[str, ...]
    done: bool = False  # the job finished its last iteration and left the group
    removed: bool = False  # the job had been removed; nothing was enqueued
    next_kind: PhaseKind | None = None  # the phase now queued for it
    next_iteration: int | None = None


@dataclass
class _MemberState:
    member: Member
    idx: int  # admission index: position in the round-robin order
    iterations: int  # the job runs iterations [iteration, iterations)
    iteration: int  # iteration of the current (queued or running) phase
    kind: PhaseKind  # kind of the current phase
    running: bool
    next_round: dict[PhaseKind, int]  # meta-iteration of the next phase to START per pool
    started: bool = False  # has any phase started since admission
    started_pools: set[str] = field(default_factory=set)  # pools it has run on
    job_id: str = field(init=False)

    def __post_init__(self) -> None:
        self.job_id = self.member.job.id

    def key(self, kind: PhaseKind) -> tuple[int, int] | None:
        """Return the pool-order key of this member's next phase of `kind` to start."""
        more = self.iteration + 1 < self.iterations
        # The current phase's kind: it is still to start unless running. The other
        # kind: a training always follows a rollout; a rollout needs another iteration.
        exists = (
            (not self.running or more) if self.kind is kind else (kind is PhaseKind.TRAIN or more)
        )
        return (self.next_round[kind], self.idx) if exists else None


class GroupRuntime:
    """Run the round-robin meta-iteration of one co-execution group.

    The caller owns time: it calls `start_ready()` to learn which phases to launch,
    and `finish(job, kind)` when one completes (the paper's runtime hook).
    """

    def __init__(self, group_id: str, *, switch_overhead_s: float) -> None:
        self.group_id = group_id
        self.switch_overhead_s = switch_overhead_s
        self._members: dict[str, _MemberState] = {}
        self._running: dict[str, RunningPhase] = {}
        self._busy: dict[str, str] = {}  # node -> job running on it
        self._last: dict[str, str] = {}  # node -> job that ran on it last
        self._seq = 0
        self._round: int | None = None  # newest meta-iteration a rollout started in

    # -- commands -----------------------------------------------------------

    def admit(self, member: Member, *, iterations: int, start_iteration: int = 0) -> None:
        """Add `member` and enqueue its first rollout (iteration `start_iteration`).

        `iterations` is the job's total iteration count; a resubmitted job resumes
        at `start_iteration`.
        """
        job_id = member.job.id
        if job_id in self._members or job_id in self._running:
            raise ValueError(f"job {job_id!r} is already in group {self.group_id!r}")
        if not 0 <= start_iteration < iterations:
            raise ValueError(
                f"start_iteration must be in [0, iterations={iterations}), got {start_iteration}"
            )
        if not member.rollout_nodes or not member.train_nodes:
            raise ValueError(f"job {job_id!r} needs at least one rollout and one training node")
        # Join the meta-iteration in progress: its rollout is the last rollout of
        # the newest round some rollout started in, its training the last training
        # of that round. Before any rollout started, join the earliest pending round.
        if self._round is not None:
            r0 = self._round
        else:
            keys = [k for st in self._members.values() if (k := st.key(PhaseKind.ROLLOUT))]
            r0 = min((k[0] for k in keys), default=0)
        self._members[job_id] = _MemberState(
            member=member,
            idx=self._seq,
            iterations=iterations,
            iteration=start_iteration,
            kind=PhaseKind.ROLLOUT,
            running=False,
            next_round={PhaseKind.ROLLOUT: r0, PhaseKind.TRAIN: r0},
        )
        self._seq += 1

    def remove(self, job_id: str) -> None:
        """Drop `job_id` and its queued phase; a phase it is running may still finish."""
        if self._members.pop(job_id, None) is None and job_id not in self._running:
            raise KeyError(f"job {job_id!r} is not in group {self.group_id!r}")

    def start_ready(self) -> list[PhaseStart]:
        """Start and return every phase that can start now, in round-robin order."""
        started: list[PhaseStart] = []
        # Starting a phase only moves the head of its own pool, so the pools are
        # served one after the other, each until its head cannot start.
        for kind in (PhaseKind.ROLLOUT, PhaseKind.TRAIN):
            while True:
                head = self._pool_head(kind)
                if head is None or head.running or head.kind is not kind:
                    break  # nothing left, or the head's phase is not ready: the pool waits
                busy = self._busy
                m = head.member
                nodes = m.rollout_nodes if kind is PhaseKind.ROLLOUT else m.train_nodes
                if any(x in busy for x in nodes):
                    break
                started.append(self._start(head))
        return started

    def finish(self, job_id: str, kind: PhaseKind) -> FinishResult:
        """Record that `job_id`'s running `kind` phase completed; enqueue its next phase."""
        run = self._running.get(job_id)
        if run is None or run.kind is not kind:
            raise ValueError(f"job {job_id!r} has no running {kind.value} phase")
        del self._running[job_id]
        for x in run.nodes:
            self._busy.pop(x, None)
        s = self._members.get(job_id)
        if s is None:
            return FinishResult(job_id, kind, run.iteration, run.nodes, removed=True)
        s.running = False
        if kind is PhaseKind.ROLLOUT:
            s.kind = PhaseKind.TRAIN
        elif s.iteration + 1 >= s.iterations:
            del self._members[job_id]
            return FinishResult(job_id, kind, run.iteration, run.nodes, done=True)
        else:
            s.kind = PhaseKind.ROLLOUT
            s.iteration += 1
        return FinishResult(
            job_id, kind, run.iteration, run.nodes, next_kind=s.kind, next_iteration=s.iteration
        )

    # -- queries ------------------------------------------------------------

    def member_ids(self) -> tuple[str, ...]:
        """Return the ids of the active members in round-robin order."""
        return tuple(s.job_id for s in sorted(self._members.values(), key=lambda s: s.idx))

    def member(self, job_id: str) -> Member:
        """Return an active member (KeyError if the job is not one)."""
        return self._members[job_id].member

    def running(self) -> tuple[RunningPhase, ...]:
        """Return the phases running now."""
        return tuple(self._running.values())

    def queued(self) -> tuple[QueuedPhase, ...]:
        """Return the phases ready to run and waiting, in the order they will start per pool."""
        out: list[tuple[tuple[int, int, int], QueuedPhase]] = []
        for s in self._members.values():
            if s.running:
                continue
            r = s.next_round[s.kind]
            q = QueuedPhase(s.job_id, s.kind, s.iteration, s.member.nodes(s.kind.pool), r)
            out.append(((r, 0 if s.kind is PhaseKind.ROLLOUT else 1, s.idx), q))
        return tuple(q for _, q in sorted(out, key=lambda e: e[0]))

    def node_queues(self) -> dict[str, tuple[str, ...]]:
        """Return, per node, the job ids queued on it in the order they will run."""
        queues: dict[str, list[str]] = {}
        for q in self.queued():
            for x in q.nodes:
                queues.setdefault(x, []).append(q.job_id)
        return {x: tuple(v) for x, v in queues.items()}

    def is_idle(self) -> bool:
        """Return True when no phase is running."""
        return not self._running

    def last_job(self, node: str) -> str | None:
        """Return the job that last ran a phase on `node` (None if none yet)."""
        return self._last.get(node)

    # -- persistence ----------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable snapshot (see `from_dict`)."""
        return {
            "version": 1,
            "group_id": self.group_id,
            "switch_overhead_s": self.switch_overhead_s,
            "seq": self._seq,
            "round": self._round,
            "members": [
                {
                    "member": member_to_dict(s.member),
                    "idx": s.idx,
                    "iterations": s.iterations,
                    "iteration": s.iteration,
                    "kind": s.kind.value,
                    "running": s.running,
                    "next_round": {k.value: v for k, v in s.next_round.items()},
                    "started": s.started,
                    "started_pools": sorted(s.started_pools),
                }
                for s in self._members.values()
            ],
            "running": [
                {
                    "job_id": r.job_id,
                    "kind": r.kind.value,
                    "iteration": r.iteration,
                    "nodes": list(r.nodes),
                    "meta_iteration": r.meta_iteration,
                }
                for r in self._running.values()
            ],
            "last": dict(self._last),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GroupRuntime:
        """Rebuild a runtime from a `to_dict` snapshot."""
        rt = cls(str(d["group_id"]), switch_overhead_s=float(d["switch_overhead_s"]))
        rt._seq = int(d["seq"])
        rt._round = None if d.get("round") is None else int(d["round"])
        for e in d["members"]:
            s = _MemberState(
                member=member_from_dict(e["member"]),
                idx=int(e["idx"]),
                iterations=int(e["iterations"]),
                iteration=int(e["iteration"]),
                kind=PhaseKind(e["kind"]),
                running=bool(e["running"]),
                next_round={PhaseKind(k): int(v) for k, v in e["next_round"].items()},
                started=bool(e["started"]),
                started_pools={str(x) for x in e.get("started_pools", ())},
            )
            rt._members[s.job_id] = s
        for e in d["running"]:
            r = RunningPhase(
                str(e["job_id"]),
                PhaseKind(e["kind"]),
                int(e["iteration"]),
                tuple(str(x) for x in e["nodes"]),
                int(e.get("meta_iteration", 0)),
            )
            rt._running[r.job_id] = r
            for x in r.nodes:
                rt._busy[x] = r.job_id
        rt._last = {str(k): str(v) for k, v in d["last"].items()}
        return rt

    # -- internals --------------------------------------------------------------

    def _pool_head(self, kind: PhaseKind) -> _MemberState | None:
        """Return the member whose next `kind` phase is first in the pool order.

        Same order as `_MemberState.key`, inlined: this runs on every phase event.
        Members iterate in admission order, so the first of equal rounds wins.
        """
        is_roll = kind is PhaseKind.ROLLOUT
        best = 0
        head: _MemberState | None = None
        for s in self._members.values():
            if s.iteration + 1 >= s.iterations and (
                (s.kind is kind and s.running) or (s.kind is not kind and is_roll)
            ):
                continue  # no phase of this kind left to start
            r = s.next_round[kind]
            if head is None or r < best:
                best, head = r, s
        return head

    def _start(self, s: _MemberState) -> PhaseStart:
        kind = s.kind
        is_roll = kind is PhaseKind.ROLLOUT
        m = s.member
        nodes = m.rollout_nodes if is_roll else m.train_nodes
        job_id = s.job_id
        rnd = s.next_round[kind]
        last, busy = self._last, self._busy
        switch = False
        for x in nodes:
            prev = last.get(x)
            if prev is not None and prev != job_id:
                switch = True
            last[x] = job_id
            busy[x] = job_id
        cold = not s.started
        pool = "rollout" if is_roll else "train"  # Pool values, as in to_dict
        first_on_pool = pool not in s.started_pools
        s.started = True
        s.started_pools.add(pool)
        s.running = True
        s.next_round[kind] = rnd + 1
        if is_roll and (self._round is None or rnd > self._round):
            self._round = rnd
        self._running[job_id] = RunningPhase(job_id, kind, s.iteration, nodes, rnd)
        return PhaseStart(job_id, kind, s.iteration, nodes, switch, cold, rnd, first_on_pool)


# ---------------------------------------------------------------------------
# Serialisation helpers (JSON-safe dicts of the domain types)
# ---------------------------------------------------------------------------


def job_to_dict(job: JobProfile) -> dict[str, Any]:
    """Return `job` as a JSON-serialisable dict with the trace-format field names."""
    return asdict(job)


def job_from_dict(d: Mapping[str, Any]) -> JobProfile:
    """Rebuild a JobProfile from `job_to_dict` output."""
    return JobProfile(**{k: d[k] for k in JobProfile.__dataclass_fields__ if k in d})


def member_to_dict(m: Member) -> dict[str, Any]:
    """Return `m` as a JSON-serialisable dict."""
    return {
        "job": job_to_dict(m.job),
        "rollout_nodes": list(m.rollout_nodes),
        "train_nodes": list(m.train_nodes),
    }


def member_from_dict(d: Mapping[str, Any]) -> Member:
    """Rebuild a Member from `member_to_dict` output."""
    return Member(
        job=job_from_dict(d["job"]),
        rollout_nodes=tuple(str(x) for x in d["rollout_nodes"]),
        train_nodes=tuple(str(x) for x in d["train_nodes"]),
    )
