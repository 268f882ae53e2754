"""Writes of jobs: submission (validation, quotas, budgets) and cancellation."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import DateTimeField, F, Sum, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from rollmux_web import metrics
from rollmux_web.accounts.models import Tenant
from rollmux_web.accounts.selectors import can_submit
from rollmux_web.audit.services import audit_record
from rollmux_web.inventory.models import GpuType
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job, JobStatus
from rollmux_web.jobs.selectors import ACTIVE_STATUSES, job_get, pool_prices
from rollmux_web.jobs.serializers import JobSpecSerializer
from rollmux_web.quotas.models import Quota
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


def _month_start(now: datetime) -> datetime:
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def tenant_usage_this_month(*, tenant: Tenant, now: datetime) -> dict[str, float]:
    """Return GPU-hours per pool kind ("rollout", "train") the tenant's phases used this month.

    Usage is busy GPU time from phase records (a running phase counts up to `now`), not
    node allocations: a group's allocation is shared by its members and splitting its idle
    time among tenants is a reporting choice, while phase time belongs to exactly one job.
    """
    from rollmux_web.workflow.models import PhaseRecord

    start = _month_start(now)
    rows = (
        PhaseRecord.objects.filter(job__tenant=tenant, started_at__isnull=False)
        .exclude(finished_at__lt=start)
        .values("kind", "job__rollout_gpus", "job__train_gpus")
        .annotate(
            busy=Sum(
                Coalesce(F("finished_at"), Value(now, output_field=DateTimeField()))
                - Greatest(F("started_at"), Value(start, output_field=DateTimeField()))
            )
        )
    )
    hours: dict[str, float] = defaultdict(float)
    for row in rows:
        if row["busy"] is None:
            continue
        gpus = row["job__rollout_gpus"] if row["kind"] == "rollout" else row["job__train_gpus"]
        hours[row["kind"]] += max(row["busy"].total_seconds(), 0.0) * gpus / 3600.0
    return dict(hours)


def _check_quotas(*, tenant: Tenant, spec: dict[str, Any], now: datetime) -> None:
    """Refuse the job if it would exceed a GPU cap or a monthly budget of its tenant.

    Locks the tenant's quota rows first, so two concurrent submissions of one tenant
    cannot both pass the "GPUs in use at once" check.
    """
    quotas = list(
        Quota.objects.select_for_update().filter(tenant=tenant).select_related("gpu_type")
    )
    if not quotas:
        return
    prices = pool_prices()
    # what this job asks for, per GPU type (both pools may share one type)
    pools = {
        "rollout": (prices["rollout"], spec["rollout_gpus"], spec["t_roll_max_s"]),
        "train": (prices["train"], spec["train_gpus"], spec["t_train_max_s"]),
    }
    asks: dict[int, dict[str, Any]] = {}
    for kind, (pool, gpus, t_max) in pools.items():
        if pool is None:
            continue
        a = asks.setdefault(
            pool.gpu_type.pk,
            {
                "gpus": 0,
                "gpu_hours": 0.0,
                "usd": 0.0,
                "kinds": [],
                "price": pool.price_per_gpu_hour,
            },
        )
        a["gpus"] += gpus
        hours = spec["iterations"] * t_max * gpus / 3600.0
        a["gpu_hours"] += hours
        a["usd"] += hours * float(pool.price_per_gpu_hour)
        a["kinds"].append(kind)

    active = list(
        Job.objects.filter(tenant=tenant, status__in=ACTIVE_STATUSES).values_list(
            "rollout_gpus", "train_gpus"
        )
    )
    usage: dict[str, float] | None = None
    for quota in quotas:
        ask = asks.get(quota.gpu_type.pk)
        if ask is None:
            continue
        gt: GpuType = quota.gpu_type
        if quota.max_gpus is not None:
            in_use = sum(
                (r if "rollout" in ask["kinds"] else 0) + (t if "train" in ask["kinds"] else 0)
                for r, t in active
            )
            if in_use + ask["gpus"] > quota.max_gpus:
                field_name = "rollout_gpus" if ask["kinds"] == ["rollout"] else "train_gpus"
                msg = (
                    f"quota: {tenant.name} may use at most {quota.max_gpus} {gt.name} GPUs at "
                    f"once; {in_use} in use, this job asks for {ask['gpus']}"
                )
                raise JobRejected("quota_exceeded", msg, {field_name: [msg]}, 403)
        if quota.monthly_gpu_hours is None and quota.monthly_budget_usd is None:
            continue
        if usage is None:
            usage = tenant_usage_this_month(tenant=tenant, now=now)
        used_hours = sum(usage.get(k, 0.0) for k in ask["kinds"])
        if (
            quota.monthly_gpu_hours is not None
            and used_hours + ask["gpu_hours"] > quota.monthly_gpu_hours
        ):
            msg = (
                f"budget: {tenant.name} may use at most {quota.monthly_gpu_hours:g} {gt.name} "
                f"GPU-hours this month; {used_hours:.1f} used, this job may take up to "
                f"{ask['gpu_hours']:.1f} (iterations x worst-case phase time x GPUs)"
            )
            raise JobRejected("budget_exceeded", msg, {"non_field_errors": [msg]}, 403)
        if quota.monthly_budget_usd is not None:
            # Priced at today's rate: an admission estimate, not the cost report (which
            # applies the price history to node allocations).
            used_usd = used_hours * float(ask["price"])
            limit = float(quota.monthly_budget_usd)
            if used_usd + ask["usd"] > limit:
                msg = (
                    f"budget: {tenant.name} may spend at most ${limit:,.2f} on {gt.name} this "
                    f"month; ${used_usd:,.2f} spent, this job may cost up to ${ask['usd']:,.2f} "
                    "(iterations x worst-case phase time x GPUs x price)"
                )
                raise JobRejected("budget_exceeded", msg, {"non_field_errors": [msg]}, 403)


def _audit_view(job: Job) -> dict[str, Any]:
    return {
        "name": job.name,
        "tenant": job.tenant.name,
        "slo_class": job.slo_class.name,
        "runner": job.runner,
        "model": job.model,
        "priority": job.priority,
        "iterations": job.iterations,
        "rollout_gpus": job.rollout_gpus,
        "train_gpus": job.train_gpus,
        "t_roll_max_s": job.t_roll_max_s,
        "t_roll_min_s": job.t_roll_min_s,
        "t_train_max_s": job.t_train_max_s,
        "t_train_min_s": job.t_train_min_s,
        "host_mem_gb": job.host_mem_gb,
        "time_scale": job.time_scale,
        "status": job.status,
    }


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
            name=data["name"],
            tenant=data["tenant"],
            submitter=user,
            slo_class=data["slo_class"],
            runner=data["runner"],
            model=data.get("model") or "",
            priority=data.get("priority") or 0,
            iterations=data["iterations"],
            rollout_gpus=data["rollout_gpus"],
            train_gpus=data["train_gpus"],
            t_roll_max_s=data["t_roll_max_s"],
            t_roll_min_s=data["t_roll_min_s"],
            t_train_max_s=data["t_train_max_s"],
            t_train_min_s=data["t_train_min_s"],
            host_mem_gb=data["host_mem_gb"],
            time_scale=data.get("time_scale"),
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
