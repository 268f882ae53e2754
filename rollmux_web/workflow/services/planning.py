"""Planning: place the queued jobs (the paper's Algorithm 1, run by the core, persisted here).

A pass reads like Kueue's `schedule()`: one numbered step after the other (`queue_plan`),
each a function of its own. It holds the planner lock for its whole length (one pass at a
time, whichever worker runs it) but writes in short transactions: the queued jobs are
claimed and placed in batches, so no transaction holds job or group rows for long. What a
batch decides is written by the pass's writer (services.plan_writer, which a live move
uses too). Jobs that did not fit are not planned again until the capacity they wait for
changes (requeue on change, as Kueue does): a pass records the capacity it saw in
`PlanWait`, and the next pass skips them while `capacity_key()` is unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import Count, Exists, F, Max, OrderBy, OuterRef, Sum
from django.utils import timezone

from rollmux_web import events, metrics
from rollmux_web.accounts.models import Tenant
from rollmux_web.id_sql import in_ids
from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.quotas.models import SloClass
from rollmux_web.transactions import atomic_with_retry
from rollmux_web.workflow import converters, fairshare, levers, snapshot, sync
from rollmux_web.workflow import starts as measured_starts
from rollmux_web.workflow.models import EndReason, NodeAllocation, Placement, PlanWait
from rollmux_web.workflow.services import consolidation, preemption, profiling
from rollmux_web.workflow.services.effects import Effects
from rollmux_web.workflow.services.locks import plan_session_lock
from rollmux_web.workflow.services.plan_writer import (
    PlanWriter,
    StaleSnapshot,
    node_ids,
    queued_since,
)
from scheduler.model import ClusterState, JobProfile, PlacementResult, PlacementStatus

if TYPE_CHECKING:
    from scheduler.planner.objective import JobProgress

BATCH_JOBS = 100  # queued jobs claimed per transaction, at most
BATCH_MIN_JOBS = 10  # ... and at least
BATCH_SECONDS = 0.25  # a transaction commits what it decided after this long
STALE_RETRIES = 3  # snapshots re-read for one job whose group changed under the batch


@dataclass
class PlanSummary:
    """What a planning pass did."""

    ran: bool  # False: another pass held the lock
    placed: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)
    infeasible: dict[int, str] = field(default_factory=dict)
    skipped: int = 0  # waiting jobs not planned again: the capacity they wait for is unchanged


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

    0. take the planner lock (one pass at a time, whichever worker runs it), then call
       `on_start` (the pass's trigger learns that a pass now starts: requests from here on
       need the next one);
    1. start the profiling runs free nodes allow (`_profiles_start`);
    2. consolidate: mark the survivors of departures the planner would move at their next
       iteration boundary (`consolidation.consolidation_plan`);
    3. the heads: the queued jobs in planning order (priority desc, then those back from
       a yield (`resuming_first`), then the tenant's weighted share with fair share on
       (`_fair_order`), then submission time), less those waiting for a capacity that has
       not changed since they last tried (`_heads`);
    4. snapshot nodes and active groups with the members' progress
       (`snapshot.planner_input`), and what the pass reads once (`_run_read`);
    5. admit, per batch of jobs, in one transaction (`_batch_place`): claim the jobs still
       queued (row locks on the job rows only), decide each with the simulator's rollmux
       adapter and the live levers (`levers.place_job`), applying each decision to the
       snapshot so the next job sees it (a job alike to one that waited on this very
       snapshot waits with it, the core not asked again: `_Waits`; a borrower only onto
       what other tenants lend: `fairshare.lending_refusal`; a job that does not fit may
       mark preemptions); the writer (`plan_writer.PlanWriter`) writes the
       batch's decisions at its end, one statement per table (Placement, ExecutionGroup
       for a new group, NodeAllocations from `now`, taken after the lock and the snapshot,
       the job rows, the group runtimes that admitted them and the phases they start);
    6. requeue: leave RETRY jobs queued with their reason (and the capacity they saw),
       fail INFEASIBLE ones;
    7. on each commit: dispatch the started phases.
    """
    with plan_session_lock() as got:  # 0.
        if not got:
            return PlanSummary(ran=False)
        if on_start is not None:
            on_start()
        return _pass(now)


