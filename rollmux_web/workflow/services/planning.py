"""Planning: place the queued jobs (the paper's Algorithm 1, run by the core, persisted here)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rollmux_web import events, metrics
from rollmux_web.inventory.models import Node
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow import converters, snapshot, sync
from rollmux_web.workflow.models import ExecutionGroup, NodeAllocation, Placement
from rollmux_web.workflow.services.effects import Effects
from rollmux_web.workflow.services.groups import phases_start, runtime_load, runtime_save
from rollmux_web.workflow.services.locks import is_postgres, lock_group, plan_serial, try_plan_lock
from scheduler.model import ClusterState, JobProfile, PlacementResult, PlacementStatus


@dataclass
class PlanSummary:
    """What a planning pass did."""

    ran: bool  # False: another pass held the lock
    placed: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)
    infeasible: dict[int, str] = field(default_factory=dict)


def queue_plan(*, now: datetime | None = None) -> PlanSummary:
    """Run one planning pass: place every queued job the cluster can take now.

    1. take the planner lock (one pass at a time, whichever worker runs it);
    2. snapshot nodes, active groups and queued jobs from the database;
    3. call the core planner per queued job (priority desc, then submission time), applying
       each decision to the snapshot so the next job sees it;
    4. persist: Placement (+ nodes), ExecutionGroup for a new group, NodeAllocation for
       newly taken nodes, job placed; admit the job to its group's runtime and record the
       phases that start now;
    5. leave RETRY jobs queued with their reason, fail INFEASIBLE ones;
    6. on commit: dispatch the started phases.
    """
    from scheduler.planner import place

    now = now or timezone.now()
    summary = PlanSummary(ran=True)
    with plan_serial() as got, transaction.atomic():
        if not got or (is_postgres() and not try_plan_lock()):
            return PlanSummary(ran=False)
        queued = list(
            # of=self: lock the job rows only, not the tenant and SLO class joined below
            # (a submission's foreign-key check on its tenant would wait for the whole pass)
            Job.objects.select_for_update(of=("self",))
            .filter(status=JobStatus.QUEUED, cancel_requested=False)
            .select_related("slo_class", "tenant")
            .order_by("-priority", "submitted_at", "pk")
        )
        if not queued:
            return summary
        try:
            state = snapshot.cluster_state()
        except snapshot.NoPoolConfigured as exc:
            for job in queued:
                _set_reason(job, f"waiting: {exc}")
                summary.waiting[job.pk] = str(exc)
            return summary
        effects = Effects()
        measured = sync.measured_s(j.pk for j in queued)  # a resubmitted job's sync times
        for job in queued:
            profile = converters.job_profile(job, t_sync_s=sync.t_sync_s(job, measured))
            decided = time.perf_counter()
            result = place(
                profile, state, policy="rollmux", max_group_size=settings.ROLLMUX_MAX_GROUP_SIZE
            )
            metrics.observe_admission(result.status.name.lower(), time.perf_counter() - decided)
            if result.status is PlacementStatus.FIT and result.placement is not None:
                state = _placement_persist(job, profile, result, state, now, effects)
                summary.placed.append(job.pk)
            elif result.status is PlacementStatus.RETRY:
                _set_reason(job, result.reason)
                summary.waiting[job.pk] = result.reason
            else:
                job.status = JobStatus.FAILED
                job.reason = f"infeasible: {result.reason}"[:500]
                job.error = result.reason
                job.finished_at = now
                job.save(update_fields=["status", "reason", "error", "finished_at", "updated_at"])
                events.publish(events.JOB_FAILED, job=job, detail={"reason": job.reason})
                summary.infeasible[job.pk] = result.reason
        effects.replan = False
        effects.schedule()
    return summary


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
) -> ClusterState:
    """Persist a FIT decision and return the snapshot with it applied."""
    from scheduler.planner import apply_placement

    placement = result.placement
    assert placement is not None  # a FIT carries its placement
    if placement.group_id is None:
        group = ExecutionGroup.objects.create()
    else:
        group = lock_group(int(placement.group_id))
    state = apply_placement(state, profile, placement, group_id=str(group.pk))
    names = set(placement.rollout_nodes) | set(placement.train_nodes)
    nodes = {n.name: n for n in Node.objects.filter(name__in=names)}
    slowdown = result.predicted_slowdown.get(profile.id, 1.0)
    row = Placement.objects.create(
        job=job,
        group=group,
        attempt=job.attempts + 1,
        strategy=placement.strategy.value,
        marginal_cost_per_hour=Decimal(str(round(result.marginal_cost_per_hour, 4))),
        predicted_slowdown=slowdown,
    )
    row.rollout_nodes.set([nodes[n] for n in placement.rollout_nodes])
    row.train_nodes.set([nodes[n] for n in placement.train_nodes])
    for name in placement.new_nodes:
        # The partial unique index (one open allocation per node) makes a double allocation
        # impossible even if two planners ever ran at once.
        NodeAllocation.objects.create(node=nodes[name], group=group, start=now)
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
    member = converters.member(row, t_sync_s=profile.t_sync_s)
    runtime.admit(member, iterations=job.iterations, start_iteration=job.iterations_done)
    phases_start(group, runtime, now, effects)
    runtime_save(group, runtime)
    return state
