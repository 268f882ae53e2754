"""Writes of jobs: submission (validation, quotas, budgets) and cancellation."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from rollmux_web import metrics
from rollmux_web.accounts.models import Tenant
from rollmux_web.accounts.selectors import can_submit
from rollmux_web.audit.services import audit_record
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job, JobStatus
from rollmux_web.jobs.selectors import job_get
from rollmux_web.jobs.serializers import JobSpecSerializer
from rollmux_web.jobs.spec import SPEC_FIELDS, spec_values
from rollmux_web.quotas.selectors import quota_usage
from workers import triggers


@dataclass
class JobRejected(Exception):
    """A submission or cancellation refused, with an API error code and per-field messages."""

    code: str
    message: str
    fields: dict[str, list[str]] = field(default_factory=dict)
    http_status: int = 400

    def __str__(self) -> str:
        return self.message


def _flatten_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            out.update(_flatten_errors(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(detail, list):
        out[prefix or "non_field_errors"] = [str(v) for v in detail]
    else:
        out[prefix or "non_field_errors"] = [str(detail)]
    return out


def validate_spec(*, user: Any, spec: Any) -> dict[str, Any]:
    """Return the cleaned spec or raise JobRejected naming every bad field."""
    if not isinstance(spec, dict):
        raise JobRejected(
            "invalid",
            "The job spec must be an object of field names to values.",
            {"non_field_errors": ["Expected an object of field names to values."]},
        )
    ser = JobSpecSerializer(data=spec, context={"user": user})
    if not ser.is_valid():
        fields = _flatten_errors(ser.errors)
        name, msgs = next(iter(fields.items()))
        message = msgs[0] if name == "non_field_errors" else f"{name}: {msgs[0]}"
        raise JobRejected("invalid", message, fields)
    return dict(ser.validated_data)


def quota_refusal(*, user: Any, spec: dict[str, Any], now: datetime | None = None) -> str:
    """Return the quota or budget refusal `job_submit` would give this spec now, or "" (it
    would pass, or the spec has field errors, which the form shows itself). Nothing is
    locked or written: the submit form's preview asks this before anyone submits."""
    try:
        data = validate_spec(user=user, spec=spec)
        _check_quotas(tenant=data["tenant"], spec=data, now=now or timezone.now(), lock=False)
    except JobRejected as exc:
        return exc.message if exc.code in ("quota_exceeded", "budget_exceeded") else ""
    return ""


def _check_quotas(
    *, tenant: Tenant, spec: dict[str, Any], now: datetime, lock: bool = True
) -> None:
    """Refuse the job if it would exceed a GPU cap or a monthly budget of its tenant.

    The usage comes from quotas.selectors.quota_usage, the function /quotas/ shows, so a
    refusal and the page give the same numbers. It locks the tenant's quota rows first,
    so two concurrent submissions of one tenant cannot both pass the "at once" check.
    """
    gpus = {"rollout": spec["rollout_gpus"], "train": spec["train_gpus"]}
    t_max = {"rollout": spec["t_roll_max_s"], "train": spec["t_train_max_s"]}
    for usage in quota_usage(tenants=[tenant], now=now, lock=lock):
        kinds = usage.pool_kinds  # the pools of this quota's GPU type
        if not kinds:
            continue
        quota, gt = usage.quota, usage.quota.gpu_type
        # what this job asks for of this GPU type (both pools may share one type)
        ask_gpus = sum(gpus[k] for k in kinds)
        ask_hours = sum(spec["iterations"] * t_max[k] * gpus[k] / 3600.0 for k in kinds)
        ask_usd = ask_hours * float(usage.price_per_gpu_hour)
        if quota.max_gpus is not None and usage.gpus_requested + ask_gpus > quota.max_gpus:
            field_name = "rollout_gpus" if kinds == ("rollout",) else "train_gpus"
            msg = (
                f"quota: {tenant.name} may use at most {quota.max_gpus} {gt.name} GPUs at "
                f"once; its live jobs (queued, placed or running) request "
                f"{usage.gpus_requested}; this job asks for {ask_gpus}"
            )
            raise JobRejected("quota_exceeded", msg, {field_name: [msg]}, 403)
        used_hours = usage.gpu_hours_month
        if quota.monthly_gpu_hours is not None and used_hours + ask_hours > quota.monthly_gpu_hours:
            msg = (
                f"budget: {tenant.name} may use at most {quota.monthly_gpu_hours:g} {gt.name} "
                f"GPU-hours this month; its jobs used {usage.gpu_hours_text} so far; this job may "
                f"take up to {ask_hours:.1f} (iterations x worst-case phase time x GPUs)"
            )
            raise JobRejected("budget_exceeded", msg, {"non_field_errors": [msg]}, 403)
        if quota.monthly_budget_usd is not None:
            # Priced at today's rate: an admission estimate, not the cost report (which
            # applies the price history to node allocations).
            limit = float(quota.monthly_budget_usd)
            if usage.usd_month + ask_usd > limit:
                msg = (
                    f"budget: {tenant.name} may spend at most ${limit:,.2f} on {gt.name} this "
                    f"month; its jobs used {usage.usd_text} so far (at today's price); "
                    f"this job may cost up to ${ask_usd:,.2f} "
                    "(iterations x worst-case phase time x GPUs x price)"
                )
                raise JobRejected("budget_exceeded", msg, {"non_field_errors": [msg]}, 403)


