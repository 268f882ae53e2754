"""Celery task of the reports app: run the simulator for a what-if run, with progress."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import shared_task

from rollmux_web.reports.models import WhatIfRun
from rollmux_web.reports.whatif_runs import (
    TraceInvalid,
    claim_run,
    current_spec,
    finish_run,
    validate_trace,
)

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 0.5  # write progress at most twice a second: the page polls it


@shared_task(name="reports.run_whatif")  # type: ignore[untyped-decorator]
def run_whatif(run_id: int) -> str:
    """Simulate a what-if run's trace under its policies; safe to run twice.

    1. claim the row (pending -> running; 0 rows changed means another worker has it),
    2. parse the trace, 3. simulate with a throttled progress callback,
    4. store the result (or the error).
    """
    if not claim_run(run_id):
        return "skipped"
    run = WhatIfRun.objects.get(pk=run_id)
    try:
        jobs = validate_trace(run.trace_text)
        from scheduler.sim import run_simulation

        last = [0.0]

        def progress(*args: Any) -> None:
            fraction = _fraction(args)
            now = time.monotonic()
            if fraction is None or (now - last[0] < PROGRESS_EVERY_S and fraction < 1.0):
                return
            last[0] = now
            WhatIfRun.objects.filter(pk=run_id).update(progress=max(0.0, min(1.0, fraction)))

        spec = current_spec()
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
    except Exception as exc:  # a failed simulation is shown on the run's page
        log.exception("what-if run %s failed", run_id)
        finish_run(run_id, result=None, error=f"The simulation failed: {exc}")
        return "failed"
    finish_run(run_id, result=_jsonable(result))
    return "done"


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
