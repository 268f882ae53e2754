"""The round-robin group runtime (paper section 3): the event-driven state machine that
BOTH the simulator and the live (Celery) controller drive: `admit`, `start_ready`,
`finish`, `remove`.

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
the planner's prediction (scheduler.meta_iteration) honest. It cannot deadlock:
ordering every future phase by ``(meta_iteration, rollout before training, admission
index)`` is a topological order of all constraints (job order, pool order, node
order), so its first element can always start once the phases running now finish.

API notes
---------
* ``admit(member, iterations=N, start_iteration=k)``: N is the job's TOTAL
  iteration count; it runs iterations k..N-1 (a resubmitted job resumes at k).
* ``PhaseStart`` also carries ``meta_iteration`` (the group round) and
  ``first_on_pool`` (first phase of the job on that pool since admission: its
  training state loads cold there even though ``cold`` is only the first phase).
* ``FinishResult`` fields: job_id, kind, iteration, freed_nodes, done, removed,
  next_kind, next_iteration. ``finish`` raises ValueError for a phase that is not
  running; ``remove`` raises KeyError for an unknown job.
* ``running()`` and ``queued()`` return `PendingPhase` records (queued ones in start
  order).
* ``on_phase_end(PhaseEnd(...))`` is the runtime hook as ONE decision (pure: the runtime
  it is called on is left as it was): it finishes the phase, decides whether the job
  leaves its group and why (`Departure`), and which phases start now; the caller writes
  the `PhaseEndDecision` (its ``runtime`` is the new state). A job that goes on after a
  training (``boundary``) may be taken by the planner there (a move, a yield): the caller
  asks it, and decides again with ``PhaseEnd.left`` set.
* Weight sync (``JobProfile.t_sync_s > 0``): after each training but the last, the
  job's next phase is ``PhaseKind.SYNC`` (same iteration) on its ROLLOUT nodes; when
  it finishes, the job's next rollout is queued. The sync is the first half of the
  job's turn on the rollout pool: it starts only when the job is the head of that
  pool, and the job stays the head until its rollout starts, so the rollout follows
  the sync at once on the same nodes (a switch overhead, if any, falls on the sync).
  With ``t_sync_s == 0`` no sync phase exists and everything is as without it.
* Co-located member (issue 14: no rollout nodes): its rollouts run on its training nodes
  (``phase_nodes``), it has no sync phase, and it is alone in its group (``admit``
  refuses to mix it with anyone).
* Long-tail migration (paper section 3): ``tail_nodes(job)`` names the nodes a running
  rollout may hand to the next member in the rollout pool's order (those they share,
  keeping one of its own); ``release_tail(job, nodes)`` frees them mid-rollout (the
  caller's runtime hook, once the rollout is tail-bound), so ``start_ready`` can start
  that member's rollout there beside the tail. The order of the meta-iteration is kept:
  the next rollout only starts earlier.

A member admitted mid-run joins the meta-iteration in progress: its rollout is the
last rollout of the current meta-iteration that has started (so it can start at
once if its nodes are idle) and its training the last training of that
meta-iteration. The planner's guarantee is on the steady-state iteration time (the paper's
T_co-exec); the joiner's first meta-iteration can wait for its turn (measured worst
case over 3,000 random joins with worst-case durations: 1.2 x T_meta in total),
which only shows in the mean of jobs with very few iterations; the planner adds
that allowance to the joiner's SLO check
(scheduler.planner.slo_checks.JOIN_ALLOWANCE_META_ITERATIONS).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from scheduler.compiled import python_class
from scheduler.model import Member, PhaseKind, member_from_dict, member_to_dict


def phase_nodes(member: Member, kind: PhaseKind) -> tuple[str, ...]:
    """Return the nodes a member's phase of `kind` runs on.

    A co-located member (issue 14: no rollout nodes) runs its rollouts on its training
    nodes, and has no sync phase: trainer and rollout worker of a GPU share its node,
    so no weights cross between pools (the coordinator hands them over on the node at
    the start of the next rollout, 0 cross-pool bytes).
    """
    if kind is PhaseKind.TRAIN or not member.rollout_nodes:
        return member.train_nodes
    return member.rollout_nodes


# _FAST_INIT: the three records below are made at every phase event; their __init__
# writes the fields at once (a frozen dataclass's own calls object.__setattr__ once a
# field: that was the simulator's dearest line). Frozen, equal and hashed as before.
@python_class  # (its __init__ writes its __dict__: _FAST_INIT)
@dataclass(frozen=True, init=False)
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

    def __init__(
        self,
        job_id: str,
        kind: PhaseKind,
        iteration: int,
        nodes: tuple[str, ...],
        switch: bool,
        cold: bool,
        meta_iteration: int = 0,
        first_on_pool: bool = False,
    ) -> None:
        self.__dict__.update(  # _FAST_INIT
            job_id=job_id, kind=kind, iteration=iteration, nodes=nodes, switch=switch,
            cold=cold, meta_iteration=meta_iteration, first_on_pool=first_on_pool,
        )  # fmt: skip


# `PhaseStart`'s fields in its order, as a plain tuple (`GroupRuntime.start_ready_raw`: the
# simulator starts phases at every event and makes no object for each)
RawPhaseStart = tuple[str, PhaseKind, int, tuple[str, ...], bool, bool, int, bool]

# A running phase as the runtime keeps it: `PendingPhase`'s fields after its job id, a plain
# tuple (one is made at every phase start; `running()` makes the records when asked)
_Run = tuple[PhaseKind, int, tuple[str, ...], int]


@python_class  # (its __init__ writes its __dict__: _FAST_INIT)
@dataclass(frozen=True, init=False)
class PendingPhase:
    """A phase of a member that is running, or ready and waiting for its turn and nodes."""

    job_id: str
    kind: PhaseKind
    iteration: int
    nodes: tuple[str, ...]
    meta_iteration: int = 0

    def __init__(
        self,
        job_id: str,
        kind: PhaseKind,
        iteration: int,
        nodes: tuple[str, ...],
        meta_iteration: int = 0,
    ) -> None:
        self.__dict__.update(  # _FAST_INIT
            job_id=job_id, kind=kind, iteration=iteration, nodes=nodes,
            meta_iteration=meta_iteration,
        )  # fmt: skip


@python_class  # (its __init__ writes its __dict__: _FAST_INIT)
@dataclass(frozen=True, init=False)
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

    def __init__(
        self,
        job_id: str,
        kind: PhaseKind,
        iteration: int,
        freed_nodes: tuple[str, ...],
        done: bool = False,
        removed: bool = False,
        next_kind: PhaseKind | None = None,
        next_iteration: int | None = None,
    ) -> None:
        self.__dict__.update(  # _FAST_INIT
            job_id=job_id, kind=kind, iteration=iteration, freed_nodes=freed_nodes, done=done,
            removed=removed, next_kind=next_kind, next_iteration=next_iteration,
        )  # fmt: skip


class Departure(Enum):
    """Why a job leaves its group at a phase end (`GroupRuntime.on_phase_end`)."""

    COMPLETED = "completed"  # its last training ended (or it has all its iterations)
    CANCELLED = "cancelled"  # its cancel takes effect at this phase boundary
    FAILED = "failed"  # its phase did not succeed (failed, or its host was lost)
    PROFILED = "profiled"  # its profiling run's last phase ended
    MOVED = "moved"  # the planner moved it to another group at this iteration boundary
    YIELDED = "yielded"  # the planner sent it back to the queue at this boundary


@dataclass(frozen=True)
class PhaseEnd:
    """What the caller knows of a phase end; the runtime knows the rest.

    `member`: the job still runs here (its placement is the phase's and it is not
    finished); False: the runtime only frees the phase's nodes. `iterations_done` counts
    this phase (a training's iteration is done), of the job's `iterations`. `profile`: a
    profiling run, which leaves its group when its last phase ends. `left`: the planner
    took the job at this iteration boundary (MOVED or YIELDED; see `boundary`).
    """

    job_id: str
    kind: PhaseKind
    ok: bool
    member: bool = True
    cancel_requested: bool = False
    iterations_done: int = 0
    iterations: int = 0
    profile: bool = False
    left: Departure | None = None


@dataclass(frozen=True)
class PhaseEndDecision:
    """One phase end, decided: apply it in one place.

    `finish`: what finishing the phase did (None: the runtime had let go of it already, its
    job removed). `leaves`: the job leaves its group, and why (None: it stays). `boundary`:
    the job goes on after a training: the planner may take it now (a move or a yield), and
    if it does the caller decides again with `PhaseEnd.left`. `starts`: the phases to
    start now, in round-robin order. `runtime`: the group's runtime after all of it (the
    state to store; the one decided on is unchanged).
    """

    finish: FinishResult | None
    leaves: Departure | None
    boundary: bool
    starts: tuple[PhaseStart, ...]
    runtime: GroupRuntime


@dataclass(slots=True)
class _MemberState:
    member: Member
    idx: int  # admission index: position in the round-robin order
    iterations: int  # the job runs iterations [iteration, iterations)
    iteration: int  # iteration of the current (queued or running) phase
    kind: PhaseKind  # kind of the current phase
    running: bool
    # meta-iteration of the next phase to START on each pool: its turn on the rollout
    # pool (a sync then a rollout) and its training (`next_round`)
    roll_round: int
    train_round: int
    started: bool = False  # has any phase started since admission
    started_pools: set[str] = field(default_factory=set)  # pools it has run on
    job_id: str = field(init=False)
    # Read at every phase event and fixed by the (immutable) member: the nodes of its turn
    # on each pool (`phase_nodes`: its rollouts and syncs, its trainings), and whether a
    # sync follows its trainings. Plain fields, no dict: a member's state is read at every
    # phase event of its group, and at 2,000 jobs each object read is a likely cache miss.
    roll_nodes: tuple[str, ...] = field(init=False)
    train_nodes: tuple[str, ...] = field(init=False)
    syncs: bool = field(init=False)

    def __post_init__(self) -> None:
        member = self.member
        self.job_id = member.job.id
        self.roll_nodes = phase_nodes(member, PhaseKind.ROLLOUT)
        self.train_nodes = phase_nodes(member, PhaseKind.TRAIN)
        # (co-located: the weights stay on the node, no sync phase: see phase_nodes)
        self.syncs = member.job.t_sync_s > 0 and bool(member.rollout_nodes)

    def next_round(self, kind: PhaseKind) -> int:
        """Return the meta-iteration of its next phase to start on `kind`'s pool."""
        return self.train_round if kind is PhaseKind.TRAIN else self.roll_round

    def nodes(self, kind: PhaseKind) -> tuple[str, ...]:
        """Return the nodes its phases of `kind` run on (`phase_nodes`)."""
        return self.train_nodes if kind is PhaseKind.TRAIN else self.roll_nodes

    def key(self, kind: PhaseKind) -> tuple[int, int] | None:
        """Return the pool-order key of this member's next phase of `kind` to start."""
        more = self.iteration + 1 < self.iterations
        # The current phase's kind: it is still to start unless running. The other
        # kind: a training always follows a rollout; a rollout needs another iteration.
        exists = (
            (not self.running or more) if self.kind is kind else (kind is PhaseKind.TRAIN or more)
        )
        return (self.next_round(kind), self.idx) if exists else None


