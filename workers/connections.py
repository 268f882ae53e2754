"""The Celery worker's database connections: kept from one task to the next, as Django
keeps a web server's from one request to the next (CONN_MAX_AGE, health checks).

Celery's Django fixup closes every connection before and after each task (since Celery
5.6 whatever CONN_MAX_AGE says: celery/celery#9824), so every phase event opened a new
PostgreSQL connection on the switch path: a backend forked, authenticated, its catalog
caches cold for the event's first statements (13 ms of the ~35 ms a phase event took in
bench/control_plane.py, py-spy; more under load). With CELERY_DB_REUSE_MAX the fixup
closes a thread's connections only every that many tasks; `install` makes each task start
as a request does (`close_old_connections`): a connection past its age, one left in a
transaction or one whose last use raised and that fails its check is closed and the task
connects anew.
"""

from __future__ import annotations

import threading
from typing import Any

from celery.signals import task_prerun

_installed = threading.Event()


def install() -> None:
    """Connect the per-task connection check (once per process)."""
    if _installed.is_set():
        return
    _installed.set()
    task_prerun.connect(_recycle, weak=False)


def _recycle(sender: Any = None, **_: Any) -> None:
    """Close what Django closes at a request's start; never inside a task run eagerly (its
    caller's transaction, a test's atomic block, owns the connection)."""
    request = getattr(sender, "request", None)
    if getattr(request, "is_eager", False):
        return
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()
