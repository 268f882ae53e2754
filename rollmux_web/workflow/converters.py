"""ORM rows -> the scheduling core's dataclasses (scheduler.model): pure row mappers.

Each function maps rows it is given (fetched by `workflow.snapshot` or the services, with
the related rows they need already selected) and runs no query of its own.
"""

from __future__ import annotations

from decimal import Decimal

from rollmux_web.inventory.models import Node as NodeRow
from rollmux_web.inventory.models import NodeState, PoolKind
from rollmux_web.jobs.models import Job
from rollmux_web.jobs.runners import time_scale_of
from rollmux_web.workflow import sync
from rollmux_web.workflow.models import ExecutionGroup, NodeAllocation
from rollmux_web.workflow.models import Placement as PlacementRow
from scheduler.model import Group, JobProfile, Member, Node, Pool


class NoPoolConfigured(LookupError):
    """The inventory lacks a rollout or a training pool: nothing can be planned."""


def job_id_str(job_id: int) -> str:
    return str(job_id)


def group_id_str(group_id: int) -> str:
    return str(group_id)


def job_profile(
    job: Job,
    *,
    slo: float | None = None,
    tenant: str | None = None,
    t_sync_s: float | None = None,
    whole_run: bool = False,
) -> JobProfile:
    """Return the core profile of a job (its remaining iterations: a resubmitted job resumes).

    Its `time_scale` is the effective one (`time_scale_of`: the job's own, else the
    settings default for the emulating runners, else 1): the clock its phases run on,
    which decides the groups it may share. `t_sync_s`: its weight-sync seconds per
    iteration (`workflow.sync.t_sync_s`: measured once it ran); None: the estimate from its
    model's size. `whole_run`: count all its iterations instead (the planner's view of a
    running member, whose `JobProgress` says how many are done, as in the simulator).
    """
    t = job.phase_times  # (a job being profiled has none: it is not the planner's yet)
    return JobProfile(
        id=job_id_str(job.pk),
        arrival_s=job.submitted_at.timestamp() if job.submitted_at else 0.0,
        iterations=max(1, job.iterations if whole_run else job.iterations - job.iterations_done),
        rollout_gpus=job.rollout_gpus,
        train_gpus=job.train_gpus,
        t_roll_max_s=t.t_roll_max_s,
        t_train_max_s=t.t_train_max_s,
        host_mem_gb=job.host_mem_gb,
        slo=slo if slo is not None else job.slo_class.slowdown,
        t_roll_min_s=t.t_roll_min_s,
        t_train_min_s=t.t_train_min_s,
        tenant=tenant if tenant is not None else job.tenant.name,
        model=job.model,
        priority=job.priority,
        time_scale=time_scale_of(job.runner, job.time_scale),
        t_sync_s=sync.estimate_s(job) if t_sync_s is None else t_sync_s,
    )


def pool_of(kind: str) -> Pool:
    return Pool.ROLLOUT if kind == PoolKind.ROLLOUT else Pool.TRAIN


def core_node(node: NodeRow, prices: dict[int, Decimal]) -> Node:
    return Node(
        name=node.name,
        pool=pool_of(node.cluster.kind),
        gpu_type=node.gpu_type.name,
        gpus=node.gpus,
        host_mem_gb=node.host_mem_gb,
        price_per_hour=float(prices.get(node.gpu_type.pk, Decimal("0"))) * node.gpus,
        cordoned=node.state == NodeState.DRAINED,
    )


def member(
    placement: PlacementRow, *, t_sync_s: float | None = None, whole_run: bool = False
) -> Member:
    return Member(
        job=job_profile(placement.job, t_sync_s=t_sync_s, whole_run=whole_run),
        rollout_nodes=tuple(sorted(n.name for n in placement.rollout_nodes.all())),
        train_nodes=tuple(sorted(n.name for n in placement.train_nodes.all())),
    )


def core_group(
    group: ExecutionGroup,
    allocations: list[NodeAllocation],
    placements: list[PlacementRow],
    *,
    whole_run: bool = False,
) -> Group:
    """Return the core group: its open node allocations split by pool, and its members
    (`whole_run`: their profiles count all their iterations, see `job_profile`)."""
    rollout = sorted(a.node.name for a in allocations if a.node.cluster.kind == PoolKind.ROLLOUT)
    train = sorted(a.node.name for a in allocations if a.node.cluster.kind == PoolKind.TRAIN)
    return Group(
        id=group_id_str(group.pk),
        rollout_nodes=tuple(rollout),
        train_nodes=tuple(train),
        members=tuple(member(p, whole_run=whole_run) for p in placements),
    )