class GroupRuntime:
    """Run the round-robin meta-iteration of one co-execution group.

    The caller owns time: it calls `start_ready()` to learn which phases to launch,
    and `finish(job, kind)` when one completes (the paper's runtime hook).
    """

    # slotted: every phase event reads several of these
    __slots__ = (
        "group_id", "switch_overhead_s", "_members", "_running", "_busy", "_last", "_seq",
        "_round", "_heads",
    )  # fmt: skip

    def __init__(self, group_id: str, *, switch_overhead_s: float) -> None:
        self.group_id = group_id
        self.switch_overhead_s = switch_overhead_s
        self._members: dict[str, _MemberState] = {}
        self._running: dict[str, _Run] = {}  # job -> its running phase
        self._busy: dict[str, str] = {}  # node -> job running on it
        self._last: dict[str, str] = {}  # node -> job that ran on it last
        self._seq = 0
        self._round: int | None = None  # newest meta-iteration a rollout started in
        # Each pool's head (`_pool_head`), kept between phase events: a pool's order
        # changes only when a phase starts on it or a member joins or leaves (finishing a
        # phase moves no member's key and no member in or out of a pool's order), so it is
        # found again only then instead of at every event. No key: not known.
        self._heads: dict[PhaseKind, _MemberState | None] = {}

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
        if not member.train_nodes:
            raise ValueError(f"job {job_id!r} needs at least one training node")
        # A co-located member (no rollout nodes: both phases on its training nodes) is
        # alone in its group: its rollouts hold the nodes another member would train on.
        if self._members:
            others = [s.member for s in self._members.values()]
            alone = [m for m in (member, *others) if not m.rollout_nodes]
            if alone:
                raise ValueError(
                    f"job {alone[0].job.id!r} runs co-located (no rollout nodes): it shares"
                    f" group {self.group_id!r} with no one"
                )
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
            roll_round=r0,
            train_round=r0,
        )
        self._seq += 1
        self._heads.clear()

    def remove(self, job_id: str) -> None:
        """Drop `job_id` and its queued phase; a phase it is running may still finish."""
        if self._members.pop(job_id, None) is None and job_id not in self._running:
            raise KeyError(f"job {job_id!r} is not in group {self.group_id!r}")
        self._heads.clear()

    def start_ready(self) -> list[PhaseStart]:
        """Start and return every phase that can start now, in round-robin order."""
        return [PhaseStart(*start) for start in self.start_ready_raw()]

    def start_ready_raw(self) -> list[RawPhaseStart]:
        """`start_ready` as plain tuples of `PhaseStart`'s fields, in its order (for a
        caller that starts phases at every event: the simulator makes no object for each)."""
        started: list[RawPhaseStart] = []
        busy, heads = self._busy, self._heads
        # Starting a phase only moves the head of its own pool, so the pools are
        # served one after the other, each until its head cannot start.
        # A member's turn on the rollout pool is its weight sync (when it has one due)
        # then its rollout: both are the head's phases of that pool.
        # (The head's nodes on the pool are read as fields, not through `nodes`: this
        # runs at every phase event.)
        for kind in (PhaseKind.ROLLOUT, PhaseKind.TRAIN):
            on_train = kind is PhaseKind.TRAIN
            head = heads[kind] if kind in heads else heads.setdefault(kind, self._pool_head(kind))
            # nothing left, or the head's phase is running: the pool waits
            while head is not None and not head.running:
                phase = head.kind
                if phase is not kind and (phase is not PhaseKind.SYNC or on_train):
                    break  # the head's phase on this pool is not ready yet
                if not busy.keys().isdisjoint(head.train_nodes if on_train else head.roll_nodes):
                    break
                started.append(self._start(head))
                # it moved its pool's head (its own key): the next one is found now
                head = heads[kind] = self._pool_head(kind)
        return started

    def finish(self, job_id: str, kind: PhaseKind) -> FinishResult:
        """Record that `job_id`'s running `kind` phase completed; enqueue its next phase."""
        run = self._running.get(job_id)
        s = self._members.get(job_id)
        done = self.end_phase(job_id, kind)
        assert run is not None  # (end_phase raised otherwise)
        _kind, iteration, nodes, _round = run
        if s is None:
            return FinishResult(job_id, kind, iteration, nodes, removed=True)
        if done:
            return FinishResult(job_id, kind, iteration, nodes, done=True)
        return FinishResult(
            job_id, kind, iteration, nodes, next_kind=s.kind, next_iteration=s.iteration
        )

    def end_phase(self, job_id: str, kind: PhaseKind) -> bool:
        """`finish` for a caller that reads only whether the job is done (the simulator, at
        every phase event: it makes no `FinishResult`): True when the job finished its
        last iteration and left the group."""
        run = self._running.get(job_id)
        if run is None or run[0] is not kind:
            raise ValueError(f"job {job_id!r} has no running {kind.value} phase")
        del self._running[job_id]
        busy = self._busy
        for x in run[2]:
            busy.pop(x, None)
        s = self._members.get(job_id)
        if s is None:
            return False  # removed: nothing is enqueued
        s.running = False
        if kind is PhaseKind.ROLLOUT:
            s.kind = PhaseKind.TRAIN
        elif kind is PhaseKind.SYNC:
            s.kind = PhaseKind.ROLLOUT
            s.iteration += 1
        elif s.iteration + 1 >= s.iterations:
            # No sync after the last training: no rollout will read those weights.
            del self._members[job_id]
            self._heads.clear()
            return True
        elif s.syncs:
            s.kind = PhaseKind.SYNC  # the sync belongs to the iteration it follows
        else:
            s.kind = PhaseKind.ROLLOUT
            s.iteration += 1
        return False

    def release_tail(self, job_id: str, nodes: tuple[str, ...]) -> tuple[str, ...]:
        """Free `nodes` of `job_id`'s running rollout: its tail was consolidated onto its
        other nodes (long-tail migration, paper section 3). The rollout keeps running there
        and `finish` frees only those; `start_ready` may now start the next member's
        rollout on the freed nodes. Return the nodes the rollout still holds.

        ValueError when the job runs no rollout, a node is not one of the rollout's, or
        none would be left (the tail needs a node to run on): a replayed event is refused.
        """
        run = self._running.get(job_id)
        if run is None or run[0] is not PhaseKind.ROLLOUT:
            raise ValueError(f"job {job_id!r} runs no rollout")
        freed = set(nodes)
        kept = tuple(x for x in run[2] if x not in freed)
        if not freed or not freed <= set(run[2]) or not kept:
            raise ValueError(
                f"job {job_id!r}'s rollout on {', '.join(run[2])} cannot free"
                f" {', '.join(sorted(freed)) or 'no node'} and keep a node for its tail"
            )
        for x in freed:
            self._busy.pop(x, None)
        self._running[job_id] = (run[0], run[1], kept, run[3])
        return kept

    def tail_nodes(self, job_id: str) -> tuple[str, ...]:
        """Return the nodes `job_id`'s running rollout could hand to the next member's
        rollout once tail-bound (long-tail migration): those of the next member in the
        rollout pool's order it shares, when it keeps at least one of its own for the tail.
        Empty when there is no one to hand them to, or the job runs co-located (its
        rollouts hold training nodes: migration is H20 to H20 only)."""
        run = self._running.get(job_id)
        s = self._members.get(job_id)
        if run is None or s is None or run[0] is not PhaseKind.ROLLOUT:
            return ()
        if not s.member.rollout_nodes:
            return ()
        head = self._pool_head(PhaseKind.ROLLOUT)
        if head is None or head.job_id == job_id or not head.member.rollout_nodes:
            return ()
        wanted = set(head.member.rollout_nodes) & set(run[2])
        if not wanted or wanted == set(run[2]):
            return ()
        return tuple(sorted(wanted))

    def on_phase_end(self, end: PhaseEnd) -> PhaseEndDecision:
        """Decide a phase end (the runtime hook) on a copy of this runtime: finish the
        phase, drop the job if it leaves its group (`Departure`), start what can start.

        The job leaves when (in this order): a profiling run's phase failed, was lost or
        its cancel is due (CANCELLED, else FAILED), or its run's last phase ended
        (PROFILED); a phase failed or was lost (FAILED); it has its iterations
        (COMPLETED); its cancel is due (CANCELLED, at the boundary); after a training the
        planner took it (`end.left`). A job that is no longer a member only frees the
        phase's nodes.
        """
        rt = self.copy()
        finish: FinishResult | None
        try:
            finish = rt.finish(end.job_id, end.kind)
        except ValueError:
            finish = None  # the runtime already let go of this phase (job removed)
        leaves: Departure | None = None
        boundary = False
        if end.member:
            done = finish is not None and finish.done
            if end.profile:
                if not end.ok or end.cancel_requested:
                    leaves = Departure.CANCELLED if end.cancel_requested else Departure.FAILED
                elif done:
                    leaves = Departure.PROFILED
            elif not end.ok:
                leaves = Departure.FAILED
            elif done or end.iterations_done >= end.iterations:
                leaves = Departure.COMPLETED
            elif end.cancel_requested:
                leaves = Departure.CANCELLED
            elif end.kind is PhaseKind.TRAIN:
                boundary = True  # an iteration boundary: its checkpoint is written
                leaves = end.left
        if leaves is not None and end.job_id in rt._members:
            rt.remove(end.job_id)
        return PhaseEndDecision(finish, leaves, boundary, tuple(rt.start_ready()), rt)

    def copy(self) -> GroupRuntime:
        """Return an independent copy (members are immutable and shared)."""
        rt = GroupRuntime(self.group_id, switch_overhead_s=self.switch_overhead_s)
        rt._members = {
            k: replace(s, started_pools=set(s.started_pools)) for k, s in self._members.items()
        }
        rt._running = dict(self._running)
        rt._busy = dict(self._busy)
        rt._last = dict(self._last)
        rt._seq = self._seq
        rt._round = self._round
        return rt

    # -- queries ------------------------------------------------------------

    def member_ids(self) -> tuple[str, ...]:
        """Return the ids of the active members in round-robin order."""
        return tuple(s.job_id for s in sorted(self._members.values(), key=lambda s: s.idx))

    def member(self, job_id: str) -> Member:
        """Return an active member (KeyError if the job is not one)."""
        return self._members[job_id].member

    def running(self) -> tuple[PendingPhase, ...]:
        """Return the phases running now."""
        return tuple(PendingPhase(job_id, *run) for job_id, run in self._running.items())

    def queued(self) -> tuple[PendingPhase, ...]:
        """Return the phases ready to run and waiting, in the order they will start per pool."""
        out: list[tuple[tuple[int, int, int], PendingPhase]] = []
        for s in self._members.values():
            if s.running:
                continue
            on_train = s.kind is PhaseKind.TRAIN
            r = s.train_round if on_train else s.roll_round
            q = PendingPhase(s.job_id, s.kind, s.iteration, s.nodes(s.kind), r)
            out.append(((r, 1 if on_train else 0, s.idx), q))
        return tuple(q for _, q in sorted(out, key=lambda e: e[0]))

    def is_idle(self) -> bool:
        """Return True when no phase is running."""
        return not self._running

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
                    "next_round": {
                        PhaseKind.ROLLOUT.value: s.roll_round,
                        PhaseKind.TRAIN.value: s.train_round,
                    },
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
                for r in self.running()
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
                roll_round=int(e["next_round"][PhaseKind.ROLLOUT.value]),
                train_round=int(e["next_round"][PhaseKind.TRAIN.value]),
                started=bool(e["started"]),
                started_pools={str(x) for x in e.get("started_pools", ())},
            )
            rt._members[s.job_id] = s
        for e in d["running"]:
            r = PendingPhase(
                str(e["job_id"]),
                PhaseKind(e["kind"]),
                int(e["iteration"]),
                tuple(str(x) for x in e["nodes"]),
                int(e.get("meta_iteration", 0)),
            )
            rt._running[r.job_id] = (r.kind, r.iteration, r.nodes, r.meta_iteration)
            for x in r.nodes:
                rt._busy[x] = r.job_id
        rt._last = {str(k): str(v) for k, v in d["last"].items()}
        return rt

    # -- internals --------------------------------------------------------------

    def _pool_head(self, kind: PhaseKind) -> _MemberState | None:
        """Return the member whose next `kind` phase is first in the pool order.

        Same order as `_MemberState.key`, inlined: this runs whenever a pool's order
        changes (`_heads`). Members iterate in admission order, so the first of equal
        rounds wins.
        """
        is_roll = kind is PhaseKind.ROLLOUT
        best = 0
        head: _MemberState | None = None
        for s in self._members.values():
            r = s.roll_round if is_roll else s.train_round
            if head is not None and r >= best:
                continue  # it cannot come first (a tie keeps the earlier member)
            if s.iteration + 1 >= s.iterations and (
                (s.kind is kind and s.running) or (s.kind is not kind and is_roll)
            ):
                continue  # no phase of this kind left to start
            best, head = r, s
        return head

    def _start(self, s: _MemberState) -> RawPhaseStart:
        kind = s.kind
        is_roll = kind is PhaseKind.ROLLOUT
        is_train = kind is PhaseKind.TRAIN
        nodes = s.train_nodes if is_train else s.roll_nodes
        job_id = s.job_id
        # A sync belongs to the meta-iteration of the training it follows and does not
        # take the member's rollout turn (its rollout starts right after it).
        if is_train:
            rnd = s.train_round
            s.train_round = rnd + 1
        elif is_roll:
            rnd = s.roll_round
            s.roll_round = rnd + 1
        else:
            rnd = s.train_round - 1
        last, busy = self._last, self._busy
        switch = False
        for x in nodes:
            prev = last.get(x)
            if prev is not None and prev != job_id:
                switch = True
            last[x] = job_id
            busy[x] = job_id
        cold = not s.started
        pool = "train" if is_train else "rollout"  # Pool values, as in to_dict
        first_on_pool = pool not in s.started_pools
        s.started = True
        s.started_pools.add(pool)
        s.running = True  # (its pool's head is found again by `start_ready_raw`)
        if is_roll and (self._round is None or rnd > self._round):
            self._round = rnd
        self._running[job_id] = (kind, s.iteration, nodes, rnd)
        return (job_id, kind, s.iteration, nodes, switch, cold, rnd, first_on_pool)
