"""Planning: place the queued jobs (the paper's Algorithm 1, run by the core, persisted here).

A pass holds the planner lock for its whole length (one pass at a time, whichever worker
runs it) but writes in short transactions: the queued jobs are claimed and placed in
batches, so no transaction holds job or group rows for long. Jobs that did not fit are
not planned again until the capacity they wait for changes (requeue on change, as
Kueue does): a pass records the capacity it saw in `PlanWait`, and the next pass skips
them while `capacity_key()` is unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.db import connection, models, transaction
from django.db.models import Count, Exists, Max, OrderBy, OuterRef, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from rollmux_web import events, metrics
from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.transactions import atomic_with_retry
from rollmux_web.workflow import converters, levers, snapshot, sync
from rollmux_web.workflow import starts as measured_starts
from rollmux_web.workflow.models import (
    EndReason,
    ExecutionGroup,
    NodeAllocation,
    PhaseRecord,
    Placement,
    PlanWait,
)
from rollmux_web.workflow.services import moves, profiling
from rollmux_web.workflow.services.effects import Effects
from rollmux_web.workflow.services.groups import order_context, phase_rows, runtime_load
from rollmux_web.workflow.services.locks import is_postgres, plan_session_lock
from rollmux_web.workflow.services.orders import Pools, phase_order
from scheduler.group_runtime import GroupRuntime, PhaseStart
from scheduler.model import ClusterState, JobProfile, Member, PlacementResult, PlacementStatus
from scheduler.model import Placement as PlacementDecision

if TYPE_CHECKING:
    from scheduler.planner.objective import JobProgress

BATCH_JOBS = 100  # queued jobs claimed per transaction, at most
BATCH_MIN_JOBS = 10  # ... and at least
BATCH_SECONDS = 0.25  # a transaction commits what it decided after this long
GROUP_IDS_BLOCK = 32  # new group ids taken from the sequence at once
STALE_RETRIES = 3  # snapshots re-read for one job whose group changed under the batch


@dataclass
class PlanSummary:
    """What a planning pass did."""

    ran: bool  # False: another pass held the lock
    placed: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)
    infeasible: dict[int, str] = field(default_factory=dict)
    skipped: int = 0  # waiting jobs not planned again: the capacity they wait for is unchanged


class _StaleSnapshot(Exception):
    """A group the snapshot placed a job into was released meanwhile (its last member left
    after the snapshot was read): read the cluster again."""


def capacity_key() -> str:
    """Return a fingerprint of what can make a waiting job fit: nodes freed (an allocation
    ended), members leaving (headroom in a group), the inventory (nodes added, taken up,
    drained, down, resized). The planner's own placements leave it unchanged."""
    freed = NodeAllocation.objects.aggregate(last=Max("end"))["last"]
    left = Placement.objects.aggregate(last=Max("ended_at"))["last"]
    inventory = sorted(
        (row["state"], row["n"], row["gpus"], str(row["changed"]))
        for row in Node.objects.order_by()
        .values("state")
        .annotate(n=Count("pk"), gpus=Sum("gpus"), changed=Max("updated_at"))
    )
    return f"{freed}|{left}|{inventory}"[:255]


def queue_plan(
    *, now: datetime | None = None, on_start: Callable[[], None] | None = None
) -> PlanSummary:
    """Run one planning pass: place every queued job the cluster can take now.

    1. take the planner lock (one pass at a time, whichever worker runs it), then call
       `on_start` (the pass's trigger learns that a pass now starts: requests from here on
       need the next one);
    2. read the queued jobs (priority desc, then those back from a yield
       (`resuming_first`), then submission time); leave out those waiting
       for a capacity that has not changed since they last tried;
    3. snapshot nodes and active groups with the members' progress
       (`snapshot.planner_input`);
    4. per batch of jobs, one transaction: claim the jobs still queued (row locks on the
       job rows only), decide each with the simulator's rollmux adapter and the live levers
       (`levers.place_job`), applying each decision to the snapshot so the next job sees
       it; write the batch's decisions at its end, one statement per table (`_Writes`:
       Placement, ExecutionGroup for a new group, NodeAllocations from `now`, taken after
       the lock and the snapshot, the job rows, the group runtimes that admitted them and
       the phases they start);
    5. leave RETRY jobs queued with their reason (and the capacity they saw), fail
       INFEASIBLE ones;
    6. on each commit: dispatch the started phases.
    """
    with plan_session_lock() as got:
        if not got:
            return PlanSummary(ran=False)
        if on_start is not None:
            on_start()
        return _pass(now)


