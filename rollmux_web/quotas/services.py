"""Write side of SLO classes and quotas: atomic, validated, audited with before/after."""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from rollmux_web.accounts.models import Tenant
from rollmux_web.audit.services import audit_record, save_changes, snapshot
from rollmux_web.inventory.models import GpuType
from rollmux_web.inventory.services import name_taken
from rollmux_web.quotas.models import Quota, SloClass

SLO_FIELDS = ["name", "slowdown", "description", "preemptible"]
QUOTA_FIELDS = [
    "tenant",
    "gpu_type",
    "max_gpus",
    "monthly_gpu_hours",
    "monthly_budget_usd",
    "borrowing_limit",
    "lending_limit",
    "weight",
]
NOT_PREEMPTIBLE_BY_DEFAULT = ("gold",)  # SLO classes created not preemptible (issue 22)
MAX_SLOWDOWN = 100.0
# The largest numbers a quota takes, in every layer (the API's fields, the page's form and
# the service): GPUs (nominal, borrowing, lending), the fair-share weight, GPU-hours a month
MAX_QUOTA_GPUS = 1_000_000
MAX_WEIGHT = 1e6
# the smallest fair-share weight: a share is usage / (weight x nominal), and a weight far
# below this (1e-320 is above 0) makes every share infinite, which the queue words as "no
# nominal quota there"
MIN_WEIGHT = 1e-6
MAX_MONTHLY_GPU_HOURS = 1e12


def _validate_slo(slo: SloClass) -> None:
    errors: dict[str, list[str]] = {}
    if taken := name_taken(SloClass, slo.name, noun="An SLO class", pk=slo.pk):
        errors["name"] = [taken]
    value = slo.slowdown
    if not isinstance(value, int | float) or not math.isfinite(value):
        errors["slowdown"] = ["Enter a finite number."]
    elif value < 1.0:
        errors["slowdown"] = [
            f"Must be at least 1.0 (1.0 = no slowdown tolerated versus running alone); got {value}."
        ]
    elif value > MAX_SLOWDOWN:
        errors["slowdown"] = [f"Must be at most {MAX_SLOWDOWN}."]
    if errors:
        raise ValidationError(errors)
    slo.full_clean()


@transaction.atomic
def slo_class_create(
    *,
    actor: Any,
    name: str,
    slowdown: float,
    description: str = "",
    preemptible: bool | None = None,
) -> SloClass:
    """Create an SLO class: a name and the slowdown its jobs tolerate (>= 1.0), and whether
    its jobs may be preempted (None: yes, but gold no)."""
    if preemptible is None:
        preemptible = name not in NOT_PREEMPTIBLE_BY_DEFAULT
    slo = SloClass(name=name, slowdown=slowdown, description=description, preemptible=preemptible)
    _validate_slo(slo)
    slo.save()
    audit_record(actor=actor, action="slo_class.create", obj=slo, after=snapshot(slo, SLO_FIELDS))
    return slo


@transaction.atomic
def slo_class_update(*, actor: Any, slo_class_id: int, data: Mapping[str, Any]) -> SloClass:
    """Change an SLO class; jobs already placed keep the plan made under the old value."""
    slo = SloClass.objects.select_for_update().get(pk=slo_class_id)
    before, after = save_changes(slo, SLO_FIELDS, data, validate=_validate_slo)
    if after != before:
        audit_record(actor=actor, action="slo_class.update", obj=slo, before=before, after=after)
    return slo


@transaction.atomic
def slo_class_delete(*, actor: Any, slo_class_id: int) -> None:
    """Delete an SLO class no job uses (a used one raises ProtectedError: 409 in the API)."""
    slo = SloClass.objects.select_for_update().get(pk=slo_class_id)
    before = snapshot(slo, SLO_FIELDS)
    pk = slo.pk
    slo.delete()
    audit_record(
        actor=actor,
        action="slo_class.delete",
        object_type="quotas.sloclass",
        object_id=str(pk),
        before=before,
    )


