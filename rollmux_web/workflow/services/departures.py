"""Departures: a job leaves its group (completed, cancelled, failed, its node went down).

A departure ends the job's placement, releases the nodes no other member of the group
uses (and the group when it is empty), and resubmits or finishes the job. Resubmitted
jobs resume from their last checkpoint (the paper: a failed job is a new arrival).
"""

from __future__ import annotations

import contextlib
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from rollmux_web import events, metrics, ports
from rollmux_web.formatting import iteration_number
from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job, JobStatus
from rollmux_web.workflow.models import (
    EndReason,
    ExecutionGroup,
    NodeAllocation,
    PhaseRecord,
    PhaseState,
    Placement,
)
from rollmux_web.workflow.services.effects import Effects
from rollmux_web.workflow.services.groups import (
    member_remove,
    phases_start,
    runtime_load,
    runtime_save,
)
from rollmux_web.workflow.services.locks import ACTIVE_PHASE_STATES, controller_serial, lock_group
from scheduler.model import PhaseKind


def placement_end(
    placement: Placement,
    reason: EndReason,
    now: datetime,
    effects: Effects,
    *,
    kill: bool = False,
) -> None:
    """End a placement; release nodes no other member of its group uses, and an empty group."""
    placement.ended_at = now
    placement.end_reason = reason
    placement.save(update_fields=["ended_at", "end_reason"])
    group_id = placement.group_id
    still = Placement.objects.filter(group_id=group_id, ended_at__isnull=True)
    used: set[int] = set()
    for other in still.prefetch_related("rollout_nodes", "train_nodes"):
        used.update(n.pk for n in other.rollout_nodes.all())
        used.update(n.pk for n in other.train_nodes.all())
    NodeAllocation.objects.filter(group_id=group_id, end__isnull=True).exclude(
        node_id__in=used
    ).update(end=now)
    due = reason not in (
        EndReason.MOVED,
        EndReason.YIELDED,
        EndReason.PREEMPTED,
        EndReason.PROFILED,
    )
    if not used:
        ExecutionGroup.objects.filter(pk=group_id, released_at__isnull=True).update(
            released_at=now, runtime_state=None, consolidation_due=due
        )
        effects.group_released = True
    elif due:
        # the next planning pass asks whether to consolidate the survivors, or (the group
        # emptied) the jobs alone elsewhere (services.moves; a move out is not asked about
        # again, so moves do not cascade; nor is a yield: it left its nodes to the members
        # it would have slowed, as the simulator's _yield does)
        ExecutionGroup.objects.filter(pk=group_id).update(consolidation_due=True)
    (effects.kills if kill else effects.releases).append((placement.job_id, placement.pk))
    effects.replan = True


# A job that keeps losing its host is most likely killing it (out of memory, a crash in
# native code): after this many times ROLLMUX_MAX_ATTEMPTS lost hosts it fails too.
LOST_HOSTS_PER_ATTEMPT = 3


def job_fail_or_resubmit(
    job: Job, outcome: str, now: datetime, *, retry: bool = True, lost: bool = False
) -> None:
    """Resubmit a failed job (it resumes from iterations_done) or fail it for good.

    Only the job's own failures (its runner raised, it overran) count against
    ROLLMUX_MAX_ATTEMPTS; a lost host (`lost`: the actor died, the platform's failure) does
    not, up to LOST_HOSTS_PER_ATTEMPT times that limit. `retry=False` (its runner cannot
    be loaded: it would fail the same way anywhere) fails it at once.
    """
    ends = Placement.objects.filter(job=job, end_reason__in=(EndReason.FAILED, EndReason.LOST))
    failures = ends.filter(end_reason=EndReason.FAILED).count()
    losses = ends.filter(end_reason=EndReason.LOST).count()
    limit = settings.ROLLMUX_MAX_ATTEMPTS
    exhausted = failures >= limit or losses >= limit * LOST_HOSTS_PER_ATTEMPT
    if job.cancel_requested:
        job_finish(job, JobStatus.CANCELLED, now, reason="cancelled after a failed phase")
    elif not retry:
        job.status = JobStatus.FAILED
        job.reason = f"failed, not retried: {outcome}"[:500]
        job.error = outcome
        job.finished_at = now
        job.save(update_fields=["status", "reason", "error", "finished_at", "updated_at"])
    elif not exhausted:
        job.status = job.requeue_status  # (profiling again if its profile never ended)
        if lost:
            why = f"resubmitted after its host was lost (not counted as a failure, {failures}/{limit})"
        else:
            why = f"resubmitted after failure {failures}/{limit}"
        # the iteration it resumes at, as the pages number it (its next: iterations_done + 1)
        at = iteration_number(job.iterations_done)
        job.reason = f"{why}, resumes at iteration {at}: {outcome}"[:500]
        job.error = outcome
        job.save(update_fields=["status", "reason", "error", "updated_at"])
        kind = "lost" if lost else "failed"
        transaction.on_commit(lambda: metrics.count_resubmission(kind))
        events.publish(events.JOB_RESUBMITTED, job=job, detail={"reason": job.reason})
    else:
        job.status = JobStatus.FAILED
        count = f"lost its host {losses} times" if lost else f"failed {failures} times"
        job.reason = f"{count} (limit {limit}): {outcome}"[:500]
        job.error = outcome
        job.finished_at = now
        job.save(update_fields=["status", "reason", "error", "finished_at", "updated_at"])
        events.publish(events.JOB_FAILED, job=job, detail={"reason": job.reason})


