"""What-if runs as the simulator task needs them: the cluster, the trace check, claim and finish.

The trace parser (`scheduler.trace.parse_trace_text`) and the simulator policies belong
to the core; they are imported where used so a missing or broken piece degrades to a
message on the run's page instead of a 500.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from rollmux_web.reports.models import WhatIfRun
from rollmux_web.workflow.selectors import cluster_spec
from rollmux_web.workflow.snapshot import NoPoolConfigured
from scheduler.model import ClusterSpec, GpuType, JobProfile


class TraceInvalid(ValueError):
    """The trace is not in the format: `message` names the line and the field."""


def current_spec() -> ClusterSpec:
    """Return the live cluster as the planner sees it (`workflow.selectors.cluster_spec`);
    without both pools configured, the trace format's example cluster (unbounded)."""
    try:
        return cluster_spec()
    except NoPoolConfigured:
        return ClusterSpec(
            rollout=GpuType("H20", 1.85, 8, 2048),
            train=GpuType("H800", 5.28, 8, 2048),
            switch_overhead_s=settings.ROLLMUX_SWITCH_OVERHEAD_S,
        )


def validate_trace(text: str) -> list[JobProfile]:
    """Parse a trace with the shared parser; raise TraceInvalid naming line and field."""
    from scheduler.trace import TraceError, parse_trace_text

    try:
        jobs = parse_trace_text(text, current_spec())
    except TraceError as exc:
        # the message already names the line and the field ("line 3, field 'slo': ...")
        raise TraceInvalid(str(exc)) from exc
    if not jobs:
        raise TraceInvalid("The trace has no job (every line is blank or a comment).")
    return list(jobs)


def policy_errors(jobs: list[JobProfile], policies: list[str]) -> list[str]:
    """Return why some of the chosen policies cannot run on this trace (empty: all can)."""
    from scheduler.sim.policies import OPTIMAL_MAX_JOBS

    if "optimal" in policies and len(jobs) > OPTIMAL_MAX_JOBS:
        return [
            f"optimal searches at most {OPTIMAL_MAX_JOBS} jobs exhaustively and this trace "
            f"has {len(jobs)}: untick optimal or simulate a smaller trace."
        ]
    return []


def claim_run(run_id: int) -> bool:
    """Move a pending run to running; False when another worker already has it."""
    return (
        WhatIfRun.objects.filter(pk=run_id, status=WhatIfRun.Status.PENDING).update(
            status=WhatIfRun.Status.RUNNING, progress=0.0
        )
        == 1
    )


def finish_run(run_id: int, *, result: dict[str, Any] | None, error: str = "") -> None:
    """Store a run's result (done) or its error (failed)."""
    WhatIfRun.objects.filter(pk=run_id).update(
        status=WhatIfRun.Status.FAILED if error else WhatIfRun.Status.DONE,
        progress=1.0 if not error else WhatIfRun.objects.get(pk=run_id).progress,
        result=result,
        error=error,
        finished_at=datetime.now(tz=timezone.get_current_timezone()),
    )