def _profiles_start(now: datetime | None) -> None:
    """0. Start the profiling runs that free nodes allow (jobs without phase times run alone
    first: services.profiling), before the planner takes nodes for the queue."""

    def start() -> None:
        effects = Effects()
        profiling.profiles_start(now=now or timezone.now(), effects=effects)
        effects.schedule()

    if Job.objects.filter(status=JobStatus.PROFILING, cancel_requested=False).exists():
        atomic_with_retry(start, what="profiling runs")  # (no transaction when none waits)


def _pass(now: datetime | None) -> PlanSummary:
    summary = PlanSummary(ran=True)
    _profiles_start(now)
    moves.consolidation_plan()  # survivors of departures to move at their next boundary
    key = capacity_key()
    rows = (
        Job.objects.filter(status=JobStatus.QUEUED, cancel_requested=False)
        .order_by(*queue_order())
        .values_list("pk", "plan_wait__capacity", "reason")
    )
    todo = []
    for pk, waited_on, reason in rows:
        if waited_on == key:
            summary.waiting[pk] = reason
            summary.skipped += 1
        else:
            todo.append(pk)
    if not todo:
        return summary
    try:
        view = snapshot.planner_input()
    except snapshot.NoPoolConfigured as exc:
        _no_pool(todo, str(exc), key, summary)
        return summary
    # read once for the whole pass: node ids by name, the jobs' measured sync times, levers
    run = _Run(
        key=key,
        now=now,
        policy=levers.arrival_policy(),
        nodes=dict(Node.objects.values_list("name", "pk")),
        measured=sync.measured_s(todo),
        started=measured_starts.measured_starts(todo),
    )
    claim = BATCH_JOBS
    while todo:
        view, done = _batch_place(todo[:claim], view, run, summary)
        todo = todo[done:]
        # claim about what a batch gets through in BATCH_SECONDS (a job claimed and left
        # for the next batch was read and locked for nothing)
        claim = min(BATCH_JOBS, max(BATCH_MIN_JOBS, 2 * done))
    return summary


def resuming_first() -> OrderBy:
    """Return the ordering term that puts a job back from a yield (services.moves: its last
    placement ended `yielded`) before the other queued jobs of its priority: it left its
    nodes to the members it would have slowed, and `scheduler.replan.may_yield` allowed it
    only because it resumes as soon as capacity frees (the simulator queues it first:
    `_yield`'s appendleft). Priority stays first: it is the operator's explicit order."""
    yielded = Placement.objects.filter(
        job_id=OuterRef("pk"), attempt=OuterRef("attempts"), end_reason=EndReason.YIELDED
    )
    return Exists(yielded).desc()


def queue_order() -> tuple[Any, ...]:
    """Return the planning order of queued jobs: priority desc, then a job back from a yield
    (`resuming_first`), then submission time."""
    return ("-priority", resuming_first(), "submitted_at", "pk")


def _no_pool(job_ids: list[int], why: str, key: str, summary: PlanSummary) -> None:
    def record() -> None:
        for job in Job.objects.filter(pk__in=job_ids, status=JobStatus.QUEUED):
            _set_reason(job, f"waiting: {why}")
        _waits_record(job_ids, key)

    atomic_with_retry(record, what="planning (no pool)")
    summary.waiting.update(dict.fromkeys(job_ids, why))