def _pass(now: datetime | None) -> PlanSummary:
    """Steps 1-7 of `queue_plan`."""
    summary = PlanSummary(ran=True)
    _profiles_start(now)  # 1.
    consolidation.consolidation_plan()  # 2.
    key = capacity_key()
    queue = _heads(key, summary)  # 3.
    if not queue.todo:
        return summary
    todo, picture = _fair_order(queue, now)  # (fair share: docs/quotas-and-cost.md)
    try:
        view = snapshot.planner_input()  # 4.
    except snapshot.NoPoolConfigured as exc:
        _no_pool(todo, str(exc), key, summary)  # (6. for all: no pool to plan on)
        return summary
    run = _run_read(todo, key, now)
    run.picture = picture
    claim = BATCH_JOBS
    while todo:  # 5.-7., one transaction per batch
        view, done = _batch_place(todo[:claim], view, run, summary)
        todo = todo[done:]
        # claim about what a batch gets through in BATCH_SECONDS (a job claimed and left
        # for the next batch was read and locked for nothing)
        claim = min(BATCH_JOBS, max(BATCH_MIN_JOBS, 2 * done))
    return summary


def _profiles_start(now: datetime | None) -> None:
    """1. Start the profiling runs that free nodes allow (jobs without phase times run alone
    first: services.profiling), before the planner takes nodes for the queue."""

    def start() -> None:
        effects = Effects()
        profiling.profiles_start(now=now or timezone.now(), effects=effects)
        effects.schedule()

    if Job.objects.filter(status=JobStatus.PROFILING, cancel_requested=False).exists():
        atomic_with_retry(start, what="profiling runs")  # (no transaction when none waits)


@dataclass
class _Queue:
    """The queue as a pass reads it (`_heads`): the jobs to plan in planning order, and
    whether each queued job is back from a yield (`resuming_first`)."""

    todo: list[int]
    back: dict[int, bool]


def _heads(key: str, summary: PlanSummary) -> _Queue:
    """3. Read the queue: the ids of the queued jobs to plan, in planning order
    (`queue_order`); those waiting on the capacity `key` they waited on last time go to
    the summary, skipped. (An idle pass reads only this: the fair-share order's columns,
    a submission time to parse per job, are read by `_fair_order` when a job is to plan.)"""
    rows = (
        Job.objects.filter(status=JobStatus.QUEUED, cancel_requested=False)
        .annotate(back=Exists(_yielded()))
        .order_by(*queue_order(back="back"))
        .values_list("pk", "plan_wait__capacity", "reason", "back")
    )
    queue = _Queue([], {})
    for pk, waited_on, reason, back in rows:
        queue.back[pk] = back
        if waited_on == key:
            summary.waiting[pk] = reason
            summary.skipped += 1
        else:
            queue.todo.append(pk)
    return queue


def _run_read(todo: list[int], key: str, now: datetime | None) -> _Run:
    """4. Read once for the whole pass: node ids by name, the jobs' measured sync times and
    starts, the levers (and, at the first wait, the nodes down: `_Run.down`)."""
    return _Run(
        key=key,
        now=now,
        policy=levers.arrival_policy(),
        node_id=node_ids(),
        measured=sync.measured_s(todo),
        started=measured_starts.measured_starts(todo),
    )


def _fair_order(queue: _Queue, now: datetime | None) -> tuple[list[int], Any]:
    """Return the jobs to plan in fair-share order (`fairshare.queue_positions`: the core's
    `queue_order`, priority, then the tenant's weighted share, then submission time; a job
    back from a drift re-plan's yield keeps its place first within its priority) and the
    fair-share picture the pass decides preemptions on (None: both are off). One read of
    the queue's fair-share columns serves the order and the priorities."""
    todo = queue.todo
    if not (settings.ROLLMUX_FAIR_SHARE or settings.ROLLMUX_PREEMPTION):
        return todo, None
    rows = fairshare.queued_rows()
    positions, picture = fairshare.queue_positions(now or timezone.now(), rows)
    if not settings.ROLLMUX_FAIR_SHARE:
        return todo, picture
    rank = {int(p.job_id): p.position for p in positions}
    first = {row.pk: (-row.priority, not queue.back.get(row.pk, False)) for row in rows}
    todo = sorted(todo, key=lambda pk: (*first.get(pk, (0, True)), rank.get(pk, 1 << 30)))
    return todo, picture


def _yielded() -> Any:
    return Placement.objects.filter(
        job_id=OuterRef("pk"), attempt=OuterRef("attempts"), end_reason=EndReason.YIELDED
    )


def resuming_first() -> OrderBy:
    """Return the ordering term that puts a job back from a yield (services.moves: its last
    placement ended `yielded`) before the other queued jobs of its priority: it left its
    nodes to the members it would have slowed, and `scheduler.replan.may_yield` allowed it
    only because it resumes as soon as capacity frees (the simulator queues it first:
    `_yield`'s appendleft). Priority stays first: it is the operator's explicit order."""
    return Exists(_yielded()).desc()


