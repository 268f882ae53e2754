"""Two read-only API views the CLI needs (above the apps' layers: they read jobs, reports and
the workflow): a submission's dry run (the planner's answer, as
the submit form's preview gives it) and a job's description (status, reason, placement,
estimates, a summary of its phases and its cost so far). Thin: they call the jobs, reports
and workflow selectors; nothing here writes."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import PermissionDenied
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from rollmux_web.accounts.selectors import can_submit
from rollmux_web.formatting import iteration_number
from rollmux_web.jobs.api import AUTH_ERRORS, NOT_FOUND, _err, _job_id, _rejected
from rollmux_web.jobs.models import Job
from rollmux_web.jobs.runners import time_scale_of
from rollmux_web.jobs.selectors import (
    job_archive,
    job_get,
    latest_placement,
    solo_cost_per_iteration,
    training_summary,
)
from rollmux_web.jobs.serializers import JobSerializer, JobSubmitRequestSerializer
from rollmux_web.jobs.services import JobRejected, quota_refusal, validate_spec
from rollmux_web.reports.selectors.cost import cost_report
from rollmux_web.reports.whatif_selectors import whatif_preview
from rollmux_web.workflow import fairshare
from rollmux_web.workflow.models import PhaseRecord, PhaseState


def _solo_cost(value: Callable[[str], Any]) -> Any:
    """Return the solo cost per iteration of a spec's or a job's GPUs and phase times."""
    names = ("rollout_gpus", "train_gpus", "t_roll_max_s", "t_train_max_s")
    return solo_cost_per_iteration(**{name: value(name) for name in names})


def dry_run(*, user: Any, spec: Any) -> dict[str, Any]:
    """Return what submitting `spec` would do now, without submitting it.

    1. the submission's own field checks (JobRejected, as `POST /jobs/` gives it);
    2. its quota and budget checks (a refusal is the answer "REFUSED", with the message);
    3. the planner's answer on the live cluster (reports.whatif_selectors.whatif_preview, the submit
       form's preview): FIT with group, strategy, nodes, marginal $/h and every member's
       predicted slowdown, or RETRY / INFEASIBLE with the reason.
    """
    if not can_submit(user):
        raise PermissionDenied("Your role may not submit jobs.")
    data = validate_spec(user=user, spec=spec)
    profiled = data.get("t_roll_max_s") is None  # no phase times: profiled first
    cost = None if profiled else _solo_cost(data.__getitem__)
    out: dict[str, Any] = {
        "dry_run": True,
        "tenant": data["tenant"].name,
        "slo_class": data["slo_class"].name,
        "solo_cost_per_iteration_usd": round(cost.busy_usd, 4) if cost else None,
        "dedicated_cost_per_iteration_usd": (
            round(cost.busy_usd + cost.bubble_usd, 4) if cost else None
        ),
        "time_scale": time_scale_of(data.get("runner") or "emulated", data.get("time_scale")),
    }
    # the tenant as resolved (a spec may leave it to default to the submitter's only one)
    refusal = quota_refusal(user=user, spec={**spec, "tenant": data["tenant"].name})
    if refusal:
        return {**out, "status": "REFUSED", "reason": refusal}
    if profiled:
        return {
            **out,
            "status": "PROFILE",
            "reason": "no phase times: the job runs its profile first (alone on free nodes of "
            "its shape), then the planner places it on the measured times",
        }
    preview = whatif_preview(
        user=user,
        data={**data, "tenant": data["tenant"].name},
        slo=data["slo_class"].slowdown,
    )
    answer = asdict(preview)
    if answer["hint"]:
        return {**out, "status": "UNKNOWN", "reason": answer["hint"]}
    group = answer["group"] if answer.pop("group_visible") else None  # another tenant's
    answer.pop("hint")
    return {**out, **answer, "group": int(group) if group else None}


def _seconds(a: datetime | None, b: datetime | None) -> float | None:
    return (b - a).total_seconds() if a and b else None


def phases_summary(job: Job) -> dict[str, Any]:
    """Return per phase kind: counts by state, warm starts, mean and longest wall time of
    the succeeded ones; and the job's latest phase."""
    rows = list(
        PhaseRecord.objects.filter(job=job)
        .order_by("queued_at", "pk")
        .values(
            "kind", "state", "warm_start", "started_at", "finished_at", "iteration", "node_names"
        )
    )
    by_kind: dict[str, dict[str, Any]] = defaultdict(lambda: {"states": Counter(), "walls": []})
    for r in rows:
        entry = by_kind[r["kind"]]
        entry["states"][r["state"]] += 1
        entry["warm"] = entry.get("warm", 0) + (1 if r["warm_start"] else 0)
        wall = _seconds(r["started_at"], r["finished_at"])
        if r["state"] == PhaseState.SUCCEEDED and wall is not None:
            entry["walls"].append(wall)
    kinds = {}
    for kind, entry in by_kind.items():
        walls = entry["walls"]
        kinds[kind] = {
            "count": sum(entry["states"].values()),
            "states": dict(entry["states"]),
            "warm_starts": entry.get("warm", 0),
            "mean_wall_s": round(sum(walls) / len(walls), 3) if walls else None,
            "max_wall_s": round(max(walls), 3) if walls else None,
        }
    last = rows[-1] if rows else None
    archive = job_archive(job=job)  # retention moved its phases to the archive (Parquet)
    return {
        "total": len(rows),
        "archived": None
        if archive is None
        else {"phases": archive.phase_count, "archived_at": archive.archived_at},
        "by_kind": kinds,
        "last": None
        if last is None
        else {
            "kind": last["kind"],
            # counted from 1, as the pages do (and as this key always was); the training
            # rows below keep the stored 0-based index, as the metrics API does
            "iteration": iteration_number(last["iteration"]),
            "state": last["state"],
            "nodes": last["node_names"],
        },
    }


