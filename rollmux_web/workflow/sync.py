"""The weight-sync time a job adds per iteration (`JobProfile.t_sync_s`), for the planner.

Before a job has run: an estimate from its model's size (the parameter count its `model`
name states, bf16 weights) over the cross-pool link (ROLLMUX_CROSS_POOL_GBPS) and, with
more than one rollout node, the broadcast inside the rollout pool (ROLLMUX_IN_POOL_GBPS):
`scheduler.weight_sync.sync_seconds`. A model name without a size gives 0 (no sync phase:
the dispatcher then syncs at the start of the next rollout, inside that phase).

Once the job has run sync phases: their measured mean, in profile seconds (wall seconds
times the job's time scale, the clock its other phases are declared on).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from django.conf import settings
from django.db.models import Avg, DurationField, ExpressionWrapper, F

from rollmux_web.id_sql import in_ids
from rollmux_web.jobs.models import Job
from rollmux_web.jobs.runners import time_scale_of
from rollmux_web.workflow.models import PhaseRecord, PhaseState
from scheduler.weight_sync import model_bytes, parameters_from_model_name, sync_seconds

NODE_GPUS = 8  # a rollout node's GPUs when the job has no placement yet (the paper's nodes)


def weights_gb(model: str) -> float:
    """Return the GB of bf16 weights a model name states (0 when it states no size)."""
    params = parameters_from_model_name(model or "")
    return model_bytes(params) / 2**30 if params else 0.0


def estimate_s(job: Job, *, rollout_nodes: int | None = None) -> float:
    """Return the estimated sync seconds per iteration from the job's model size."""
    params = parameters_from_model_name(job.model or "")
    if not params:
        return 0.0
    nodes = rollout_nodes or max(1, math.ceil(job.rollout_gpus / NODE_GPUS))
    return sync_seconds(
        model_bytes(params),
        cross_pool_gbps=settings.ROLLMUX_CROSS_POOL_GBPS,
        in_pool_gbps=settings.ROLLMUX_IN_POOL_GBPS,
        rollout_nodes=nodes,
    )


def measured_s(job_ids: Iterable[int]) -> dict[int, float]:
    """Return each job's mean measured sync seconds (profile seconds), for jobs that ran one."""
    rows = (
        PhaseRecord.objects.filter(
            in_ids("job_id", set(job_ids)),
            kind="sync",
            state=PhaseState.SUCCEEDED,
            started_at__isnull=False,
            finished_at__isnull=False,
        )
        .values("job_id", "job__runner", "job__time_scale")
        .annotate(
            mean=Avg(
                ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
            )
        )
    )
    return {
        r["job_id"]: r["mean"].total_seconds()
        * time_scale_of(r["job__runner"], r["job__time_scale"])
        for r in rows
        if r["mean"] is not None
    }


def t_sync_s(job: Job, measured: dict[int, float] | None = None) -> float:
    """Return the job's sync seconds per iteration: measured when it has run, else estimated."""
    if measured is not None and job.pk in measured:
        return measured[job.pk]
    return estimate_s(job)
