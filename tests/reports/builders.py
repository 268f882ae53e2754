"""Builders for report tests: groups, placements, node allocations and phase records made
directly with the ORM, so report tests do not depend on the live workflow."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from rollmux_web.inventory.models import Node
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow.models import (
    ExecutionGroup,
    NodeAllocation,
    PhaseRecord,
    PhaseState,
    Placement,
)

MIN = timedelta(minutes=1)


def make_job(world: Any, *, name: str = "job", tenant: str = "vision", **kw: Any) -> Job:
    submitter = world.alice if tenant == "vision" else world.charlie
    fields: dict[str, Any] = {
        "name": name,
        "tenant": getattr(world, tenant),
        "submitter": submitter,
        "slo_class": world.silver,
        "iterations": 3,
        "rollout_gpus": 8,
        "train_gpus": 8,
        "t_roll_max_s": 600.0,
        "t_roll_min_s": 600.0,
        "t_train_max_s": 600.0,
        "t_train_min_s": 600.0,
        "host_mem_gb": 400.0,
        "status": JobStatus.RUNNING,
        "time_scale": 1.0,  # phases in these tests take their profile's real time
    }
    fields.update(kw)
    return Job.objects.create(**fields)


def make_group(*, created: datetime, released: datetime | None = None) -> ExecutionGroup:
    group = ExecutionGroup.objects.create()
    # created_at is auto_now_add: set the moment the test means
    ExecutionGroup.objects.filter(pk=group.pk).update(created_at=created, released_at=released)
    group.refresh_from_db()
    return group


def allocate(group: ExecutionGroup, node: str, start: datetime, end: datetime | None) -> None:
    NodeAllocation.objects.create(
        group=group, node=Node.objects.get(name=node), start=start, end=end
    )


def place(
    group: ExecutionGroup,
    job: Job,
    *,
    rollout: list[str],
    train: list[str],
    joined: datetime,
    left: datetime | None = None,
    strategy: str = "new_group",
) -> Placement:
    pl = Placement.objects.create(job=job, group=group, strategy=strategy, predicted_slowdown=1.2)
    Placement.objects.filter(pk=pl.pk).update(created_at=joined, ended_at=left)
    pl.rollout_nodes.set(Node.objects.filter(name__in=rollout))
    pl.train_nodes.set(Node.objects.filter(name__in=train))
    pl.refresh_from_db()
    return pl


def phase(
    pl: Placement,
    *,
    iteration: int,
    kind: str,
    nodes: list[str],
    start: datetime,
    minutes: float | None,
    warm: bool | None = True,
) -> PhaseRecord:
    finished = None if minutes is None else start + timedelta(minutes=minutes)
    return PhaseRecord.objects.create(
        job=pl.job,
        group=pl.group,
        placement=pl,
        iteration=iteration,
        kind=kind,
        node_names=nodes,
        state=PhaseState.RUNNING if finished is None else PhaseState.SUCCEEDED,
        warm_start=warm,
        queued_at=start,
        started_at=start,
        finished_at=finished,
    )


def alternate(
    pl: Placement,
    *,
    start: datetime,
    iterations: int,
    roll_min: float,
    train_min: float,
    roll_nodes: list[str],
    train_nodes: list[str],
    gap_min: float = 0.0,
) -> datetime:
    """Add `iterations` rollout-then-training phases back to back; return the end time."""
    t = start
    for i in range(iterations):
        phase(
            pl, iteration=i, kind="rollout", nodes=roll_nodes, start=t, minutes=roll_min, warm=i > 0
        )
        t += timedelta(minutes=roll_min)
        phase(
            pl, iteration=i, kind="train", nodes=train_nodes, start=t, minutes=train_min, warm=i > 0
        )
        t += timedelta(minutes=train_min + gap_min)
    return t


def now() -> datetime:
    return timezone.now()


def profiled_job(
    world: Any,
    *,
    t0: datetime,
    name: str = "p",
    tenant: str = "vision",
    roll: str = "h20-0",
    train: str = "h800-0",
) -> tuple[Job, ExecutionGroup, ExecutionGroup]:
    """A job profiled then run (issue 13): its profiling run (placement strategy profile, a
    group of its own) holds `roll` and `train` 12 min from t0 (rollout 5 min, training 4
    min); its production run holds the next nodes (h20-1 after h20-0) 1 h from t0 + 20 min
    (rollout 20 min, training 10 min). Returns the job, the profile group and the run's."""
    job = make_job(world, name=name, tenant=tenant)
    prof = make_group(created=t0, released=t0 + 12 * MIN)
    allocate(prof, roll, t0, t0 + 12 * MIN)
    allocate(prof, train, t0, t0 + 12 * MIN)
    pl = place(
        prof, job, rollout=[roll], train=[train], joined=t0, left=t0 + 12 * MIN, strategy="profile"
    )
    Placement.objects.filter(pk=pl.pk).update(attempt=100)  # (place() creates attempt 1)
    phase(pl, iteration=0, kind="rollout", nodes=[roll], start=t0, minutes=5, warm=False)
    phase(pl, iteration=0, kind="train", nodes=[train], start=t0 + 5 * MIN, minutes=4, warm=False)
    run_roll, run_train = (f"{n[:-1]}{int(n[-1]) + 1}" for n in (roll, train))
    t = t0 + 20 * MIN
    prod = make_group(created=t)
    allocate(prod, run_roll, t, t + 60 * MIN)
    allocate(prod, run_train, t, t + 60 * MIN)
    pl2 = place(prod, job, rollout=[run_roll], train=[run_train], joined=t)
    Placement.objects.filter(pk=pl2.pk).update(attempt=2)
    Placement.objects.filter(pk=pl.pk).update(attempt=1)  # profiled first, then run
    phase(pl2, iteration=0, kind="rollout", nodes=[run_roll], start=t, minutes=20, warm=False)
    phase(pl2, iteration=0, kind="train", nodes=[run_train], start=t + 20 * MIN, minutes=10)
    return job, prof, prod
