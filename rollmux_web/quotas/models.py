"""SLO classes and per-tenant quotas/budgets."""

from __future__ import annotations

from django.db import models

from rollmux_web.accounts.models import Tenant
from rollmux_web.inventory.models import GpuType


class SloClass(models.Model):
    """A named tolerated slowdown (co-execution iteration time / solo iteration time)."""

    name = models.SlugField(max_length=32, unique=True)
    slowdown = models.FloatField(help_text=">= 1.0")
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["slowdown"]
        constraints = [
            models.CheckConstraint(condition=models.Q(slowdown__gte=1.0), name="slo_at_least_1")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.slowdown}x)"


class Quota(models.Model):
    """Per tenant and GPU type: a cap on GPUs in use at once and monthly budgets (null = no limit)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quotas")
    gpu_type = models.ForeignKey(GpuType, on_delete=models.CASCADE, related_name="quotas")
    max_gpus = models.PositiveIntegerField(null=True, blank=True)
    monthly_gpu_hours = models.FloatField(null=True, blank=True)
    monthly_budget_usd = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)

    class Meta:
        ordering = ["tenant__name", "gpu_type__name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "gpu_type"], name="uniq_quota")]

    def __str__(self) -> str:
        return f"{self.tenant} on {self.gpu_type}"
