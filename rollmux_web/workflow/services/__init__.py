"""Writes of the live workflow: planning, the group controller, departures, reconcile.

Every service is one transaction (or one per group) that decides with the core
(scheduler/) and then persists the decision; side effects outside the database
(dispatching phases to Ray, killing hosts, asking for another planning pass) run on
commit, through the ports (`rollmux_web.ports`: the dispatcher and the triggers
the composition root configured). Celery tasks in `workers.tasks` are thin wrappers that
call these with ids.

The decision cycle, in the paper's words:

| step | module | service |
| --- | --- | --- |
| a job arrives, departs, a node changes: plan | `planning` | `queue_plan` (numbered steps: profiling runs, consolidation, Algorithm 1 per queued job; written by `plan_writer`) |
| a phase ends (the runtime hook): next phases | `controller` | `phase_finish` (one decision, `GroupRuntime.on_phase_end`, applied in one place) |
| a cancel, a node down: the job leaves | `departures` | `job_stop`, `node_down_resubmit` |
| every few iterations, after the dispatch: is the job drifting, should it move? | `moves` | `drift_check` (the move itself: `at_iteration_boundary`, in `phase_finish`) |
| a report lost, a host dead, an overrun | `reconcile` | `phases_watch` (overdue phases, every second), `phases_reconcile` (everything, every 15 s) |

Helpers: `plan_writer` (a planning batch's or a move's placements, written), `consolidation`
(a pass's step 2), `locks` (the row and advisory locks, the phase claim), `groups` (a group's
runtime snapshot and the phase records it starts), `orders` (PhaseOrders), `effects`
(what runs on commit). The locking design is in workers/README.md.
"""

from __future__ import annotations

from rollmux_web.workflow.services.controller import phase_finish, phase_start, phase_tail
from rollmux_web.workflow.services.departures import job_stop, node_down_resubmit
from rollmux_web.workflow.services.moves import DRIFT_BUSY, drift_check
from rollmux_web.workflow.services.orders import (
    job_time_scale,
    order_for,
    phase_order,
    placement_pools,
    runner_context,
)
from rollmux_web.workflow.services.planning import PlanSummary, queue_plan
from rollmux_web.workflow.services.reconcile import (
    ReconcileSummary,
    phase_deadline,
    phases_reconcile,
    phases_watch,
)

__all__ = [
    "DRIFT_BUSY",
    "PlanSummary",
    "ReconcileSummary",
    "drift_check",
    "job_stop",
    "job_time_scale",
    "node_down_resubmit",
    "order_for",
    "phase_deadline",
    "phase_finish",
    "phase_order",
    "phase_start",
    "phase_tail",
    "phases_reconcile",
    "phases_watch",
    "placement_pools",
    "queue_plan",
    "runner_context",
]