def estimates(job: Job) -> dict[str, Any]:
    """Return the job's worst-case solo iteration, predicted slowdown and time left."""
    placement = latest_placement(job)
    slowdown = placement.predicted_slowdown if placement is not None else None
    scale = time_scale_of(job.runner, job.time_scale)
    left = max(job.iterations - job.iterations_done, 0)
    if not job.has_phase_times:  # being profiled: its profiling run measures them
        return {
            "solo_iteration_s": None,
            "predicted_slowdown": slowdown,
            "slo": job.slo_class.slowdown,
            "time_scale": scale,
            "iterations_left": left,
            "remaining_wall_s": None,
            "solo_cost_per_iteration_usd": None,
        }
    t = job.phase_times
    iteration_s = t.t_roll_max_s + t.t_train_max_s  # profile seconds, worst case
    remaining = None
    if not job.is_terminal:
        remaining = round(left * iteration_s * (slowdown or 1.0) / scale, 1)
    cost = _solo_cost(lambda name: getattr(job, name))
    return {
        "solo_iteration_s": iteration_s,
        "predicted_slowdown": slowdown,
        "slo": job.slo_class.slowdown,
        "time_scale": scale,
        "iterations_left": left,
        "remaining_wall_s": remaining,
        "solo_cost_per_iteration_usd": round(cost.busy_usd, 4),
    }


def cost_so_far(*, user: Any, job: Job) -> dict[str, Any]:
    """Return the job's cost from the cost report (busy + its share of idle time), from its
    submission to now: the same figures as /reports/cost/ for that range."""
    now = timezone.now()
    report = cost_report(
        user=user, start=job.submitted_at.date(), end=now.date(), now=now, with_burn_down=False
    )
    busy = idle = Decimal(0)
    hours = Decimal(0)
    for line in report.lines:
        if line.job_id == job.pk:
            busy += line.busy_cost
            idle += line.idle_cost
            hours += line.gpu_hours
    return {
        "busy_usd": str(busy),
        "idle_usd": str(idle),
        "total_usd": str(busy + idle),
        "gpu_hours": str(hours),
        "since": job.submitted_at.date().isoformat(),
    }


class JobDryRunView(GenericAPIView):
    serializer_class = JobSubmitRequestSerializer

    @extend_schema(
        summary="What submitting this spec would do now (nothing is submitted)",
        description=(
            "The submission's field checks (400 as for POST /jobs/), then its quota and budget "
            "checks (status REFUSED with the message), then the planner's answer on the live "
            "cluster, as the submit form's preview: FIT (group, strategy, nodes, marginal $/h, "
            "predicted slowdowns), RETRY or INFEASIBLE with the reason."
        ),
        request=JobSubmitRequestSerializer,
        responses={200: OpenApiTypes.OBJECT, 400: _err("invalid spec"), **AUTH_ERRORS},
    )
    def post(self, request: Request) -> Response:
        try:
            return Response(dry_run(user=request.user, spec=request.data))
        except JobRejected as exc:
            return _rejected(exc)


class JobDescribeView(GenericAPIView):
    serializer_class = JobSerializer

    @extend_schema(
        summary="A job with its estimates, a summary of its phases, its training metrics in "
        "brief and its cost so far",
        description=(
            "Iteration numbers: `phases.last.iteration` counts from 1 (as the pages and "
            "`rollmux describe` show it); `training.first_reward.iteration` and "
            "`training.latest.iteration` are the stored 0-based index, as in "
            "GET /jobs/{id}/metrics/ (0-based; pages show it + 1)."
        ),
        parameters=[OpenApiParameter("job_id", OpenApiTypes.INT, OpenApiParameter.PATH)],
        responses={200: OpenApiTypes.OBJECT, 404: NOT_FOUND, **AUTH_ERRORS},
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = job_get(user=request.user, job_id=_job_id(job_id))
        queued = fairshare.position_of(job, request.user, timezone.now())
        return Response(
            {
                "job": JobSerializer(job).data,
                # None unless queued: its place in the planning order and why it waits
                "queue": None
                if queued is None
                else {"position": queued.position, "why": queued.why, "waiting": queued.waiting},
                "estimates": estimates(job),
                "phases": phases_summary(job),
                # None: no phase reported training metrics (e.g. an `emulated` job)
                "training": training_summary(job=job),
                "cost": cost_so_far(user=request.user, job=job),
            }
        )
