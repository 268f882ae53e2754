"""Ray dispatch: one detached actor per job placement, pinned to the job's nodes.

Every Node row maps to a Ray custom resource `node:<name>` (Node.ray_resource). The actor
of a placement asks for a sliver (0.001) of each of its nodes' resources, so Ray places it
exactly where those nodes are advertised; the controller (the core's per-node FIFO queues)
keeps a node to one phase at a time. On one machine, `ray.init(address="local")` advertises
every node's resource (the `resources` callable it is given: the composition root reads
the Node rows); in production each Ray node
advertises its own (`ray start --resources='{"node:h20-0": 1}'`).

Actors are detached and named `job-<id>-p<placement>` in namespace "rollmux": they outlive
the Celery worker that created them (a killed worker loses no resident state) and any worker
finds them by name. Each holds its job's state in host memory between phases (residency);
a phase is a method call. The actor publishes `phase_started`/`phase_finished` to the broker
itself; this process's completion callback covers the cases it cannot: no broker (embedded
mode) or a dead actor.

Limitation: one actor per placement needs every pinned node's resource on one Ray node; a
job whose rollout and training nodes are separate Ray nodes needs one actor per pool (not
built here).

This is the only module of the project that imports `ray`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import ray
from ray.exceptions import GetTimeoutError

from workers.dispatch.base import PhaseOrder, PhaseReport, Probe, ReportSink, host_name
from workers.dispatch.host import JobHost

log = logging.getLogger(__name__)

NAMESPACE = "rollmux"
ACTOR_SLIVER = 0.001
PROBE_TIMEOUT_S = 10.0

JobHostActor = ray.remote(num_cpus=0, max_restarts=0)(JobHost)


_init_lock = threading.Lock()


Resources = Callable[[], dict[str, float]]


def _no_resources() -> dict[str, float]:
    return {}


def ensure_ray(address: str, resources: Resources = _no_resources) -> None:
    """Connect to Ray once per process; start a local one advertising `resources()` (the
    composition root passes one per Node row) if asked."""
    if ray.is_initialized():
        return
    with _init_lock:
        if ray.is_initialized():
            return
        # A Celery worker replaces stdout/stderr by logging proxies without fileno(), which
        # ray.init's faulthandler needs: give it the real streams while it connects.
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        try:
            _init(address, resources)
        finally:
            sys.stdout, sys.stderr = saved


def _init(address: str, resources: Callable[[], dict[str, float]]) -> None:
    kwargs: dict[str, Any] = {
        "namespace": NAMESPACE,
        "log_to_driver": False,
        "ignore_reinit_error": True,
    }
    if address == "local":
        kwargs.update(
            address="local",
            resources=resources(),
            include_dashboard=False,
            num_cpus=int(os.environ.get("ROLLMUX_RAY_CPUS", "2")),
        )
    else:
        kwargs["address"] = address
    ray.init(**kwargs)


def shutdown_ray() -> None:
    if ray.is_initialized():
        ray.shutdown()


def ray_address() -> str:
    """Return the GCS address of the connected Ray (for worker processes to join)."""
    return str(ray.get_runtime_context().gcs_address)


class RayDispatcher:
    def __init__(
        self,
        *,
        address: str,
        on_report: ReportSink,
        report: dict[str, Any] | None = None,
        background: bool = False,
        resources: Resources = _no_resources,
    ) -> None:
        self.address = address
        self.resources = resources  # what a local Ray advertises (address="local")
        self.on_report = on_report
        # broker settings handed to actors so they publish their own phase events
        self.report = report if report and report.get("broker_url") else None
        self.background = background
        self._handles: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._jobs: queue.Queue[Callable[[], None]] | None = None
        self._missing_checked: set[str] = set()

    # --- plumbing -------------------------------------------------------------------
    def _submit(self, fn: Callable[[], None]) -> None:
        """Run fn now, or on a background thread (embedded mode: never block a web request
        on `ray.init` or actor creation)."""
        if not self.background:
            fn()
            return
        with self._lock:
            if self._jobs is None:
                self._jobs = queue.Queue()
                threading.Thread(target=self._loop, name="rollmux-dispatch", daemon=True).start()
        self._jobs.put(fn)

    def _loop(self) -> None:
        assert self._jobs is not None
        while True:
            fn = self._jobs.get()
            try:
                fn()
            except Exception:
                log.exception("background dispatch failed")

    def _actor(self, order: PhaseOrder) -> Any:
        name = order.host_name
        with self._lock:
            handle = self._handles.get(name)
        if handle is not None:
            return handle
        handle = JobHostActor.options(
            name=name,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            max_concurrency=4,  # `status` answers while a phase runs
            resources={f"node:{n}": ACTOR_SLIVER for n in order.pinned_nodes},
        ).remote(order.runner, order.context, order.checkpoint_dir)
        with self._lock:
            self._handles[name] = handle
        return handle

    def _missing_resources(self, order: PhaseOrder) -> list[str]:
        wanted = [f"node:{n}" for n in order.pinned_nodes if n not in self._missing_checked]
        if not wanted:
            return []
        advertised = ray.cluster_resources()  # type: ignore[no-untyped-call]
        missing = [r for r in wanted if r not in advertised]
        self._missing_checked.update(n for n in order.pinned_nodes if f"node:{n}" not in missing)
        return missing

    # --- Dispatcher ---------------------------------------------------------------------
    def warm(self) -> None:
        """Connect to Ray now rather than on the first dispatch."""
        ensure_ray(self.address, self.resources)

    def dispatch(self, order: PhaseOrder) -> None:
        self._submit(lambda: self._dispatch(order))

    def _dispatch(self, order: PhaseOrder) -> None:
        try:
            ensure_ray(self.address, self.resources)
            missing = self._missing_resources(order)
            if missing:
                # Ray would keep the actor pending forever: fail the phase with the reason.
                self.on_report(
                    PhaseReport(
                        order.phase_id,
                        f"error: Ray advertises no resource {', '.join(missing)}",
                    )
                )
                return
            ref = self._actor(order).run_phase.remote(order.to_dict(), self.report)
        except Exception as exc:
            self.on_report(PhaseReport(order.phase_id, f"lost: dispatch failed: {exc}"[:480]))
            return
        ref.future().add_done_callback(lambda fut: self._done(order, fut))

    def _done(self, order: PhaseOrder, fut: Future[Any]) -> None:
        """Deliver the report when the actor could not (no broker) or died."""
        try:
            result = fut.result()
        except Exception as exc:
            with self._lock:
                self._handles.pop(order.host_name, None)
            report = PhaseReport(order.phase_id, f"lost: actor died: {type(exc).__name__}"[:480])
            threading.Thread(target=self.on_report, args=(report,), daemon=True).start()
            return
        if self.report is None and result.get("outcome") != "duplicate":
            # Ray runs this callback on its own thread: hand off so Ray is never blocked
            # by the controller's database work.
            report = PhaseReport.from_dict(result)
            threading.Thread(target=self.on_report, args=(report,), daemon=True).start()

    def probe(self, order: PhaseOrder) -> Probe:
        ensure_ray(self.address, self.resources)
        try:
            handle = ray.get_actor(order.host_name, namespace=NAMESPACE)
        except ValueError:
            return Probe("dead")
        try:
            status: dict[str, Any] = ray.get(  # type: ignore[assignment]
                handle.status.remote(order.phase_id), timeout=PROBE_TIMEOUT_S
            )
        except GetTimeoutError:
            return Probe("running")  # alive but busy answering: assume the phase runs
        except Exception:
            return Probe("dead")
        report = PhaseReport.from_dict(status["report"]) if status["report"] else None
        return Probe(status["state"], report)

    def release(self, job_id: int, placement_id: int) -> None:
        self._submit(lambda: self._kill(job_id, placement_id))

    def kill(self, job_id: int, placement_id: int) -> None:
        self._kill(job_id, placement_id)

    def _kill(self, job_id: int, placement_id: int) -> None:
        name = host_name(job_id, placement_id)
        with self._lock:
            self._handles.pop(name, None)
        if not ray.is_initialized():
            ensure_ray(self.address, self.resources)
        with contextlib.suppress(ValueError):  # already gone
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)

    def actor_stats(self, job_id: int, placement_id: int) -> dict[str, Any]:
        handle = ray.get_actor(host_name(job_id, placement_id), namespace=NAMESPACE)
        stats: dict[str, Any] = ray.get(handle.stats.remote(), timeout=PROBE_TIMEOUT_S)  # type: ignore[assignment]
        return stats
