"""Discrete-event, phase-level simulator of a RollMux cluster.

The engine keeps a heap of (time, priority, seq, event). Every phase of every
iteration of every job is an event: a phase starts when the group's intra-group
runtime (the core's round-robin `GroupRuntime`) says so and ends after its
actual duration, drawn uniformly in [min, max] from the run's seed, plus the
warm-start switch overhead when the node last ran another job's phase.
Arrivals call the policy's planner (for the RollMux-family policies: the same
`place` / `apply_placement` / `remove_job` the live planner calls); RETRY jobs
wait in a FIFO queue that is retried after every departure; INFEASIBLE jobs are
reported and skipped. Departures release the nodes nobody uses any more.

Everything the run needs is injected: the trace, the cluster spec, the policy
adapter and the seed. The engine reads no clock except `time.perf_counter`,
which only measures the planner's decision latency (a measurement, not state).
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from scheduler.cluster import initial_state
from scheduler.collector import gc_paused
from scheduler.config import PlannerConfig
from scheduler.model import (
    ClusterSpec,
    Group,
    JobProfile,
    Member,
    PhaseKind,
    Placement,
    PlacementStatus,
    Pool,
)
from scheduler.planner import update_job
from scheduler.planner.consolidation import restart_seconds
from scheduler.planner.objective import JobProgress
from scheduler.replan import Move as ReplanMove
from scheduler.replan import (
    Outlook,
    Stay,
    Yield,
    admission_profile,
    decide,
    move_profile,
    resolve,
)
from scheduler.sim.allocation import EPS, NodeLedger
from scheduler.sim.drift import CHECK_EVERY, MAX_REPLANS, WINDOW, Observer, drifted
from scheduler.sim.protocols import Policy, Runtime, SimulationError
from scheduler.sim.records import (
    JobRecord,
    LiveProgress,
    MoveRecord,
    PhaseRecord,
    RunResult,
    draw_durations,
)

if TYPE_CHECKING:
    from scheduler.sim.tenancy import Tenancy

# Event priorities at equal times: a phase that ends frees its nodes (and perhaps a
# whole job) before an arrival at the same instant is planned.
PHASE_END = 0
ARRIVAL = 1
RETRY_TIMER = "retry"  # an ARRIVAL-priority event with this group id: retry the queue

# A heap entry: (time, priority, seq, job id, phase kind or None, group id). Plain
# tuples: comparing dataclasses was most of the engine's time on a 200-job trace.
_Event = tuple[float, int, int, str, PhaseKind | None, str]


class Simulation:
    """One run of one policy over one trace (use `simulate`)."""

    def __init__(
        self,
        jobs: Sequence[JobProfile],
        spec: ClusterSpec,
        policy: Policy,
        *,
        seed: int,
        record_phases: bool = False,
        progress: Callable[[float], None] | None = None,
        drift: Mapping[str, str] | None = None,
        replan_drift: bool = False,
        tenancy: Tenancy | None = None,
    ) -> None:
        self.spec = spec
        # tenants' quotas, fair-share order and preemption (scheduler.sim.tenancy)
        self.tenancy = tenancy
        self.retry_timer_at: float | None = None
        self.policy = policy
        # the planner's config follows the run: its movers' drift hedge is in force only
        # while drift re-planning is (`PlannerConfig.drift_hedge`)
        use_replan = getattr(policy, "use_drift_replan", None)
        if use_replan is not None:
            use_replan(replan_drift)
        self.seed = seed
        self.record_phases = record_phases
        self.progress = progress
        self.state = initial_state(spec, jobs)
        self.node_pool = {node.name: node.pool for node in self.state.nodes}
        self.node_price = {node.name: node.price_per_hour for node in self.state.nodes}
        self.jobs: dict[str, JobRecord] = {}
        for job in jobs:
            if job.id in self.jobs:
                raise SimulationError(f"duplicate job id {job.id!r}")
            roll: Sequence[float]
            train: Sequence[float]
            roll, train = draw_durations(job, seed)
            template = (drift or {}).get(job.id, "none")
            if template != "none":
                roll, train = drifted(roll, train, template)
            self.jobs[job.id] = JobRecord(profile=job, roll=roll, train=train, drift=template)
        # Drift re-planning: the estimates each job is planned with now (learned ones
        # after a re-plan) and the iteration of its last check.
        self.replan_drift = replan_drift
        self.config: PlannerConfig = getattr(policy, "config", None) or PlannerConfig()
        self.planned_profile: dict[str, JobProfile] = {}
        self.drift_checked: dict[str, int] = {}
        self.observer = Observer()
        # jobs that left their nodes to the partners they broke and wait to resume:
        # the profile they are resubmitted with, and their restart
        self.resume: dict[str, tuple[JobProfile, float]] = {}
        self.heap: list[_Event] = []
        self.seq = 0
        self.now = 0.0
        self.runtimes: dict[str, Runtime] = {}
        self.group_of: dict[str, str] = {}
        self.next_group = 0
        self.waiting: deque[str] = deque()
        # node allocations (the ledger's own dict and lists, read here by name)
        self.ledger = NodeLedger(self.node_pool)
        self.allocated_since = self.ledger.allocated_since
        self.allocations = self.ledger.allocations
        self.peak_nodes = self.ledger.peak_nodes
        self.busy_s: dict[str, float] = {}
        self.node_free_at: dict[str, float] = {}
        self.admissions = {
            "direct_packing": 0,
            "rollout_scaling": 0,
            "new_group": 0,
            "colocated": 0,
        }
        self.latencies: list[float] = []
        self.phases: list[PhaseRecord] = []
        self.total_phases = 2 * sum(job.iterations for job in jobs)
        self.done_phases = 0
        self.next_progress = 0.0
        self.to_move: set[str] = set()  # jobs to re-plan at their next iteration boundary
        self.restart_due: dict[str, float] = {}  # a mover's restart, paid by its next phase
        self.moves: list[MoveRecord] = []
        self.rollout_factor = {p: spec.gpu_type(p).rollout_speed_factor for p in Pool}
        self.tail_end: dict[str, float] = {}  # job -> when its migrated rollout's tail ends
        self.tail_saved_s = 0.0  # node-seconds long-tail migration handed to the next rollout
        self._groups_seen: tuple[Group, ...] | None = None
        self._group_by_id: dict[str, Group] = {}
        self._shares: dict[tuple[str, tuple[str, ...]], tuple[Group, bool]] = {}
        # a job alone in a disaggregated group -> since when (or its last re-plan)
        self.alone_since: dict[str, float] = {}

    # -- event heap -----------------------------------------------------------
    def _push(self, event: _Event) -> None:
        heapq.heappush(self.heap, event)

    def _new_seq(self) -> int:
        self.seq += 1
        return self.seq

    # -- node accounting --------------------------------------------------------
    def _sync_allocation(self) -> None:
        """Open/close node-allocation intervals to match the groups in `self.state`."""
        self.ledger.sync(self.state.groups, self.now, self.node_free_at)
        if self.tenancy is not None:
            self.tenancy.tick(self)

    # -- planning ---------------------------------------------------------------
    def _target_group(self, placement: Placement) -> str:
        """Return the group a placement joins, naming a new one when it opens one."""
        if placement.group_id is not None:
            return placement.group_id
        self.next_group += 1
        return f"g{self.next_group:04d}"

    def _learn_nodes(self) -> None:
        """Learn the pool and price of nodes the state gained.

        The core planner names fresh nodes for an unbounded pool when the state has
        none free; the accounting needs their pool and price.
        """
        if len(self.state.nodes) != len(self.node_pool):
            for node in self.state.nodes:
                self.node_pool.setdefault(node.name, node.pool)
                self.node_price.setdefault(node.name, node.price_per_hour)

    def _try_place(self, job_id: str) -> PlacementStatus:
        if self.tenancy is None:
            return self._place(job_id)
        if not self.tenancy.may_admit(self, job_id):
            status = PlacementStatus.RETRY
        else:
            status = self._place(job_id)
        if status is PlacementStatus.FIT:
            self.tenancy.started(self, job_id)
        elif status is PlacementStatus.RETRY:
            again = self.tenancy.blocked(self, job_id)
            if again is not None and (self.retry_timer_at is None or again < self.retry_timer_at):
                self.retry_timer_at = again
                self._push((again, ARRIVAL, self._new_seq(), "", None, RETRY_TIMER))
        return status

    def _place(self, job_id: str) -> PlacementStatus:
        if job_id in self.resume:
            return self._resume(job_id)
        record = self.jobs[job_id]
        job = record.profile
        started = time.perf_counter()
        # a job too short to be re-planned in time is planned stricter for its whole run,
        # its own admission included (scheduler.replan.young_profile)
        planned = self._held(job_id, job)
        result = self.policy.place(planned, self.state, self._progress(), self.now)
        self.latencies.append(time.perf_counter() - started)
        if result.status is not PlacementStatus.FIT or result.placement is None:
            if result.status is PlacementStatus.INFEASIBLE:
                record.status = "infeasible"
            record.reason = result.reason
            return result.status
        placement = result.placement
        group_id = self._target_group(placement)
        self.state = self.policy.apply(self.state, job, placement, group_id)
        self._learn_nodes()
        self._sync_allocation()
        runtime = self.runtimes.get(group_id)
        if runtime is None:
            colocated = not placement.rollout_nodes
            runtime = self.policy.runtime(group_id, self.spec, colocated=colocated)
            self.runtimes[group_id] = runtime
        member = Member(
            job=job, rollout_nodes=placement.rollout_nodes, train_nodes=placement.train_nodes
        )
        runtime.admit(member, iterations=job.iterations)
        if planned is not job:  # held stricter for its whole run (scheduler.replan)
            self.state = update_job(self.state, planned)
        record.status = "running"
        record.admitted_s = self.now
        record.group_id = group_id
        record.strategy = str(placement.strategy)
        record.reason = result.reason
        record.predicted_slowdown = result.predicted_slowdown.get(job.id)
        self.admissions[str(placement.strategy)] = (
            self.admissions.get(str(placement.strategy), 0) + 1
        )
        self.group_of[job_id] = group_id
        self._note_alone(group_id)
        # co-located jobs the planner moves into the newcomer's group (next boundary)
        self.to_move.update(self.policy.arrival_movers())
        self._start_ready(group_id)
        return PlacementStatus.FIT

    def _retry_waiting(self) -> None:
        # First fit over the FIFO queue: a small job behind a large one may start.
        still: deque[str] = deque()
        if self.tenancy is not None:
            self.waiting = deque(self.tenancy.order(self, list(self.waiting)))
        while self.waiting:
            job_id = self.waiting.popleft()
            self.jobs[job_id].retries += 1
            status = self._try_place(job_id)
            if status is PlacementStatus.RETRY:
                still.append(job_id)
        self.waiting = still

    # -- phases -----------------------------------------------------------------
    def _group(self, group_id: str) -> Group | None:
        if self._groups_seen is not self.state.groups:
            self._groups_seen = self.state.groups
            self._group_by_id = {g.id: g for g in self.state.groups}
        return self._group_by_id.get(group_id)

    def _note_alone(self, group_id: str) -> None:
        """Start the clock of a job left alone in a disaggregated group."""
        group = self._group(group_id)
        if group is not None and len(group.members) == 1 and group.rollout_nodes:
            self.alone_since.setdefault(group.members[0].job.id, self.now)

    def _lone_due(self, job_id: str, group_id: str) -> bool:
        """Return True when a job alone has waited long enough for a partner
        (the policy's `lone_wait_s`) to be re-planned at this iteration boundary."""
        group = self._group(group_id)
        if group is None or len(group.members) != 1 or not group.rollout_nodes:
            self.alone_since.pop(job_id, None)
            return False
        since = self.alone_since.setdefault(job_id, self.now)
        wait = self.policy.lone_wait_s(self.state, group.members[0].job)
        if wait is None or self.now - since < wait - EPS:
            return False
        self.alone_since[job_id] = self.now  # re-planned now; again after another wait
        return True

    def _shares_rollout_nodes(self, group_id: str, job_id: str, nodes: tuple[str, ...]) -> bool:
        """Return True when another member of the group is pinned to one of `nodes`."""
        group = self._group(group_id)
        if group is None:
            return False
        key = (job_id, nodes)
        seen = self._shares.get(key)  # the answer for this group object (it is immutable)
        if seen is not None and seen[0] is group:
            return seen[1]
        mine = set(nodes)
        hit = any(
            m.job.id != job_id and not mine.isdisjoint(m.rollout_nodes) for m in group.members
        )
        self._shares[key] = (group, hit)
        return hit

    def _start_ready(self, group_id: str) -> None:
        starts = self.runtimes[group_id].start_ready_raw()
        if not starts:
            return
        # (locals: this runs at every phase event)
        long_tail = self.policy.long_tail
        record_phases, seq = self.record_phases, self.seq
        jobs, node_pool, free_at, busy_s = self.jobs, self.node_pool, self.node_free_at, self.busy_s
        allocated, heap, now = self.allocated_since, self.heap, self.now
        switch_s, rollout_factor = self.spec.switch_overhead_s, self.rollout_factor
        restart_due, tail_end = self.restart_due, self.tail_end
        shares, group = self._shares, None
        busy_after = now + EPS
        for job_id, kind, index, nodes, switch, _cold, _round, _first in starts:
            record = jobs[job_id]
            start_s = now
            drawn = 0.0
            migrates = False  # a rollout whose tail long-tail migration may consolidate
            if kind is PhaseKind.ROLLOUT:
                pool = node_pool[nodes[0]]
                # on the training type (co-located) a rollout takes f x its time
                duration = drawn = record.roll[index] * rollout_factor[pool]
                if long_tail is not None and pool is Pool.ROLLOUT:
                    # `_shares_rollout_nodes`'s kept answer, read here (every rollout)
                    if group is None:
                        group = self._group(group_id)
                    seen = shares.get((job_id, nodes))
                    if seen is not None and seen[0] is group:
                        migrates = seen[1]
                    else:
                        migrates = self._shares_rollout_nodes(group_id, job_id, nodes)
            elif kind is PhaseKind.TRAIN:
                duration = drawn = record.train[index]
                if tail_end:
                    # long-tail migration: the rollout's nodes were released before its
                    # slowest response finished; its training starts when that one does
                    start_s = max(now, tail_end.pop(job_id, now))
            else:
                duration = record.profile.t_sync_s  # weight sync: not drawn
            if switch:
                duration += switch_s
            restart = restart_due.pop(job_id, 0.0) if restart_due else 0.0
            duration += restart
            end = start_s + duration
            release = end  # when the phase's nodes are free for another phase
            if migrates:
                assert long_tail is not None
                if record.tail_fractions is None:
                    record.tail_fractions = long_tail.tail_start_fractions(
                        record.profile, self.seed
                    )
                tail_start = end - drawn + record.tail_fractions[index] * drawn
                release = long_tail.release_s(start_s, tail_start, end)
                tail_end[job_id] = end
                self.tail_saved_s += end - release
            held = release - start_s
            for node in nodes:
                if free_at.get(node, 0.0) > busy_after:
                    raise SimulationError(
                        f"node {node} asked to start {job_id}/{kind} at "
                        f"{now:.3f}s while busy until {free_at[node]:.3f}s"
                    )
                if node not in allocated:
                    raise SimulationError(f"node {node} runs a phase but is not allocated")
                free_at[node] = release
                busy_s[node] = busy_s.get(node, 0.0) + held
            if record_phases:
                phase = (job_id, kind, index, tuple(nodes), start_s, end, switch)
                self.phases.append(PhaseRecord(*phase, restart, release))
            seq += 1
            heapq.heappush(heap, (release, PHASE_END, seq, job_id, kind, group_id))
        self.seq = seq

    def _progress(self) -> LiveProgress:
        return LiveProgress(self.jobs)

    def _phase_end(self, job_id: str, kind: PhaseKind, group_id: str) -> None:
        done = self.runtimes[group_id].end_phase(job_id, kind)
        self.done_phases += 1
        if kind is not PhaseKind.TRAIN and not done and self.progress is None:
            # a rollout or a sync: not an iteration boundary, nothing to decide or count
            # (the path of two phase events in three, kept short)
            self._start_ready(group_id)
            return
        record = self.jobs[job_id]
        if kind is PhaseKind.TRAIN:
            i = record.iterations_done
            record.solo_done_s += record.roll[i] + record.train[i] + record.profile.t_sync_s
            record.iterations_done += 1
            if i == 0:
                record.first_boundary_s = self.now
            if self.tenancy is not None:
                self.tenancy.boundary(job_id, self.now)
        if done:
            # The runtime dropped the member itself when it finished its last phase.
            record.status = "done"
            record.finished_s = self.now
            self.to_move.discard(job_id)
            self.state = self.policy.remove(self.state, job_id)
            self.group_of.pop(job_id, None)
            if not any(g.id == group_id for g in self.state.groups):
                del self.runtimes[group_id]
            # Consolidation: survivors the planner would move (and, when its group is
            # gone, the jobs alone in a group the freed nodes may serve better) are
            # re-planned at their next iteration boundary (a checkpoint), on the state
            # of then.
            self.to_move.update(
                self.policy.on_departure(self.state, group_id, self.now, self._progress())
            )
            self.alone_since.pop(job_id, None)
            self._note_alone(group_id)
            self._sync_allocation()
            if group_id in self.runtimes:
                self._start_ready(group_id)
            self._retry_waiting()
        elif kind is not PhaseKind.TRAIN:
            self._start_ready(group_id)  # not an iteration boundary: nothing to decide
        elif self.tenancy is not None and self.tenancy.must_yield(job_id):
            self._preempted(job_id, group_id)
        elif job_id in self.to_move or self._lone_due(job_id, group_id):
            self.to_move.discard(job_id)
            if not self._move(job_id, group_id):
                self._start_ready(group_id)
        elif self.replan_drift:
            if not self._drift_replan(job_id, group_id):
                self._start_ready(group_id)
        else:
            self._start_ready(group_id)
        if self.progress is not None and self.total_phases:
            fraction = self.done_phases / self.total_phases
            if fraction >= self.next_progress:
                self.progress(min(1.0, fraction))
                self.next_progress = fraction + 0.01

    def _move(self, job_id: str, group_id: str) -> bool:
        """Move `job_id` (between two iterations) if the planner still wants to."""
        planned = self.policy.move(self.state, job_id, self.now, self._progress())
        if planned is None:
            return False
        if planned[1].placement.group_id is None:  # a new (co-located) group
            self.next_group += 1
            new_id = f"g{self.next_group:04d}"
            planned = self.policy.move(
                self.state, job_id, self.now, self._progress(), new_group_id=new_id
            )
            assert planned is not None
        self.state, move = planned
        record = self.jobs[job_id]
        target = move.group_id
        self.runtimes[group_id].remove(job_id)
        if not any(g.id == group_id for g in self.state.groups):
            del self.runtimes[group_id]
        self._sync_allocation()
        if target not in self.runtimes:
            colocated = not move.placement.rollout_nodes
            self.runtimes[target] = self.policy.runtime(target, self.spec, colocated=colocated)
        member = Member(record.profile, move.placement.rollout_nodes, move.placement.train_nodes)
        self.runtimes[target].admit(
            member, iterations=record.profile.iterations, start_iteration=record.iterations_done
        )
        self.restart_due[job_id] = move.restart_s
        record.restart_s += move.restart_s
        record.moves += 1
        record.group_id = target
        self.group_of[job_id] = target
        self.moves.append(
            MoveRecord(self.now, job_id, group_id, target, move.saving_usd, move.restart_s)
        )
        self.alone_since.pop(job_id, None)
        self._note_alone(group_id)
        self._start_ready(target)
        if group_id in self.runtimes:
            self._start_ready(group_id)
        self._retry_waiting()
        return True

    def _drift_replan(self, job_id: str, group_id: str) -> bool:
        """Project its group's SLOs to the end of their runs and move the job out if it must,
        every `drift.CHECK_EVERY` iterations (scheduler.replan); True when it moved."""
        record = self.jobs[job_id]
        done = record.iterations_done
        if done - self.drift_checked.get(job_id, 0) < CHECK_EVERY or record.replans >= MAX_REPLANS:
            return False
        if done >= record.profile.iterations:
            return False
        self.drift_checked[job_id] = done
        group = self._group(group_id)
        assert group is not None and record.admitted_s is not None
        outlooks = {m.job.id: self._outlook(m.job.id) for m in group.members}
        k = min(WINDOW, done)
        # (typed sums: mypyc adds two untyped `sum`s as ints, scheduler.compiled)
        rolled: float = sum(record.roll[done - k : done])
        trained: float = sum(record.train[done - k : done])
        recent = (rolled + trained) / k
        decision = decide(
            group.members,
            outlooks,
            job_id,
            record.profile,
            recent_solo_s=recent,
            slowdown_so_far=(self.now - record.admitted_s) / record.solo_done_s,
            switch_overhead_s=self.spec.switch_overhead_s,
            movable={j for j in outlooks if self.jobs[j].replans < MAX_REPLANS},
            others_drift=any(o.drifts for j, o in outlooks.items() if j != job_id),
        )
        if not decision.move or decision.profile is None:
            if decision.profile is not None:  # planned from now with what it learned
                self._plan_in_place(job_id, decision.profile)
            return False
        learned, restart = self._held(job_id, decision.profile), decision.restart_s
        remaining = record.profile.iterations - done
        # the one re-plan decision (scheduler.replan.resolve); this applies what it returns
        outcome = self._resolve(
            job_id,
            group_id,
            for_others=decision.for_others,
            joining=replace(learned, iterations=remaining),  # what it adds from now
            outlooks=outlooks,
            restart_s=restart,
            progress=self._progress(),
        )
        if isinstance(outcome, Yield):
            self._yield(job_id, group_id, learned, restart)
            return True
        if isinstance(outcome, Stay):
            # it stays: planned from now with its forecast, as a job that trends and
            # stays is, so admission and consolidation see what it has become (before,
            # its stale profile let the planner pack it, or a newcomer, where the
            # projection had just found an SLO broken)
            outlook = outlooks[job_id]
            self._plan_in_place(job_id, move_profile(outlook, record.profile, restart_s=0.0))
            return False
        placement, without = outcome.result.placement, outcome.without
        assert placement is not None
        target = self._target_group(placement)
        self.runtimes[group_id].remove(job_id)
        self.state = self.policy.apply(without, learned, placement, target)
        if not any(g.id == group_id for g in self.state.groups):
            del self.runtimes[group_id]
        self._resume_in(job_id, learned, placement, target, restart)
        record.replans += 1
        self._start_ready(target)
        if group_id in self.runtimes:
            self._start_ready(group_id)
        self._retry_waiting()
        return True

    def _preempted(self, job_id: str, group_id: str) -> None:
        """Yield `job_id` at this iteration boundary (its checkpoint) to the job that
        preempts it (scheduler.sim.tenancy); it waits in the queue and resumes from
        here after its restart, as a drift yield does, without counting as a re-plan."""
        assert self.tenancy is not None
        record = self.jobs[job_id]
        profile = self.planned_profile.get(job_id, record.profile)
        replans = record.replans
        self._yield(job_id, group_id, profile, restart_seconds(record.profile))
        record.replans = replans
        self.tenancy.yielded(self, job_id)
        self._retry_waiting()

    def _resolve(
        self,
        job_id: str,
        group_id: str,
        *,
        for_others: Sequence[str],
        joining: JobProfile,
        outlooks: Mapping[str, Outlook],
        restart_s: float,
        progress: Mapping[str, JobProgress],
    ) -> Stay | ReplanMove | Yield:
        """Return the re-plan decision for a job that must leave (`scheduler.replan.resolve`)
        on the state of now, through this run's policy (its admission, removal and
        destination check)."""
        return resolve(
            job_id=job_id,
            group_id=group_id,
            must_go=True,
            for_others=for_others,
            joining=joining,
            outlooks=outlooks,
            restart_s=restart_s,
            state=self.state,
            config=self.config,
            progress=progress,
            now=self.now,
            place=lambda job, state: self.policy.place(job, state, progress, self.now),
            remove=self.policy.remove,
            keeps_partners=lambda without, result: self.policy.partners_keep_slo(
                without, result, restart_s, self.now, progress
            ),
        )

    def _yield(self, job_id: str, group_id: str, profile: JobProfile, restart: float) -> None:
        """Checkpoint `job_id` and queue it first, its nodes left to the partners its
        phases would break (scheduler.replan.may_yield); it resumes at its next
        iteration, after its restart, when the planner places it (`_resume`)."""
        record = self.jobs[job_id]
        self.runtimes[group_id].remove(job_id)
        self.state = self.policy.remove(self.state, job_id)
        if not any(g.id == group_id for g in self.state.groups):
            del self.runtimes[group_id]
        self._sync_allocation()
        record.status = "waiting"
        record.group_id = None
        record.replans += 1
        self.group_of.pop(job_id, None)
        self.to_move.discard(job_id)
        self.alone_since.pop(job_id, None)
        self.resume[job_id] = (profile, restart)
        self.waiting.appendleft(job_id)
        self._note_alone(group_id)
        if group_id in self.runtimes:
            self._start_ready(group_id)

    def _resume(self, job_id: str) -> PlacementStatus:
        """Place a job that yielded its nodes (`_yield`) for the rest of its run, with what
        is left of its SLO budget now; on a FIT it resumes after its restart."""
        record = self.jobs[job_id]
        profile, restart = self.resume[job_id]
        done = record.iterations_done
        planned = admission_profile(
            profile,
            run_iterations=record.profile.iterations,
            young=self.replan_drift,
            budget=self._outlook(job_id),
            restart_s=restart,
        )
        joining = replace(planned, iterations=record.profile.iterations - done)
        result = self.policy.place(joining, self.state, self._progress(), self.now)
        if result.status is not PlacementStatus.FIT or result.placement is None:
            return PlacementStatus.RETRY
        del self.resume[job_id]
        placement = result.placement
        group_id = self._target_group(placement)
        self.state = self.policy.apply(self.state, planned, placement, group_id)
        self._resume_in(job_id, planned, placement, group_id, restart)
        record.status = "running"
        self._note_alone(group_id)
        self._start_ready(group_id)
        return PlacementStatus.FIT

    def _resume_in(
        self, job_id: str, profile: JobProfile, placement: Placement, group_id: str, restart: float
    ) -> None:
        """Admit a checkpointed job (placed, the state applied) to `group_id` at its next
        iteration, as `profile`; its first phase there pays its `restart` first."""
        record = self.jobs[job_id]
        self._learn_nodes()
        self._sync_allocation()
        if group_id not in self.runtimes:
            colocated = not placement.rollout_nodes
            self.runtimes[group_id] = self.policy.runtime(group_id, self.spec, colocated=colocated)
        member = Member(profile, placement.rollout_nodes, placement.train_nodes)
        self.runtimes[group_id].admit(
            member, iterations=record.profile.iterations, start_iteration=record.iterations_done
        )
        self.restart_due[job_id] = restart
        record.restart_s += restart
        record.group_id = group_id
        self.group_of[job_id] = group_id
        self.planned_profile[job_id] = profile

    def _held(self, job_id: str, profile: JobProfile) -> JobProfile:
        """Return `profile` as a job is planned: in re-planning runs a short one stricter,
        for its whole run (`young_profile`)."""
        whole = self.jobs[job_id].profile.iterations
        return admission_profile(profile, run_iterations=whole, young=self.replan_drift)

    def _plan_in_place(self, job_id: str, profile: JobProfile) -> None:
        """Plan a running job from now with `profile` (what it learned), held if short."""
        self.state = update_job(self.state, self._held(job_id, profile))

    def _outlook(self, job_id: str) -> Outlook:
        """Return a running job's outlook from its drawn phases (scheduler.replan)."""
        r = self.jobs[job_id]
        assert r.admitted_s is not None
        return self.observer.outlook(
            r.profile, r.roll, r.train, done=r.iterations_done,
            elapsed_s=self.now - r.admitted_s, solo_done_s=r.solo_done_s,
        )  # fmt: skip

    # -- main loop --------------------------------------------------------------
    def _loop(self) -> None:
        """Pop and handle events until the heap is empty."""
        while self.heap:
            when, priority, _seq, job_id, kind, group_id = heapq.heappop(self.heap)
            if when + EPS < self.now:
                raise SimulationError("time went backwards")
            self.now = when
            if kind is not None:
                self._phase_end(job_id, kind, group_id)
            elif group_id == RETRY_TIMER:
                self.retry_timer_at = None
                if self.waiting:
                    self._retry_waiting()
            else:
                status = self._try_place(job_id)
                if status is PlacementStatus.RETRY:
                    self.jobs[job_id].status = "waiting"
                    self.waiting.append(job_id)

    def run(self) -> RunResult:
        """Run the simulation to the end and return its raw observations."""
        for job_id, record in self.jobs.items():
            self._push((record.profile.arrival_s, ARRIVAL, self._new_seq(), job_id, None, ""))
        start = min((r.profile.arrival_s for r in self.jobs.values()), default=0.0)
        # the run makes millions of small objects and no cyclic garbage worth a scan: the
        # cyclic collector paused (scheduler.collector; ~3% of the CPU at 600 jobs), its
        # full collections no longer fall inside the planner's timed decisions
        with gc_paused():
            self._loop()
        for job_id in self.waiting:
            # Nothing is left running that could free capacity: the job can never start.
            self.jobs[job_id].status = "stuck"
        if self.allocated_since:
            raise SimulationError(
                f"nodes still allocated at the end: {sorted(self.allocated_since)[:5]}"
            )
        end = max(
            (r.finished_s for r in self.jobs.values() if r.finished_s is not None), default=start
        )
        if self.progress is not None:
            self.progress(1.0)
        return RunResult(
            policy=self.policy.name,
            spec=self.spec,
            jobs=self.jobs,
            node_pool=self.node_pool,
            node_price_per_hour=self.node_price,
            allocations=self.allocations,
            busy_s=self.busy_s,
            peak_nodes=self.peak_nodes,
            admissions=self.admissions,
            decision_latency_s=self.latencies,
            start_s=start,
            end_s=end,
            phases=self.phases,
            moves=self.moves,
            tail_saved_s=self.tail_saved_s,
        )


def simulate(
    jobs: Sequence[JobProfile],
    spec: ClusterSpec,
    policy: Policy,
    *,
    seed: int,
    record_phases: bool = False,
    progress: Callable[[float], None] | None = None,
    drift: Mapping[str, str] | None = None,
    replan_drift: bool = False,
    tenancy: Tenancy | None = None,
) -> RunResult:
    """Simulate `jobs` on `spec` under `policy` with durations drawn from `seed`.

    `drift` gives jobs a drift template (scheduler.sim.drift; default none), and
    `replan_drift` re-plans drifting jobs (default: the static planner).
    """
    return Simulation(
        jobs,
        spec,
        policy,
        seed=seed,
        record_phases=record_phases,
        progress=progress,
        drift=drift,
        replan_drift=replan_drift,
        tenancy=tenancy,
    ).run()
