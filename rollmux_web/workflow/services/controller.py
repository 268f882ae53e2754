"""The group controller: apply a phase's end and start what comes next (the runtime hook).

One transaction per phase event, under the group row's lock: claim the phase record (at
most once), advance the core GroupRuntime, move the job on (iterations done, completed,
cancelled at the boundary, failed and resubmitted), record the phases that start now and
dispatch them on commit. workers/README.md counts its round trips.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rollmux_web import events, metrics
from rollmux_web.inventory.services import node_ray_changed
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job, JobStatus
from rollmux_web.jobs.runners import own_seconds, time_scale_of
from rollmux_web.ports import Outcome, PhaseReport
from rollmux_web.workflow.models import EndReason, PhaseRecord, PhaseState, Placement
from rollmux_web.workflow.services import moves, planning, profiling
from rollmux_web.workflow.services.departures import (
    job_fail_or_resubmit,
    job_finish,
    job_resubmit_node_down,
    placement_end,
)
from rollmux_web.workflow.services.effects import Effects
from rollmux_web.workflow.services.groups import (
    member_remove,
    open_placements,
    phases_start,
    runtime_load,
    runtime_save,
    tail_release,
)
from rollmux_web.workflow.services.locks import (
    ClaimedPhase,
    claim_phase,
    controller_serial,
    lock_group,
)
from rollmux_web.workflow.services.training_metrics import iteration_metrics_record
from scheduler.group_runtime import FinishResult, GroupRuntime
from scheduler.model import PhaseKind

log = logging.getLogger(__name__)

_STATE_OF = {
    Outcome.OK: PhaseState.SUCCEEDED,
    Outcome.ERROR: PhaseState.FAILED,
    Outcome.LOAD_ERROR: PhaseState.FAILED,
}


def _ts(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


def phase_start(*, phase_id: int, started_at: float | None = None) -> bool:
    """Record a phase's start as its host reported it; False if it is not running."""
    when = _ts(started_at) or timezone.now()
    return bool(
        PhaseRecord.objects.filter(pk=phase_id, state=PhaseState.RUNNING).update(started_at=when)
    )


def phase_finish(
    report: PhaseReport, *, now: datetime | None = None, recovered: bool = False
) -> bool:
    """Apply a phase's end: advance the job, free its nodes, start what is next.

    `recovered`: the report comes from `reconcile` (read from the host, or decided there),
    not from the host's own message. Returns False when the report was already applied (or
    the phase was given up on).
    """
    given_now = now
    if report.group_id is not None and report.job_id is not None:
        group_id = report.group_id  # the host knows: saves a query
    else:
        try:
            group_id = PhaseRecord.objects.values_list("group_id", flat=True).get(
                pk=report.phase_id
            )
        except PhaseRecord.DoesNotExist:
            log.warning("report for unknown phase %s", report.phase_id)
            return False
    result = report.outcome
    with controller_serial(), transaction.atomic():
        group = lock_group(group_id, phase_event=True)
        # After the lock: whatever this event ends (a node allocation) ends after what the
        # transaction that held the lock before it started (issue 12 item 5).
        now = given_now or timezone.now()
        fields: dict[str, Any] = {
            "state": _STATE_OF.get(result, PhaseState.LOST),
            "finished_at": _ts(report.finished_at) or now,
            "outcome": report.summary[:500],
            "metrics": _metrics(report),
            "ray_node_ids": report.ray_node_ids,
            "gpu_ids": report.gpu_ids,
            "bytes_moved": report.bytes_moved,
            "setup_s": report.setup_s,
            "load_s": report.load_s,
            "work_s": report.work_s,
            "reported_at": now,
        }
        if recovered:
            fields["recovered"] = True
        if report.started_at is not None:
            fields["started_at"] = _ts(report.started_at)
        if report.warm is not None:
            fields["warm_start"] = report.warm
        phase = claim_phase(report.phase_id, group_id, fields)
        if phase is None:
            return False
        if result is Outcome.OK:  # its training metrics, with the iteration (none: no query)
            iteration_metrics_record(
                job_id=phase.job_id,
                placement_id=phase.placement_id,
                iteration=phase.iteration,
                metrics=report.metrics,
                now=now,
            )
        # The job rows are read, not locked: the group lock serialises the controller, and
        # the jobs app only flips cancel_requested, which the saves below never overwrite.
        # The same read serves the phases started below.
        placements = open_placements(group)
        runtime = runtime_load(group)
        effects = Effects()
        effects.schedule()  # first: on commit the dispatch runs before any event published
        try:
            finish: FinishResult | None = runtime.finish(str(phase.job_id), PhaseKind(phase.kind))
        except ValueError:
            finish = None  # the runtime already let go of this phase (job removed)
        placement = placements.get(phase.job_id)
        if placement is not None and placement.pk == phase.placement_id:
            job = placement.job
            if job.status not in TERMINAL_STATUSES and profiling.is_profile(placement):
                profiling.profile_phase_end(
                    job=job,
                    phase=phase,
                    placement=placement,
                    runtime=runtime,
                    finish=finish,
                    result=result,
                    outcome=report.summary,
                    now=now,
                    effects=effects,
                )
            elif job.status not in TERMINAL_STATUSES:
                if result is Outcome.OK:
                    _after_success(job, phase, placement, runtime, finish, now, effects)
                    _check_drift(job, phase, report)
                else:
                    member_remove(runtime, job.pk)
                    # a lost host is the platform's failure, not the job's: its attempt
                    # is not counted against ROLLMUX_MAX_ATTEMPTS (departures)
                    lost = result is Outcome.LOST
                    node = report.lost_node if lost else None
                    if node is not None:  # its node died or is missing: the platform's loss
                        # Ray's word: the node is down now, in this transaction, so the
                        # planning pass this resubmission asks for cannot pick it again
                        node_ray_changed(name=node, alive=False, reason=report.reason)
                        placement_end(placement, EndReason.NODE_DOWN, now, effects, kill=True)
                        job_resubmit_node_down(job, node, now)
                    else:
                        reason = EndReason.LOST if lost else EndReason.FAILED
                        placement_end(placement, reason, now, effects, kill=lost)
                        job_fail_or_resubmit(
                            job, report.summary, now, retry=not report.load_error, lost=lost
                        )
        if not effects.group_released:
            phases_start(group, runtime, now, effects, placements=placements)
            runtime_save(group, runtime)
        if effects.orders and report.finished_at is not None:
            ended = report.finished_at  # observed after the dispatch (on_commit runs in order)
            transaction.on_commit(lambda: metrics.observe_switch(ended))
    return True


