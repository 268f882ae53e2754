"""Reconcile: the safety net that finds what the event path missed and repairs it.

Run by beat every 15 s (and by the embedded beat): phases whose host died, whose end
report was lost (a broker outage, a worker killed while it held it), that never arrived
at their host, or that overran; and groups with members but nothing running.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rollmux_web import ports
from rollmux_web.jobs.models import Job
from rollmux_web.ports import Outcome, PhaseReport
from rollmux_web.workflow.models import ExecutionGroup, PhaseRecord, PhaseState, Strategy
from rollmux_web.workflow.services.controller import phase_finish
from rollmux_web.workflow.services.effects import Effects
from rollmux_web.workflow.services.groups import phases_start, runtime_load, runtime_save
from rollmux_web.workflow.services.locks import ACTIVE_PHASE_STATES, controller_serial, lock_group
from rollmux_web.workflow.services.orders import phase_order, phase_worst_s, placement_pools

log = logging.getLogger(__name__)


@dataclass
class ReconcileSummary:
    recovered: list[int] = field(default_factory=list)  # reports re-applied from hosts
    lost: list[int] = field(default_factory=list)  # phases whose host died
    redispatched: list[int] = field(default_factory=list)
    overran: list[int] = field(default_factory=list)
    advanced: list[int] = field(default_factory=list)  # stalled groups restarted


def phase_deadline(phase: PhaseRecord, job: Job) -> timedelta:
    """Return how long a phase may run before reconcile declares it overrun."""
    colocated = phase.placement.strategy == Strategy.COLOCATED
    worst = phase_worst_s(phase.kind, job, colocated=colocated)
    return timedelta(seconds=3 * worst + settings.ROLLMUX_PHASE_GRACE_S)


def phases_reconcile(
    *, now: datetime | None = None, grace_s: float | None = None
) -> ReconcileSummary:
    """Find phases whose host died, whose report was lost, or that overran; recover them;
    restart groups with members but nothing running."""
    now = now or timezone.now()
    grace = timedelta(seconds=settings.ROLLMUX_DISPATCH_GRACE_S if grace_s is None else grace_s)
    summary = ReconcileSummary()
    active = PhaseRecord.objects.filter(state__in=ACTIVE_PHASE_STATES).select_related(
        "job", "placement"
    )
    for phase in active:
        _phase_check(phase, now, grace, summary)
    summary.advanced = _stalled_groups_advance(now)
    return summary


def phases_watch(*, now: datetime | None = None) -> ReconcileSummary:
    """Ask the hosts of running phases whose end report is overdue (past `due_at`: the
    job's worst case plus a second) what became of them, and apply what they say.

    The fast half of reconcile, run every second: a report lost on its way (a broker
    outage, a controller killed while it held the message) costs about a second of idle
    nodes instead of a reconcile interval. A phase still running (a real runner slower
    than its declared worst case) is asked again later, at growing intervals.
    """
    now = now or timezone.now()
    grace = timedelta(seconds=settings.ROLLMUX_DISPATCH_GRACE_S)
    summary = ReconcileSummary()
    overdue = PhaseRecord.objects.filter(
        state__in=ACTIVE_PHASE_STATES, due_at__lt=now
    ).select_related("job", "placement")
    for phase in overdue:
        if _phase_check(phase, now, grace, summary) == "running":
            late = (now - (phase.started_at or phase.queued_at)).total_seconds()
            PhaseRecord.objects.filter(pk=phase.pk, state=PhaseState.RUNNING).update(
                due_at=now + timedelta(seconds=max(1.0, late / 2))
            )
    return summary


def _phase_check(
    phase: PhaseRecord, now: datetime, grace: timedelta, summary: ReconcileSummary
) -> str | None:
    """Probe one active phase's host and repair what it says; return the probe's state."""
    dispatcher = ports.dispatcher()
    order = phase_order(phase, phase.job, placement_pools(phase.placement))
    try:
        probe = dispatcher.probe(order)
    except Exception as exc:
        log.warning("probe of phase %s failed: %s", phase.pk, exc)
        return None
    if probe.state == "done" and probe.report is not None:
        if phase_finish(probe.report, recovered=True):
            summary.recovered.append(phase.pk)
    elif probe.state == "dead" and phase.queued_at < now - grace:
        held_state = PhaseRecord.objects.filter(
            placement_id=phase.placement_id, state=PhaseState.SUCCEEDED
        ).exists()
        if not held_state:
            # The host never ran a phase of this placement (its first dispatch was lost
            # before the actor existed): nothing resident was lost, start it again.
            dispatcher.dispatch(order)
            summary.redispatched.append(phase.pk)
        elif phase_finish(
            PhaseReport.failed(phase.pk, Outcome.LOST, "its host (actor) died"), recovered=True
        ):
            summary.lost.append(phase.pk)
    elif probe.state == "unknown" and phase.queued_at < now - grace:
        dispatcher.dispatch(order)
        summary.redispatched.append(phase.pk)
    elif probe.state == "running":
        since = phase.started_at or phase.queued_at
        if since < now - phase_deadline(phase, phase.job):
            dispatcher.kill(phase.job_id, phase.placement_id)
            if phase_finish(
                PhaseReport.failed(phase.pk, Outcome.ERROR, "overran its deadline"),
                recovered=True,
            ):
                summary.overran.append(phase.pk)
    return probe.state


def _stalled_groups_advance(now: datetime) -> list[int]:
    """Start ready phases of groups with members but nothing running (a lost decision)."""
    advanced = []
    busy = set(
        PhaseRecord.objects.filter(state__in=ACTIVE_PHASE_STATES).values_list("group_id", flat=True)
    )
    for group_id in (
        ExecutionGroup.objects.filter(released_at__isnull=True)
        .exclude(pk__in=busy)
        .values_list("pk", flat=True)
    ):
        with controller_serial(), transaction.atomic():
            group = lock_group(group_id)
            if not group.runtime_state:
                continue
            now = max(now, timezone.now())  # after the lock (see controller.phase_finish)
            runtime = runtime_load(group)
            effects = Effects()
            if phases_start(group, runtime, now, effects):
                advanced.append(group_id)
            runtime_save(group, runtime)
            effects.schedule()
    return advanced