def job_resubmit_node_down(job: Job, node: str, now: datetime) -> bool:
    """Resubmit a job whose node went down (not counted as a failed attempt: the platform
    failed, not the job); a job whose cancel was requested ends. Return whether queued."""
    if job.cancel_requested:
        job_finish(job, JobStatus.CANCELLED, now, reason="cancelled (its node went down)")
        return False
    job.status = job.requeue_status  # (profiling again if its profiling run was cut)
    job.reason = (
        f"resubmitted: node {node} went down; resumes at iteration "
        f"{iteration_number(job.iterations_done)}"
    )[:500]
    job.save(update_fields=["status", "reason", "updated_at"])
    return True


def job_finish(job: Job, status: str, now: datetime, *, reason: str = "") -> None:
    job.status = status
    job.finished_at = now
    job.reason = reason
    job.save(update_fields=["status", "finished_at", "reason", "updated_at"])


def job_stop(*, job_id: int, now: datetime | None = None) -> bool:
    """Stop a job whose cancel was requested: at once if no phase of it is running (it
    waits in its group's queue, or is not placed yet), else `phase_finish` does it at the
    phase boundary. Return whether it stopped now."""
    given_now = now
    placement = Placement.objects.filter(job_id=job_id, ended_at__isnull=True).first()
    if placement is None:
        with transaction.atomic():
            n = Job.objects.filter(
                pk=job_id, cancel_requested=True, status__in=(JobStatus.QUEUED, JobStatus.PLACED)
            ).update(
                status=JobStatus.CANCELLED,
                finished_at=given_now or timezone.now(),
                updated_at=given_now or timezone.now(),
            )
        return bool(n)
    with controller_serial(), transaction.atomic():
        group = lock_group(placement.group_id)
        now = given_now or timezone.now()  # after the lock (see controller.phase_finish)
        placement = Placement.objects.get(pk=placement.pk)
        job = Job.objects.select_for_update().get(pk=job_id)
        if placement.ended_at is not None or job.status in TERMINAL_STATUSES:
            return False
        running = PhaseRecord.objects.filter(
            placement=placement, state__in=ACTIVE_PHASE_STATES
        ).exists()
        if running:
            return False  # phase_finish cancels it when the running phase ends
        runtime = runtime_load(group)
        effects = Effects()
        member_remove(runtime, job.pk)
        placement_end(placement, EndReason.CANCELLED, now, effects)
        job_finish(job, JobStatus.CANCELLED, now, reason="cancelled at a phase boundary")
        if ExecutionGroup.objects.filter(pk=group.pk, released_at__isnull=True).exists():
            phases_start(group, runtime, now, effects)
            runtime_save(group, runtime)
        effects.schedule()
    return True


def node_down_resubmit(*, node_id: int, now: datetime | None = None) -> list[int]:
    """Resubmit every job pinned to a node that went down; return their ids. Planning is
    requested in any case (a node that came back up or was drained changes capacity)."""
    resubmitted = _node_down(node_id=node_id, now=now)
    ports.request_planning()
    return resubmitted


def _node_down(*, node_id: int, now: datetime | None) -> list[int]:
    given_now = now
    node = Node.objects.get(pk=node_id)
    if node.state != NodeState.DOWN:
        return []
    hit = list(
        Placement.objects.filter(ended_at__isnull=True)
        .filter(Q(rollout_nodes=node) | Q(train_nodes=node))
        .distinct()
        .values_list("pk", "group_id")
    )
    resubmitted = []
    for placement_id, group_id in hit:
        with controller_serial(), transaction.atomic():
            group = lock_group(group_id)
            now = given_now or timezone.now()  # after the lock (see controller.phase_finish)
            placement = Placement.objects.get(pk=placement_id)
            if placement.ended_at is not None:
                continue
            job = Job.objects.select_for_update().get(pk=placement.job_id)
            runtime = runtime_load(group)
            effects = Effects()
            for phase in PhaseRecord.objects.filter(
                placement=placement, state__in=ACTIVE_PHASE_STATES
            ):
                PhaseRecord.objects.filter(pk=phase.pk).update(
                    state=PhaseState.LOST,
                    finished_at=now,
                    reported_at=now,
                    outcome=f"lost: node {node.name} down",
                )
                with contextlib.suppress(ValueError):
                    runtime.finish(str(job.pk), PhaseKind(phase.kind))
            member_remove(runtime, job.pk)
            placement_end(placement, EndReason.NODE_DOWN, now, effects, kill=True)
            if job_resubmit_node_down(job, node.name, now):
                transaction.on_commit(lambda: metrics.count_resubmission("node_down"))
                events.publish(events.JOB_RESUBMITTED, job=job, detail={"reason": job.reason})
                resubmitted.append(job.pk)
            if ExecutionGroup.objects.filter(pk=group.pk, released_at__isnull=True).exists():
                phases_start(group, runtime, now, effects)
                runtime_save(group, runtime)
            effects.schedule()
    return resubmitted
