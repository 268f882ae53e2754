"""The "a planning pass is pending" marker in Redis.

A planning pass reads every queued job, so one pending pass serves any number of requests:
the first request sets this marker and enqueues `plan`; the pass clears it before it takes
its snapshot, so a job committed after that moment enqueues the next pass. The TTL bounds
the damage of a pass that never ran (lost message): requests enqueue again after it.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

PLAN_PENDING_KEY = "rollmux:plan-pending"
PLAN_PENDING_TTL_S = 10


def _redis() -> Any:
    from django.conf import settings

    if settings.CELERY_TASK_ALWAYS_EAGER or not settings.REDIS_URL:
        return None
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1.0)


def claim() -> bool:
    """Set the marker; False when a pass is already pending (no Redis: always True)."""
    client = _redis()
    return client is None or bool(client.set(PLAN_PENDING_KEY, 1, nx=True, ex=PLAN_PENDING_TTL_S))


def clear() -> None:
    """Clear the marker: requests from now on need a pass after this one."""
    try:
        client = _redis()
        if client is not None:
            client.delete(PLAN_PENDING_KEY)
    except Exception:
        log.warning("could not clear the planning marker; it expires by itself", exc_info=True)
