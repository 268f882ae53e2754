"""The embedded default (no REDIS_URL): Celery runs tasks eagerly in this process, so there
is no beat process either; a daemon thread plays beat's part (plan + reconcile)."""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings

log = logging.getLogger(__name__)

_started = threading.Event()
_lock = threading.Lock()


def ensure_started() -> None:
    """Start the in-process beat thread once, in embedded (eager) mode only."""
    if _started.is_set() or not settings.CELERY_TASK_ALWAYS_EAGER:
        return
    if not getattr(settings, "ROLLMUX_EMBEDDED_BEAT", True):
        return
    with _lock:
        if _started.is_set():
            return
        _started.set()
        threading.Thread(target=_beat, name="rollmux-embedded-beat", daemon=True).start()


def _beat() -> None:
    from django.db import close_old_connections

    from workers.tasks import reconcile

    interval = float(settings.CELERY_BEAT_SCHEDULE["reconcile"]["schedule"])
    while True:
        time.sleep(interval)
        try:
            reconcile.delay()
        except Exception:
            log.exception("embedded beat: reconcile failed")
        finally:
            close_old_connections()
