"""Who changed what, when, with before/after."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditEntry(models.Model):
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64, db_index=True)  # e.g. job.submit, quota.update
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    # what the audit log shows: "node h800-5", not "inventory.node #13" (kept as it was named
    # then, so a renamed or deleted object still reads as it did)
    object_name = models.CharField(max_length=200, blank=True)
    tenant = models.CharField(max_length=64, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_name or 'system'} at {self.at:%Y-%m-%d %H:%M:%S}"
