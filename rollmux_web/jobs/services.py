"""Writes of jobs: submission (validation, quotas, budgets) and cancellation."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from rollmux_web import metrics, ports
from rollmux_web.accounts.models import Tenant
from rollmux_web.accounts.selectors import can_submit
from rollmux_web.audit.services import audit_record
from rollmux_web.jobs.caps import GPU_CAP_EXCEEDED, commit_within_gpu_caps
from rollmux_web.jobs.models import TERMINAL_STATUSES, DurationSource, Job, JobStatus
from rollmux_web.jobs.selectors import ACTIVE_STATUSES, PoolNow, job_get, pools_now
from rollmux_web.jobs.serializers import JobSpecSerializer
from rollmux_web.jobs.spec import SPEC_FIELDS, spec_values
from rollmux_web.quotas.selectors import QuotaUsage, quota_usage
from rollmux_web.transactions import atomic_with_retry


@dataclass
class JobRejected(Exception):
    """A submission or cancellation refused, with an API error code and per-field messages."""

    code: str
    message: str
    fields: dict[str, list[str]] = field(default_factory=dict)
    http_status: int = 400

    def __str__(self) -> str:
        return self.message


QUOTA_CODES = ("quota_exceeded", "budget_exceeded")  # the refusals of quotas and budgets
# The fields the quota and budget checks read (the tenant's usage is read from the database).
QUOTA_FIELDS = (
    "tenant",
    "iterations",
    "rollout_gpus",
    "train_gpus",
    "t_roll_max_s",
    "t_train_max_s",
)


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


def validate_spec(
    *, user: Any, spec: Any, pools: dict[str, PoolNow] | None = None
) -> dict[str, Any]:
    """Return the cleaned spec or raise JobRejected naming every bad field (`pools`: the
    caller's `pools_now()` read, else the checks read the pools themselves)."""
    if not isinstance(spec, dict):
        raise JobRejected(
            "invalid",
            "The job spec must be an object of field names to values.",
            {"non_field_errors": ["Expected an object of field names to values."]},
        )
    ser = JobSpecSerializer(data=spec, context={"user": user, "pools": pools})
    if not ser.is_valid():
        fields = _flatten_errors(ser.errors)
        name, msgs = next(iter(fields.items()))
        message = msgs[0] if name == "non_field_errors" else f"{name}: {msgs[0]}"
        raise JobRejected("invalid", message, fields)
    return dict(ser.validated_data)


def quota_refusal(*, user: Any, spec: dict[str, Any], now: datetime | None = None) -> str:
    """Return the quota or budget refusal `job_submit` would give this spec now, or "".

    It checks as soon as the fields the checks read (QUOTA_FIELDS) are valid, whatever the
    other fields say (the form starts without a name; the form shows field errors itself).
    Nothing is locked or written: the submit form's preview asks this on every render,
    the first one included.
    """
    if not isinstance(spec, dict):
        return ""
    data = JobSpecSerializer(data=spec, context={"user": user}).values_valid_alone(QUOTA_FIELDS)
    if set(QUOTA_FIELDS) - set(data):
        return ""
    try:
        _check_quotas(tenant=data["tenant"], spec=data, now=now or timezone.now(), lock=False)
    except JobRejected as exc:
        return exc.message
    return ""


QUOTAS_PAGE = "/quotas/"  # where a refusal sends the user: each quota next to its usage


def _gpus_would_free(*, tenant: Tenant, usage: QuotaUsage, ask: int, job: int | None) -> str:
    """Return what would let a job asking for `ask` GPUs past a full GPU cap run (`job`:
    the job asking, when it is already inserted, left out of the live jobs)."""
    cap, gt = usage.quota.ceiling or 0, usage.quota.gpu_type.name
    if ask > cap:
        return (
            f"This job alone asks for more than the quota: it can run only once an admin "
            f"raises it to at least {ask} (see {QUOTAS_PAGE})."
        )
    over = usage.gpus_requested + ask - cap
    # the smallest live job of the tenant whose end alone frees enough
    gpus_of = {"rollout": "rollout_gpus", "train": "train_gpus"}
    live = Job.objects.filter(tenant=tenant, status__in=ACTIVE_STATUSES).only(
        "pk", "name", "rollout_gpus", "train_gpus"
    )
    enough = sorted(
        (n, j.pk, j.name)
        for j in live
        if j.pk != job and (n := sum(getattr(j, gpus_of[k]) for k in usage.pool_kinds)) >= over
    )
    example = f", e.g. #{enough[0][1]} {enough[0][2]} with {enough[0][0]}" if enough else ""
    return (
        f"It fits once {tenant.name}'s live jobs release {over} {gt} GPUs (one finishes or is "
        f"cancelled{example}) or an admin raises the quota to {usage.gpus_requested + ask} "
        f"(see {QUOTAS_PAGE})."
    )


def _budget_would_free(*, left: float, per_iteration: float, raise_to: str) -> str:
    """Return what would let a job past a monthly budget run: fewer iterations (when some
    fit in what is left), the next month, or a raised budget."""
    # (a hair of slack: 20 GPU-hours at 0.2222 per iteration are 90 iterations, not 89)
    fit = int((left + 1e-9) // per_iteration) if per_iteration > 0 and left > 0 else 0
    fewer = f"with at most {fit} iteration{'s' if fit != 1 else ''}, " if fit >= 1 else ""
    return (
        f"It fits {fewer}next month, or once an admin raises the budget to {raise_to} "
        f"(see {QUOTAS_PAGE})."
    )


def _check_quotas(
    *,
    tenant: Tenant,
    spec: dict[str, Any],
    now: datetime,
    lock: bool = True,
    caps: bool = True,
    pools: dict[str, PoolNow] | None = None,
    job: int | None = None,
) -> list[QuotaUsage]:
    """Refuse the job if it would exceed a GPU cap or a monthly budget of its tenant;
    return the tenant's quotas with their usage.

    The usage comes from quotas.selectors.quota_usage, the function /quotas/ shows, so a
    refusal and the page give the same numbers; each refusal ends with what would free it.
    With `lock` it locks the tenant's capped quota rows before it counts the live jobs, so
    two concurrent submissions of one tenant cannot both pass the "at once" check; a
    submission calls it last, after inserting its job (`job`, left out of the count) and
    audit entry, so the lock is held for the count and the commit only. The budgets need
    the worst-case phase times: a
    job to be profiled has none yet, and `budget_refusal` checks it once it has.
    `caps=False` checks the budgets alone (the job is live already and counted in them,
    or a submission's commit checks the caps: `_submit`), and counts no live GPUs.
    """
    gpus = {"rollout": spec["rollout_gpus"], "train": spec["train_gpus"]}
    t_max = {"rollout": spec.get("t_roll_max_s"), "train": spec.get("t_train_max_s")}
    budgets = None not in t_max.values()
    usages = quota_usage(
        tenants=[tenant], now=now, lock=lock, pools=pools, exclude_job=job, count_live=caps
    )
    for usage in usages:
        kinds = usage.pool_kinds  # the pools of this quota's GPU type
        if not kinds:
            continue
        quota, gt = usage.quota, usage.quota.gpu_type
        # what this job asks for of this GPU type (both pools may share one type)
        ask_gpus = sum(gpus[k] for k in kinds)
        ceiling = quota.ceiling
        if caps and ceiling is not None and usage.gpus_requested + ask_gpus > ceiling:
            field_name = "rollout_gpus" if kinds == ("rollout",) else "train_gpus"
            borrow = (
                f" ({quota.max_gpus} nominal + {quota.borrowing_limit} it may borrow)"
                if quota.borrowing_limit
                else ""
            )
            msg = (
                f"quota: {tenant.name} may use at most {ceiling}{borrow} {gt.name} GPUs at "
                f"once; its live jobs (profiling, queued, placed or running) request "
                f"{usage.gpus_requested}; this job asks for {ask_gpus}. "
                + _gpus_would_free(tenant=tenant, usage=usage, ask=ask_gpus, job=job)
            )
            raise JobRejected("quota_exceeded", msg, {field_name: [msg]}, 403)
        if not budgets:
            continue
        iter_hours = sum((t_max[k] or 0.0) * gpus[k] / 3600.0 for k in kinds)
        ask_hours = spec["iterations"] * iter_hours
        price = float(usage.price_per_gpu_hour)
        ask_usd = ask_hours * price
        used_hours = usage.gpu_hours_month
        if quota.monthly_gpu_hours is not None and used_hours + ask_hours > quota.monthly_gpu_hours:
            msg = (
                f"budget: {tenant.name} may use at most {quota.monthly_gpu_hours:g} {gt.name} "
                f"GPU-hours this month; its jobs used {usage.gpu_hours_text} so far; this job may "
                f"take up to {ask_hours:.1f} (iterations x worst-case phase time x GPUs). "
                + _budget_would_free(
                    left=quota.monthly_gpu_hours - used_hours,
                    per_iteration=iter_hours,
                    raise_to=f"{used_hours + ask_hours:.1f} GPU-hours",
                )
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
                    "(iterations x worst-case phase time x GPUs x price). "
                    + _budget_would_free(
                        left=limit - usage.usd_month,
                        per_iteration=iter_hours * price,
                        raise_to=f"${usage.usd_month + ask_usd:,.2f}",
                    )
                )
                raise JobRejected("budget_exceeded", msg, {"non_field_errors": [msg]}, 403)
    return usages


def budget_refusal(*, job: Job, now: datetime | None = None) -> str:
    """Return the budget refusal a profiled job gets now that its phase times are known, or
    "" (the GPU caps were checked when it was submitted; it counts in them since)."""
    spec = {name: getattr(job, name) for name in SPEC_FIELDS}
    try:
        _check_quotas(
            tenant=job.tenant, spec=spec, now=now or timezone.now(), lock=False, caps=False
        )
    except JobRejected as exc:
        return exc.message
    return ""


def _audit_view(job: Job) -> dict[str, Any]:
    return {**spec_values(job), "status": job.status}


def job_submit(*, user: Any, spec: Any, channel: str, now: datetime | None = None) -> Job:
    """Validate a job spec, check quotas and budgets, and queue the job (all or nothing).

    A spec without phase times makes a `profiling` job: it runs its profile first
    (workflow.profiling) and is queued for the planner with the measured times.

    Raises PermissionDenied for users who may not submit and JobRejected for a bad spec
    or a refused quota; nothing is written in either case.
    """
    if not can_submit(user):
        raise PermissionDenied("Your role may not submit jobs.")
    now = now or timezone.now()
    pools = pools_now(at=now)  # one read of the pools for the field checks and the quotas
    data = validate_spec(user=user, spec=spec, pools=pools)
    # a deadlock or serialisation failure reruns the whole write (never a 500); a GPU cap
    # its commit found exceeded reruns it with the check made here, to say by how much
    write = lambda at_commit: _submit(  # noqa: E731
        user=user, data=data, channel=channel, now=now, pools=pools, caps_at_commit=at_commit
    )
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        try:
            return atomic_with_retry(lambda: write(True))
        except DatabaseError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != GPU_CAP_EXCEEDED:
                raise
    return atomic_with_retry(lambda: write(False))


def _submit(
    *,
    user: Any,
    data: dict[str, Any],
    channel: str,
    now: datetime,
    pools: dict[str, PoolNow],
    caps_at_commit: bool,
) -> Job:
    """Write the job and its audit entry, then check the quotas (in the caller's transaction:
    a refusal rolls both back).

    The GPU caps are checked last, under a lock on the tenant's capped quota rows (two
    submissions must not both take the last GPUs), so that the tenant's concurrent
    submissions queue on that lock for as little as possible (workers/README.md
    "Locking"): with `caps_at_commit` (the outermost transaction, on PostgreSQL) the
    budgets are checked here and the caps by the commit itself, in one round trip
    (jobs.caps.commit_within_gpu_caps, which raises GPU_CAP_EXCEEDED: the caller
    then runs this again without it, for the refusal's numbers); otherwise the caps are
    checked here after the lock and a count of the live jobs, and the lock is held for that
    round trip, the checks and the commit.
    """
    declared = data.get("t_roll_max_s") is not None
    job = Job.objects.create(
        **{name: data.get(name) for name in SPEC_FIELDS},
        submitter=user,
        status=JobStatus.QUEUED if declared else JobStatus.PROFILING,
        duration_source=DurationSource.DECLARED if declared else "",
        reason="waiting for the planner"
        if declared
        else "profiling: waiting for the planner to find free nodes for its profiling run",
    )
    audit_record(
        actor=user,
        action="job.submit",
        obj=job,
        tenant=job.tenant.name,
        after={**_audit_view(job), "channel": channel},
    )
    usages = _check_quotas(
        tenant=data["tenant"],
        spec=data,
        now=now,
        lock=not caps_at_commit,
        caps=not caps_at_commit,
        pools=pools,
        job=job.pk,
    )
    tenant_name = job.tenant.name
    transaction.on_commit(lambda: metrics.SUBMISSIONS.labels(tenant_name, channel).inc())
    transaction.on_commit(ports.request_planning)
    caps = [
        (u.quota.pk, "rollout" in u.pool_kinds, "train" in u.pool_kinds)
        for u in usages
        if u.quota.max_gpus is not None and u.pool_kinds
    ]
    if caps_at_commit and caps:
        commit_within_gpu_caps(caps=caps, live=tuple(str(s) for s in ACTIVE_STATUSES))
    return job


def job_cancel(*, user: Any, job_id: int, now: datetime | None = None) -> Job:
    """Cancel a job: a queued one (or one waiting to be profiled) at once, a placed/running
    one (or one in its profiling run) at its next phase boundary.

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
        waiting = [JobStatus.QUEUED]
        # A profiling job waiting for free nodes leaves at once too; one whose profiling run
        # started stops at its phase boundary. The row lock orders this against the planner
        # starting that run (it locks the profiling jobs it starts).
        if (
            Job.objects.select_for_update().filter(pk=job.pk, status=JobStatus.PROFILING).exists()
            and not Job.objects.filter(
                pk=job.pk, placements__isnull=False, placements__ended_at__isnull=True
            ).exists()
        ):
            waiting.append(JobStatus.PROFILING)
        queued = Job.objects.filter(pk=job.pk, status__in=waiting).update(
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
                status__in=(JobStatus.PROFILING, JobStatus.PLACED, JobStatus.RUNNING),
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
            transaction.on_commit(lambda: ports.request_cancel(job_pk))
        else:
            # a queued job leaving may free room in the planner's view of quotas
            transaction.on_commit(ports.request_planning)
    return job
