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
