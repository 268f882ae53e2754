"""The ports of the web app: the dispatcher and the workflow triggers, filled at start-up.

The web services need two things from the layer above them: a `Dispatcher` to run the
phases they decide (on commit), and the triggers that wake the workflow after a commit
(`request_planning`, `request_cancel`, `node_state_changed`). They get both from here;
the composition root (`workers.composition.install`, run by the `workers` Django app when
Django starts) fills this registry once, and tests fill it with fakes (`override`). So
`rollmux_web` never imports `workers`: the types that cross the port (`PhaseOrder`,
`PhaseReport`, `Probe`, `Dispatcher`) are the neutral contract both sides import
(`rollmux_contract.phases`, standard library only), re-exported here.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol

from rollmux_contract.phases import (
    TRAINING_METRICS,
    Dispatcher,
    Outcome,
    PhaseOrder,
    PhaseReport,
    Probe,
)

__all__ = [
    "TRAINING_METRICS",
    "Dispatcher",
    "Outcome",
    "PhaseOrder",
    "PhaseReport",
    "Ports",
    "Probe",
    "Triggers",
    "configure",
    "dispatcher",
    "node_state_changed",
    "override",
    "request_cancel",
    "request_drift_check",
    "request_planning",
]


class Triggers(Protocol):
    """The hooks the web app calls after a commit (`workers.triggers` implements them)."""

    def request_planning(self) -> None: ...

    def request_cancel(self, job_id: int) -> None: ...

    def node_state_changed(self, node_id: int) -> None: ...

    def request_drift_check(self, placement_id: int, iterations_done: int) -> None: ...


@dataclass(frozen=True)
class Ports:
    """What this process is configured with. The dispatcher is built on first use (building
    the Ray one reads settings and may connect), then kept for the life of the process."""

    build_dispatcher: Callable[[], Dispatcher] | None = None
    dispatcher: Dispatcher | None = None
    triggers: Triggers | None = None


_lock = threading.Lock()
_ports = Ports()


def configure(
    *,
    dispatcher: Dispatcher | None = None,
    build_dispatcher: Callable[[], Dispatcher] | None = None,
    triggers: Triggers | None = None,
) -> Ports:
    """Set this process's ports (the arguments given; a new factory drops a built dispatcher)
    and return the previous configuration (for `restore`)."""
    global _ports
    with _lock:
        previous = _ports
        changes: dict[str, object] = {}
        if build_dispatcher is not None:
            changes.update(build_dispatcher=build_dispatcher, dispatcher=None)
        if dispatcher is not None:
            changes["dispatcher"] = dispatcher
        if triggers is not None:
            changes["triggers"] = triggers
        _ports = replace(_ports, **changes)  # type: ignore[arg-type]
        return previous


def restore(previous: Ports) -> None:
    """Put back a configuration `configure` returned."""
    global _ports
    with _lock:
        _ports = previous


@contextlib.contextmanager
def override(
    *, dispatcher: Dispatcher | None = None, triggers: Triggers | None = None
) -> Iterator[None]:
    """Use these ports inside the block (tests), the previous ones after it."""
    previous = configure(dispatcher=dispatcher, triggers=triggers)
    try:
        yield
    finally:
        restore(previous)


def dispatcher() -> Dispatcher:
    """Return this process's dispatcher (built once by the configured factory)."""
    global _ports
    with _lock:
        built = _ports.dispatcher
        if built is None:
            if _ports.build_dispatcher is None:
                raise RuntimeError(
                    "no dispatcher configured: workers.composition.install() fills the ports"
                    " when Django starts ('workers' in INSTALLED_APPS)"
                )
            built = _ports.build_dispatcher()
            _ports = replace(_ports, dispatcher=built)
        return built


def _triggers() -> Triggers:
    triggers = _ports.triggers
    if triggers is None:
        raise RuntimeError(
            "no workflow triggers configured: workers.composition.install() fills the ports"
        )
    return triggers


def request_planning() -> None:
    """Ask for a planning pass (after a submission, departure, failure or node change)."""
    _triggers().request_planning()


def request_cancel(job_id: int) -> None:
    """Ask the job's group controller to stop it at the next phase boundary."""
    _triggers().request_cancel(job_id)


def node_state_changed(node_id: int) -> None:
    """React to a node going down, drained or up."""
    _triggers().node_state_changed(node_id)


def request_drift_check(placement_id: int, iterations_done: int) -> None:
    """Ask for the drift re-plan's check of a placement at an iteration boundary."""
    _triggers().request_drift_check(placement_id, iterations_done)
