"""The resident host of one job placement: runs its phases and keeps its state between them.

`PhaseHost` is the bookkeeping every host shares: one phase at a time, the stored report
of every phase it ran (a re-dispatch after a lost message gets that report, not a second
run), the phase events it publishes to the broker itself, and the outcome of a failure:
`LOAD_ERROR` (the runner cannot be loaded: never retried), `ERROR` (the runner raised) or
`LOST` (a worker or its node died; `lost_node` names the node when it is known).

`JobHost` runs a single-object runner in this process: the in-process dispatcher's host.
The Ray dispatcher's host (`ray_coordinator.JobCoordinator`) drives one worker per GPU of
the job's nodes instead. Neither imports Django; this module does not import Ray.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from typing import Any

from rollmux_contract.phases import REASON_CHARS, Outcome, PhaseOrder, PhaseReport
from workers.dispatch.storage import CheckpointStore
from workers.runners import Runner, RunnerContext, RunnerLoadError, make_runner


class WorkerLost(RuntimeError):
    """A worker of the job (or the node it ran on) died mid-phase, or cannot be created.

    `node`: the inventory node whose loss is why (its Ray node died, or no live Ray node
    can serve it), when that is known; the report names it and the controller marks it down.
    """

    def __init__(self, why: str, *, node: str | None = None) -> None:
        super().__init__(why)
        self.node = node


def _split_times(
    report: PhaseReport,
    metrics: dict[str, float],
    warm: bool,
    start_s: float,
    total_s: float,
    restore_s: float,
) -> None:
    """Split a phase's time into set-up, load and work (`PhaseReport.setup_s` ...).

    `start_s`: the host's cold start (`_setup`: workers created, the runner built, the
    checkpoint restored) or warm start (`_reload`) before the phase's work; `restore_s`: the
    restore within a cold start; `metrics["reload_s"]` (popped): the reload inside the phase's
    own calls (the slowest worker's, on Ray, where each worker reloads its side). Set-up is the
    cold start less its restore; load is the restore or the reload(s); work is the rest.
    """
    reload_s = float(metrics.pop("reload_s", 0.0))
    if warm:
        setup, load = 0.0, start_s + reload_s
    else:
        setup, load = max(0.0, start_s - restore_s), restore_s + reload_s
    report.setup_s, report.load_s = setup, load
    report.work_s = max(0.0, total_s - setup - load)
    # (the platform's time inside the phase, as the drift checks read it: set-up + load)
    metrics["load_s"] = setup + load


class PhaseHost:
    def __init__(self, runner: str, context: dict[str, Any], checkpoint_dir: str = "") -> None:
        self.runner_name = runner
        self.restore_s = 0.0  # the last cold start's checkpoint restore (set by `_setup`)
        self.context = RunnerContext.from_dict(context)
        self.store = CheckpointStore(checkpoint_dir)
        self.set_up = False
        self.results: dict[int, PhaseReport] = {}
        self.current: int | None = None
        self._lock = threading.Lock()
        self._publisher: Any = None
        self._publisher_lock = threading.Lock()
        self.reporting: dict[str, Any] | None = None  # the broker settings of the last phase

    # --- what a host does (subclasses) ---------------------------------------------------
    def _setup(self, order: PhaseOrder) -> None:
        """Cold start: load the runner, restore the checkpoint of a resumed job."""
        raise NotImplementedError

    def _reload(self) -> None:
        """Warm start: bring the resident state back from host memory before a phase."""

    def _run(self, order: PhaseOrder, report: PhaseReport) -> dict[str, float]:
        """Run the phase; fill where it ran into `report`; return its metrics."""
        raise NotImplementedError

    # --- the phase ---------------------------------------------------------------------
    def run_phase(
        self, order_data: dict[str, Any], report: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Run one phase: reload (warm) or set up (cold), run, offload, checkpoint, report."""
        order = PhaseOrder.from_dict(order_data)
        if self._publisher is None and report and report.get("broker_url"):
            # the first phase: connect to the broker while it runs, so its end report does
            # not also pay for importing Celery and connecting (a new worker process)
            threading.Thread(
                target=self._connect, args=(report,), name="rollmux-publisher", daemon=True
            ).start()
        with self._lock:
            if order.phase_id in self.results:
                done = self.results[order.phase_id]
                self._publish(report, "workers.tasks.phase_finished", done.to_dict())
                return done.to_dict()
            if self.current is not None:
                return {"phase_id": order.phase_id, "outcome": "duplicate", "busy": self.current}
            self.current = order.phase_id
        started = time.time()
        self.reporting = report  # (a host may publish an event mid-phase: long-tail migration)
        if report and report.get("report_start"):
            # optional: the controller records a phase as running when it dispatches it, and
            # the end report carries this start stamp anyway
            self._publish(
                report,
                "workers.tasks.phase_started",
                {"phase_id": order.phase_id, "started_at": started},
            )
        warm = self.set_up
        result = PhaseReport(
            phase_id=order.phase_id,
            outcome=Outcome.OK,
            group_id=order.group_id,
            job_id=order.job_id,
        )
        metrics: dict[str, float] = {}
        if order.sent_at is not None:  # the dispatch's own transit (the Ray call)
            metrics["dispatch_s"] = max(0.0, started - order.sent_at)
        try:
            t0 = time.perf_counter()
            self.restore_s = 0.0
            if not self.set_up:
                self._setup(order)
                self.set_up = True
            else:
                self._reload()
            t1 = time.perf_counter()
            metrics.update(self._run(order, result))
            _split_times(result, metrics, warm, t1 - t0, time.perf_counter() - t0, self.restore_s)
            factor = self.context.rollout_speed_factor
            if order.kind == "rollout" and factor != 1.0:  # co-located: on the training type
                metrics["rollout_speed_factor"] = factor
        except RunnerLoadError as exc:
            result.outcome, result.reason = Outcome.LOAD_ERROR, str(exc)
        except WorkerLost as exc:
            result.outcome, result.reason, result.lost_node = Outcome.LOST, str(exc), exc.node
        except Exception as exc:  # the runner's error fails the phase, not the host
            result.outcome, result.reason = Outcome.ERROR, f"{type(exc).__name__}: {exc}"
            metrics["traceback_lines"] = float(len(traceback.format_exc().splitlines()))
        result.reason = result.reason[:REASON_CHARS]
        result.started_at, result.finished_at, result.warm = started, time.time(), warm
        result.metrics = {k: float(v) for k, v in metrics.items()}
        with self._lock:
            self.results[order.phase_id] = result
            self.current = None
        self._publish(report, "workers.tasks.phase_finished", result.to_dict())
        return result.to_dict()

    def status(self, phase_id: int) -> dict[str, Any]:
        """Return {"state": "running"|"done"|"unknown", "report": ...} for a phase."""
        with self._lock:
            if phase_id in self.results:
                return {"state": "done", "report": self.results[phase_id].to_dict()}
            if self.current == phase_id:
                return {"state": "running", "report": None}
        return {"state": "unknown", "report": None}

    def ping(self) -> int:
        return os.getpid()

    # --- reporting ----------------------------------------------------------------------
    def _connect(self, report: dict[str, Any]) -> Any:
        """Return this host's broker client, creating and connecting it once."""
        with self._publisher_lock:
            if self._publisher is None:
                from celery import Celery

                # not the current app: the inline dispatcher runs this in the controller's
                # process, whose `shared_task`s must stay on its own app
                publisher = Celery(
                    "rollmux-host", broker=report["broker_url"], set_as_current=False
                )
                try:  # what the first send does once: a pooled connection and channel, the
                    # task message format, the result backend, the queue declared (idempotent)
                    queue = publisher.amqp.queues[report.get("queue", "rollmux")]
                    publisher.amqp.create_task_message  # noqa: B018  (loads the protocol)
                    publisher.backend  # noqa: B018  (send_task reads it: imports a module)
                    with publisher.producer_or_acquire() as producer:
                        producer.maybe_declare(queue)
                except Exception:  # the broker is down: the first send retries
                    pass
                self._publisher = publisher
            return self._publisher

    def _publish(self, report: dict[str, Any] | None, task: str, payload: dict[str, Any]) -> None:
        """Send a phase event straight to the broker (no-op without one)."""
        if not report or not report.get("broker_url"):
            return
        try:
            publisher = self._publisher or self._connect(report)
            publisher.send_task(task, args=[payload], queue=report.get("queue", "rollmux"))
        except Exception:  # the broker is down: reconcile recovers from `status`
            traceback.print_exc()


class JobHost(PhaseHost):
    """A single-object runner in this process (the in-process dispatcher's host)."""

    def __init__(self, runner: str, context: dict[str, Any], checkpoint_dir: str = "") -> None:
        super().__init__(runner, context, checkpoint_dir)
        self.runner: Runner | None = None

    def _setup(self, order: PhaseOrder) -> None:
        runner = make_runner(self.runner_name, self.context.runner_packages)
        runner.setup(self.context)
        if order.resume_iteration > 0:
            t0 = time.perf_counter()
            blob = self.store.read(self.context.job_id, order.resume_iteration)
            if blob is not None:
                runner.restore(blob)
            elif getattr(runner, "requires_checkpoint", False):
                where = self.store.path(self.context.job_id, order.resume_iteration)
                raise RuntimeError(
                    f"cannot resume job {self.context.job_id} after {order.resume_iteration}"
                    f" iterations: its checkpoint is missing ({where})"
                )
            self.restore_s = time.perf_counter() - t0
        self.runner = runner

    def _reload(self) -> None:
        if self.runner is not None:
            self.runner.reload()

    def _run(self, order: PhaseOrder, report: PhaseReport) -> dict[str, float]:
        assert self.runner is not None
        metrics: dict[str, float] = {}
        if order.kind == "rollout":
            metrics.update(self.runner.rollout(order.iteration))
        elif order.kind == "train":
            metrics.update(self.runner.train(order.iteration))
        # "sync": one object holds both sides' state, nothing to move
        self.runner.offload()
        if order.kind == "train":
            self.store.write(self.context.job_id, order.iteration + 1, self.runner.checkpoint())
        return metrics

    def stats(self) -> dict[str, Any]:
        stats = getattr(self.runner, "stats", None)
        return {"pid": os.getpid(), "phases": len(self.results), **(stats() if stats else {})}
