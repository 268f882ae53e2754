"""Writes of the live workflow: planning passes, the group controller, departures, failures.

Every function here is one transaction that decides with the core (scheduler/) and then
persists the decision; side effects outside the database (dispatching phases to Ray,
killing hosts, asking for another planning pass) run on commit, through the ports
(`rollmux_web.workflow.ports`: the dispatcher and the triggers the composition root
configured). Celery tasks in `workers.tasks` are thin wrappers that call these with ids.

Serialisation:
- planning runs one pass at a time: `pg_try_advisory_xact_lock` on PostgreSQL, a process
  lock on SQLite (the embedded default is one process);
- a group's controller state (the core GroupRuntime snapshot on ExecutionGroup) is read and
  written under the group row's lock (SELECT ... FOR UPDATE), so phase events of one group
  are applied one at a time whichever worker receives them; on SQLite a process lock does it;
- a phase report is applied at most once: it claims its PhaseRecord with a conditional
  UPDATE from an active state, and 0 rows updated means another worker already did.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, cast

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Field, Q, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

from rollmux_web import metrics
from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job, JobStatus
from rollmux_web.jobs.runners import time_scale_of
from rollmux_web.workflow import converters, ports, snapshot
from rollmux_web.workflow.models import (
    ExecutionGroup,
    NodeAllocation,
    PhaseRecord,
    PhaseState,
    Placement,
)
from rollmux_web.workflow.ports import PhaseOrder, PhaseReport
from scheduler.model import ClusterState, PhaseKind, PlacementStatus
from scheduler.roundrobin import GroupRuntime

log = logging.getLogger(__name__)

PLAN_LOCK_KEY = 0x524F4C4C  # "ROLL": the advisory lock id of the planner
ACTIVE_PHASE_STATES = (PhaseState.QUEUED, PhaseState.DISPATCHED, PhaseState.RUNNING)

_sqlite_plan_lock = threading.Lock()
_sqlite_controller_lock = threading.RLock()


# --------------------------------------------------------------------------------------
# locks
# --------------------------------------------------------------------------------------


def _is_postgres() -> bool:
    return connection.vendor == "postgresql"


@contextlib.contextmanager
def _controller_serial() -> Iterator[None]:
    """Serialise controller transactions on SQLite (row locks do it on PostgreSQL)."""
    if _is_postgres():
        yield
        return
    with _sqlite_controller_lock:
        yield


def _try_plan_lock() -> bool:
    """Take the planner lock for the current transaction; False if another pass holds it."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [PLAN_LOCK_KEY])
        return bool(cur.fetchone()[0])


def _lock_group(group_id: int, *, phase_event: bool = False) -> ExecutionGroup:
    """Lock the group row for this transaction and return it.

    For a phase event (`phase_event=True`) the same statement also lets the transaction's
    commit return before its WAL is flushed on PostgreSQL (`set_config(...)`, i.e. SET LOCAL
    synchronous_commit = off, folded into the SELECT to save a round trip on the switch
    path). A database crash can lose the last few milliseconds of such commits; what they
    recorded is still on the job's host (its stored reports) and `reconcile` re-applies it.
    """
    qs = ExecutionGroup.objects.select_for_update()
    if phase_event and _is_postgres() and settings.ROLLMUX_ASYNC_COMMIT_PHASE_EVENTS:
        qs = qs.annotate(_async_commit=RawSQL("set_config('synchronous_commit', 'off', true)", ()))
    return qs.get(pk=group_id)