@dataclass
class _Run:
    """What a pass reads once for all its batches."""

    key: str  # the capacity a waiting job waits on (`capacity_key`)
    now: datetime | None
    policy: Any  # the simulator's rollmux adapter with the live levers (levers.arrival_policy)
    nodes: dict[str, int]  # node ids by name
    measured: dict[int, float]  # measured sync seconds of the pass's jobs (sync.measured_s)
    # measured warm and cold starts of the pass's jobs that ran before (starts.measured_starts)
    started: dict[int, measured_starts.MeasuredStarts] = field(default_factory=dict)

    def node_id(self, name: str) -> int:
        if name not in self.nodes:  # a node added during the pass (a snapshot read again)
            self.nodes.update(Node.objects.values_list("name", "pk"))
        return self.nodes[name]


@dataclass
class _Decided:
    """What a batch decided (its summary part) and the snapshot it leaves."""

    view: tuple[ClusterState, dict[str, JobProgress]]
    placed: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)
    infeasible: dict[int, str] = field(default_factory=dict)
    again: set[int] = field(default_factory=set)  # stale every time: planned again next pass
    done: int = 0  # job ids of the batch gone through (the rest go to the next one)


def _claim(job_ids: list[int]) -> list[Job]:
    """Lock and return the batch's jobs still queued, in planning order.

    Lock only the job rows (not the tenant / SLO class rows a join would lock too:
    submissions take FOR KEY SHARE on those), and only as a no-key update, which phase
    records and placements referencing the job (FOR KEY SHARE) do not wait on. Jobs
    cancelled or placed since the read drop out here (the conditional claim).
    """
    return list(
        Job.objects.select_for_update(of=("self",), no_key=True)
        .filter(pk__in=job_ids, status=JobStatus.QUEUED, cancel_requested=False)
        .select_related("slo_class", "tenant")
        .order_by(*queue_order())
    )


def _batch_place(
    job_ids: list[int],
    view: tuple[ClusterState, dict[str, JobProgress]],
    run: _Run,
    summary: PlanSummary,
) -> tuple[tuple[ClusterState, dict[str, JobProgress]], int]:
    """Claim and place one batch of queued jobs in one transaction; return the snapshot
    (`view`: the state and its members' progress, `snapshot.planner_input`) with its
    placements applied (a rolled-back batch leaves the caller's snapshot as it was) and how
    many of `job_ids` it went through. Each job is placed as the simulator's rollmux places
    it (`levers.place_job`); what the batch decides is written at its end, one statement
    per table (`_Writes`)."""

    def batch() -> _Decided:
        began = time.perf_counter()
        jobs = _claim(job_ids)
        # After the lock and the snapshot: an allocation this batch creates never starts
        # before the end of the allocation it follows (the snapshot saw that end).
        writes = _Writes(run.now or timezone.now(), run, _queued_since(jobs))
        effects = Effects()
        out = _Decided(view, done=len(job_ids))
        down: str | None = None  # the nodes down with a reason, read at the first wait
        for index, job in enumerate(jobs):
            if index and time.perf_counter() - began > BATCH_SECONDS:
                # commit what is decided: the rest goes to the next transaction
                out.done = job_ids.index(job.pk)
                break
            result = _place_one(job, out, writes, effects)
            if result.status is PlacementStatus.FIT and result.placement is not None:
                out.placed.append(job.pk)
            elif result.status is PlacementStatus.RETRY:
                if down is None:
                    down = _down_note()
                writes.reason(job, result.reason + down)
                out.waiting[job.pk] = result.reason
            else:
                job.status = JobStatus.FAILED
                job.reason = f"infeasible: {result.reason}"[:500]
                job.error = result.reason
                job.finished_at = writes.now
                job.save(update_fields=["status", "reason", "error", "finished_at", "updated_at"])
                events.publish(events.JOB_FAILED, job=job, detail={"reason": job.reason})
                out.infeasible[job.pk] = result.reason
        writes.flush(effects)
        # (a job left for the next pass records no wait: it is planned again regardless)
        _waits_record([pk for pk in out.waiting if pk not in out.again], run.key)
        PlanWait.objects.filter(job_id__in=out.placed + list(out.infeasible)).delete()
        effects.replan = effects.replan or bool(out.again)
        effects.schedule()
        return out

    out = atomic_with_retry(batch, what="planning batch")
    summary.placed += out.placed
    summary.waiting.update(out.waiting)
    summary.infeasible.update(out.infeasible)
    return out.view, out.done


