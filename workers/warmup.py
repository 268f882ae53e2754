"""Connect the dispatcher when a `celery worker` process starts, not on its first phase.

The composition root calls `install(app)` when Django starts, which a `celery worker` does
before it sends its first signal (`celeryd_init`); nothing here imports Django at import
time, and the handlers read the Celery app they are given (no import of it).
"""

from __future__ import annotations

import gc
import logging
import threading
from typing import Any

from celery import Celery
from celery.signals import celeryd_init, worker_process_init, worker_ready

log = logging.getLogger(__name__)

_cli_worker = threading.Event()


_installed = threading.Event()


def install(app: Celery) -> None:
    """Connect the warm-up handlers for the workers of `app` (once per process)."""
    if _installed.is_set():
        return
    _installed.set()

    def runs_the_controller() -> bool:
        """Return whether this worker consumes the controller's queue (the what-if worker,
        on its own queue, never dispatches a phase and needs no Ray)."""
        from django.conf import settings

        consume_from = app.amqp.queues.consume_from  # set by -Q before the pool forks
        return not consume_from or settings.CELERY_TASK_DEFAULT_QUEUE in consume_from

    def mark_cli_worker(**_: Any) -> None:
        """`celery worker` (the command) is starting: this process (and its prefork
        children) may connect the dispatcher early. In-process workers (tests'
        start_worker) never do."""
        _cli_worker.set()

    def warm_pool_process(**_: Any) -> None:
        """A prefork child connects to Ray as it starts (each child is its own Ray driver);
        on a thread, as this signal's handlers must return within seconds."""
        if _cli_worker.is_set() and runs_the_controller():
            threading.Thread(target=_warm, name="rollmux-warm-up", daemon=True).start()

    def warm_worker(sender: Any = None, **_: Any) -> None:
        """A threads/solo worker runs tasks in this process: connect it now, so the first
        phase it dispatches does not wait for `ray.init`. (A prefork parent runs no task.)"""
        pool = getattr(sender, "pool", None)
        if (
            _cli_worker.is_set()
            and "prefork" not in type(pool).__module__
            and runs_the_controller()
        ):
            _warm()

    # weak=False: the handlers are closures, kept alive by the signals themselves
    celeryd_init.connect(mark_cli_worker, weak=False)
    worker_process_init.connect(warm_pool_process, weak=False)
    worker_ready.connect(warm_worker, weak=False)


def _warm() -> None:
    try:
        from rollmux_web import ports

        warm = getattr(ports.dispatcher(), "warm", None)
        if warm is not None:
            warm()
        log.info("dispatcher connected at worker start")
    except Exception:  # the first dispatch connects again and reports what fails
        log.exception("could not connect the dispatcher at worker start")
    freeze_heap()


def freeze_heap() -> None:
    """Move every object alive now (Django, Celery, Ray and their modules: ~180k objects)
    out of the garbage collector's reach, so a full collection scans only what the
    controller allocated since. Without it a full collection, which Python starts by itself
    every few hundred phase events, scans them all: 40-80 ms on a quiet core, 460-680 ms
    measured on this loaded 2-core box, on the phase-switch path (the control-plane
    bench's p99 and its one-off 1.4 s switch). Start-up objects live as long as the
    process anyway."""
    gc.collect()
    gc.freeze()
