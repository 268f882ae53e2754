"""Celery task of the reports app: run the simulator for a what-if run, with progress."""

from __future__ import annotations

import logging
import os
import resource
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import shared_task
from django.db import connection
from django.utils import timezone

from rollmux_web.reports import cost_days, cost_hours
from rollmux_web.reports.models import WhatIfRun
from rollmux_web.reports.whatif_runs import (
    TraceInvalid,
    WhatIfLimits,
    claim_next_run,
    current_spec,
    finish_run,
    heartbeat,
    runs_reconcile,
    validate_trace,
)

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 0.5  # write progress at most twice a second: the page polls it
HEARTBEAT_S = 5.0  # well under ROLLMUX_WHATIF_STALE_S (60 s)


class LimitExceeded(RuntimeError):
    """The run went over its wall-time or memory limit: it is stopped and failed."""


def _rss_mb() -> float:
    """Return this process's resident memory in MB (Linux /proc; else the peak so far)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Guard:
    """Checked at every progress report of the simulator: over the wall time or memory a
    run may take, the simulation is stopped by raising out of the callback."""

    def __init__(self, limits: WhatIfLimits) -> None:
        self.limits = limits
        self.t0 = time.monotonic()
        self.rss0 = _rss_mb()

    def check(self) -> None:
        took = time.monotonic() - self.t0
        if took > self.limits.max_wall_s:
            raise LimitExceeded(
                f"it ran {took:,.0f} s, over the {self.limits.max_wall_s:,.0f} s a run may take "
                "(ROLLMUX_WHATIF_MAX_WALL_S)"
            )
        grown = _rss_mb() - self.rss0
        if grown > self.limits.max_memory_mb:
            raise LimitExceeded(
                f"it needed {grown:,.0f} MB, over the {self.limits.max_memory_mb:,} MB a run may "
                "take (ROLLMUX_WHATIF_MAX_MEMORY_MB)"
            )


@contextmanager
def _beating(run_id: int, every_s: float | None = None) -> Iterator[None]:
    """Beat the run's heartbeat from a thread while the simulation runs (it stops with the
    process: a killed worker stops beating, and reconcile fails the run).

    The period is read when the run starts (default `HEARTBEAT_S` then, not when this
    module was imported), so a test or an operator that sets it is obeyed.
    """
    period = HEARTBEAT_S if every_s is None else every_s
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(period):
                heartbeat(run_id)
        finally:
            connection.close()  # the thread's own connection

    thread = threading.Thread(target=beat, name=f"rollmux-whatif-beat-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


@shared_task(name="reports.run_whatif")  # type: ignore[untyped-decorator]
def run_whatif(run_id: int) -> str:
    """Simulate the next what-if run that is fair to run; safe to run twice.

    1. claim the pending run whose tenant was served least recently (`run_id` is the run
    this task was queued for; it runs in its turn, maybe by another task),
    2. parse the trace, 3. simulate with a throttled progress callback that also stops the
    run over its wall-time or memory limit, beating a heartbeat meanwhile,
    4. store the result (or the error).
    """
    claimed = claim_next_run()
    if claimed is None:
        return "skipped"
    run_id = claimed
    run = WhatIfRun.objects.get(pk=run_id)
    guard = _Guard(WhatIfLimits.from_settings())
    try:
        jobs = validate_trace(run.trace_text)
        from scheduler.sim import run_simulation

        last = [0.0]

        def progress(*args: Any) -> None:
            guard.check()
            fraction = _fraction(args)
            now = time.monotonic()
            if fraction is None or (now - last[0] < PROGRESS_EVERY_S and fraction < 1.0):
                return
            last[0] = now
            WhatIfRun.objects.filter(pk=run_id).update(progress=max(0.0, min(1.0, fraction)))

        spec = current_spec()
        with _beating(run_id):
            result = run_simulation(
                jobs, spec, policies=list(run.policies), seed=run.seed, progress=progress
            )
        result["cluster"] = {
            pool: (
                f"{t.name}: {t.nodes if t.nodes is not None else 'unbounded'} nodes x "
                f"{t.gpus_per_node} GPUs at ${t.price_per_gpu_hour:,.2f}/GPU-h"
            )
            for pool, t in (("rollout", spec.rollout), ("training", spec.train))
        }
    except TraceInvalid as exc:
        finish_run(run_id, result=None, error=f"The trace is not in the format: {exc}")
        return "failed"
    except LimitExceeded as exc:
        finish_run(run_id, result=None, error=f"The simulation was stopped: {exc}.")
        return "failed"
    except Exception as exc:  # a failed simulation is shown on the run's page
        log.exception("what-if run %s failed", run_id)
        finish_run(run_id, result=None, error=f"The simulation failed: {exc}")
        return "failed"
    finish_run(run_id, result=_jsonable(result))
    return "done"


@shared_task(name="rollmux_web.reports.tasks.reconcile_whatif")  # type: ignore[untyped-decorator]
def reconcile_whatif() -> int:
    """Fail the running what-if runs whose worker died (beat runs this every 30 s)."""
    return len(runs_reconcile())


def _fraction(args: tuple[Any, ...]) -> float | None:
    """Accept progress(fraction) or progress(done, total)."""
    nums = [a for a in args if isinstance(a, int | float)]
    if len(nums) >= 2 and nums[1]:
        return float(nums[0]) / float(nums[1])
    if len(nums) == 1:
        return float(nums[0])
    return None


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return str(value)


@shared_task(name="rollmux_web.reports.tasks.keep_cost_days", ignore_result=True)  # type: ignore[untyped-decorator]
def keep_cost_days() -> dict[str, int]:
    """Keep the cost amounts of the days the rollup watermark closed (reports.cost_days),
    a few a run, and drop those past the rollup retention; keep the last day's closed
    hours' (reports.cost_hours: the overview's last 24 hours)."""
    now = timezone.now()
    return {
        "days_kept": len(cost_days.keep_days(now)),
        "days_purged": cost_days.purge_days(now),
        "hours_kept": len(cost_hours.keep_hours(now)),
    }
