"""The composition root: the one place that wires the workflow's parts together.

`install()` runs once per process when Django starts (`workers.apps.WorkersConfig.ready`,
so web servers, Celery workers, management commands and the tests all get it):

1. fill the web app's ports (`rollmux_web.ports`) with the dispatcher factory
   (ROLLMUX_DISPATCHER: the Ray dispatcher, or the in-process one) and the triggers;
2. connect the Celery worker's handlers: warm-up (`workers.warmup`), the worker's metrics
   exporter (`workers.metrics_exporter`) and its database connections kept across tasks
   (`workers.connections`);
3. in the embedded default (no Redis), let the web server process run work and its
   in-process beat.

Dependencies point one way from here: this module imports the web app and the
dispatchers; nothing imports it but the app config (and tests that rebuild a dispatcher).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from django.conf import settings

from rollmux_web import ports
from workers import connections, embedded, triggers, warmup
from workers.dispatch import Dispatcher, PhaseReport

SERVER_COMMANDS = ("runserver", "gunicorn", "uvicorn", "daphne")

_installed = threading.Event()


def install() -> None:
    """Wire this process once (later calls do nothing)."""
    if _installed.is_set():
        return
    _installed.set()
    ports.configure(build_dispatcher=build_dispatcher, triggers=triggers)
    from rollmux_web.celery import app
    from workers import metrics_exporter  # noqa: F401  (its worker signal handlers connect)

    warmup.install(app)
    connections.install()
    # Embedded default (no Redis, no beat process): the web server runs the safety-net
    # beat itself, so jobs left queued or running by a previous run get picked up.
    if any(cmd in arg for arg in sys.argv[:2] for cmd in SERVER_COMMANDS):
        embedded.set_serving()
        embedded.ensure_started(
            triggers.run_reconcile, triggers.run_watch, triggers.run_notifications_sweep
        )


def report_config() -> dict[str, Any] | None:
    """Return the broker settings a job host needs to publish its own phase events, or None
    when there is no real broker (embedded mode: the dispatcher's callback delivers)."""
    broker = str(settings.CELERY_BROKER_URL)
    if settings.CELERY_TASK_ALWAYS_EAGER or not broker.startswith(("redis://", "rediss://")):
        return None
    return {"broker_url": broker, "queue": settings.ROLLMUX_PHASE_QUEUE}


def deliver_report(report: PhaseReport) -> None:
    """Hand a phase report to the controller (`workers.tasks.phase_finished`, in-process
    when eager); the dispatchers' report sink."""
    from django.db import connection

    try:
        triggers.report_phase_end(report)
    finally:
        if settings.CELERY_TASK_ALWAYS_EAGER:
            # the task ran on this (callback) thread: do not leak its connection
            connection.close()


def node_resources() -> dict[str, float]:
    """Return the Ray resources a local Ray must advertise: one per Node row."""
    from rollmux_web.inventory.models import Node

    return {node.ray_resource: 1.0 for node in Node.objects.all()}


def build_dispatcher() -> Dispatcher:
    """Build this process's dispatcher from settings (ROLLMUX_DISPATCHER)."""
    kind = settings.ROLLMUX_DISPATCHER
    if kind == "inline":
        from workers.dispatch.inline import InlineDispatcher

        return InlineDispatcher(on_report=deliver_report)
    if kind == "ray":
        from workers.dispatch.ray_dispatcher import RayDispatcher

        return RayDispatcher(
            address=settings.ROLLMUX_RAY_ADDRESS,
            on_report=deliver_report,
            report=report_config(),
            background=bool(settings.CELERY_TASK_ALWAYS_EAGER),
            resources=node_resources,
            # a labelled Ray node that dies, is missing or rejoins: its inventory node follows
            on_node_change=triggers.node_ray_changed,
        )
    raise ValueError(f"ROLLMUX_DISPATCHER={kind!r}: use 'ray' or 'inline'")
