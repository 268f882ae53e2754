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
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import Count, Max, Sum
from django.utils import timezone

from rollmux_web import events, metrics
from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.transactions import atomic_with_retry
from rollmux_web.workflow import converters, levers, snapshot, sync
from rollmux_web.workflow.models import ExecutionGroup, NodeAllocation, Placement, PlanWait
from rollmux_web.workflow.services import moves, profiling
from rollmux_web.workflow.services.effects import Effects
from rollmux_web.workflow.services.groups import phases_start, runtime_load, runtime_save
from rollmux_web.workflow.services.locks import lock_group, plan_session_lock
from scheduler.model import ClusterState, JobProfile, Member, PlacementResult, PlacementStatus

if TYPE_CHECKING:
    from scheduler.planner.objective import JobProgress
    from scheduler.sim.policies import Levers

BATCH_JOBS = 100  # queued jobs claimed per transaction
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


def queue_plan(*, now: datetime | None = None) -> PlanSummary:
    """Run one planning pass: place every queued job the cluster can take now.

    1. take the planner lock (one pass at a time, whichever worker runs it);
    2. read the queued jobs (priority desc, then submission time); leave out those waiting
       for a capacity that has not changed since they last tried;
    3. snapshot nodes and active groups (`snapshot.cluster_state`);
    4. per batch of jobs, one transaction: claim the jobs still queued (row locks on the
       job rows only), call the core planner per job, applying each decision to the
       snapshot so the next job sees it; persist a FIT (Placement, ExecutionGroup for a
       new group, NodeAllocations from `now`, taken after the lock and the snapshot, job
       placed; admit the job to its group's runtime and record the phases that start);
    5. leave RETRY jobs queued with their reason (and the capacity they saw), fail
       INFEASIBLE ones;
    6. on each commit: dispatch the started phases.
    """
    with plan_session_lock() as got:
        if not got:
            return PlanSummary(ran=False)
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
        .order_by("-priority", "submitted_at", "pk")
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
        state, progress = snapshot.planner_input()
    except snapshot.NoPoolConfigured as exc:
        _no_pool(todo, str(exc), key, summary)
        return summary
    lv = levers.live_levers()
    while todo:
        state, progress, done = _batch_place(
            todo[:BATCH_JOBS], (state, progress), key, now, summary, lv
        )
        todo = todo[done:]
    return summary


def _no_pool(job_ids: list[int], why: str, key: str, summary: PlanSummary) -> None:
    def record() -> None:
        for job in Job.objects.filter(pk__in=job_ids, status=JobStatus.QUEUED):
            _set_reason(job, f"waiting: {why}")
        _waits_record(job_ids, key)

    atomic_with_retry(record, what="planning (no pool)")
    summary.waiting.update(dict.fromkeys(job_ids, why))


def _batch_place(
    job_ids: list[int],
    view: tuple[ClusterState, dict[str, JobProgress]],
    key: str,
    now: datetime | None,
    summary: PlanSummary,
    lv: Levers,
) -> tuple[ClusterState, dict[str, JobProgress], int]:
    """Claim and place one batch of queued jobs in one transaction; return the snapshot
    (`view`: the state and its members' progress, `snapshot.planner_input`) with its
    placements applied (a rolled-back batch leaves the caller's snapshot as it was). Each
    job is placed as the simulator's rollmux places it (`levers.place_job`, levers `lv`)."""
    state, progress = view

    def batch() -> tuple[
        ClusterState, dict[str, JobProgress], list[int], dict[int, str], dict[int, str], int
    ]:
        began = time.perf_counter()
        state_now, progress_now = state, progress
        placed: list[int] = []
        waiting: dict[int, str] = {}
        infeasible: dict[int, str] = {}
        again: set[int] = set()
        # Lock only the job rows (not the tenant / SLO class rows a join would lock too:
        # submissions take FOR KEY SHARE on those), and only as a no-key update, which
        # phase records and placements referencing the job (FOR KEY SHARE) do not wait on.
        # Jobs cancelled or placed since the read drop out here (the conditional claim).
        jobs = list(
            Job.objects.select_for_update(of=("self",), no_key=True)
            .filter(pk__in=job_ids, status=JobStatus.QUEUED, cancel_requested=False)
            .select_related("slo_class", "tenant")
            .order_by("-priority", "submitted_at", "pk")
        )
        # After the lock and the snapshot: an allocation this batch creates never starts
        # before the end of the allocation it follows (the snapshot saw that end).
        stamp = now or timezone.now()
        effects = Effects()
        nodes = dict(Node.objects.values_list("name", "pk"))
        measured = sync.measured_s(j.pk for j in jobs)  # a resubmitted job's sync times
        done = len(job_ids)
        down: str | None = None  # the nodes down with a reason, read at the first wait
        for index, job in enumerate(jobs):
            if index and time.perf_counter() - began > BATCH_SECONDS:
                # commit what is decided: the rest goes to the next transaction
                done = job_ids.index(job.pk)
                break
            profile = converters.job_profile(job, t_sync_s=sync.t_sync_s(job, measured))
            decided = time.perf_counter()
            result = levers.place_job(profile, state_now, progress_now, levers=lv)
            for _ in range(STALE_RETRIES):
                if result.status is not PlacementStatus.FIT or result.placement is None:
                    break
                try:
                    state_now = _placement_persist(
                        job, profile, result, state_now, stamp, effects, nodes
                    )
                    break
                except _StaleSnapshot:
                    # a departure committed while this batch waited for the group's lock
                    state_now, progress_now = snapshot.planner_input()
                    stamp = now or timezone.now()  # after this snapshot, as above
                    result = levers.place_job(profile, state_now, progress_now, levers=lv)
            else:  # stale every time: the cluster churns; the next pass tries again
                result = PlacementResult(
                    PlacementStatus.RETRY, "the cluster changed; planning again"
                )
                again.add(job.pk)
                effects.replan = True
            metrics.observe_admission(result.status.name.lower(), time.perf_counter() - decided)
            if result.status is PlacementStatus.FIT and result.placement is not None:
                placed.append(job.pk)
            elif result.status is PlacementStatus.RETRY:
                if down is None:
                    down = _down_note()
                _set_reason(job, result.reason + down)
                waiting[job.pk] = result.reason
            else:
                job.status = JobStatus.FAILED
                job.reason = f"infeasible: {result.reason}"[:500]
                job.error = result.reason
                job.finished_at = stamp
                job.save(update_fields=["status", "reason", "error", "finished_at", "updated_at"])
                events.publish(events.JOB_FAILED, job=job, detail={"reason": job.reason})
                infeasible[job.pk] = result.reason
        # (a job left for the next pass records no wait: it is planned again regardless)
        _waits_record([pk for pk in waiting if pk not in again], key)
        PlanWait.objects.filter(job_id__in=placed + list(infeasible)).delete()
        effects.schedule()
        return state_now, progress_now, placed, waiting, infeasible, done

    state, progress, placed, waiting, infeasible, done = atomic_with_retry(
        batch, what="planning batch"
    )
    summary.placed += placed
    summary.waiting.update(waiting)
    summary.infeasible.update(infeasible)
    return state, progress, done


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