def _claim_phase(phase_id: int, group_id: int, fields: dict[str, Any]) -> _Claimed | None:
    """Apply a phase's end to its record if it is still active; None if it is not.

    One round trip: `UPDATE ... WHERE state IN (active) RETURNING ...` (PostgreSQL and
    SQLite >= 3.35). The conditional UPDATE is what makes a report apply at most once; a
    record without a start stamp gets the end stamp as its start.
    """
    meta = PhaseRecord._meta
    qn = connection.ops.quote_name

    def column(name: str) -> Field[Any, Any]:
        return cast("Field[Any, Any]", meta.get_field(name))

    sets = [f"{qn(str(column(name).column))} = %s" for name in fields]
    params = [column(name).get_db_prep_save(value, connection) for name, value in fields.items()]
    if "started_at" not in fields:  # (the right-hand side of SET sees the old row)
        sets.append(f"{qn('started_at')} = COALESCE({qn('started_at')}, %s)")
        params.append(column("finished_at").get_db_prep_save(fields["finished_at"], connection))
    states = ", ".join(["%s"] * len(ACTIVE_PHASE_STATES))
    sql = (
        f"UPDATE {qn(meta.db_table)} SET {', '.join(sets)}"
        f" WHERE {qn('id')} = %s AND {qn('group_id')} = %s AND {qn('state')} IN ({states})"
        f" RETURNING {qn('job_id')}, {qn('placement_id')}, {qn('kind')}, {qn('iteration')}"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [*params, phase_id, group_id, *ACTIVE_PHASE_STATES])
        row = cur.fetchone()
    if row is None:
        return None
    return _Claimed(phase_id, int(row[0]), int(row[1]), str(row[2]), int(row[3]))


@dataclass(frozen=True)
class _Claimed:
    """The fields of a claimed phase record the controller needs."""

    pk: int
    job_id: int
    placement_id: int
    kind: str
    iteration: int


def _open_placements(group: ExecutionGroup) -> dict[int, Placement]:
    """Return the group's open placements with their jobs, by job id (one query)."""
    return {
        p.job_id: p
        for p in Placement.objects.filter(group=group, ended_at__isnull=True).select_related("job")
    }


# --------------------------------------------------------------------------------------
# runtime snapshots and phase orders
# --------------------------------------------------------------------------------------


def _load_runtime(group: ExecutionGroup) -> GroupRuntime:
    if group.runtime_state:
        return GroupRuntime.from_dict(group.runtime_state)
    return GroupRuntime(str(group.pk), switch_overhead_s=settings.ROLLMUX_SWITCH_OVERHEAD_S)


def _save_runtime(group: ExecutionGroup, runtime: GroupRuntime) -> None:
    group.runtime_state = runtime.to_dict()
    group.save(update_fields=["runtime_state"])


def job_time_scale(job: Job) -> float:
    """Return the speed-up applied to the job's profile durations (see `time_scale_of`)."""
    return time_scale_of(job.runner, job.time_scale)


def runner_context(job: Job) -> dict[str, Any]:
    """Return what the job's runner knows about it (the fields of `workers.runners.
    RunnerContext`, as the dict a PhaseOrder carries)."""
    return {
        "job_id": job.pk,
        "iterations": job.iterations,
        "t_roll_min_s": job.t_roll_min_s,
        "t_roll_max_s": job.t_roll_max_s,
        "t_train_min_s": job.t_train_min_s,
        "t_train_max_s": job.t_train_max_s,
        "host_mem_gb": job.host_mem_gb,
        "time_scale": job_time_scale(job),
        "seed": 0,
        "channel": {
            "redis_url": settings.REDIS_URL,
            "timeout_s": settings.ROLLMUX_EXTERNAL_TIMEOUT_S,
        },
    }


def phase_order(phase: PhaseRecord, job: Job, pinned: tuple[str, ...]) -> PhaseOrder:
    """Return what the dispatcher needs to run a phase record on the job's resident host."""
    return PhaseOrder(
        phase_id=phase.pk,
        job_id=job.pk,
        placement_id=phase.placement_id,
        kind=phase.kind,
        iteration=phase.iteration,
        nodes=tuple(phase.node_names),
        pinned_nodes=pinned,
        runner=job.runner,
        context=runner_context(job),
        checkpoint_dir=str(settings.ROLLMUX_CHECKPOINT_DIR),
        resume_iteration=phase.iteration,
        group_id=phase.group_id,
    )


