"""Hooks the web app calls after a commit to wake the workflow.

Each function is safe to call from `transaction.on_commit` and enqueues a Celery task that
takes ids; in embedded mode (no REDIS_URL: eager Celery) the task runs in-process. A broker
that is down does not fail the caller's request: the beat safety net (plan every 30 s,
reconcile every 15 s) catches up once it is back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def _send(fn: Callable[[], Any], what: str) -> None:
    from workers import embedded

    if not embedded.runs_work_here():
        log.info("embedded mode, not the server process: %s left to the server's beat", what)
        return
    embedded.ensure_started()
    try:
        fn()
    except Exception:
        log.exception("could not enqueue %s; the beat safety net will retry", what)


# A planning pass reads every queued job, so one pending pass serves any number of requests:
# the first request sets this marker and enqueues `plan`; the pass clears it before it takes
# its snapshot, so a job committed after that moment enqueues the next pass. The TTL bounds
# the damage of a pass that never ran (lost message): requests enqueue again after it.
PLAN_PENDING_KEY = "rollmux:plan-pending"
PLAN_PENDING_TTL_S = 10


def _redis() -> Any:
    from django.conf import settings

    if settings.CELERY_TASK_ALWAYS_EAGER or not settings.REDIS_URL:
        return None
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1.0)


def request_planning() -> None:
    """Ask for a planning pass (after a submission, departure, failure or node change)."""
    from workers.tasks import plan

    def enqueue() -> None:
        client = _redis()
        if client is not None and not client.set(
            PLAN_PENDING_KEY, 1, nx=True, ex=PLAN_PENDING_TTL_S
        ):
            return  # a pass is already queued and has not taken its snapshot yet
        plan.delay()

    _send(enqueue, "planning")


def planning_started() -> None:
    """Clear the pending marker: requests from now on need a pass after this one."""
    try:
        client = _redis()
        if client is not None:
            client.delete(PLAN_PENDING_KEY)
    except Exception:
        log.warning("could not clear the planning marker; it expires by itself", exc_info=True)


def request_cancel(job_id: int) -> None:
    """Ask the job's group controller to stop the job at the next phase boundary."""
    from workers.tasks import cancel_job

    _send(lambda: cancel_job.delay(job_id), f"cancel of job {job_id}")


def node_state_changed(node_id: int) -> None:
    """React to a node going down/drained/up (resubmit jobs pinned to a down node)."""
    from workers.tasks import node_changed

    _send(lambda: node_changed.delay(node_id), f"node change {node_id}")
