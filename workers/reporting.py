"""How a phase's end reaches the controller: a Celery task, from whichever process saw it."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from workers.dispatch import PhaseReport


def report_config() -> dict[str, Any] | None:
    """Return the broker settings a job host needs to publish its own phase events, or None
    when there is no real broker (embedded mode: the dispatcher's callback delivers)."""
    broker = str(settings.CELERY_BROKER_URL)
    if settings.CELERY_TASK_ALWAYS_EAGER or not broker.startswith(("redis://", "rediss://")):
        return None
    return {"broker_url": broker, "queue": settings.CELERY_TASK_DEFAULT_QUEUE}


def deliver_report(report: PhaseReport) -> None:
    """Hand a phase report to `workers.tasks.phase_finished` (in-process when eager)."""
    from django.db import connection

    from workers.tasks import phase_finished

    try:
        phase_finished.delay(report.to_dict())
    finally:
        if settings.CELERY_TASK_ALWAYS_EAGER:
            # the task ran on this (callback) thread: do not leak its connection
            connection.close()
