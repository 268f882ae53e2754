"""Ray dispatch, the controller side: `RayDispatcher` starts each placement's coordinator
(`workers.dispatch.ray_coordinator`: the coordinator actor, its per-GPU workers pinned to
their Ray nodes, the Ray node directory; its docstring says where work runs), hands it
phases, probes it and watches Ray's node table, and owns this process's Ray connection
(`ensure_ray`, `shutdown_ray`).

With `ray_coordinator`, the only modules of the project that import `ray`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import ray
from ray.exceptions import GetTimeoutError
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
)

from rollmux_contract.phases import Outcome, PhaseOrder, PhaseReport, Probe, ReportSink, host_name
from workers import ray_env
from workers.dispatch.ray_coordinator import (
    NAMESPACE,
    NODE_LABEL,
    PROBE_TIMEOUT_S,
    JobCoordinator,
    JobCoordinatorActor,
    Lacking,
    NodeDirectory,
)

# (re-exported: the composition root, the benches and the tests name them from here)
__all__ = [
    "NAMESPACE",
    "NODE_LABEL",
    "JobCoordinator",
    "JobCoordinatorActor",
    "RayDispatcher",
    "ensure_ray",
    "ray_address",
    "shutdown_ray",
]

log = logging.getLogger(__name__)


_init_lock = threading.Lock()
NodeChange = Callable[[str, bool, str], None]


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
        "logging_level": logging.WARNING,  # not "Connecting to existing Ray cluster..." per start
    }
    if address == "local":
        kwargs.update(
            address="local",
            resources=resources(),
            include_dashboard=False,
            num_cpus=int(os.environ.get("ROLLMUX_RAY_CPUS", "2")),
            # its own temp directory, not /tmp/ray (ROLLMUX_RAY_TEMP_DIR: workers/ray_env.py)
            _temp_dir=ray_env.temp_dir(),
            # the controller's node: its coordinators at the controller's priority
            _system_config=ray_env.CONTROLLER_NODE_CONFIG,
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
        on_node_change: NodeChange | None = None,
    ) -> None:
        self.address = address
        # (inventory node, alive, reason): a labelled Ray node died, is missing or rejoined
        self.on_node_change = on_node_change
        self._watching = False
        self.resources = resources  # what a local Ray advertises (address="local")
        self.on_report = on_report
        # broker settings handed to actors so they publish their own phase events
        self.report = report if report and report.get("broker_url") else None
        self.background = background
        self._handles: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._jobs: queue.Queue[Callable[[], None]] | None = None
        self._missing_checked: set[str] = set()
        self._stopped = threading.Event()
        self._watch_thread: threading.Thread | None = None

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

    def coordinator(self, order: PhaseOrder) -> Any:
        """Return the handle of the order's placement's coordinator, creating it once."""
        name = order.host_name
        with self._lock:
            handle = self._handles.get(name)
        if handle is not None:
            return handle
        handle = JobCoordinatorActor.options(
            name=name,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            max_concurrency=4,  # `status` answers while a phase runs
            # on the controller's own Ray node (not a GPU node: it survives the loss of any
            # of the job's nodes and reports it as that node's death). Hard affinity: with
            # a soft one Ray put most coordinators created at once on GPU nodes, and a
            # killed GPU node then took a coordinator along (`lost: actor died`).
            scheduling_strategy=NodeAffinitySchedulingStrategy(
                ray.get_runtime_context().get_node_id(), soft=False
            ),
        ).remote(order.runner, order.context, order.checkpoint_dir)
        with self._lock:
            self._handles[name] = handle
        return handle

    def _lacking(self, order: PhaseOrder) -> Lacking | None:
        """Return why no Ray node can serve one of the order's nodes (its label, or its
        GPUs), or None; a node once found serving is not read again until it dies."""
        wanted = tuple(n for n in order.pinned_nodes if n not in self._missing_checked)
        if not wanted:
            return None
        lacking = NodeDirectory.read().lacking(wanted, order.node_gpus)
        if lacking is None:
            self._missing_checked.update(wanted)
        return lacking

    def watch_nodes(self, on_change: NodeChange, *, interval_s: float = 0.5) -> threading.Thread:
        """Call on_change(node name, alive, reason) when a labelled Ray node dies (once) and
        for each labelled node alive (when first seen, and when it rejoins).

        Ray's GCS marks a node dead when its raylet stops answering health checks
        (`health_check_period_ms` x `health_check_failure_threshold`); this reads the node
        table every `interval_s`, so a lost node is noticed within seconds, not by a
        phase deadline.
        """
        ensure_ray(self.address, self.resources)

        def loop() -> None:
            seen: dict[str, str] = {}  # Ray node id -> inventory node, while alive
            while not self._stopped.is_set():
                if not ray.is_initialized():  # this process disconnected (shutdown)
                    return
                try:
                    nodes = ray.nodes()  # type: ignore[no-untyped-call]
                except Exception:
                    log.exception("reading Ray's node table failed")
                    self._stopped.wait(interval_s)
                    continue
                for n in nodes:
                    name = (n.get("Labels") or {}).get(NODE_LABEL)
                    if not name:
                        continue
                    if n.get("Alive"):
                        if n["NodeID"] not in seen:
                            seen[n["NodeID"]] = name
                            self._tell(on_change, name, True, "")
                    elif seen.pop(n["NodeID"], None) is not None:
                        with self._lock:
                            self._missing_checked.discard(name)
                        why = n.get("DeathReasonMessage") or "its raylet stopped answering"
                        self._tell(
                            on_change, name, False, f"Ray node {n['NodeID'][:12]} died: {why}"
                        )
                self._stopped.wait(interval_s)

        thread = threading.Thread(target=loop, name="rollmux-node-watch", daemon=True)
        thread.start()
        return thread

    @staticmethod
    def _tell(on_change: NodeChange, name: str, alive: bool, reason: str) -> None:
        try:
            on_change(name, alive, reason[:280])
        except Exception:
            log.exception("handling the change of node %s failed", name)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the node watch and wait for it: no node change is told after this returns."""
        self._stopped.set()
        thread = self._watch_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    # --- Dispatcher ---------------------------------------------------------------------
    def warm(self) -> None:
        """Connect to Ray now rather than on the first dispatch; start the node watcher."""
        ensure_ray(self.address, self.resources)
        self._watch()

    def _watch(self) -> None:
        with self._lock:
            if self._watching or self.on_node_change is None:
                return
            self._watching = True
        self._watch_thread = self.watch_nodes(self.on_node_change)

    def dispatch(self, order: PhaseOrder) -> None:
        self._submit(lambda: self._dispatch(order))

    def _dispatch(self, order: PhaseOrder) -> None:
        try:
            ensure_ray(self.address, self.resources)
            self._watch()
            lacking = self._lacking(order)
            if lacking:
                # Ray would keep its workers pending forever: fail the phase at once (the
                # platform's failure: `lost`), and take the node out of the inventory's
                # service until a Ray node with its label (and GPUs) joins.
                for node in lacking.nodes:
                    if self.on_node_change is not None:
                        self.on_node_change(node, False, lacking.why)
                report = PhaseReport.failed(
                    order.phase_id,
                    Outcome.LOST,
                    f"node {lacking}",
                    lost_node=lacking.nodes[0],
                    group_id=order.group_id,
                    job_id=order.job_id,
                )
                self.on_report(report)
                return
            handle = self.coordinator(order)
            sent = dataclasses.replace(order, sent_at=time.time())
            ref = handle.run_phase.remote(sent.to_dict(), self.report)
        except Exception as exc:
            self.on_report(
                PhaseReport.failed(order.phase_id, Outcome.LOST, f"dispatch failed: {exc}")
            )
            return
        ref.future().add_done_callback(lambda fut: self._done(order, fut))

    def _done(self, order: PhaseOrder, fut: Future[Any]) -> None:
        """Deliver the report when the actor could not (no broker) or died."""
        try:
            result = fut.result()
        except Exception as exc:
            with self._lock:
                self._handles.pop(order.host_name, None)
            report = PhaseReport.failed(
                order.phase_id, Outcome.LOST, f"actor died: {type(exc).__name__}"
            )
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