def queue_order(back: str | None = None) -> tuple[Any, ...]:
    """Return the planning order of queued jobs: priority desc, then a job back from a yield
    (`resuming_first`; `back`: the name of the query's annotation that says it, ordered
    on instead of computing it again), then submission time."""
    first = resuming_first() if back is None else F(back).desc()
    return ("-priority", first, "submitted_at", "pk")


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
    node_id: Callable[[str], int]  # a node's id by name (plan_writer.node_ids)
    measured: dict[int, float]  # measured sync seconds of the pass's jobs (sync.measured_s)
    # measured warm and cold starts of the pass's jobs that ran before (starts.measured_starts)
    started: dict[int, measured_starts.MeasuredStarts] = field(default_factory=dict)
    picture: fairshare.Picture | None = None  # fair-share inputs (preemption), read once
    # the nodes down with a reason, said in a waiting job's reason (`_down_note`): read at
    # the pass's first wait, as the snapshot the job waited on was read once
    down: str | None = None
    preempt_memo: preemption.Memo = field(default_factory=preemption.Memo)
    waits: _Waits = field(default_factory=lambda: _Waits())
    related: _Related = field(default_factory=lambda: _Related())


@dataclass
class _Related:
    """The tenants and SLO classes of the pass's claimed jobs, each read once for the pass
    (a few rows that thousands of jobs share: joined to every claimed job, they made two
    more model objects per job and batch), as the pass reads the levers and the fair-share
    picture once."""

    tenants: dict[int, Tenant] = field(default_factory=dict)
    slo_classes: dict[int, SloClass] = field(default_factory=dict)

    def attach(self, jobs: list[Job]) -> None:
        """Give each job its tenant and SLO class (read the ones not seen yet)."""
        tenants = {j.tenant_id for j in jobs} - self.tenants.keys()
        if tenants:
            self.tenants.update(Tenant.objects.in_bulk(tenants))
        classes = {j.slo_class_id for j in jobs} - self.slo_classes.keys()
        if classes:
            self.slo_classes.update(SloClass.objects.in_bulk(classes))
        tenant_field, class_field = Job.tenant.field, Job.slo_class.field
        for job in jobs:
            tenant_field.set_cached_value(job, self.tenants[job.tenant_id])
            class_field.set_cached_value(job, self.slo_classes[job.slo_class_id])


@dataclass
class _Waits:
    """The RETRY answers of the core on one snapshot, by what the core reads of the job
    (`_asked_key`): a queued job equal to one that could not be placed on this very
    snapshot cannot be placed either (the core's `admit` is a pure function of the job's
    profile, the snapshot and the configuration; its RETRY reads neither the job's id,
    its arrival time nor the clock). A burst of alike jobs that wait is decided once per
    snapshot, not once per job; any placement makes a new snapshot and forgets them."""

    state: ClusterState | None = None
    answers: dict[JobProfile, PlacementResult] = field(default_factory=dict)

    def get(self, state: ClusterState, asked: JobProfile) -> PlacementResult | None:
        return self.answers.get(_asked_key(asked)) if self.state is state else None

    def keep(self, state: ClusterState, asked: JobProfile, result: PlacementResult) -> None:
        if self.state is not state:
            self.state, self.answers = state, {}
        self.answers[_asked_key(asked)] = result


def _asked_key(asked: JobProfile) -> JobProfile:
    """Return the job's profile as the core decides on it: without its id and arrival."""
    return replace(asked, id="", arrival_s=0.0)


@dataclass
class _Decided:
    """What a batch decided (its summary part) and the snapshot it leaves."""

    view: tuple[ClusterState, dict[str, JobProgress]]
    placed: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)
    infeasible: dict[int, str] = field(default_factory=dict)
    again: set[int] = field(default_factory=set)  # stale every time: planned again next pass
    done: int = 0  # job ids of the batch gone through (the rest go to the next one)


