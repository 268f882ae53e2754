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
    # Fair share (issue 22): may a job of this class be preempted (at an iteration boundary,
    # after its checkpoint) to admit a job within its tenant's nominal quota? gold: no.
    preemptible = models.BooleanField(default=True)

    class Meta:
        ordering = ["slowdown"]
        constraints = [
            models.CheckConstraint(condition=models.Q(slowdown__gte=1.0), name="slo_at_least_1")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.slowdown}x)"


class Quota(models.Model):
    """Per tenant and GPU type (a share): the nominal quota (`max_gpus`, GPUs in use at once;
    null = no limit), how far beyond it the tenant may borrow capacity others leave idle, how
    much of its nominal quota others may borrow, its fair-share weight, and monthly budgets
    (null = no limit). Borrowed capacity may be taken back by preemption (docs/quotas-and-cost.md "Fair share").
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quotas")
    gpu_type = models.ForeignKey(GpuType, on_delete=models.CASCADE, related_name="quotas")
    max_gpus = models.PositiveIntegerField(null=True, blank=True)
    monthly_gpu_hours = models.FloatField(null=True, blank=True)
    monthly_budget_usd = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    borrowing_limit = models.PositiveIntegerField(
        default=0, help_text="GPUs it may use beyond its nominal quota when others do not"
    )
    lending_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="GPUs of its nominal quota others may borrow; null = all"
    )
    weight = models.FloatField(default=1.0, help_text="fair-share weight (> 0)")

    class Meta:
        ordering = ["tenant__name", "gpu_type__name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "gpu_type"], name="uniq_quota")]

    def __str__(self) -> str:
        return f"{self.tenant} on {self.gpu_type}"

    @property
    def ceiling(self) -> int | None:
        """Return the GPUs its live jobs may request at once: nominal + borrowing limit."""
        return None if self.max_gpus is None else self.max_gpus + self.borrowing_limit