def _limit_number(
    errors: dict[str, list[str]],
    field: str,
    value: Any,
    unit: str,
    maximum: float | None = None,
) -> None:
    if value is None:
        return
    if isinstance(value, Decimal):
        ok = value.is_finite()
    else:
        ok = isinstance(value, int | float) and math.isfinite(value)
    if not ok:
        errors[field] = ["Enter a finite number, or leave empty for no limit."]
    elif value < 0:
        errors[field] = [f"Must be zero or more {unit}, or empty for no limit; got {value}."]
    elif maximum is not None and value > maximum:
        errors[field] = [_too_big(maximum, unit, value)]


def _too_big(maximum: float, unit: str, value: Any) -> str:
    return f"Must be at most {maximum:,.0f} {unit}; got {value}."


def quota_errors(quota: Quota) -> dict[str, list[str]]:
    """Return the service's checks of a quota that failed, by field (nothing saved, nothing
    raised): the quota form also shows them beside its own field errors, so a page with
    several mistakes names them all at once (`QuotaForm.clean`)."""
    errors: dict[str, list[str]] = {}
    _limit_number(errors, "max_gpus", quota.max_gpus, "GPUs", MAX_QUOTA_GPUS)
    per_node = quota.gpu_type.gpus_per_node if quota.gpu_type_id else 0
    if "max_gpus" not in errors and quota.max_gpus and per_node and quota.max_gpus % per_node:
        # jobs ask for whole nodes: a cap between two multiples acts as the lower one
        errors["max_gpus"] = [
            f"Must be a multiple of {per_node} ({quota.gpu_type.name} nodes have {per_node} "
            f"GPUs and jobs ask for whole nodes); got {quota.max_gpus}."
        ]
    _limit_number(
        errors, "monthly_gpu_hours", quota.monthly_gpu_hours, "GPU-hours", MAX_MONTHLY_GPU_HOURS
    )
    if quota.monthly_budget_usd is not None:
        try:
            quota.monthly_budget_usd = Decimal(str(quota.monthly_budget_usd))
        except InvalidOperation:
            errors["monthly_budget_usd"] = ["Enter a number, or leave empty for no limit."]
        else:
            _limit_number(errors, "monthly_budget_usd", quota.monthly_budget_usd, "dollars")
            if "monthly_budget_usd" not in errors:
                quota.monthly_budget_usd = quota.monthly_budget_usd.quantize(Decimal("0.01"))
    _validate_share(errors, quota)
    return errors


def _validate_quota(quota: Quota) -> None:
    errors = quota_errors(quota)
    if errors:
        raise ValidationError(errors)
    try:
        quota.full_clean()
    except ValidationError as exc:
        # The unique (tenant, gpu_type) check reports on __all__; name the fields.
        if "__all__" in exc.message_dict and "tenant" not in exc.message_dict:
            raise ValidationError(
                {"gpu_type": [f"{quota.tenant} already has a quota for {quota.gpu_type}."]}
            ) from None
        raise


