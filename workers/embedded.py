"""The embedded default (no REDIS_URL): Celery runs tasks eagerly in this process, so there
is no beat process either; a daemon thread plays beat's part (reconcile and its planning
pass, the watch of overdue phase reports, the notifications' sweep of due retries). It
imports nothing of the workflow: what the beat runs is handed in (`ensure_started`)."""

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


def ensure_started(
    tick: Callable[[], None],
    fast_tick: Callable[[], None] | None = None,
    sweep: Callable[[], None] | None = None,
) -> None:
    """Start the in-process beat thread once, in embedded (eager) mode only; it calls `tick`
    (the safety net: `triggers.run_reconcile`) every reconcile interval, `fast_tick`
    (`triggers.run_watch`: overdue phase reports) every second and `sweep`
    (`triggers.run_notifications_sweep`: due delivery retries) every sweep interval, as
    beat does with a broker (CELERY_BEAT_SCHEDULE)."""
    if _started.is_set() or not settings.CELERY_TASK_ALWAYS_EAGER:
        return
    if not getattr(settings, "ROLLMUX_EMBEDDED_BEAT", True):
        return
    with _lock:
        if _started.is_set():
            return
        _started.set()
        threading.Thread(
            target=_beat, args=(ticks(tick, fast_tick, sweep),), name="rollmux-embedded-beat",
            daemon=True,
        ).start()  # fmt: skip


def ticks(
    tick: Callable[[], None],
    fast_tick: Callable[[], None] | None = None,
    sweep: Callable[[], None] | None = None,
) -> list[tuple[float, Callable[[], None]]]:
    """Return what the embedded beat runs, each with its interval in seconds (beat's own
    intervals, from CELERY_BEAT_SCHEDULE)."""
    schedule: dict[str, dict[str, Any]] = settings.CELERY_BEAT_SCHEDULE
    out = [(float(schedule["reconcile"]["schedule"]), tick)]
    if fast_tick is not None:
        out.append((float(schedule["watch"]["schedule"]), fast_tick))
    if sweep is not None:
        out.append((float(schedule["notifications-sweep"]["schedule"]), sweep))
    return out


def _beat(entries: list[tuple[float, Callable[[], None]]]) -> None:
    from django.db import close_old_connections

    time.sleep(2.0)  # let the server finish starting, then catch up at once
    due = [time.monotonic()] * len(entries)
    while True:
        for i, (interval, fn) in enumerate(entries):
            if time.monotonic() < due[i]:
                continue
            due[i] = time.monotonic() + interval
            try:
                fn()
            except Exception:
                log.exception("embedded beat: %s failed", getattr(fn, "__name__", fn))
            finally:
                close_old_connections()
        time.sleep(min(interval for interval, _ in entries))
