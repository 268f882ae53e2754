"""RL post-training jobs: the trace-format fields plus lifecycle."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from rollmux_web.accounts.models import Tenant
from rollmux_web.quotas.models import SloClass


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    PLACED = "placed", "Placed"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


TERMINAL_STATUSES = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)


class Job(models.Model):
    name = models.CharField(max_length=128)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="jobs")
    submitter = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    slo_class = models.ForeignKey(SloClass, on_delete=models.PROTECT, related_name="jobs")
    runner = models.CharField(
        max_length=200, default="emulated", help_text="emulated, toy-rl or an import path"
    )
    model = models.CharField(max_length=128, blank=True)
    priority = models.IntegerField(default=0)

    # trace-format fields (docs/spec/trace-format.md)
    iterations = models.PositiveIntegerField()
    rollout_gpus = models.PositiveIntegerField()
    train_gpus = models.PositiveIntegerField()
    t_roll_max_s = models.FloatField()
    t_roll_min_s = models.FloatField()
    t_train_max_s = models.FloatField()
    t_train_min_s = models.FloatField()
    host_mem_gb = models.FloatField()
    time_scale = models.FloatField(
        null=True, blank=True, help_text="emulation speed-up; null = settings default"
    )

    # lifecycle
    status = models.CharField(
        max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED, db_index=True
    )
    reason = models.CharField(
        max_length=500, blank=True, help_text="why it waits, or why it failed"
    )
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(
        default=0, help_text="placements so far (resubmissions + 1)"
    )
    iterations_done = models.PositiveIntegerField(default=0)
    submitted_at = models.DateTimeField(auto_now_add=True, db_index=True)
    placed_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [models.Index(fields=["tenant", "status"])]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def slo(self) -> float:
        return self.slo_class.slowdown