def placement_nodes(placement: Placement) -> tuple[str, ...]:
    names = {n.name for n in placement.rollout_nodes.all()} | {
        n.name for n in placement.train_nodes.all()
    }
    return tuple(sorted(names))


def order_for(phase_id: int) -> PhaseOrder:
    phase = PhaseRecord.objects.select_related("job", "placement").get(pk=phase_id)
    return phase_order(phase, phase.job, placement_nodes(phase.placement))


@dataclass
class _Effects:
    """Side effects to run after the transaction commits."""

    orders: list[PhaseOrder] = field(default_factory=list)
    releases: list[tuple[int, int]] = field(default_factory=list)  # (job, placement)
    kills: list[tuple[int, int]] = field(default_factory=list)
    replan: bool = False
    group_released: bool = False  # a departure emptied the group

    def schedule(self) -> None:
        if not (self.orders or self.releases or self.kills or self.replan):
            return
        orders, releases, kills, replan = self.orders, self.releases, self.kills, self.replan
        transaction.on_commit(lambda: _run_effects(orders, releases, kills, replan))


def _run_effects(
    orders: list[PhaseOrder],
    releases: list[tuple[int, int]],
    kills: list[tuple[int, int]],
    replan: bool,
) -> None:
    dispatcher = ports.dispatcher()
    for job_id, placement_id in kills:
        _safely(functools.partial(dispatcher.kill, job_id, placement_id), "kill host")
    for job_id, placement_id in releases:
        _safely(functools.partial(dispatcher.release, job_id, placement_id), "release host")
    for order in orders:
        _safely(functools.partial(dispatcher.dispatch, order), f"dispatch phase {order.phase_id}")
    if replan:
        ports.request_planning()


def _safely(fn: Callable[[], None], what: str) -> None:
    # A failed side effect must not undo a committed decision: reconcile repairs it.
    try:
        fn()
    except Exception:
        log.exception("%s failed; reconcile will recover", what)


def _pinned_nodes(runtime: GroupRuntime, job_id: int) -> tuple[str, ...]:
    """Return every node a member is pinned to (its host's Ray resources)."""
    member = runtime.member(str(job_id))
    return tuple(sorted(set(member.rollout_nodes) | set(member.train_nodes)))


def _start_phases(
    group: ExecutionGroup,
    runtime: GroupRuntime,
    now: datetime,
    effects: _Effects,
    *,
    placements: dict[int, Placement] | None = None,
) -> list[PhaseRecord]:
    """Ask the runtime which phases start now; record and queue them for dispatch.

    A started phase is recorded as RUNNING with started_at = now (the dispatch moment: the
    runtime only starts a phase on idle nodes and its host runs one phase at a time, so it
    begins within milliseconds); the host's own start and end stamps replace both when it
    reports the end. That saves a broker message and a transaction per phase.
    """
    starts = runtime.start_ready()
    if not starts:
        return []
    job_ids = {int(s.job_id) for s in starts}
    if placements is None:
        placements = _open_placements(group)
    placements = {
        job_id: p for job_id, p in placements.items() if job_id in job_ids and p.ended_at is None
    }
    jobs = {job_id: p.job for job_id, p in placements.items()}
    rows = []
    for start in starts:
        job_id = int(start.job_id)
        if job_id not in placements:  # the runtime and the rows disagree: say so, skip it
            log.error(
                "group %s: runtime started job %s without an open placement", group.pk, job_id
            )
            continue
        rows.append(
            PhaseRecord(
                job_id=job_id,
                group=group,
                placement_id=placements[job_id].pk,
                iteration=start.iteration,
                kind=start.kind.value,
                node_names=list(start.nodes),
                state=PhaseState.RUNNING,
                warm_start=not start.cold,
                queued_at=now,
                started_at=now,
            )
        )
    # One INSERT for all. The uniqueness of (placement, iteration, kind) cannot be hit here:
    # runtime snapshot and records change in the same transaction under the group lock; if
    # it ever were, the IntegrityError aborts the whole event (nothing half-applied).
    created = PhaseRecord.objects.bulk_create(rows)
    for phase in created:
        effects.orders.append(
            phase_order(phase, jobs[phase.job_id], _pinned_nodes(runtime, phase.job_id))
        )
    job_ids = set(jobs)
    started_jobs = [j for j in job_ids if jobs[j].status == JobStatus.PLACED]
    if started_jobs:
        # a resubmitted job keeps the start of its first attempt
        Job.objects.filter(pk__in=started_jobs, status=JobStatus.PLACED).update(
            status=JobStatus.RUNNING,
            started_at=Coalesce("started_at", Value(now)),
            reason="",
            updated_at=now,
        )
    return created


