"""Connect the dispatcher when a `celery worker` process starts, not on its first phase.

Imported by the Celery app (rollmux_web/celery.py) so the handlers are connected before the
worker sends its first signal; nothing here imports Django at import time.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.signals import celeryd_init, worker_process_init, worker_ready

log = logging.getLogger(__name__)

_cli_worker = threading.Event()


@celeryd_init.connect  # type: ignore[untyped-decorator]
def _mark_cli_worker(**_: Any) -> None:
    """`celery worker` (the command) is starting: this process (and its prefork children) may
    connect the dispatcher early. In-process workers (tests' start_worker) never do."""
    _cli_worker.set()


def _runs_the_controller() -> bool:
    """Return whether this worker consumes the controller's queue (the what-if worker, on
    its own queue, never dispatches a phase and needs no Ray)."""
    from django.conf import settings

    from rollmux_web.celery import app

    consume_from = app.amqp.queues.consume_from  # set by -Q before the pool forks
    return not consume_from or settings.CELERY_TASK_DEFAULT_QUEUE in consume_from


def _warm() -> None:
    try:
        from workers.dispatch import warm_up

        warm_up()
        log.info("dispatcher connected at worker start")
    except Exception:  # the first dispatch connects again and reports what fails
        log.exception("could not connect the dispatcher at worker start")


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _warm_pool_process(**_: Any) -> None:
    """A prefork child connects to Ray as it starts (each child is its own Ray driver); on a
    thread, as this signal's handlers must return within seconds."""
    if _cli_worker.is_set() and _runs_the_controller():
        threading.Thread(target=_warm, name="rollmux-warm-up", daemon=True).start()


@worker_ready.connect  # type: ignore[untyped-decorator]
def _warm_worker(sender: Any = None, **_: Any) -> None:
    """A threads/solo worker runs tasks in this process: connect it now, so the first phase
    it dispatches does not wait for `ray.init`. (A prefork parent runs no task.)"""
    pool = getattr(sender, "pool", None)
    if _cli_worker.is_set() and "prefork" not in type(pool).__module__ and _runs_the_controller():
        _warm()
