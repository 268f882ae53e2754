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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class PhaseOrder:
    """One phase to run: which job, placement (the host's identity), kind, iteration, nodes."""

    phase_id: int
    job_id: int
    placement_id: int
    kind: str
    iteration: int
    nodes: tuple[str, ...]
    pinned_nodes: tuple[str, ...]  # every node of the job's placement (where its host lives)
    runner: str
    context: dict[str, Any]  # RunnerContext.to_dict()
    checkpoint_dir: str = ""
    resume_iteration: int = 0  # restore the checkpoint taken after this many iterations
    group_id: int | None = None  # echoed in the report (the controller locks the group first)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["nodes"] = list(self.nodes)
        data["pinned_nodes"] = list(self.pinned_nodes)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhaseOrder:
        data = dict(data)
        data["nodes"] = tuple(data["nodes"])
        data["pinned_nodes"] = tuple(data["pinned_nodes"])
        return cls(**data)

    @property
    def host_name(self) -> str:
        return host_name(self.job_id, self.placement_id)


def host_name(job_id: int, placement_id: int) -> str:
    """Name the resident host of one placement of a job (a Ray actor name)."""
    return f"job-{job_id}-p{placement_id}"


@dataclass
class PhaseReport:
    """The end of a phase as its host saw it (times are Unix seconds)."""

    phase_id: int
    outcome: str  # "ok", "error: ...", or "lost: ..." when the host died
    started_at: float | None = None
    finished_at: float | None = None
    warm: bool | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    group_id: int | None = None
    job_id: int | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhaseReport:
        return cls(**data)


@dataclass(frozen=True)
class Probe:
    """What a host says about a phase: "running", "done" (with its report), "unknown" (never
    received it) or "dead" (no host)."""

    state: str
    report: PhaseReport | None = None


ReportSink = Callable[[PhaseReport], None]


class Dispatcher(Protocol):
    """Run phases on resident job hosts. Every method returns quickly (no phase-long block)."""

    def dispatch(self, order: PhaseOrder) -> None:
        """Start the phase; its end arrives later as a PhaseReport."""

    def probe(self, order: PhaseOrder) -> Probe:
        """Ask the job's host about a phase (for reconcile)."""

    def release(self, job_id: int, placement_id: int) -> None:
        """Drop a placement's host and its resident state (the job left the group)."""

    def kill(self, job_id: int, placement_id: int) -> None:
        """Kill a placement's host abruptly (tests, and recovery from an overrun)."""


_lock = threading.Lock()
_dispatcher: Dispatcher | None = None


def get_dispatcher() -> Dispatcher:
    """Return this process's dispatcher, built once from settings (ROLLMUX_DISPATCHER)."""
    global _dispatcher
    with _lock:
        if _dispatcher is None:
            _dispatcher = _build()
        return _dispatcher


def set_dispatcher(dispatcher: Dispatcher | None) -> None:
    """Replace this process's dispatcher (tests; None rebuilds it from settings on next use)."""
    global _dispatcher
    with _lock:
        _dispatcher = dispatcher


def warm_up() -> None:
    """Build this process's dispatcher and let it connect (a Celery worker calls this when it
    starts, so the first phase it dispatches does not wait for `ray.init`)."""
    warm = getattr(get_dispatcher(), "warm", None)
    if warm is not None:
        warm()


def _build() -> Dispatcher:
    from django.conf import settings

    from workers.reporting import deliver_report, report_config

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
        )
    raise ValueError(f"ROLLMUX_DISPATCHER={kind!r}: use 'ray' or 'inline'")
