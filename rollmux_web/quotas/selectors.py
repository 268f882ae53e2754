"""Read side of quotas and SLO classes (quotas are tenant-scoped)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from rollmux_web.accounts.models import Tenant
from rollmux_web.accounts.selectors import visible_tenants
from rollmux_web.quotas.models import Quota, SloClass


def quotas_for(tenant: Tenant | int | str) -> dict[str, Quota]:
    """Return the tenant's quotas by GPU type name (a GPU type without a row is unlimited)."""
    qs = Quota.objects.select_related("gpu_type", "tenant")
    if isinstance(tenant, Tenant):
        qs = qs.filter(tenant=tenant)
    elif isinstance(tenant, int):
        qs = qs.filter(tenant_id=tenant)
    else:
        qs = qs.filter(tenant__name=tenant)
    return {q.gpu_type.name: q for q in qs}


def quota_list(
    *, user: Any, tenant: str | None = None, gpu_type: str | None = None
) -> QuerySet[Quota]:
    """Return the quotas of the tenants the user may see."""
    qs = Quota.objects.select_related("tenant", "gpu_type").filter(tenant__in=visible_tenants(user))
    if tenant:
        qs = qs.filter(tenant__name=tenant)
    if gpu_type:
        qs = qs.filter(gpu_type__name=gpu_type)
    return qs.order_by("tenant__name", "gpu_type__name")


def slo_class_list() -> QuerySet[SloClass]:
    return SloClass.objects.order_by("slowdown", "name")
