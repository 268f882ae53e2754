"""The resident host of one job placement: runs its phases and keeps its state between them.

Used as the body of the Ray actor (`ray_dispatcher`) and directly by the inline dispatcher;
it imports neither Django nor Ray. A host runs one phase at a time for its job; calls for a
phase it already ran return the stored report (a re-dispatch after a lost message is safe).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from workers.dispatch.base import PhaseOrder, PhaseReport
from workers.runners import Runner, RunnerContext, make_runner

KEEP_CHECKPOINTS = 2


class JobHost:
    def __init__(self, runner: str, context: dict[str, Any], checkpoint_dir: str = "") -> None:
        self.runner_name = runner
        self.context = RunnerContext.from_dict(context)
        self.checkpoint_dir = checkpoint_dir
        self.runner: Runner | None = None
        self.resident = False  # state offloaded to host memory after a phase
        self.results: dict[int, PhaseReport] = {}
        self.current: int | None = None
        self._lock = threading.Lock()
        self._publisher: Any = None
        self.setup_error: str | None = None

    # --- the phase ---------------------------------------------------------------------
    def run_phase(
        self, order_data: dict[str, Any], report: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Run one phase: reload (warm) or set up (cold), run, offload, checkpoint, report."""
        order = PhaseOrder.from_dict(order_data)
        with self._lock:
            if order.phase_id in self.results:
                done = self.results[order.phase_id]
                self._publish(report, "workers.tasks.phase_finished", done.to_dict())
                return done.to_dict()
            if self.current is not None:
                return {"phase_id": order.phase_id, "outcome": "duplicate", "busy": self.current}
            self.current = order.phase_id
        started = time.time()
        if report and report.get("report_start"):
            # optional: the controller records a phase as running when it dispatches it, and
            # the end report carries this start stamp anyway
            self._publish(
                report,
                "workers.tasks.phase_started",
                {"phase_id": order.phase_id, "started_at": started},
            )
        warm = self.runner is not None and self.resident
        metrics: dict[str, float] = {}
        try:
            t0 = time.perf_counter()
            if self.runner is None:
                self._setup(order)
            else:
                self.runner.reload()
            metrics["load_s"] = time.perf_counter() - t0
            assert self.runner is not None
            if order.kind == "rollout":
                metrics.update(self.runner.rollout(order.iteration))
            else:
                metrics.update(self.runner.train(order.iteration))
            self.runner.offload()
            self.resident = True
            if order.kind == "train":
                self._checkpoint(order.iteration + 1)
            outcome = "ok"
        except Exception as exc:  # the runner's error fails the phase, not the host
            outcome = f"error: {type(exc).__name__}: {exc}"[:480]
            metrics["traceback_lines"] = float(len(traceback.format_exc().splitlines()))
        result = PhaseReport(
            phase_id=order.phase_id,
            outcome=outcome,
            started_at=started,
            finished_at=time.time(),
            warm=warm,
            metrics={k: float(v) for k, v in metrics.items()},
            group_id=order.group_id,
            job_id=order.job_id,
        )
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

    def stats(self) -> dict[str, Any]:
        stats = getattr(self.runner, "stats", None)
        return {"pid": os.getpid(), "phases": len(self.results), **(stats() if stats else {})}

    # --- setup, checkpoints -------------------------------------------------------------
    def _setup(self, order: PhaseOrder) -> None:
        runner = make_runner(self.runner_name)
        runner.setup(self.context)
        if order.resume_iteration > 0:
            blob = self._read_checkpoint(order.resume_iteration)
            if blob is not None:
                runner.restore(blob)
        self.runner = runner

    def _ckpt_path(self, iterations_done: int) -> Path:
        return Path(self.checkpoint_dir) / f"job-{self.context.job_id}-it{iterations_done}.ckpt"

    def _checkpoint(self, iterations_done: int) -> None:
        if not self.checkpoint_dir or self.runner is None:
            return
        blob = self.runner.checkpoint()
        path = self._ckpt_path(iterations_done)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(blob)
        tmp.replace(path)  # atomic: a crash never leaves a half-written checkpoint
        old = self._ckpt_path(iterations_done - KEEP_CHECKPOINTS)
        with contextlib.suppress(FileNotFoundError):
            old.unlink()

    def _read_checkpoint(self, iterations_done: int) -> bytes | None:
        if not self.checkpoint_dir:
            return None
        try:
            return self._ckpt_path(iterations_done).read_bytes()
        except FileNotFoundError:
            return None

    # --- reporting ----------------------------------------------------------------------
    def _publish(self, report: dict[str, Any] | None, task: str, payload: dict[str, Any]) -> None:
        """Send a phase event straight to the broker (no-op without one)."""
        if not report or not report.get("broker_url"):
            return
        try:
            if self._publisher is None:
                from celery import Celery

                self._publisher = Celery("rollmux-host", broker=report["broker_url"])
            self._publisher.send_task(task, args=[payload], queue=report.get("queue", "rollmux"))
        except Exception:  # the broker is down: reconcile recovers from `status`
            traceback.print_exc()
