"""What-if runs as the simulator task needs them: the cluster, the trace check, claim and finish.

The trace parser (`scheduler.trace.parse_trace_text`) and the simulator policies belong
to the core; they are imported where used so a missing or broken piece degrades to a
message on the run's page instead of a 500.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Max, Q
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


@dataclass(frozen=True)
class WhatIfLimits:
    """What one what-if run may take (settings ROLLMUX_WHATIF_*)."""

    max_jobs: int
    max_iterations: int
    max_events: int
    max_wall_s: float
    max_memory_mb: int
    max_queued_per_tenant: int

    @classmethod
    def from_settings(cls) -> WhatIfLimits:
        return cls(
            max_jobs=settings.ROLLMUX_WHATIF_MAX_JOBS,
            max_iterations=settings.ROLLMUX_WHATIF_MAX_ITERATIONS,
            max_events=settings.ROLLMUX_WHATIF_MAX_EVENTS,
            max_wall_s=settings.ROLLMUX_WHATIF_MAX_WALL_S,
            max_memory_mb=settings.ROLLMUX_WHATIF_MAX_MEMORY_MB,
            max_queued_per_tenant=settings.ROLLMUX_WHATIF_MAX_QUEUED_PER_TENANT,
        )


def simulated_events(jobs: list[JobProfile], policies: list[str]) -> int:
    """Return the phases the simulator would run: each job's iterations x its phases per
    iteration (rollout, training, and a weight sync when it has one), once per policy."""
    per_policy = sum(j.iterations * (3 if j.t_sync_s > 0 else 2) for j in jobs)
    return per_policy * max(1, len(policies))


def limit_errors(
    jobs: list[JobProfile],
    policies: list[str],
    *,
    text: str = "",
    limits: WhatIfLimits | None = None,
) -> list[str]:
    """Return why this trace is over a what-if limit, naming the field (empty: within)."""
    lim = limits or WhatIfLimits.from_settings()
    out = []
    if len(jobs) > lim.max_jobs:
        out.append(
            f"The trace has {len(jobs):,} jobs; a what-if run takes at most {lim.max_jobs:,} "
            "(ROLLMUX_WHATIF_MAX_JOBS)."
        )
    lines = [
        n
        for n, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    for i, job in enumerate(jobs):
        if job.iterations > lim.max_iterations:
            where = f"line {lines[i]}, " if i < len(lines) else ""
            out.append(
                f"{where}job {job.id!r}, field 'iterations': {job.iterations:,} iterations; a "
                f"what-if run takes at most {lim.max_iterations:,} per job "
                "(ROLLMUX_WHATIF_MAX_ITERATIONS)."
            )
            break  # one is enough to say what to change
    events = simulated_events(jobs, policies)
    if not out and events > lim.max_events:
        out.append(
            f"The trace's 'iterations' add up to {events:,} simulated phases over "
            f"{len(policies)} policies; a what-if run takes at most {lim.max_events:,} "
            "(ROLLMUX_WHATIF_MAX_EVENTS): fewer jobs, iterations or policies."
        )
    return out


def queued_errors(tenant: str, *, limits: WhatIfLimits | None = None) -> list[str]:
    """Return why a tenant may not queue another run now (empty: it may)."""
    lim = limits or WhatIfLimits.from_settings()
    waiting = WhatIfRun.objects.filter(
        tenant=tenant, status__in=(WhatIfRun.Status.PENDING, WhatIfRun.Status.RUNNING)
    ).count()
    if waiting >= lim.max_queued_per_tenant:
        return [
            f"Your tenant has {waiting} what-if runs waiting or running; at most "
            f"{lim.max_queued_per_tenant} at a time (ROLLMUX_WHATIF_MAX_QUEUED_PER_TENANT): "
            "start this one when one of them finishes."
        ]
    return []


def claim_run(run_id: int) -> bool:
    """Move a pending run to running; False when another worker already has it."""
    now = timezone.now()
    return (
        WhatIfRun.objects.filter(pk=run_id, status=WhatIfRun.Status.PENDING).update(
            status=WhatIfRun.Status.RUNNING, progress=0.0, started_at=now, heartbeat_at=now
        )
        == 1
    )


def claim_next_run() -> int | None:
    """Claim the pending run whose tenant was served least recently (None: none waits).

    A queued task is a token for one simulation, not for one run: each takes the run that
    is fair to run next, so a tenant who queues many runs does not hold up another's (its
    runs take turns with theirs, oldest first within a tenant). Claims are conditional
    updates: two workers never take one run.
    """
    for _ in range(5):  # another worker took the chosen run: choose again
        pending = list(
            WhatIfRun.objects.filter(status=WhatIfRun.Status.PENDING)
            .order_by("created_at", "id")
            .values_list("id", "tenant")[:500]
        )
        if not pending:
            return None
        served = dict(
            WhatIfRun.objects.filter(started_at__isnull=False)
            .order_by()
            .values_list("tenant")
            .annotate(last=Max("started_at"))
            .values_list("tenant", "last")
        )
        never = datetime.min.replace(tzinfo=UTC)
        order = {rid: i for i, (rid, _) in enumerate(pending)}
        run_id, _tenant = min(pending, key=lambda r: (served.get(r[1]) or never, order[r[0]]))
        if claim_run(run_id):
            return run_id
    return None


def heartbeat(run_id: int) -> None:
    WhatIfRun.objects.filter(pk=run_id, status=WhatIfRun.Status.RUNNING).update(
        heartbeat_at=timezone.now()
    )


def runs_reconcile(*, now: datetime | None = None) -> list[int]:
    """Fail the running runs whose worker stopped beating; return their ids.

    The task beats every few seconds while it simulates (and a run stops itself at the
    wall-time limit), so a heartbeat older than ROLLMUX_WHATIF_STALE_S means the worker
    died (killed, out of memory): without this the run would show "running" forever.
    """
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.ROLLMUX_WHATIF_STALE_S)
    dead = list(
        WhatIfRun.objects.filter(status=WhatIfRun.Status.RUNNING)
        .filter(Q(heartbeat_at__lt=stale) | Q(heartbeat_at__isnull=True, created_at__lt=stale))
        .values_list("id", flat=True)
    )
    for run_id in dead:
        WhatIfRun.objects.filter(pk=run_id, status=WhatIfRun.Status.RUNNING).update(
            status=WhatIfRun.Status.FAILED,
            error=(
                "The simulation's worker stopped (no heartbeat for over "
                f"{settings.ROLLMUX_WHATIF_STALE_S:.0f} s: killed or out of memory); "
                "start the run again."
            ),
            finished_at=now,
        )
    return dead


def finish_run(run_id: int, *, result: dict[str, Any] | None, error: str = "") -> None:
    """Store a run's result (done) or its error (failed)."""
    WhatIfRun.objects.filter(pk=run_id).update(
        status=WhatIfRun.Status.FAILED if error else WhatIfRun.Status.DONE,
        progress=1.0 if not error else WhatIfRun.objects.get(pk=run_id).progress,
        result=result,
        error=error,
        finished_at=datetime.now(tz=timezone.get_current_timezone()),
    )
