"""The embedded default (no REDIS_URL): Celery runs tasks eagerly in this process, so there
is no beat process either; a daemon thread plays beat's part (plan + reconcile). It imports
nothing of the workflow: what the beat runs is handed in (`ensure_started(tick)`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)

_started = threading.Event()
_serving = threading.Event()
_lock = threading.Lock()


def set_serving(value: bool = True) -> None:
    """Mark this process as the one that executes work in embedded mode (the web server;
    tests that drive the workflow in-process)."""
    if value:
        _serving.set()
    else:
        _serving.clear()


def runs_work_here() -> bool:
    """Return whether tasks may run in this process: always with a real broker; in embedded
    (eager) mode only in the serving process. A one-shot command (seed_demo, shell) must not
    start phases on a local Ray that dies with it: it leaves jobs queued, and the server's
    beat plans them within seconds of starting."""
    return not settings.CELERY_TASK_ALWAYS_EAGER or _serving.is_set()


def ensure_started(tick: Callable[[], None], fast_tick: Callable[[], None] | None = None) -> None:
    """Start the in-process beat thread once, in embedded (eager) mode only; it calls `tick`
    (the safety net: `triggers.run_reconcile`) every reconcile interval and `fast_tick`
    (`triggers.run_watch`: overdue phase reports) every second."""
    if _started.is_set() or not settings.CELERY_TASK_ALWAYS_EAGER:
        return
    if not getattr(settings, "ROLLMUX_EMBEDDED_BEAT", True):
        return
    with _lock:
        if _started.is_set():
            return
        _started.set()
        threading.Thread(
            target=_beat, args=(tick, fast_tick), name="rollmux-embedded-beat", daemon=True
        ).start()


def _beat(tick: Callable[[], None], fast_tick: Callable[[], None] | None) -> None:
    from django.db import close_old_connections

    schedule: dict[str, dict[str, Any]] = settings.CELERY_BEAT_SCHEDULE
    interval = float(schedule["reconcile"]["schedule"])
    time.sleep(2.0)  # let the server finish starting, then catch up at once
    next_tick = time.monotonic()
    while True:
        due = [tick] if time.monotonic() >= next_tick else []
        if due:
            next_tick = time.monotonic() + interval
        elif fast_tick is not None:
            due = [fast_tick]
        for fn in due:
            try:
                fn()
            except Exception:
                log.exception("embedded beat: %s failed", getattr(fn, "__name__", fn))
            finally:
                close_old_connections()
        time.sleep(1.0 if fast_tick is not None else interval)