def _depart(
    placement: Placement, reason: str, now: datetime, effects: _Effects, *, kill: bool = False
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
    if not used:
        ExecutionGroup.objects.filter(pk=group_id, released_at__isnull=True).update(
            released_at=now, runtime_state=None
        )
        effects.group_released = True
    (effects.kills if kill else effects.releases).append((placement.job_id, placement.pk))
    effects.replan = True


def _failed_attempts(job: Job) -> int:
    return Placement.objects.filter(job=job, end_reason="failed").count()


def _fail_or_resubmit(job: Job, outcome: str, now: datetime) -> None:
    """Resubmit a failed job (it resumes from iterations_done) or fail it for good."""
    failures = _failed_attempts(job)
    limit = settings.ROLLMUX_MAX_ATTEMPTS
    if job.cancel_requested:
        _finish_job(job, JobStatus.CANCELLED, now, reason="cancelled after a failed phase")
    elif failures < limit:
        job.status = JobStatus.QUEUED
        job.reason = (
            f"resubmitted after failure {failures}/{limit}, resumes at iteration "
            f"{job.iterations_done}: {outcome}"
        )[:500]
        job.error = outcome
        job.save(update_fields=["status", "reason", "error", "updated_at"])
        transaction.on_commit(lambda: metrics.count_resubmission("failed"))
    else:
        job.status = JobStatus.FAILED
        job.reason = f"failed {failures} times (limit {limit}): {outcome}"[:500]
        job.error = outcome
        job.finished_at = now
        job.save(update_fields=["status", "reason", "error", "finished_at", "updated_at"])


def _finish_job(job: Job, status: str, now: datetime, *, reason: str = "") -> None:
    job.status = status
    job.finished_at = now
    job.reason = reason
    job.save(update_fields=["status", "finished_at", "reason", "updated_at"])


# --------------------------------------------------------------------------------------
# planning
# --------------------------------------------------------------------------------------


@dataclass
class PlanSummary:
    """What a planning pass did."""

    ran: bool  # False: another pass held the lock
    placed: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)
    infeasible: dict[int, str] = field(default_factory=dict)


