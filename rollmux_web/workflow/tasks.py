"""Celery tasks of the workflow app: retention (issue 25). Each takes ids and is safe to
run twice (services.retention); the beat schedule runs `retention_sweep`."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.utils import timezone

from rollmux_web.workflow.services import fair_share_hours, retention, rollup_days

log = logging.getLogger(__name__)
BATCHES_PER_SWEEP = 5


@shared_task(acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def archive_jobs(job_ids: list[int]) -> dict[str, Any]:
    """Archive one batch of jobs (ids): files first, then rollups and deletes in one commit."""
    result = retention.archive_jobs(job_ids, now=timezone.now())
    return {"jobs": result.jobs, "phases": result.phases, "metrics": result.metrics}


@shared_task(ignore_result=True)  # type: ignore[untyped-decorator]
def retention_sweep() -> dict[str, int]:
    """Roll up a few closed days (the rollup watermark), queue a few archive batches; purge
    rollups and audit entries past their retention; keep fair share's closed hours."""
    now = timezone.now()
    batches = retention.eligible_batches(now, max_batches=BATCHES_PER_SWEEP)
    for ids in batches:
        archive_jobs.delay(ids)
    return {
        "days_rolled_up": len(rollup_days.advance(now)),
        "batches": len(batches),
        "rollups_purged": retention.purge_rollups(now),
        "audit_purged": retention.purge_audit(now),
        "fair_share_hours_kept": fair_share_hours.keep(now),
    }
