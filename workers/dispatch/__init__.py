"""Phase dispatch: run a granted phase on the job's resident host and report its end.

The controller hands a `PhaseOrder` to a `Dispatcher`. The dispatcher runs it on the job's
`JobHost` (a Ray actor per placement in production, a thread in-process for tests and the
embedded fallback) and a `PhaseReport` comes back to `workers.tasks.phase_finished`:

- with a real broker (Redis), the host itself publishes `phase_started` / `phase_finished`
  Celery tasks the moment the phase starts and ends (the paper's runtime hook), so a
  report does not depend on the process that dispatched the phase staying alive;
- without one (embedded mode), the dispatcher's completion callback delivers it.

Either way a dead host is noticed by the dispatcher's completion callback (the Ray call
fails) or by `reconcile`, which `probe`s hosts.

The contract itself (`PhaseOrder`, `PhaseReport`, `Probe`, `ReportSink`, `Dispatcher`) is
`rollmux_contract.phases`, standard library only, which the web app imports too; which dispatcher a process uses is decided
once, by the composition root (`workers.composition`). This package imports no Django and
no `rollmux_web` (import-linter contract).
"""

from __future__ import annotations

from rollmux_contract.phases import (
    Dispatcher,
    Outcome,
    PhaseOrder,
    PhaseReport,
    Probe,
    ReportSink,
    host_name,
)

__all__ = ["Dispatcher", "Outcome", "PhaseOrder", "PhaseReport", "Probe", "ReportSink", "host_name"]
