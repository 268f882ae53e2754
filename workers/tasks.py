"""Celery tasks of the live workflow. Each takes ids (or a phase report), is acked late and
is safe to run twice: the services it calls claim rows with conditional UPDATEs.

Only `workers.triggers` enqueues these (by calling them); they call the services, and the
services reach the triggers again only through their ports (no import back).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import shared_task
from django.conf import settings

from rollmux_web.workflow import services
from workers import plan_marker
from workers.dispatch import PhaseReport

log = logging.getLogger(__name__)

_replan = threading.Event()
DRIFT_CHECK_RETRIES = 10  # x 0.5 s while planning passes hold the planner's lock


@shared_task(name="workers.tasks.plan", bind=True, acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def plan_task(self: Any) -> dict[str, Any]:
    """Run a planning pass; if another pass holds the lock, make sure one runs after it.

    The pending marker is cleared once this pass holds the planner's lock, not before: a
    task that finds the lock busy is still the pending pass (it retries), so requests
    meanwhile ride on it instead of each queueing a task of its own (under a submission
    storm that made hundreds of planning tasks, each retrying, ahead of everything else).
    """
    summary = services.queue_plan(on_start=plan_marker.clear)
    if not summary.ran:
        if settings.CELERY_TASK_ALWAYS_EAGER:
            _replan.set()  # the pass running in this process loops once more
            return {"ran": False}
        plan_marker.hold()  # still pending, for as long as this task retries
        raise self.retry(countdown=1.0, max_retries=30)
    while _replan.is_set():
        _replan.clear()
        services.queue_plan()
    return {
        "ran": True,
        "placed": summary.placed,
        "waiting": list(summary.waiting),
        "infeasible": list(summary.infeasible),
    }


@shared_task(name="workers.tasks.phase_started", acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def phase_started_task(payload: dict[str, Any]) -> bool:
    """Record a phase's start as its host reported it."""
    return services.phase_start(
        phase_id=int(payload["phase_id"]), started_at=payload.get("started_at")
    )


@shared_task(name="workers.tasks.phase_finished", acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def phase_finished_task(payload: dict[str, Any]) -> bool:
    """Apply a phase's end (the runtime hook): the group controller starts what is next."""
    return services.phase_finish(PhaseReport.from_dict(payload))


@shared_task(name="workers.tasks.phase_tail", acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def phase_tail_task(payload: dict[str, Any]) -> bool:
    """Apply a tail-bound rollout's hand-over of nodes (long-tail migration)."""
    return services.phase_tail(
        phase_id=int(payload["phase_id"]),
        group_id=int(payload["group_id"]),
        nodes=[str(n) for n in payload["nodes"]],
    )


@shared_task(name="workers.tasks.drift_check", bind=True, acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def drift_check_task(self: Any, placement_id: int, iterations_done: int) -> str:
    """Check a placement for drift at an iteration boundary (the drift re-plan); mark it to
    move at its next boundary if the planner wants it elsewhere. A planning pass holding
    the planner's lock: again in a moment (eager: the boundary checks instead)."""
    eager = bool(self.request.is_eager)
    last = self.request.retries >= DRIFT_CHECK_RETRIES
    outcome = services.drift_check(
        placement_id=int(placement_id),
        iterations_done=int(iterations_done),
        may_wait=not (eager or last),
    )
    if outcome == services.DRIFT_BUSY:
        raise self.retry(countdown=0.5, max_retries=DRIFT_CHECK_RETRIES)
    return outcome


@shared_task(name="workers.tasks.cancel_job", acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def cancel_job_task(job_id: int) -> bool:
    """Stop a job at its next phase boundary."""
    return services.job_stop(job_id=int(job_id))


@shared_task(name="workers.tasks.node_changed", acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def node_changed_task(node_id: int) -> list[int]:
    """Resubmit the jobs pinned to a node that went down; replan in any case."""
    return services.node_down_resubmit(node_id=int(node_id))


@shared_task(name="workers.tasks.node_ray_changed", acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def node_ray_changed_task(name: str, alive: bool, reason: str = "") -> bool:
    """Mark a node down (its Ray node died or is missing) or up (it rejoined); the node
    change then resubmits the jobs pinned to it (`node_changed_task`)."""
    from rollmux_web.inventory import services as inventory

    return inventory.node_ray_changed(name=str(name), alive=bool(alive), reason=str(reason))


@shared_task(name="workers.tasks.reconcile", acks_late=True)  # type: ignore[untyped-decorator]
def reconcile_task() -> dict[str, list[int]]:
    """Recover phases whose host died, whose report was lost or that overran; replan."""
    summary = services.phases_reconcile()
    services.queue_plan()
    return {
        "recovered": summary.recovered,
        "lost": summary.lost,
        "redispatched": summary.redispatched,
        "overran": summary.overran,
        "advanced": summary.advanced,
    }


@shared_task(name="workers.tasks.watch", acks_late=True, ignore_result=True, expires=5)  # type: ignore[untyped-decorator]
def watch_task() -> dict[str, list[int]]:
    """Recover the phases whose end report is overdue (beat, every second)."""
    summary = services.phases_watch()
    return {"recovered": summary.recovered, "lost": summary.lost}


@shared_task(name="workers.tasks.ping")  # type: ignore[untyped-decorator]
def ping_task() -> str:
    """Answer "pong" (liveness checks and the control-plane benchmark's broker baseline)."""
    return "pong"
