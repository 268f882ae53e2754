"""Phase orders: what the dispatcher needs to run a phase record on the job's host."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from rollmux_contract.runners import BUILTIN_RUNNERS
from rollmux_web.inventory.selectors import runner_allowlist
from rollmux_web.jobs.models import Job, PhaseTimes
from rollmux_web.jobs.runners import EMULATED_PROFILE_S, EMULATING_RUNNERS, time_scale_of
from rollmux_web.ports import PhaseOrder
from rollmux_web.workflow import sync
from rollmux_web.workflow.models import PhaseRecord, Placement
from scheduler.model import PhaseKind


def job_time_scale(job: Job) -> float:
    """Return the speed-up applied to the job's profile durations (see `time_scale_of`)."""
    return time_scale_of(job.runner, job.time_scale)


def rollout_speed_factor(colocated: bool) -> float:
    """Return how much longer a rollout takes than profiled: the training type's rollout
    speed factor for a co-located placement (its rollouts run on the training GPUs)."""
    return float(settings.ROLLMUX_ROLLOUT_SPEED_FACTOR) if colocated else 1.0


def phase_worst_s(kind: str, job: Job, *, colocated: bool = False) -> float:
    """Return the wall-clock seconds a phase of this kind takes at worst (the job's declared
    maximum over its time scale; a sync phase is bounded by the training phase's; a
    co-located rollout runs at the training type's rollout speed factor). A profiling run
    has no worst case yet: the profile timeout bounds it (a third of it, as the deadline is
    three worst cases)."""
    if not job.has_phase_times:
        return float(settings.ROLLMUX_PROFILE_PHASE_TIMEOUT_S) / 3
    t = job.phase_times
    if kind == PhaseKind.ROLLOUT.value:
        worst = t.t_roll_max_s * rollout_speed_factor(colocated)
    else:
        worst = t.t_train_max_s
    return worst / job_time_scale(job)


def profile_times(job: Job) -> PhaseTimes:
    """Return the phase times a profiling run's runner is given: the configured
    distribution of an emulating runner (it has nothing else to draw from), zeros (unknown)
    for a runner that measures its real phases."""
    if job.runner in EMULATING_RUNNERS:
        return PhaseTimes(*EMULATED_PROFILE_S)
    return PhaseTimes(0.0, 0.0, 0.0, 0.0)


def runner_context(job: Job, *, colocated: bool = False) -> dict[str, Any]:
    """Return what the job's runner knows about it (the fields of `workers.runners.
    RunnerContext`, as the dict a PhaseOrder carries). A job without phase times is in its
    profiling run: `profile` is set and the times are the emulation's (`profile_times`).
    A co-located placement's rollouts run on training GPUs: the emulating runners stretch
    them by the rollout speed factor."""
    profile = not job.has_phase_times
    times = profile_times(job) if profile else job.phase_times
    if job.prior_estimates and job.runner in EMULATING_RUNNERS:
        # its estimates were learned from its drifting phases (services.moves): the
        # emulation keeps drawing from its configured distribution, as a real job would run
        # the same however the planner estimates it
        times = PhaseTimes(*(float(job.prior_estimates[n]) for n in PhaseTimes._fields))
    return {
        "job_id": job.pk,
        "iterations": job.iterations,
        "t_roll_min_s": times.t_roll_min_s,
        "t_roll_max_s": times.t_roll_max_s,
        "t_train_min_s": times.t_train_min_s,
        "t_train_max_s": times.t_train_max_s,
        "profile": profile,
        "drift": job.emulated_drift,
        "host_mem_gb": job.host_mem_gb,
        "time_scale": job_time_scale(job),
        "seed": 0,
        "channel": {
            "redis_url": settings.REDIS_URL,
            "timeout_s": settings.ROLLMUX_EXTERNAL_TIMEOUT_S,
        },
        "model": job.model,
        "weights_gb": sync.weights_gb(job.model),
        "rollout_speed_factor": rollout_speed_factor(colocated),
        # what the job's workers may import: the admin's allowlist (a built-in needs none)
        "runner_packages": [] if job.runner in BUILTIN_RUNNERS else runner_allowlist(),
    }


Pools = tuple[tuple[str, ...], tuple[str, ...]]  # (rollout nodes, training nodes)


def node_gpus(job: Job, pools: Pools) -> dict[str, int]:
    """Return the GPUs the job needs on each of its nodes: its GPUs of a pool spread over
    the pool's nodes (a node in both pools: the larger share)."""
    need: dict[str, int] = {}
    for names, gpus in zip(pools, (job.rollout_gpus, job.train_gpus), strict=True):
        if names:
            share = -(-int(gpus) // len(names))
            for name in names:
                need[name] = max(need.get(name, 0), share)
    return need


def phase_order(
    phase: PhaseRecord, job: Job, pools: Pools, *, tail_nodes: tuple[str, ...] = ()
) -> PhaseOrder:
    """Return what the dispatcher needs to run a phase record on the job's resident host
    (`pools`: the job's rollout nodes and training nodes, where its workers live;
    `tail_nodes`: the nodes a rollout hands to the next member once tail-bound,
    `GroupRuntime.tail_nodes`, with ROLLMUX_LONG_TAIL_THRESHOLD > 0)."""
    threshold = float(settings.ROLLMUX_LONG_TAIL_THRESHOLD)
    if threshold <= 0:
        tail_nodes = ()
    rollout, train = pools
    colocated = not rollout and bool(train)  # both phases on the training nodes
    return PhaseOrder(
        phase_id=phase.pk,
        job_id=job.pk,
        placement_id=phase.placement_id,
        kind=phase.kind,
        iteration=phase.iteration,
        nodes=tuple(phase.node_names),
        pinned_nodes=tuple(sorted(set(rollout) | set(train))),
        runner=job.runner,
        context=runner_context(job, colocated=colocated),
        checkpoint_dir=settings.ROLLMUX_CHECKPOINT_URI or str(settings.ROLLMUX_CHECKPOINT_DIR),
        resume_iteration=phase.iteration,
        group_id=phase.group_id,
        rollout_nodes=rollout,
        train_nodes=train,
        node_gpus=node_gpus(job, pools),
        tail_nodes=tail_nodes,
        tail_threshold=threshold if tail_nodes else 0.0,
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
