"""Phase orders: what the dispatcher needs to run a phase record on the job's host."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from rollmux_web.inventory.runners import BUILTIN_RUNNERS
from rollmux_web.inventory.selectors import runner_allowlist
from rollmux_web.jobs.models import Job
from rollmux_web.jobs.runners import time_scale_of
from rollmux_web.workflow import sync
from rollmux_web.workflow.models import PhaseRecord, Placement
from rollmux_web.workflow.ports import PhaseOrder
from scheduler.model import PhaseKind


def job_time_scale(job: Job) -> float:
    """Return the speed-up applied to the job's profile durations (see `time_scale_of`)."""
    return time_scale_of(job.runner, job.time_scale)


def phase_worst_s(kind: str, job: Job) -> float:
    """Return the wall-clock seconds a phase of this kind takes at worst (the job's declared
    maximum over its time scale; a sync phase is bounded by the training phase's)."""
    worst = job.t_roll_max_s if kind == PhaseKind.ROLLOUT.value else job.t_train_max_s
    return worst / job_time_scale(job)


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
        "model": job.model,
        "weights_gb": sync.weights_gb(job.model),
        # what the job's workers may import: the admin's allowlist (a built-in needs none)
        "runner_packages": [] if job.runner in BUILTIN_RUNNERS else runner_allowlist(),
    }


Pools = tuple[tuple[str, ...], tuple[str, ...]]  # (rollout nodes, training nodes)


def phase_order(phase: PhaseRecord, job: Job, pools: Pools) -> PhaseOrder:
    """Return what the dispatcher needs to run a phase record on the job's resident host
    (`pools`: the job's rollout nodes and training nodes, where its workers live)."""
    rollout, train = pools
    return PhaseOrder(
        phase_id=phase.pk,
        job_id=job.pk,
        placement_id=phase.placement_id,
        kind=phase.kind,
        iteration=phase.iteration,
        nodes=tuple(phase.node_names),
        pinned_nodes=tuple(sorted(set(rollout) | set(train))),
        runner=job.runner,
        context=runner_context(job),
        checkpoint_dir=settings.ROLLMUX_CHECKPOINT_URI or str(settings.ROLLMUX_CHECKPOINT_DIR),
        resume_iteration=phase.iteration,
        group_id=phase.group_id,
        rollout_nodes=rollout,
        train_nodes=train,
    )


def placement_pools(placement: Placement) -> Pools:
    """Return a placement's (rollout nodes, training nodes), each sorted."""
    return (
        tuple(sorted(n.name for n in placement.rollout_nodes.all())),
        tuple(sorted(n.name for n in placement.train_nodes.all())),
    )


def order_for(phase_id: int) -> PhaseOrder:
    """Return the order of one phase record (read from the database)."""
    phase = PhaseRecord.objects.select_related("job", "placement").get(pk=phase_id)
    return phase_order(phase, phase.job, placement_pools(phase.placement))