def _place_one(job: Job, out: _Decided, writes: _Writes, effects: Effects) -> PlacementResult:
    """Place one claimed job on the batch's snapshot (`out.view`, advanced on a FIT)."""
    run = writes.run
    profile = converters.job_profile(job, t_sync_s=sync.t_sync_s(job, run.measured))
    # a job that ran before (resubmitted, moved, back from a yield): its measured starts
    profile = measured_starts.with_measured_starts(profile, run.started.get(job.pk))
    decided = time.perf_counter()
    state, progress = out.view
    now_s = writes.now.timestamp()
    asked = snapshot.held_young(profile, iterations=job.iterations)  # a short job: stricter
    # a job back from a yield: what is left of its SLO budget (the simulator's _resume)
    asked = moves.resume_profile(job, asked, writes.now)
    result = levers.place_job(asked, state, progress, policy=run.policy, now_s=now_s)
    for _ in range(STALE_RETRIES):
        if result.status is not PlacementStatus.FIT or result.placement is None:
            break
        try:
            out.view = (writes.placement(job, profile, result, state), progress)
            break
        except _StaleSnapshot:
            # a departure committed while this batch waited for the group's lock: write
            # what the batch decided so far (the new snapshot sees it), read it again
            writes.flush(effects)
            state, progress = snapshot.planner_input()
            writes.now = run.now or timezone.now()  # after this snapshot, as above
            out.view = (state, progress)
            result = levers.place_job(asked, state, progress, policy=run.policy, now_s=now_s)
    else:  # stale every time: the cluster churns; the next pass tries again
        result = PlacementResult(PlacementStatus.RETRY, "the cluster changed; planning again")
        out.again.add(job.pk)
    metrics.observe_admission(result.status.name.lower(), time.perf_counter() - decided)
    return result


def _placement_persist(
    job: Job,
    profile: JobProfile,
    result: PlacementResult,
    state: ClusterState,
    now: datetime,
    effects: Effects,
    nodes: dict[str, int],
) -> ClusterState:
    """Persist one FIT decision at once (a live move's new placement: services.moves) and
    return the snapshot with it applied (`nodes`: node ids by name); raises _StaleSnapshot
    when its group changed under the snapshot."""
    run = _Run(key="", now=now, policy=None, nodes=nodes, measured={})
    writes = _Writes(now, run, _queued_since([job]))
    state = writes.placement(job, profile, result, state)
    writes.flush(effects)
    return state


def _queued_since(jobs: list[Job]) -> dict[int, datetime]:
    """Return when each job entered the queue: its submission, or for a resubmitted job the
    end of the placement that put it back (one query for the batch)."""
    since = {j.pk: j.submitted_at for j in jobs}
    again = {j.pk: j.attempts for j in jobs if j.attempts}
    if again:
        for job_id, attempt, ended in Placement.objects.filter(job_id__in=list(again)).values_list(
            "job_id", "attempt", "ended_at"
        ):
            if attempt == again[job_id] and ended is not None:
                since[job_id] = ended
    return since


def _waits_record(job_ids: list[int], key: str) -> None:
    if job_ids:
        PlanWait.objects.bulk_create(
            [PlanWait(job_id=pk, capacity=key) for pk in job_ids],
            update_conflicts=True,
            unique_fields=["job"],
            update_fields=["capacity"],
        )


def _down_note() -> str:
    """Return "; down: <node> (<why>)" for the nodes down with a reason (their Ray node died,
    is missing, or lacks GPUs), so a job that waits says what the cluster is missing."""
    rows = list(
        Node.objects.filter(state=NodeState.DOWN)
        .exclude(state_reason="")
        .order_by("name")
        .values_list("name", "state_reason")[:3]
    )
    return "".join(f"; down: {name} ({why})" for name, why in rows)


def _set_reason(job: Job, reason: str) -> None:
    reason = reason[:500]
    if job.reason != reason:
        job.reason = reason
        job.save(update_fields=["reason", "updated_at"])