def _placement_persist(
    job: Job,
    profile: JobProfile,
    result: PlacementResult,
    state: ClusterState,
    now: datetime,
    effects: Effects,
    nodes: dict[str, int],
) -> ClusterState:
    """Persist a FIT decision and return the snapshot with it applied (`nodes`: node ids
    by name)."""
    from scheduler.planner import apply_placement

    placement = result.placement
    assert placement is not None  # a FIT carries its placement
    if placement.group_id is None:
        group = ExecutionGroup.objects.create()
    else:
        group = lock_group(int(placement.group_id))
        kept = (set(placement.rollout_nodes) | set(placement.train_nodes)) - set(
            placement.new_nodes
        )
        held = NodeAllocation.objects.filter(
            group=group, end__isnull=True, node__name__in=kept
        ).count()
        if group.released_at is not None or held != len(kept):
            raise _StaleSnapshot(group.pk)  # a member left after the snapshot: nodes went
    state = apply_placement(state, profile, placement, group_id=str(group.pk))
    slowdown = result.predicted_slowdown.get(profile.id, 1.0)
    row = Placement.objects.create(
        job=job,
        group=group,
        attempt=job.attempts + 1,
        strategy=placement.strategy.value,
        marginal_cost_per_hour=Decimal(str(round(result.marginal_cost_per_hour, 4))),
        predicted_slowdown=slowdown,
    )
    # the pinned nodes: one INSERT per pool (`.set()` would read the empty sets first)
    rollout, train = Placement.rollout_nodes.through, Placement.train_nodes.through
    rollout.objects.bulk_create(
        [rollout(placement_id=row.pk, node_id=nodes[n]) for n in placement.rollout_nodes]
    )
    train.objects.bulk_create(
        [train(placement_id=row.pk, node_id=nodes[n]) for n in placement.train_nodes]
    )
    # The exclusion constraint (no two allocations of a node overlap in time) and the
    # partial unique index (one open allocation per node) make a double allocation
    # impossible even if two planners ever ran at once.
    NodeAllocation.objects.bulk_create(
        [NodeAllocation(node_id=nodes[n], group=group, start=now) for n in placement.new_nodes]
    )
    # the wait since submission, or since the resubmission that put it back in the queue
    queued_since = job.submitted_at
    if job.attempts:
        left = (
            Placement.objects.filter(job=job, attempt=job.attempts)
            .values_list("ended_at", flat=True)
            .first()
        )
        queued_since = left or queued_since
    waited, slo_name = (now - queued_since).total_seconds(), job.slo_class.name
    transaction.on_commit(lambda: metrics.observe_wait(slo_name, waited))
    job.status = JobStatus.PLACED
    job.placed_at = now
    job.attempts += 1
    job.reason = (
        f"placed in group {group.pk} by {placement.strategy.value.replace('_', ' ')}"
        f" (predicted slowdown {slowdown:.2f})"
    )
    job.save(update_fields=["status", "placed_at", "attempts", "reason", "updated_at"])
    events.publish(
        events.JOB_PLACED,
        job=job,
        detail={
            "group": group.pk,
            "strategy": placement.strategy.value.replace("_", " "),
            "predicted_slowdown": slowdown,
        },
    )
    runtime = runtime_load(group)
    # the member as decided (converters.member(row) would read the nodes back); its
    # profile is the one the planner placed (t_sync_s included)
    member = Member(
        job=profile,
        rollout_nodes=tuple(sorted(placement.rollout_nodes)),
        train_nodes=tuple(sorted(placement.train_nodes)),
    )
    runtime.admit(member, iterations=job.iterations, start_iteration=job.iterations_done)
    phases_start(group, runtime, now, effects)
    runtime_save(group, runtime)
    return state
