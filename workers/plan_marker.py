"""The "a planning pass is pending" marker in Redis, and the spacing of planning passes.

A planning pass reads every queued job, so one pending pass serves any number of requests:
the first request sets this marker and enqueues `plan`; the pass clears it once it holds
the planner's lock, before it takes its snapshot, so a job committed after that moment
enqueues the next pass. A `plan` task that finds the lock busy stays the pending pass: it
keeps the marker (`hold`) and retries. The TTL bounds the damage of a pass that never ran
(lost message): requests enqueue again after it.

Passes start at most once per ROLLMUX_PLAN_MIN_INTERVAL_S: the pass records when it
started, and a request that finds the last start more recent than that enqueues the next
pass with a countdown to the end of the interval (a request after a quiet moment plans at
once). Under a burst of submissions the jobs of each interval then share one pass, instead
of passes running back to back, each with its own snapshot and task, and the lock-busy
retries of the passes queued behind it.

Each call is one round trip on a client kept for the process (one connection pool per
process, not a new connection per request).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

PLAN_PENDING_KEY = "rollmux:plan-pending"
PLAN_STARTED_KEY = "rollmux:plan-started"
PLAN_PENDING_TTL_S = 10

_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def _redis() -> Any:
    from django.conf import settings

    if settings.CELERY_TASK_ALWAYS_EAGER or not settings.REDIS_URL:
        return None
    url = settings.REDIS_URL
    client = _clients.get(url)
    if client is None:
        import redis

        with _clients_lock:
            client = _clients.get(url)
            if client is None:
                client = _clients[url] = redis.Redis.from_url(url, socket_timeout=1.0)
    return client


def min_interval_s() -> float:
    from django.conf import settings

    return float(getattr(settings, "ROLLMUX_PLAN_MIN_INTERVAL_S", 0.0))


def countdown(last_started: float | None, now: float, interval: float) -> float:
    """Return how long the next pass waits: to `interval` after the last start (0 after a
    quiet moment, never more than `interval`, whatever the clocks of two hosts say)."""
    if last_started is None or interval <= 0:
        return 0.0
    return min(max(last_started + interval - now, 0.0), interval)


def claim() -> float | None:
    """Set the marker and return the countdown of the pass to enqueue (0: at once), or None
    when a pass is already pending (no Redis: always 0)."""
    client = _redis()
    if client is None:
        return 0.0
    pipe = client.pipeline(transaction=False)
    pipe.set(PLAN_PENDING_KEY, 1, nx=True, ex=PLAN_PENDING_TTL_S)
    pipe.get(PLAN_STARTED_KEY)
    claimed, started = pipe.execute()
    if not claimed:
        return None
    try:
        last = float(started) if started is not None else None
    except ValueError:
        last = None
    return countdown(last, time.time(), min_interval_s())


def clear() -> None:
    """Clear the marker (a pass starts: requests from now on need a pass after this one)
    and record the start (the next pass is spaced from it)."""
    try:
        client = _redis()
        if client is not None:
            pipe = client.pipeline(transaction=False)
            pipe.delete(PLAN_PENDING_KEY)
            pipe.set(PLAN_STARTED_KEY, repr(time.time()), ex=PLAN_PENDING_TTL_S)
            pipe.execute()
    except Exception:
        log.warning("could not clear the planning marker; it expires by itself", exc_info=True)


def hold() -> None:
    """Keep the marker set for another TTL (the pending pass retries: the lock was busy)."""
    try:
        client = _redis()
        if client is not None:
            client.set(PLAN_PENDING_KEY, 1, ex=PLAN_PENDING_TTL_S)
    except Exception:
        log.warning("could not hold the planning marker; requests enqueue passes", exc_info=True)