class _Writes:
    """A batch's decisions, written at its end (`flush`) in one statement per table.

    A group is locked (and checked against the snapshot) the first time the batch places a
    job in it; its runtime is loaded then and kept for the batch's other joiners. Placements,
    their pinned nodes, node allocations, the phases the runtimes start, the jobs' rows and
    the runtimes are written by `flush`: at the batch's end, and before a snapshot is read
    again (it must see them). The exclusion constraint on allocations and the partial
    unique index (one open allocation per node) still make a double allocation impossible:
    the flush fails and the whole batch rolls back.
    """

    def __init__(self, now: datetime, run: _Run, queued_since: dict[int, datetime]) -> None:
        self.now = now
        self.run = run
        self.queued_since = queued_since
        self.groups: dict[int, tuple[ExecutionGroup, GroupRuntime]] = {}
        self._group_ids: list[int] = []  # taken from the sequence, not used yet
        self._clear()

    def _clear(self) -> None:
        # (placement, its job, rollout node ids, training node ids)
        self.placements: list[tuple[Placement, Job, list[int], list[int]]] = []
        self.allocations: list[NodeAllocation] = []
        self.starts: list[tuple[int, list[PhaseStart]]] = []  # group id, the phases it started
        # per started phase (job, kind, iteration): its order's pools and tail nodes
        self.orders: dict[tuple[int, str, int], tuple[Pools, tuple[str, ...]]] = {}
        self.reasons: list[Job] = []  # waiting jobs whose reason changed
        self.touched: set[int] = set()  # groups whose runtime changed
        self.new_groups: list[ExecutionGroup] = []  # opened by this batch, not written yet

    def _new_group(self) -> ExecutionGroup:
        """Return a new group with its id (inserted by `flush`: its ids are taken from the
        table's sequence in blocks, so a batch opening many groups writes them at once)."""
        if not is_postgres():
            return ExecutionGroup.objects.create()
        if not self._group_ids:
            table = ExecutionGroup._meta.db_table
            with connection.cursor() as cur:
                cur.execute(
                    "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                    [table, GROUP_IDS_BLOCK],
                )
                self._group_ids = [row[0] for row in cur.fetchall()]
        group = ExecutionGroup(pk=self._group_ids.pop(0), created_at=timezone.now())
        self.new_groups.append(group)
        return group

    def reason(self, job: Job, reason: str) -> None:
        reason = reason[:500]
        if job.reason != reason:
            job.reason = reason
            self.reasons.append(job)

    def group(self, placement: PlacementDecision) -> tuple[ExecutionGroup, GroupRuntime]:
        """Return the placement's group (locked, or new) and its runtime."""
        if placement.group_id is None:
            group = self._new_group()
        else:
            gid = int(placement.group_id)
            if gid in self.groups:  # locked by this batch: it changed only by its placements
                return self.groups[gid]
            kept = (set(placement.rollout_nodes) | set(placement.train_nodes)) - set(
                placement.new_nodes
            )
            group = _lock_group_held(gid, kept)
            if group.released_at is not None or group.held != len(kept):
                raise _StaleSnapshot(group.pk)  # a member left after the snapshot: nodes went
        self.groups[group.pk] = (group, runtime_load(group))
        return self.groups[group.pk]

    def placement(
        self, job: Job, profile: JobProfile, result: PlacementResult, state: ClusterState
    ) -> ClusterState:
        """Record a FIT decision and return the snapshot with it applied."""
        from scheduler.planner import apply_placement

        placement = result.placement
        assert placement is not None  # a FIT carries its placement
        group, runtime = self.group(placement)
        # the rest of the batch sees the member as the next snapshot will (held_young)
        planned = snapshot.held_young(profile, iterations=job.iterations)
        state = apply_placement(state, planned, placement, group_id=str(group.pk))
        slowdown = result.predicted_slowdown.get(profile.id, 1.0)
        row = Placement(
            job=job,
            group=group,
            attempt=job.attempts + 1,
            strategy=placement.strategy.value,
            marginal_cost_per_hour=Decimal(str(round(result.marginal_cost_per_hour, 4))),
            predicted_slowdown=slowdown,
        )
        node_id = self.run.node_id
        self.placements.append(
            (
                row,
                job,
                [node_id(n) for n in placement.rollout_nodes],
                [node_id(n) for n in placement.train_nodes],
            )
        )
        self.allocations += [
            NodeAllocation(node_id=node_id(n), group=group, start=self.now)
            for n in placement.new_nodes
        ]
        # the wait since submission, or since the resubmission that put it back in the queue
        waited = (self.now - self.queued_since.get(job.pk, job.submitted_at)).total_seconds()
        slo_name = job.slo_class.name
        transaction.on_commit(lambda: metrics.observe_wait(slo_name, waited))
        job.status = JobStatus.PLACED
        job.placed_at = self.now
        job.attempts += 1
        job.reason = (
            f"placed in group {group.pk} by {placement.strategy.value.replace('_', ' ')}"
            f" (predicted slowdown {slowdown:.2f})"
        )
        events.publish(
            events.JOB_PLACED,
            job=job,
            detail={
                "group": group.pk,
                "strategy": placement.strategy.value.replace("_", " "),
                "predicted_slowdown": slowdown,
            },
        )
        # the member as decided (converters.member(row) would read the nodes back); its
        # profile is the one the planner placed (t_sync_s included)
        member = Member(
            job=profile,
            rollout_nodes=tuple(sorted(placement.rollout_nodes)),
            train_nodes=tuple(sorted(placement.train_nodes)),
        )
        runtime.admit(member, iterations=job.iterations, start_iteration=job.iterations_done)
        starts = runtime.start_ready()
        if starts:
            self.starts.append((group.pk, starts))
            for start in starts:  # what each order needs of the runtime as it is now
                job_id, kind = int(start.job_id), start.kind.value
                self.orders[(job_id, kind, start.iteration)] = order_context(runtime, job_id, kind)
        self.touched.add(group.pk)
        return state

    def flush(self, effects: Effects) -> None:
        """Write what was recorded since the last flush."""
        for group in self.new_groups:
            group.runtime_state = self.groups[group.pk][1].to_dict()
        ExecutionGroup.objects.bulk_create(self.new_groups)
        new = {g.pk for g in self.new_groups}
        rows = Placement.objects.bulk_create([p for p, _, _, _ in self.placements])
        # the pinned nodes: one INSERT per pool (`.set()` would read the empty sets first)
        rollout, train = Placement.rollout_nodes.through, Placement.train_nodes.through
        rollout.objects.bulk_create(
            [
                rollout(placement_id=row.pk, node_id=n)
                for row, (_, _, roll, _) in zip(rows, self.placements, strict=True)
                for n in roll
            ]
        )
        train.objects.bulk_create(
            [
                train(placement_id=row.pk, node_id=n)
                for row, (_, _, _, tr) in zip(rows, self.placements, strict=True)
                for n in tr
            ]
        )
        NodeAllocation.objects.bulk_create(self.allocations)
        started = self._phases_record(effects)
        placed = [job for _, job, _, _ in self.placements]
        stamp = timezone.now()
        for job in placed:
            job.updated_at = stamp
            if job.pk in started:  # its first phase runs (a resubmitted job keeps its start)
                job.status, job.reason, job.updated_at = JobStatus.RUNNING, "", self.now
                job.started_at = job.started_at or self.now
        _rows_update(
            placed, ["status", "placed_at", "attempts", "reason", "started_at", "updated_at"]
        )
        for job in self.reasons:
            job.updated_at = stamp
        _rows_update(self.reasons, ["reason", "updated_at"])
        touched = [self.groups[gid] for gid in sorted(self.touched - new)]
        for group, runtime in touched:
            group.runtime_state = runtime.to_dict()
        _rows_update([g for g, _ in touched], ["runtime_state"])
        self._clear()

    def _phases_record(self, effects: Effects) -> set[int]:
        """Record the phases the runtimes started (one INSERT), queue their dispatch; return
        the ids of this batch's jobs that started one."""
        ours = {p.job_id: p for p, _, _, _ in self.placements}
        others = {
            gid for gid, starts in self.starts if any(int(s.job_id) not in ours for s in starts)
        }
        open_rows: dict[int, dict[int, Placement]] = {gid: {} for gid in others}
        if others:  # a start of a member placed before this batch (rare)
            for p in Placement.objects.filter(
                group_id__in=others, ended_at__isnull=True
            ).select_related("job"):
                open_rows[p.group_id][p.job_id] = p
        rows = []
        for gid, starts in self.starts:
            group, _ = self.groups[gid]
            rows += phase_rows(group, starts, open_rows.get(gid, {}) | ours, self.now)
        created = PhaseRecord.objects.bulk_create(rows)
        jobs = {p.job_id: p.job for p in ours.values()}
        for phase in created:
            job = jobs.get(phase.job_id) or open_rows[phase.group_id][phase.job_id].job
            pools, tail = self.orders[(phase.job_id, phase.kind, phase.iteration)]
            effects.orders.append(phase_order(phase, job, pools, tail_nodes=tail))
        earlier = [
            p.job_id for p in created if p.job_id not in ours
        ]  # members placed before: as groups.phases_start does
        if earlier:
            Job.objects.filter(pk__in=earlier, status=JobStatus.PLACED).update(
                status=JobStatus.RUNNING,
                started_at=Coalesce("started_at", Value(self.now)),
                reason="",
                updated_at=self.now,
            )
        return {p.job_id for p in created if p.job_id in ours}