def plan_pass(*, now: datetime | None = None) -> PlanSummary:
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
    with _plan_serial() as got, transaction.atomic():
        if not got or (_is_postgres() and not _try_plan_lock()):
            return PlanSummary(ran=False)
        queued = list(
            Job.objects.select_for_update()
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
        effects = _Effects()
        for job in queued:
            profile = converters.job_profile(job)
            decided = time.perf_counter()
            result = place(
                profile, state, policy="rollmux", max_group_size=settings.ROLLMUX_MAX_GROUP_SIZE
            )
            metrics.observe_admission(result.status.name.lower(), time.perf_counter() - decided)
            if result.status is PlacementStatus.FIT and result.placement is not None:
                state = _persist_placement(job, profile, result, state, now, effects)
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
                summary.infeasible[job.pk] = result.reason
        effects.replan = False
        effects.schedule()
    return summary


@contextlib.contextmanager
def _plan_serial() -> Iterator[bool]:
    """Yield True when this process may plan (SQLite: a process lock; PostgreSQL: always,
    the advisory lock decides inside the transaction)."""
    if _is_postgres():
        with _controller_serial():
            yield True
        return
    got = _sqlite_plan_lock.acquire(blocking=False)
    try:
        if not got:
            yield False
            return
        with _controller_serial():
            yield True
    finally:
        if got:
            _sqlite_plan_lock.release()


def _set_reason(job: Job, reason: str) -> None:
    reason = reason[:500]
    if job.reason != reason:
        job.reason = reason
        job.save(update_fields=["reason", "updated_at"])


def _persist_placement(
    job: Job, profile: Any, result: Any, state: ClusterState, now: datetime, effects: _Effects
) -> ClusterState:
    from scheduler.planner import apply_placement

    placement = result.placement
    if placement.group_id is None:
        group = ExecutionGroup.objects.create()
    else:
        group = _lock_group(int(placement.group_id))
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
        f"placed in group-{group.pk} by {placement.strategy.value.replace('_', ' ')}"
        f" (predicted slowdown {slowdown:.2f})"
    )
    job.save(update_fields=["status", "placed_at", "attempts", "reason", "updated_at"])
    runtime = _load_runtime(group)
    member = converters.member(row)
    runtime.admit(member, iterations=job.iterations, start_iteration=job.iterations_done)
    _start_phases(group, runtime, now, effects)
    _save_runtime(group, runtime)
    return state


# --------------------------------------------------------------------------------------
# the group controller
# --------------------------------------------------------------------------------------


