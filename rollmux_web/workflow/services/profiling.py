"""Profiling: the one-shot profiler of the paper (section 4) for jobs without phase times.

A job submitted without its four phase times is `profiling`. Each planning pass first
starts the profiling runs it can (`profiles_start`), in submission order: a run takes free
nodes of the job's shape (its GPUs / the pool's node size, up and in no group) and runs
`ROLLMUX_PROFILE_ITERATIONS` iterations alone, in a co-execution group of its own
(placement strategy `profile`), its runner told to run at the maximum token length
(`RunnerContext.profile`). A job that finds no such nodes waits, and its reason says for
what. The run is a phase like any other: phase records, node allocations (billed to the
job), drawn on the Gantt. The planner's snapshot leaves profile groups and their nodes out
(`workflow.snapshot`), so nothing is packed with a profile.

When its last training ends (`profile_departure`, the controller's hook for profile
placements), the measured times become the job's estimates (`duration_source` profiled):
the slowest phase of each kind its max, the fastest its min (profile seconds: wall-clock x
the job's time scale), and it is queued for the planner, which admits it on the worst case.
A runner error ends the job at once with the runner's error (one attempt: a runner that
fails its profile would fail its run); a lost host sends it back to wait for nodes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.conf import settings

from rollmux_web.inventory.models import Cluster, Node, NodeState, PoolKind
from rollmux_web.jobs.models import DurationSource, Job, JobStatus, PhaseTimes
from rollmux_web.jobs.runners import time_scale_of
from rollmux_web.ports import Outcome
from rollmux_web.workflow.models import (
    EndReason,
    ExecutionGroup,
    NodeAllocation,
    PhaseRecord,
    PhaseState,
    Placement,
    Strategy,
)
from rollmux_web.workflow.services.departures import job_finish, placement_end
from rollmux_web.workflow.services.effects import Effects
from rollmux_web.workflow.services.groups import (
    phases_start,
    runtime_load,
    runtime_save,
)
from rollmux_web.workflow.snapshot import current_prices
from scheduler.group_runtime import Departure
from scheduler.model import JobProfile, Member

log = logging.getLogger(__name__)


def profile_iterations() -> int:
    return int(settings.ROLLMUX_PROFILE_ITERATIONS)


def is_profile(placement: Placement) -> bool:
    return placement.strategy == Strategy.PROFILE


@dataclass
class ProfileSummary:
    started: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)


def _free_nodes() -> dict[str, list[Node]]:
    """Return per pool kind the nodes that are up and allocated to no group, by name."""
    taken = NodeAllocation.objects.filter(end__isnull=True).values_list("node_id", flat=True)
    out: dict[str, list[Node]] = {PoolKind.ROLLOUT: [], PoolKind.TRAIN: []}
    for node in (
        Node.objects.filter(state=NodeState.UP)
        .exclude(pk__in=list(taken))
        .select_related("cluster", "gpu_type")
        .order_by("name")
    ):
        out[node.cluster.kind].append(node)
    return out


def _node_sizes() -> dict[str, tuple[str, int]]:
    """Return per pool kind its GPU type's name and GPUs per node (the first pool's)."""
    sizes: dict[str, tuple[str, int]] = {}
    for c in Cluster.objects.select_related("gpu_type").order_by("kind", "name"):
        sizes.setdefault(c.kind, (c.gpu_type.name, c.gpu_type.gpus_per_node))
    return sizes


def profiles_start(*, now: datetime, effects: Effects) -> ProfileSummary:
    """Start the profiling run of every waiting profiling job that free nodes of its shape
    exist for, oldest first; give the others their reason. Runs in the planning pass's
    transaction, under its lock (the nodes it takes are then not the planner's)."""
    summary = ProfileSummary()
    running = set(
        Placement.objects.filter(
            ended_at__isnull=True, job__status=JobStatus.PROFILING
        ).values_list("job_id", flat=True)
    )
    waiting = [
        j
        for j in Job.objects.select_for_update(of=("self",))
        .filter(status=JobStatus.PROFILING, cancel_requested=False)
        .select_related("tenant", "slo_class")
        .order_by("-priority", "submitted_at", "pk")
        if j.pk not in running
    ]
    if not waiting:
        return summary
    free, sizes, prices = _free_nodes(), _node_sizes(), current_prices()
    for job in waiting:
        need: dict[str, int] = {}
        for kind, gpus in ((PoolKind.ROLLOUT, job.rollout_gpus), (PoolKind.TRAIN, job.train_gpus)):
            per_node = sizes.get(kind, ("", 0))[1]
            need[kind] = -(-gpus // per_node) if per_node else 0
        short = {k: n for k, n in need.items() if n == 0 or len(free[k]) < n}
        if short:
            reason = (
                "profiling: waiting for "
                + " and ".join(
                    f"{need[k]} free {sizes.get(k, ('?', 0))[0]} node{'s' if need[k] != 1 else ''}"
                    f" ({len(free[k])} free now)"
                    for k in (PoolKind.ROLLOUT, PoolKind.TRAIN)
                    if k in short
                )
                + "; a profiling run has its nodes to itself"
            )
            if job.reason != reason[:500]:
                job.reason = reason[:500]
                job.save(update_fields=["reason", "updated_at"])
            summary.waiting[job.pk] = reason
            continue
        taken = {k: free[k][: need[k]] for k in need}
        for k in need:
            free[k] = free[k][need[k] :]
        _profile_start(job, taken[PoolKind.ROLLOUT], taken[PoolKind.TRAIN], prices, now, effects)
        summary.started.append(job.pk)
    return summary


def _runtime_member(job: Job, rollout: list[Node], train: list[Node]) -> Member:
    # The group runtime orders phases and pins them to nodes; it reads no durations but the
    # weight sync's (none in a profile), so the job's unknown times are placeholders here.
    return Member(
        job=JobProfile(
            id=str(job.pk),
            arrival_s=job.submitted_at.timestamp(),
            iterations=profile_iterations(),
            rollout_gpus=job.rollout_gpus,
            train_gpus=job.train_gpus,
            t_roll_max_s=1.0,
            t_train_max_s=1.0,
            host_mem_gb=job.host_mem_gb,
            slo=job.slo_class.slowdown,
            tenant=job.tenant.name,
            model=job.model,
            time_scale=time_scale_of(job.runner, job.time_scale),
        ),
        rollout_nodes=tuple(n.name for n in rollout),
        train_nodes=tuple(n.name for n in train),
    )


def _profile_start(
    job: Job,
    rollout: list[Node],
    train: list[Node],
    prices: dict[int, Decimal],
    now: datetime,
    effects: Effects,
) -> None:
    nodes = [*rollout, *train]
    per_hour = sum((prices.get(n.gpu_type_id, Decimal("0")) * n.gpus for n in nodes), Decimal(0))
    group = ExecutionGroup.objects.create()
    placement = Placement.objects.create(
        job=job,
        group=group,
        attempt=job.attempts + 1,
        strategy=Strategy.PROFILE,
        marginal_cost_per_hour=per_hour.quantize(Decimal("0.0001")),
        predicted_slowdown=1.0,
    )
    placement.rollout_nodes.set(rollout)
    placement.train_nodes.set(train)
    NodeAllocation.objects.bulk_create(
        [NodeAllocation(node=n, group=group, start=now) for n in nodes]
    )
    n = profile_iterations()
    job.attempts += 1
    job.reason = (
        f"profiling: running {n} iteration{'s' if n != 1 else ''} alone on "
        f"{', '.join(x.name for x in nodes)} at the maximum token length (group-{group.pk})"
    )[:500]
    job.save(update_fields=["attempts", "reason", "updated_at"])
    runtime = runtime_load(group)
    runtime.admit(_runtime_member(job, rollout, train), iterations=n)
    phases_start(group, runtime, now, effects)
    runtime_save(group, runtime)


def measured_times(placement: Placement, job: Job) -> PhaseTimes:
    """Return the profile's estimates: per kind, the slowest succeeded phase is the max and
    the fastest the min, in profile seconds (x the job's time scale). A phase's time is its
    work time (`PhaseRecord.work_s`): its host's set-up (workers created, the runner and
    its libraries loaded: seconds for a real model) and its warm or cold start are the
    platform's, and a profile that counted them planned every later phase that much longer
    (issue 21). A host that does not split its time: the phase's wall-clock."""
    scale = time_scale_of(job.runner, job.time_scale)
    seconds: dict[str, list[float]] = {"rollout": [], "train": []}
    for kind, started, finished, work in PhaseRecord.objects.filter(
        placement=placement, state=PhaseState.SUCCEEDED
    ).values_list("kind", "started_at", "finished_at", "work_s"):
        if kind not in seconds:
            continue
        if work is None and started is not None and finished is not None:
            work = (finished - started).total_seconds()
        if work is not None:
            # (a phase shorter than the clock's resolution still took some time)
            seconds[kind].append(max(work, 1e-3) * scale)
    roll, train = seconds["rollout"], seconds["train"]
    return PhaseTimes(min(roll), max(roll), min(train), max(train))


def profile_departure(
    *,
    job: Job,
    placement: Placement,
    leaves: Departure,
    result: Outcome,
    outcome: str,
    now: datetime,
    effects: Effects,
) -> None:
    """Write a profiling run's departure as the controller's phase-end decision took it
    (the runtime already dropped the job): the last phase queues the job with the measured
    estimates; a failed one fails the job with its runner's error, never retried; a lost
    one sends the job back to wait; a cancel ends it."""
    if leaves is Departure.PROFILED:
        placement_end(placement, EndReason.PROFILED, now, effects)
        _profiled(job, measured_times(placement, job), now)
    elif leaves is Departure.CANCELLED:
        placement_end(placement, EndReason.CANCELLED, now, effects)
        job_finish(job, JobStatus.CANCELLED, now, reason="cancelled during its profiling run")
    elif result in (Outcome.ERROR, Outcome.LOAD_ERROR):  # the runner's (never the platform's)
        placement_end(placement, EndReason.FAILED, now, effects)
        job.error = outcome
        job_finish(
            job,
            JobStatus.FAILED,
            now,
            reason=f"failed in its profiling run (not retried: the runner fails as it "
            f"would in every iteration): {outcome}"[:500],
        )
        job.save(update_fields=["error"])
    else:  # its host was lost: the platform's failure, profile it again
        placement_end(placement, EndReason.LOST, now, effects, kill=True)
        job.reason = f"profiling: its run was lost ({outcome}); waiting to profile again"[:500]
        job.save(update_fields=["reason", "updated_at"])


def _profiled(job: Job, times: PhaseTimes, now: datetime) -> None:
    from rollmux_web.jobs.services import budget_refusal

    job.t_roll_min_s, job.t_roll_max_s, job.t_train_min_s, job.t_train_max_s = times
    job.duration_source = DurationSource.PROFILED
    n = profile_iterations()
    job.status = JobStatus.QUEUED
    job.reason = (
        f"profiled ({n} iteration{'s' if n != 1 else ''} at the maximum token length: rollout "
        f"{times.t_roll_max_s:.1f} s, training {times.t_train_max_s:.1f} s, profile time); "
        "waiting for the planner"
    )
    job.save(
        update_fields=[
            "t_roll_min_s",
            "t_roll_max_s",
            "t_train_min_s",
            "t_train_max_s",
            "duration_source",
            "status",
            "reason",
            "updated_at",
        ]
    )
    refusal = budget_refusal(job=job, now=now)  # its budgets need the times it now has
    if refusal:
        job.error = refusal
        job.save(update_fields=["error"])
        job_finish(job, JobStatus.FAILED, now, reason=f"profiled, then refused: {refusal}"[:500])