def _rows_update(rows: Sequence[models.Model], fields: list[str]) -> None:
    """Write `fields` of `rows` (of one model) in one statement.

    On PostgreSQL an UPDATE ... FROM (VALUES ...): Django's `bulk_update` builds a CASE per
    field and row, whose expressions cost more to compile than the statement to run.
    """
    if not rows:
        return
    model = type(rows[0])
    if not is_postgres():
        model._default_manager.bulk_update(rows, fields)
        return
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    cols = [meta.get_field(f) for f in fields]
    assert all(isinstance(c, models.Field) for c in cols)
    fields_ = [c for c in cols if isinstance(c, models.Field)]
    qn = connection.ops.quote_name
    casts = [f"%s::{f.db_type(connection)}" for f in (pk, *fields_)]
    row_sql = "(" + ", ".join(casts) + ")"
    params: list[Any] = []
    for obj in rows:
        params.append(pk.get_db_prep_value(obj.pk, connection))
        params += [f.get_db_prep_value(getattr(obj, f.attname), connection) for f in fields_]
    pk_col = qn(str(pk.column))
    names = [qn(str(f.column)) for f in fields_]
    sql = (
        f"UPDATE {qn(str(meta.db_table))} AS t SET "
        + ", ".join(f"{n} = v.{n}" for n in names)
        + f" FROM (VALUES {', '.join([row_sql] * len(rows))}) AS v({pk_col}, {', '.join(names)})"
        + f" WHERE t.{pk_col} = v.{pk_col}"
    )
    with connection.cursor() as cur:
        cur.execute(sql, params)


def _lock_group_held(group_id: int, names: set[str]) -> Any:
    """Lock a group's row (as `locks.lock_group`) and count, in the same statement, the
    nodes among `names` it still holds (open allocations): the row, with `held` set."""
    group_t = ExecutionGroup._meta.db_table
    alloc_t = NodeAllocation._meta.db_table
    node_t = Node._meta.db_table
    qn = connection.ops.quote_name
    sql = (
        f"SELECT g.*, (SELECT COUNT(*) FROM {qn(alloc_t)} a JOIN {qn(node_t)} n"
        ' ON n.id = a.node_id WHERE a.group_id = g.id AND a."end" IS NULL'
        f" AND n.name IN ({', '.join(['%s'] * len(names)) or 'NULL'})) AS held"
        f" FROM {qn(group_t)} g WHERE g.id = %s FOR UPDATE"
    )
    if not is_postgres():
        sql = sql.removesuffix(" FOR UPDATE")  # (SQLite: the controller's lock serialises)
    return next(iter(ExecutionGroup.objects.raw(sql, [*sorted(names), group_id])))
