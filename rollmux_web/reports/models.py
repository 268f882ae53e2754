"""What-if simulator runs (the only state the reports app owns)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class WhatIfRun(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="whatif_runs"
    )
    tenant = models.CharField(max_length=64, blank=True)
    source = models.CharField(max_length=16, default="upload")  # upload | queue
    trace_text = models.TextField()
    policies = models.JSONField(default=list)
    seed = models.IntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    progress = models.FloatField(default=0.0)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)  # claimed by a worker
    # the worker's heartbeat while it simulates: a running run whose heartbeat stops had its
    # worker die (reconcile fails it)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"what-if run {self.pk} ({self.source}, {self.status})"

    @property
    def source_label(self) -> str:
        """Return what the run simulated, in words: a queue run says whose jobs it took
        (a researcher's takes only their tenants' jobs; `tenant` is "" for every tenant)."""
        if self.source != "queue":
            return "an uploaded trace"
        return queue_scope_label(self.tenant)


def queue_scope_label(tenants: str) -> str:
    """Return whose jobs a what-if on the current queue simulates: `tenants` the caller's
    tenants, comma-separated ("" for an admin or finance user: every tenant)."""
    if not tenants:
        return "the current queue: every tenant's queued and running jobs"
    names = tenants.replace(",", ", ")
    return (
        f"the current queue: {names}'s queued and running jobs only "
        "(other tenants' jobs are not simulated)"
    )