def _ts(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


def phase_started(*, phase_id: int, started_at: float | None = None) -> bool:
    """Record a phase's start (from its host's report); False if it was not dispatched."""
    when = _ts(started_at) or timezone.now()
    return bool(
        PhaseRecord.objects.filter(
            pk=phase_id, state__in=(PhaseState.DISPATCHED, PhaseState.RUNNING)
        ).update(state=PhaseState.RUNNING, started_at=when)
    )


def phase_finished(report: PhaseReport, *, now: datetime | None = None) -> bool:
    """Apply a phase's end: advance the job, free its nodes, start what is next.

    Returns False when the report was already applied (or the phase was given up on).
    """
    now = now or timezone.now()
    if report.group_id is not None and report.job_id is not None:
        group_id, job_id = report.group_id, report.job_id  # the host knows: saves a query
    else:
        try:
            group_id, job_id = PhaseRecord.objects.values_list("group_id", "job_id").get(
                pk=report.phase_id
            )
        except PhaseRecord.DoesNotExist:
            log.warning("report for unknown phase %s", report.phase_id)
            return False
    with _controller_serial(), transaction.atomic():
        group = _lock_group(group_id, phase_event=True)
        state = (
            PhaseState.SUCCEEDED
            if report.ok
            else (PhaseState.LOST if report.outcome.startswith("lost") else PhaseState.FAILED)
        )
        fields: dict[str, Any] = {
            "state": state,
            "finished_at": _ts(report.finished_at) or now,
            "outcome": report.outcome[:500],
            "metrics": report.metrics,
        }
        if report.started_at is not None:
            fields["started_at"] = _ts(report.started_at)
        if report.warm is not None:
            fields["warm_start"] = report.warm
        phase = _claim_phase(report.phase_id, group_id, fields)
        if phase is None:
            return False
        # The job rows are read, not locked: the group lock serialises the controller, and
        # the jobs app only flips cancel_requested, which the saves below never overwrite.
        # The same read serves the phases started below.
        placements = _open_placements(group)
        runtime = _load_runtime(group)
        effects = _Effects()
        try:
            finish = runtime.finish(str(phase.job_id), PhaseKind(phase.kind))
        except ValueError:
            finish = None  # the runtime already let go of this phase (job removed)
        placement = placements.get(phase.job_id)
        if placement is not None and placement.pk == phase.placement_id:
            job = placement.job
            if job.status not in TERMINAL_STATUSES:
                if report.ok:
                    _after_success(job, phase, placement, runtime, finish, now, effects)
                else:
                    _remove_member(runtime, job.pk)
                    _depart(
                        placement, "failed", now, effects, kill=report.outcome.startswith("lost")
                    )
                    _fail_or_resubmit(job, report.outcome, now)
        if not effects.group_released:
            _start_phases(group, runtime, now, effects, placements=placements)
            _save_runtime(group, runtime)
        effects.schedule()
        if effects.orders and report.finished_at is not None:
            ended = report.finished_at  # observed after the dispatch (on_commit runs in order)
            transaction.on_commit(lambda: metrics.observe_switch(ended))
    return True


def _remove_member(runtime: GroupRuntime, job_id: int) -> None:
    with contextlib.suppress(KeyError):
        runtime.remove(str(job_id))


def _after_success(
    job: Job,
    phase: _Claimed,
    placement: Placement,
    runtime: GroupRuntime,
    finish: Any,
    now: datetime,
    effects: _Effects,
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
        _remove_member(runtime, job.pk)
        _depart(placement, "completed", now, effects)
        _finish_job(job, JobStatus.COMPLETED, now)
    elif job.cancel_requested:
        # cancel takes effect at the phase boundary: drop the job's next phase
        _remove_member(runtime, job.pk)
        _depart(placement, "cancelled", now, effects)
        _finish_job(job, JobStatus.CANCELLED, now, reason="cancelled at a phase boundary")


def cancel(*, job_id: int, now: datetime | None = None) -> bool:
    """Stop a placed/running job at its next phase boundary (now if no phase is running)."""
    now = now or timezone.now()
    placement = Placement.objects.filter(job_id=job_id, ended_at__isnull=True).first()
    if placement is None:
        with transaction.atomic():
            n = Job.objects.filter(
                pk=job_id, cancel_requested=True, status__in=(JobStatus.QUEUED, JobStatus.PLACED)
            ).update(status=JobStatus.CANCELLED, finished_at=now, updated_at=now)
        return bool(n)
    with _controller_serial(), transaction.atomic():
        group = _lock_group(placement.group_id)
        placement = Placement.objects.get(pk=placement.pk)
        job = Job.objects.select_for_update().get(pk=job_id)
        if placement.ended_at is not None or job.status in TERMINAL_STATUSES:
            return False
        running = PhaseRecord.objects.filter(
            placement=placement, state__in=ACTIVE_PHASE_STATES
        ).exists()
        if running:
            return False  # phase_finished cancels it when the running phase ends
        runtime = _load_runtime(group)
        effects = _Effects()
        _remove_member(runtime, job.pk)
        _depart(placement, "cancelled", now, effects)
        _finish_job(job, JobStatus.CANCELLED, now, reason="cancelled at a phase boundary")
        if ExecutionGroup.objects.filter(pk=group.pk, released_at__isnull=True).exists():
            _start_phases(group, runtime, now, effects)
            _save_runtime(group, runtime)
        effects.schedule()
    return True


def node_down(*, node_id: int, now: datetime | None = None) -> list[int]:
    """Resubmit every job pinned to a node that went down; return their ids. Planning is
    requested in any case (a node that came back up or was drained changes capacity)."""
    resubmitted = _node_down(node_id=node_id, now=now)
    ports.request_planning()
    return resubmitted


def _node_down(*, node_id: int, now: datetime | None) -> list[int]:
    now = now or timezone.now()
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
        with _controller_serial(), transaction.atomic():
            group = _lock_group(group_id)
            placement = Placement.objects.get(pk=placement_id)
            if placement.ended_at is not None:
                continue
            job = Job.objects.select_for_update().get(pk=placement.job_id)
            runtime = _load_runtime(group)
            effects = _Effects()
            for phase in PhaseRecord.objects.filter(
                placement=placement, state__in=ACTIVE_PHASE_STATES
            ):
                PhaseRecord.objects.filter(pk=phase.pk).update(
                    state=PhaseState.LOST, finished_at=now, outcome=f"lost: node {node.name} down"
                )
                with contextlib.suppress(ValueError):
                    runtime.finish(str(job.pk), PhaseKind(phase.kind))
            _remove_member(runtime, job.pk)
            _depart(placement, "node_down", now, effects, kill=True)
            if job.cancel_requested:
                _finish_job(job, JobStatus.CANCELLED, now, reason="cancelled (its node went down)")
            else:
                job.status = JobStatus.QUEUED
                job.reason = (
                    f"resubmitted: node {node.name} went down; resumes at iteration "
                    f"{job.iterations_done}"
                )
                job.save(update_fields=["status", "reason", "updated_at"])
                transaction.on_commit(lambda: metrics.count_resubmission("node_down"))
                resubmitted.append(job.pk)
            if ExecutionGroup.objects.filter(pk=group.pk, released_at__isnull=True).exists():
                _start_phases(group, runtime, now, effects)
                _save_runtime(group, runtime)
            effects.schedule()
    return resubmitted


# --------------------------------------------------------------------------------------
# reconcile
# --------------------------------------------------------------------------------------


@dataclass
class ReconcileSummary:
    recovered: list[int] = field(default_factory=list)  # reports re-applied from hosts
    lost: list[int] = field(default_factory=list)  # phases whose host died
    redispatched: list[int] = field(default_factory=list)
    overran: list[int] = field(default_factory=list)
    advanced: list[int] = field(default_factory=list)  # stalled groups restarted


def phase_deadline(phase: PhaseRecord, job: Job) -> timedelta:
    """Return how long a phase may run before reconcile declares it overrun."""
    worst = job.t_roll_max_s if phase.kind == PhaseKind.ROLLOUT.value else job.t_train_max_s
    return timedelta(seconds=3 * worst / job_time_scale(job) + settings.ROLLMUX_PHASE_GRACE_S)


def reconcile(*, now: datetime | None = None, grace_s: float | None = None) -> ReconcileSummary:
    """Find phases whose host died, whose report was lost, or that overran; recover them."""
    now = now or timezone.now()
    grace = timedelta(seconds=settings.ROLLMUX_DISPATCH_GRACE_S if grace_s is None else grace_s)
    summary = ReconcileSummary()
    dispatcher = ports.dispatcher()
    active = PhaseRecord.objects.filter(state__in=ACTIVE_PHASE_STATES).select_related(
        "job", "placement"
    )
    for phase in active:
        order = phase_order(phase, phase.job, placement_nodes(phase.placement))
        try:
            probe = dispatcher.probe(order)
        except Exception as exc:
            log.warning("probe of phase %s failed: %s", phase.pk, exc)
            continue
        if probe.state == "done" and probe.report is not None:
            if phase_finished(probe.report):
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
            elif phase_finished(PhaseReport(phase.pk, "lost: its host (actor) died")):
                summary.lost.append(phase.pk)
        elif probe.state == "unknown" and phase.queued_at < now - grace:
            dispatcher.dispatch(order)
            summary.redispatched.append(phase.pk)
        elif probe.state == "running":
            since = phase.started_at or phase.queued_at
            if since < now - phase_deadline(phase, phase.job):
                dispatcher.kill(phase.job_id, phase.placement_id)
                if phase_finished(PhaseReport(phase.pk, "error: overran its deadline")):
                    summary.overran.append(phase.pk)
    summary.advanced = _advance_stalled_groups(now)
    return summary


def _advance_stalled_groups(now: datetime) -> list[int]:
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
        with _controller_serial(), transaction.atomic():
            group = _lock_group(group_id)
            if not group.runtime_state:
                continue
            runtime = _load_runtime(group)
            effects = _Effects()
            if _start_phases(group, runtime, now, effects):
                advanced.append(group_id)
            _save_runtime(group, runtime)
            effects.schedule()
    return advanced
