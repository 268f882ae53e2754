"""Hooks that wake the workflow: the one façade over the Celery tasks.

The web app reaches these through its ports (`rollmux_web.ports`, filled with this
module by the composition root); the dispatchers' report sink and the embedded beat call
them too. Nothing else enqueues a task of `workers.tasks`.

Each function is safe to call from `transaction.on_commit` and enqueues a Celery task that
takes ids; in embedded mode (no REDIS_URL: eager Celery) the task runs in-process. A broker
that is down does not fail the caller's request: the beat safety net (plan every 30 s,
reconcile every 15 s) catches up once it is back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from workers import embedded, plan_marker
from workers.dispatch import PhaseReport

log = logging.getLogger(__name__)


def _send(fn: Callable[[], Any], what: str) -> None:
    if not embedded.runs_work_here():
        # expected in every management command and script of an embedded install: not news
        log.debug("embedded mode, not the server process: %s left to the server's beat", what)
        return
    embedded.ensure_started(run_reconcile, run_watch, run_notifications_sweep)
    try:
        fn()
    except Exception:
        log.exception("could not enqueue %s; the beat safety net will retry", what)


def request_planning() -> None:
    """Ask for a planning pass (after a submission, departure, failure or node change)."""
    from workers.tasks import plan_task

    def enqueue() -> None:
        wait = plan_marker.claim()  # None: a pass is queued and has not taken its snapshot yet
        if wait is None:
            return
        if wait > 0:  # the last pass started less than ROLLMUX_PLAN_MIN_INTERVAL_S ago
            plan_task.apply_async(countdown=wait)
        else:
            plan_task.delay()

    _send(enqueue, "planning")


def request_cancel(job_id: int) -> None:
    """Ask the job's group controller to stop the job at the next phase boundary."""
    from workers.tasks import cancel_job_task

    _send(lambda: cancel_job_task.delay(job_id), f"cancel of job {job_id}")


def request_drift_check(placement_id: int, iterations_done: int) -> None:
    """Ask whether a job drifts and should move (the drift re-plan's check, off the
    controller's switch path: after the boundary's next phases were dispatched)."""
    from workers.tasks import drift_check_task

    _send(
        lambda: drift_check_task.delay(placement_id, iterations_done),
        f"drift check of placement {placement_id}",
    )


def node_state_changed(node_id: int) -> None:
    """React to a node going down/drained/up (resubmit jobs pinned to a down node)."""
    from workers.tasks import node_changed_task

    _send(lambda: node_changed_task.delay(node_id), f"node change {node_id}")


def node_ray_changed(name: str, alive: bool, reason: str = "") -> None:
    """Follow a Ray node that died, is missing or rejoined (the Ray dispatcher's node
    watcher): its inventory node goes down with the reason, or back up."""
    from workers.tasks import node_ray_changed_task

    _send(lambda: node_ray_changed_task.delay(name, alive, reason), f"Ray node change {name}")


def report_phase_end(report: PhaseReport) -> None:
    """Hand a phase's end to the controller (the dispatchers' report sink). Raises when the
    broker refuses it: the dispatcher's caller logs it and `reconcile` re-reads the host."""
    from workers.tasks import phase_finished_task

    phase_finished_task.delay(report.to_dict())


def run_reconcile() -> None:
    """Run the safety net once (the embedded beat's tick)."""
    from workers.tasks import reconcile_task

    reconcile_task.delay()


def run_watch() -> None:
    """Recover overdue phase reports once (the embedded beat's one-second tick)."""
    from workers.tasks import watch_task

    watch_task.delay()


def run_notifications_sweep() -> None:
    """Queue the notification deliveries that are due (retries after a failed try, lost
    ones) once (the embedded beat's tick; beat's notifications-sweep with a broker):
    without it a failed webhook delivery under `make run` said "retrying" for good."""
    from rollmux_web.notifications.tasks import sweep

    sweep.delay()
