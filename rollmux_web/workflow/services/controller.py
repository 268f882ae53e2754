"""The group controller: apply a phase's end and start what comes next (the runtime hook).

One transaction per phase event, under the group row's lock:

1. claim the phase record (at most once), with the iteration's training metrics in the
   same statement (`locks.claim_phase`);
2. read the group's open placements and its runtime; record a successful phase's
   progress on its job (`_job_progress`);
3. decide: the core's `GroupRuntime.on_phase_end` returns ONE decision (the job leaves,
   and why; the phases that start; the new runtime). At an iteration boundary the
   planner may take the job (services.moves: a move or a yield), and the decision is
   taken again with that answer;
4. apply it in one place (`_apply`): the departure (completed, cancelled at the
   boundary, failed and resubmitted, its node down, profiled), the phases that start
   (recorded, dispatched on commit) and the runtime.

workers/README.md counts its round trips.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rollmux_web import events, metrics
from rollmux_web.formatting import iteration_number
from rollmux_web.inventory.services import node_ray_changed
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job, JobStatus
from rollmux_web.jobs.runners import own_seconds, time_scale_of
from rollmux_web.ports import Outcome, PhaseReport
from rollmux_web.workflow.models import (
    EndReason,
    ExecutionGroup,
    PhaseRecord,
    PhaseState,
    Placement,
)
from rollmux_web.workflow.services import moves, profiling
from rollmux_web.workflow.services.departures import (
    job_fail_or_resubmit,
    job_finish,
    job_resubmit_node_down,
    placement_end,
)
from rollmux_web.workflow.services.effects import Effects
from rollmux_web.workflow.services.groups import (
    open_placements,
    phases_record,
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
from rollmux_web.workflow.services.training_metrics import training_metrics_of
from scheduler.group_runtime import Departure, PhaseEnd, PhaseEndDecision
from scheduler.model import PhaseKind

log = logging.getLogger(__name__)

_STATE_OF = {
    Outcome.OK: PhaseState.SUCCEEDED,
    Outcome.ERROR: PhaseState.FAILED,
    Outcome.LOAD_ERROR: PhaseState.FAILED,
}


# how the planner took a job at its iteration boundary (services.moves), as the runtime hears it
# (a fair-share preemption is a yield to the runtime: services.preemption)
_LEFT = {
    EndReason.MOVED: Departure.MOVED,
    EndReason.YIELDED: Departure.YIELDED,
    EndReason.PREEMPTED: Departure.YIELDED,
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
        # the claim, with the iteration's training metrics of a successful phase in the
        # same statement (none reported: no upsert)
        training = training_metrics_of(report.metrics) if result is Outcome.OK else {}
        phase = claim_phase(report.phase_id, group_id, fields, training_metrics=training)
        if phase is None:
            return False
        # The job rows are read, not locked: the group lock serialises the controller, and
        # the jobs app only flips cancel_requested, which the saves below never overwrite.
        # The same read serves the phases started below.
        placements = open_placements(group)
        runtime = runtime_load(group)
        effects = Effects()
        effects.schedule()  # first: on commit the dispatch runs before any event published
        placement = placements.get(phase.job_id)
        if placement is None or placement.pk != phase.placement_id:
            placement = None  # the phase's placement ended: the runtime only frees its nodes
        elif placement.job.status in TERMINAL_STATUSES:
            placement = None  # its job finished (a cancel applied meanwhile): the same
        end = _phase_end(phase, placement, result, now)
        decision = runtime.on_phase_end(end)  # the runtime hook: one decision
        if decision.boundary and placement is not None:
            # an iteration boundary: the planner may move the job now (services.moves)
            left = moves.at_iteration_boundary(
                job=placement.job, placement=placement, now=now, effects=effects
            )
            if left is not None:  # it left (its placement ended): decide without it
                decision = runtime.on_phase_end(replace(end, left=_LEFT[left]))
        _apply(decision, phase, group, placements, placement, report, now, effects)
        if effects.orders and report.finished_at is not None:
            ended = report.finished_at  # observed after the dispatch (on_commit runs in order)
            transaction.on_commit(lambda: metrics.observe_switch(ended))
    return True


def _phase_end(
    phase: ClaimedPhase, placement: Placement | None, result: Outcome, now: datetime
) -> PhaseEnd:
    """Return what the runtime is told of the phase end; a successful phase of a production
    run records the job's progress first (its iterations, its start), which the decision
    reads."""
    kind = PhaseKind(phase.kind)
    if placement is None:
        return PhaseEnd(str(phase.job_id), kind, ok=result is Outcome.OK, member=False)
    job = placement.job
    profile = profiling.is_profile(placement)
    if result is Outcome.OK and not profile:
        _job_progress(job, phase, now)
    return PhaseEnd(
        str(job.pk),
        kind,
        ok=result is Outcome.OK,
        cancel_requested=job.cancel_requested,
        iterations_done=job.iterations_done,
        iterations=job.iterations,
        profile=profile,
    )


def _apply(
    decision: PhaseEndDecision,
    phase: ClaimedPhase,
    group: ExecutionGroup,
    placements: dict[int, Placement],
    placement: Placement | None,
    report: PhaseReport,
    now: datetime,
    effects: Effects,
) -> None:
    """Write a phase end's decision: the job's departure (its placement ended, the job
    finished, resubmitted or queued), then the phases that start and the runtime."""
    if placement is not None:
        job = placement.job
        if profiling.is_profile(placement):
            if decision.leaves is not None:
                profiling.profile_departure(
                    job=job,
                    placement=placement,
                    leaves=decision.leaves,
                    result=report.outcome,
                    outcome=report.summary,
                    now=now,
                    effects=effects,
                )
        else:
            _depart(decision.leaves, job, placement, report, now, effects)
            if report.outcome is Outcome.OK:
                _check_drift(job, phase, report)
    if not effects.group_released:
        phases_record(group, decision.starts, decision.runtime, now, effects, placements)
        runtime_save(group, decision.runtime)


def _depart(
    leaves: Departure | None,
    job: Job,
    placement: Placement,
    report: PhaseReport,
    now: datetime,
    effects: Effects,
) -> None:
    """Write a production job's departure from its group (nothing when it stays, or when
    the planner moved it or sent it back: services.moves wrote that)."""
    if leaves is Departure.COMPLETED:
        placement_end(placement, EndReason.COMPLETED, now, effects)
        job_finish(job, JobStatus.COMPLETED, now)
        events.publish(events.JOB_COMPLETED, job=job)
    elif leaves is Departure.CANCELLED:
        placement_end(placement, EndReason.CANCELLED, now, effects)
        job_finish(job, JobStatus.CANCELLED, now, reason="cancelled at a phase boundary")
    elif leaves is Departure.FAILED:
        # a lost host is the platform's failure, not the job's: its attempt is not
        # counted against ROLLMUX_MAX_ATTEMPTS (departures)
        lost = report.outcome is Outcome.LOST
        node = report.lost_node if lost else None
        if node is not None:  # its node died or is missing: the platform's loss
            # Ray's word: the node is down now, in this transaction, so the planning pass
            # this resubmission asks for cannot pick it again
            node_ray_changed(name=node, alive=False, reason=report.reason)
            placement_end(placement, EndReason.NODE_DOWN, now, effects, kill=True)
            job_resubmit_node_down(job, node, now)
        else:
            reason = EndReason.LOST if lost else EndReason.FAILED
            placement_end(placement, reason, now, effects, kill=lost)
            job_fail_or_resubmit(job, report.summary, now, retry=not report.load_error, lost=lost)


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
                "iteration": iteration_number(phase.iteration),  # as pages say it
                "profile_s": round(profile_s, 3),
                "declared_s": worst,
            },
        )


def _job_progress(job: Job, phase: ClaimedPhase, now: datetime) -> None:
    """Record a successful phase's progress on its job: a training's iteration is done,
    and a job placed runs from its first phase's end on (one UPDATE, none when nothing
    changed)."""
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
