"""Side effects of a committed decision: dispatch, release, kill, ask for planning.

A service collects them in an `Effects` while it decides, and `schedule()` runs them on
commit through the ports (the dispatcher and the triggers the composition root set). A
rolled-back transaction runs none; a failed effect never undoes a committed decision
(`reconcile` repairs what it left undone).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction

from rollmux_web.workflow import ports
from rollmux_web.workflow.ports import PhaseOrder

log = logging.getLogger(__name__)


@dataclass
class Effects:
    """Side effects to run after the transaction commits."""

    orders: list[PhaseOrder] = field(default_factory=list)
    releases: list[tuple[int, int]] = field(default_factory=list)  # (job, placement)
    kills: list[tuple[int, int]] = field(default_factory=list)
    replan: bool = False
    group_released: bool = False  # a departure emptied the group

    def schedule(self) -> None:
        if not (self.orders or self.releases or self.kills or self.replan):
            return
        orders, releases, kills, replan = self.orders, self.releases, self.kills, self.replan
        transaction.on_commit(lambda: run_effects(orders, releases, kills, replan))


def run_effects(
    orders: list[PhaseOrder],
    releases: list[tuple[int, int]],
    kills: list[tuple[int, int]],
    replan: bool,
) -> None:
    dispatcher = ports.dispatcher()
    for job_id, placement_id in kills:
        _safely(functools.partial(dispatcher.kill, job_id, placement_id), "kill host")
    for job_id, placement_id in releases:
        _safely(functools.partial(dispatcher.release, job_id, placement_id), "release host")
    for order in orders:
        _safely(functools.partial(dispatcher.dispatch, order), f"dispatch phase {order.phase_id}")
    if replan:
        ports.request_planning()


def _safely(fn: Callable[[], None], what: str) -> None:
    # A failed side effect must not undo a committed decision: reconcile repairs it.
    try:
        fn()
    except Exception:
        log.exception("%s failed; reconcile will recover", what)