def _claim(job_ids: list[int], related: _Related) -> list[Job]:
    """Lock and return the batch's jobs still queued, in planning order, with their tenant
    and SLO class (`related`: the pass's).

    Lock only the job rows (not the tenant / SLO class rows a join would lock too:
    submissions take FOR KEY SHARE on those), and only as a no-key update, which phase
    records and placements referencing the job (FOR KEY SHARE) do not wait on. Jobs
    cancelled or placed since the read drop out here (the conditional claim).
    """
    jobs = list(
        Job.objects.select_for_update(of=("self",), no_key=True)
        .filter(in_ids("pk", set(job_ids)), status=JobStatus.QUEUED, cancel_requested=False)
        .order_by("pk")  # locks taken in one order
    )
    related.attach(jobs)
    at = {pk: i for i, pk in enumerate(job_ids)}
    return sorted(jobs, key=lambda j: at[j.pk])  # the pass's order (fair share)


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
    per table (`plan_writer.PlanWriter`)."""

    def batch() -> _Decided:
        began = time.perf_counter()
        jobs = _claim(job_ids, run.related)
        # After the lock and the snapshot: an allocation this batch creates never starts
        # before the end of the allocation it follows (the snapshot saw that end).
        writes = PlanWriter(run.now or timezone.now(), run.node_id, queued_since(jobs))
        effects = Effects()
        out = _Decided(view, done=len(job_ids))
        for index, job in enumerate(jobs):
            if index and time.perf_counter() - began > BATCH_SECONDS:
                # commit what is decided: the rest goes to the next transaction
                out.done = job_ids.index(job.pk)
                break
            result = _place_one(job, out, run, writes, effects)
            if result.status is PlacementStatus.FIT and result.placement is not None:
                out.placed.append(job.pk)
            elif result.status is PlacementStatus.RETRY:
                if run.down is None:  # (read at the pass's first wait)
                    run.down = _down_note()
                taken = ""
                if run.picture is not None:
                    taken = preemption.request_for(
                        job, out.view[0], run.picture, writes.now, run.preempt_memo
                    )
                writes.reason(job, result.reason + run.down + taken)
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


def _place_one(
    job: Job, out: _Decided, run: _Run, writes: PlanWriter, effects: Effects
) -> PlacementResult:
    """Place one claimed job on the batch's snapshot (`out.view`, advanced on a FIT)."""
    profile = converters.job_profile(job, t_sync_s=sync.t_sync_s(job, run.measured))
    # a job that ran before (resubmitted, moved, back from a yield): its measured starts
    profile = measured_starts.with_measured_starts(profile, run.started.get(job.pk))
    decided = time.perf_counter()
    state, progress = out.view
    now_s = writes.now.timestamp()
    # a job back from a yield: what is left of its SLO budget, then a short job held
    # stricter (scheduler.replan.admission_profile's order, the simulator's _resume)
    asked = snapshot.resume_profile(job, profile, writes.now)
    asked = snapshot.held_young(asked, iterations=job.iterations)
    result = run.waits.get(state, asked)  # (a job alike waited on this snapshot: _Waits)
    if result is None:
        result = _decide(asked, state, progress, run, now_s)
        if result.status is PlacementStatus.RETRY:
            run.waits.keep(state, asked, result)
    if result.status is PlacementStatus.FIT and run.picture is not None:
        refused = fairshare.lending_refusal(job, run.picture)
        if refused is not None:  # what other tenants keep of their nominal quota is not lent
            result = PlacementResult(PlacementStatus.RETRY, refused)
    for _ in range(STALE_RETRIES):
        if result.status is not PlacementStatus.FIT or result.placement is None:
            break
        try:
            out.view = (writes.placement(job, profile, result, state), progress)
            break
        except StaleSnapshot:
            # a departure committed while this batch waited for the group's lock: write
            # what the batch decided so far (the new snapshot sees it), read it again
            writes.flush(effects)
            state, progress = snapshot.planner_input()
            writes.now = run.now or timezone.now()  # after this snapshot, as above
            out.view = (state, progress)
            result = _decide(asked, state, progress, run, now_s)
    else:  # stale every time: the cluster churns; the next pass tries again
        result = PlacementResult(PlacementStatus.RETRY, "the cluster changed; planning again")
        out.again.add(job.pk)
    if result.status is PlacementStatus.FIT and run.picture is not None:
        fairshare.hold(job, run.picture)
    metrics.observe_admission(result.status.name.lower(), time.perf_counter() - decided)
    return result


def _decide(
    asked: JobProfile,
    state: ClusterState,
    progress: dict[str, JobProgress],
    run: _Run,
    now_s: float,
) -> PlacementResult:
    """Ask the core (`levers.place_job`) where the job goes. Its members' SLO
    probabilities are not computed: the pass writes none (the what-if preview shows them)."""
    return levers.place_job(
        asked, state, progress, policy=run.policy, now_s=now_s, with_slo_probability=False
    )


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
