"""Gauges read from the database when /metrics is scraped."""

from __future__ import annotations

from django.db.models import Count
from prometheus_client import Gauge

JOBS = Gauge("rollmux_jobs", "Jobs by status and tenant", ["status", "tenant"])


def refresh_job_gauges() -> None:
    from rollmux_web.jobs.models import Job

    JOBS.clear()
    for row in Job.objects.values("status", "tenant__name").annotate(n=Count("id")):
        JOBS.labels(row["status"], row["tenant__name"]).set(row["n"])