def _metrics(report: PhaseReport) -> dict[str, Any]:
    """The phase's metrics as recorded; a rollout that migrated its tail also records which
    nodes it freed, seconds after its start (`tail_released`)."""
    if not report.released or report.started_at is None:
        return report.metrics
    start = report.started_at
    released = {n: round(max(0.0, t - start), 6) for n, t in report.released.items()}
    return {**report.metrics, "tail_released": released}


def phase_tail(
    *, phase_id: int, group_id: int, nodes: list[str], now: datetime | None = None
) -> bool:
    """Apply a tail-bound rollout's hand-over (long-tail migration, paper section 3): its
    host consolidated the tail onto its other nodes; free `nodes` and start the next
    member's rollout there. One transaction under the group lock, idempotent."""
    with controller_serial(), transaction.atomic():
        group = lock_group(group_id, phase_event=True)
        effects = Effects()
        done = tail_release(group, phase_id, tuple(nodes), now or timezone.now(), effects)
        effects.schedule()
    return done


def _check_drift(job: Job, phase: ClaimedPhase, report: PhaseReport) -> None:
    """Publish "job drifting" when a phase took longer, in profile seconds, than the job
    declared as its worst case (by more than ROLLMUX_DRIFT_TOLERANCE): the planner's
    estimates for the job and its group no longer hold. No query: the numbers are at hand."""
    declared = {PhaseKind.ROLLOUT.value: job.t_roll_max_s, PhaseKind.TRAIN.value: job.t_train_max_s}
    worst = declared.get(phase.kind)
    if not worst or report.started_at is None or report.finished_at is None:
        return
    wall_s = report.finished_at - report.started_at
    profile_s = own_seconds(wall_s, report.metrics) * time_scale_of(job.runner, job.time_scale)
    if profile_s > worst * (1.0 + settings.ROLLMUX_DRIFT_TOLERANCE):
        events.publish(
            events.JOB_DRIFTING,
            job=job,
            key=f"{events.JOB_DRIFTING}:{job.pk}:{phase.placement_id}",  # once per placement
            detail={
                "phase": phase.kind,
                "iteration": phase.iteration + 1,
                "profile_s": round(profile_s, 3),
                "declared_s": worst,
            },
        )


def _after_success(
    job: Job,
    phase: ClaimedPhase,
    placement: Placement,
    runtime: GroupRuntime,
    finish: FinishResult | None,
    now: datetime,
    effects: Effects,
) -> None:
    update = ["updated_at"]
    if phase.kind == PhaseKind.TRAIN.value and job.iterations_done < phase.iteration + 1:
        job.iterations_done = phase.iteration + 1
        update.append("iterations_done")
    if job.status == JobStatus.PLACED:
        job.status = JobStatus.RUNNING
        job.started_at = job.started_at or now
        update += ["status", "started_at"]
    if len(update) > 1:
        job.save(update_fields=update)
    if (finish is not None and finish.done) or job.iterations_done >= job.iterations:
        member_remove(runtime, job.pk)
        placement_end(placement, EndReason.COMPLETED, now, effects)
        job_finish(job, JobStatus.COMPLETED, now)
        events.publish(events.JOB_COMPLETED, job=job)
    elif job.cancel_requested:
        # cancel takes effect at the phase boundary: drop the job's next phase
        member_remove(runtime, job.pk)
        placement_end(placement, EndReason.CANCELLED, now, effects)
        job_finish(job, JobStatus.CANCELLED, now, reason="cancelled at a phase boundary")
    elif phase.kind == PhaseKind.TRAIN.value:
        # an iteration boundary (its checkpoint is written): the planner may move it now
        moves.at_iteration_boundary(
            job=job,
            placement=placement,
            runtime=runtime,
            now=now,
            effects=effects,
            persist=planning._placement_persist,
            stale=planning._StaleSnapshot,
        )
