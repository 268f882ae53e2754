"""A co-execution group's runtime (the core GroupRuntime snapshot) and the phases it starts.

Every function here runs inside a transaction that holds the group row's lock
(`locks.lock_group`): the snapshot is read, advanced and written back under it, together
with the phase records it starts, so a replayed event can never start a phase twice.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Value
from django.db.models.functions import Coalesce

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow.models import (
    ExecutionGroup,
    PhaseRecord,
    PhaseState,
    Placement,
    Strategy,
)
from rollmux_web.workflow.services.effects import Effects
from rollmux_web.workflow.services.orders import Pools, phase_order, phase_worst_s
from scheduler.group_runtime import GroupRuntime, PhaseStart
from scheduler.model import PhaseKind

log = logging.getLogger(__name__)

# How long after its worst case a phase's end report counts as overdue (the watch task then
# asks its host): reports arrive within milliseconds; this covers dispatch and clock slack.
DUE_SLACK_S = 1.0


def runtime_load(group: ExecutionGroup) -> GroupRuntime:
    """Return the group's runtime (a new one for a group that has none yet)."""
    if group.runtime_state:
        return GroupRuntime.from_dict(group.runtime_state)
    return GroupRuntime(str(group.pk), switch_overhead_s=settings.ROLLMUX_SWITCH_OVERHEAD_S)


def runtime_save(group: ExecutionGroup, runtime: GroupRuntime) -> None:
    group.runtime_state = runtime.to_dict()
    group.save(update_fields=["runtime_state"])


def member_remove(runtime: GroupRuntime, job_id: int) -> None:
    """Drop a job from the runtime (no-op when it already left)."""
    with contextlib.suppress(KeyError):
        runtime.remove(str(job_id))


def open_placements(group: ExecutionGroup) -> dict[int, Placement]:
    """Return the group's open placements with their jobs, by job id (one query)."""
    return {
        p.job_id: p
        for p in Placement.objects.filter(group=group, ended_at__isnull=True).select_related("job")
    }


def _pools(runtime: GroupRuntime, job_id: int) -> Pools:
    """Return a member's (rollout nodes, training nodes): where its workers live."""
    member = runtime.member(str(job_id))
    return tuple(member.rollout_nodes), tuple(member.train_nodes)


def _worst_s(start: PhaseStart, placement: Placement) -> float:
    colocated = placement.strategy == Strategy.COLOCATED
    return phase_worst_s(start.kind.value, placement.job, colocated=colocated)


def tail_release(
    group: ExecutionGroup, phase_id: int, nodes: tuple[str, ...], now: datetime, effects: Effects
) -> bool:
    """Long-tail migration: a running rollout consolidated its tail off `nodes`; free them
    in the runtime and start what can start there now (the next member's rollout). False
    when the phase is no longer running or has already let them go (a replayed event)."""
    phase = (
        PhaseRecord.objects.filter(pk=phase_id, group=group, state=PhaseState.RUNNING)
        .only("job_id", "kind")
        .first()
    )
    if phase is None or phase.kind != PhaseKind.ROLLOUT.value:
        return False
    runtime = runtime_load(group)
    try:
        runtime.release_tail(str(phase.job_id), nodes)
    except ValueError:
        return False
    phases_start(group, runtime, now, effects)
    runtime_save(group, runtime)
    return True


def phases_start(
    group: ExecutionGroup,
    runtime: GroupRuntime,
    now: datetime,
    effects: Effects,
    *,
    placements: dict[int, Placement] | None = None,
) -> list[PhaseRecord]:
    """Ask the runtime which phases start now; record and queue them (`phases_record`)."""
    return phases_record(group, runtime.start_ready(), runtime, now, effects, placements)


def phases_record(
    group: ExecutionGroup,
    starts: Sequence[PhaseStart],
    runtime: GroupRuntime,
    now: datetime,
    effects: Effects,
    placements: dict[int, Placement] | None = None,
) -> list[PhaseRecord]:
    """Record the phases the runtime started (`starts`; `runtime`: as it is after them) and
    queue them for dispatch.

    A started phase is recorded as RUNNING with started_at = now (the dispatch moment: the
    runtime only starts a phase on idle nodes and its host runs one phase at a time, so it
    begins within milliseconds); the host's own start and end stamps replace both when it
    reports the end. That saves a broker message and a transaction per phase.
    """
    if not starts:
        return []
    if placements is None:
        placements = open_placements(group)
    rows = phase_rows(group, starts, placements, now)
    # One INSERT for all. The uniqueness of (placement, iteration, kind) cannot be hit here:
    # runtime snapshot and records change in the same transaction under the group lock; if
    # it ever were, the IntegrityError aborts the whole event (nothing half-applied).
    created = PhaseRecord.objects.bulk_create(rows)
    jobs = {p.job_id: p.job for p in placements.values()}
    phase_orders(created, jobs, runtime, effects)
    started_jobs = [j for j in {p.job_id for p in created} if jobs[j].status == JobStatus.PLACED]
    if started_jobs:
        # a resubmitted job keeps the start of its first attempt
        Job.objects.filter(pk__in=started_jobs, status=JobStatus.PLACED).update(
            status=JobStatus.RUNNING,
            started_at=Coalesce("started_at", Value(now)),
            reason="",
            updated_at=now,
        )
    return created


def phase_rows(
    group: ExecutionGroup,
    starts: Sequence[PhaseStart],
    placements: dict[int, Placement],
    now: datetime,
) -> list[PhaseRecord]:
    """Return the (unsaved) RUNNING records of the phases the runtime started (`starts`),
    from `now`; `placements`: the group's open placements by job id, with their jobs."""
    rows = []
    for start in starts:
        job_id = int(start.job_id)
        p = placements.get(job_id)
        if p is None or p.ended_at is not None:  # the runtime and the rows disagree: say so
            log.error(
                "group %s: runtime started job %s without an open placement", group.pk, job_id
            )
            continue
        rows.append(
            PhaseRecord(
                job_id=job_id,
                group=group,
                placement_id=p.pk,
                iteration=start.iteration,
                kind=start.kind.value,
                node_names=list(start.nodes),
                state=PhaseState.RUNNING,
                warm_start=not start.cold,
                queued_at=now,
                started_at=now,
                due_at=now + timedelta(seconds=_worst_s(start, p) + DUE_SLACK_S),
            )
        )
    return rows


def order_context(runtime: GroupRuntime, job_id: int, kind: str) -> tuple[Pools, tuple[str, ...]]:
    """Return what a phase order of the job needs of the runtime as it is now: where its
    workers live, and for a rollout the nodes it may hand to the next member once
    tail-bound (long-tail migration)."""
    rollout = kind == PhaseKind.ROLLOUT.value
    tail = runtime.tail_nodes(str(job_id)) if rollout else ()
    return _pools(runtime, job_id), tail


def phase_orders(
    created: Sequence[PhaseRecord], jobs: dict[int, Job], runtime: GroupRuntime, effects: Effects
) -> None:
    """Queue the dispatch of the recorded phases of one group (on commit)."""
    for phase in created:
        pools, tail = order_context(runtime, phase.job_id, phase.kind)
        effects.orders.append(phase_order(phase, jobs[phase.job_id], pools, tail_nodes=tail))