def _validate_share(errors: dict[str, list[str]], quota: Quota) -> None:
    """The fair-share settings (issue 22): borrowing >= 0, lending <= nominal, weight > 0,
    and a share setting only for a GPU type the cluster has (a node of it that is not down)."""
    borrow, lend, weight = quota.borrowing_limit, quota.lending_limit, quota.weight
    if not isinstance(borrow, int) or isinstance(borrow, bool) or borrow < 0:
        errors["borrowing_limit"] = [
            f"Must be zero or more GPUs (beyond the nominal quota); got {borrow}."
        ]
    elif borrow > MAX_QUOTA_GPUS:
        errors["borrowing_limit"] = [_too_big(MAX_QUOTA_GPUS, "GPUs", borrow)]
    if lend is not None:
        if not isinstance(lend, int) or isinstance(lend, bool) or lend < 0:
            errors["lending_limit"] = [f"Must be zero or more GPUs, or empty for all; got {lend}."]
        elif lend > MAX_QUOTA_GPUS:
            errors["lending_limit"] = [_too_big(MAX_QUOTA_GPUS, "GPUs", lend)]
        elif quota.max_gpus is not None and lend > quota.max_gpus:
            errors["lending_limit"] = [
                f"Must be at most the nominal quota (max_gpus {quota.max_gpus}): a tenant "
                f"lends only what it is given; got {lend}."
            ]
    if not isinstance(weight, int | float) or not math.isfinite(weight) or weight <= 0:
        errors["weight"] = [f"Must be a number above 0; got {weight}."]
    elif weight < MIN_WEIGHT:
        errors["weight"] = [f"Must be at least {MIN_WEIGHT:f}; got {weight}."]
    elif weight > MAX_WEIGHT:
        errors["weight"] = [f"Must be at most {MAX_WEIGHT:,.0f}; got {weight}."]
    shared = borrow != 0 or lend is not None or weight != 1.0
    if shared and quota.gpu_type_id and "gpu_type" not in errors:
        from rollmux_web.inventory.models import Node, NodeState

        has = (
            Node.objects.filter(gpu_type_id=quota.gpu_type_id)
            .exclude(state=NodeState.DOWN)
            .exists()
        )
        if not has:
            errors["gpu_type"] = [
                f"The cluster has no {quota.gpu_type.name} nodes: a share (borrowing, lending, "
                "weight) for it would never apply."
            ]


def _quota_snapshot(quota: Quota) -> dict[str, Any]:
    return snapshot(quota, QUOTA_FIELDS)


@transaction.atomic
def quota_create(
    *,
    actor: Any,
    tenant: Tenant,
    gpu_type: GpuType,
    max_gpus: int | None = None,
    monthly_gpu_hours: float | None = None,
    monthly_budget_usd: Decimal | None = None,
    borrowing_limit: int = 0,
    lending_limit: int | None = None,
    weight: float = 1.0,
) -> Quota:
    """Create a tenant's quota (its share) for one GPU type (None = no limit)."""
    quota = Quota(
        tenant=tenant,
        gpu_type=gpu_type,
        max_gpus=max_gpus,
        monthly_gpu_hours=monthly_gpu_hours,
        monthly_budget_usd=monthly_budget_usd,
        borrowing_limit=borrowing_limit,
        lending_limit=lending_limit,
        weight=weight,
    )
    _validate_quota(quota)
    quota.save()
    audit_record(
        actor=actor,
        action="quota.create",
        obj=quota,
        tenant=tenant.name,
        after=_quota_snapshot(quota),
    )
    return quota


@transaction.atomic
def quota_update(*, actor: Any, quota_id: int, data: Mapping[str, Any]) -> Quota:
    quota = Quota.objects.select_for_update().select_related("tenant", "gpu_type").get(pk=quota_id)
    before, after = save_changes(
        quota, QUOTA_FIELDS, data, validate=_validate_quota, snap=_quota_snapshot
    )
    if after != before:
        audit_record(
            actor=actor,
            action="quota.update",
            obj=quota,
            tenant=quota.tenant.name,
            before=before,
            after=after,
        )
    return quota


@transaction.atomic
def quota_delete(*, actor: Any, quota_id: int) -> None:
    """Delete a quota: the tenant is then unlimited on that GPU type."""
    quota = Quota.objects.select_for_update().select_related("tenant", "gpu_type").get(pk=quota_id)
    before = _quota_snapshot(quota)
    pk, tenant = quota.pk, quota.tenant.name
    quota.delete()
    audit_record(
        actor=actor,
        action="quota.delete",
        object_type="quotas.quota",
        object_id=str(pk),
        tenant=tenant,
        before=before,
    )
