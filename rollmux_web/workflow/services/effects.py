"""Side effects of a committed decision: dispatch, release, kill, ask for planning, check
for drift.

A service collects them in an `Effects` while it decides, and `schedule()` runs them on
commit through the ports (the dispatcher and the triggers the composition root set). A
rolled-back transaction runs none; a failed effect never undoes a committed decision
(`reconcile` repairs what it left undone). The dispatch comes first: what only books
(a planning pass, a drift check) is asked for after the next phases are on their way.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction

from rollmux_web import ports
from rollmux_web.ports import PhaseOrder

log = logging.getLogger(__name__)


@dataclass
class Effects:
    """Side effects to run after the transaction commits."""

    orders: list[PhaseOrder] = field(default_factory=list)
    releases: list[tuple[int, int]] = field(default_factory=list)  # (job, placement)
    kills: list[tuple[int, int]] = field(default_factory=list)
    replan: bool = False
    group_released: bool = False  # a departure emptied the group
    drift_checks: list[tuple[int, int]] = field(default_factory=list)  # (placement, iteration)
    _scheduled: bool = field(default=False, repr=False)

    def schedule(self) -> None:
        """Run these effects when the transaction commits, as they are then (once: a later
        call does nothing). The phase-end controller calls it first thing, so the dispatch
        runs before the domain events its transaction publishes later (events.publish)."""
        if not self._scheduled:
            self._scheduled = True
            transaction.on_commit(functools.partial(run_effects, self))

    def empty(self) -> bool:
        return not (self.orders or self.releases or self.kills or self.replan or self.drift_checks)


def run_effects(effects: Effects) -> None:
    if effects.empty():
        return
    dispatcher = ports.dispatcher()
    for job_id, placement_id in effects.kills:
        _safely(functools.partial(dispatcher.kill, job_id, placement_id), "kill host")
    for job_id, placement_id in effects.releases:
        _safely(functools.partial(dispatcher.release, job_id, placement_id), "release host")
    for order in effects.orders:
        _safely(functools.partial(dispatcher.dispatch, order), f"dispatch phase {order.phase_id}")
    if effects.replan:
        ports.request_planning()
    for placement_id, iterations_done in effects.drift_checks:
        _safely(
            functools.partial(ports.request_drift_check, placement_id, iterations_done),
            f"drift check of placement {placement_id}",
        )


def _safely(fn: Callable[[], None], what: str) -> None:
    # A failed side effect must not undo a committed decision: reconcile repairs it.
    try:
        fn()
    except Exception:
        log.exception("%s failed; reconcile will recover", what)