def _audit_view(job: Job) -> dict[str, Any]:
    return {**spec_values(job), "status": job.status}


def job_submit(*, user: Any, spec: Any, channel: str, now: datetime | None = None) -> Job:
    """Validate a job spec, check quotas and budgets, and queue the job (all or nothing).

    Raises PermissionDenied for users who may not submit and JobRejected for a bad spec
    or a refused quota; nothing is written in either case.
    """
    if not can_submit(user):
        raise PermissionDenied("Your role may not submit jobs.")
    now = now or timezone.now()
    data = validate_spec(user=user, spec=spec)
    with transaction.atomic():
        _check_quotas(tenant=data["tenant"], spec=data, now=now)
        job = Job.objects.create(
            **{name: data.get(name) for name in SPEC_FIELDS},
            submitter=user,
            status=JobStatus.QUEUED,
            reason="waiting for the planner",
        )
        audit_record(
            actor=user,
            action="job.submit",
            obj=job,
            tenant=job.tenant.name,
            after={**_audit_view(job), "channel": channel},
        )
        tenant_name = job.tenant.name
        transaction.on_commit(lambda: metrics.SUBMISSIONS.labels(tenant_name, channel).inc())
        transaction.on_commit(triggers.request_planning)
    return job


def job_cancel(*, user: Any, job_id: int, now: datetime | None = None) -> Job:
    """Cancel a job: a queued one at once, a placed/running one at its next phase boundary.

    Raises Http404 for a job the user cannot see, PermissionDenied for finance, and
    JobRejected (409) for a job that already ended.
    """
    job = job_get(user=user, job_id=job_id)  # 404 for another tenant's job
    if not can_submit(user):
        raise PermissionDenied("Your role may not cancel jobs.")
    now = now or timezone.now()
    who = getattr(user, "username", "") or "system"
    with transaction.atomic():
        before = {"status": job.status, "cancel_requested": job.cancel_requested}
        # Conditional UPDATEs: whichever of us and the workflow moves the row first wins;
        # 0 rows changed means the status moved under us, so re-read and decide again.
        queued = Job.objects.filter(pk=job.pk, status=JobStatus.QUEUED).update(
            status=JobStatus.CANCELLED,
            cancel_requested=True,
            finished_at=now,
            reason=f"cancelled by {who} before placement",
            updated_at=now,
        )
        stop_requested = 0
        if not queued:
            stop_requested = Job.objects.filter(
                pk=job.pk,
                status__in=(JobStatus.PLACED, JobStatus.RUNNING),
                cancel_requested=False,
            ).update(
                cancel_requested=True,
                reason=f"cancel requested by {who}; stops at the next phase boundary",
                updated_at=now,
            )
        job.refresh_from_db()
        if not queued and not stop_requested:
            if job.status in TERMINAL_STATUSES:
                msg = f"Job {job.pk} is already {job.status}; there is nothing to cancel."
                raise JobRejected("conflict", msg, {"status": [msg]}, 409)
            # placed/running with a cancel already requested: asking twice is harmless
            return job
        audit_record(
            actor=user,
            action="job.cancel",
            obj=job,
            tenant=job.tenant.name,
            before=before,
            after={"status": job.status, "cancel_requested": job.cancel_requested},
        )
        if stop_requested:
            job_pk = job.pk
            transaction.on_commit(lambda: triggers.request_cancel(job_pk))
        else:
            # a queued job leaving may free room in the planner's view of quotas
            transaction.on_commit(triggers.request_planning)
    return job
