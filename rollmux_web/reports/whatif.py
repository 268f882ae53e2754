"""What-if planning: the planner's answer for a job not yet submitted, and simulator runs.

The planner (`scheduler.planner.place`), the live snapshot
(`rollmux_web.workflow.selectors.cluster_snapshot`), the trace parser
(`scheduler.trace.parse_trace_text`) and the simulator (`scheduler.sim.run_simulation`)
belong to other parts of the product; they are imported where used so a missing or
broken piece degrades to a message instead of a 500.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rollmux_web.accounts.selectors import sees_all_tenants, visible_tenants
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.reports.models import WhatIfRun
from scheduler.model import ClusterSpec, GpuType, JobProfile, PlacementStatus

PREVIEW_JOB_ID = "what-if"


@dataclass
class PreviewMember:
    label: str
    slowdown: float
    slo: float | None
    is_new: bool


@dataclass
class Preview:
    """What the planner would do with this job now, or why it cannot say."""

    hint: str = ""  # incomplete input or an unavailable planner: a short note, no answer
    status: str = ""  # FIT | RETRY | INFEASIBLE
    reason: str = ""
    strategy: str = ""
    group: str = ""
    group_visible: bool = False  # the viewer may open the group (one of its tenants is in it)
    marginal_cost_per_hour: float = 0.0
    rollout_nodes: list[str] = field(default_factory=list)
    train_nodes: list[str] = field(default_factory=list)
    new_nodes: list[str] = field(default_factory=list)
    members: list[PreviewMember] = field(default_factory=list)


def current_spec() -> ClusterSpec:
    """Return the live cluster as the planner sees it (`workflow.selectors.cluster_spec`);
    without both pools configured, the trace format's example cluster (unbounded)."""
    from rollmux_web.workflow.converters import NoPoolConfigured
    from rollmux_web.workflow.selectors import cluster_spec

    try:
        return cluster_spec()
    except NoPoolConfigured:
        return ClusterSpec(
            rollout=GpuType("H20", 1.85, 8, 2048),
            train=GpuType("H800", 5.28, 8, 2048),
            switch_overhead_s=settings.ROLLMUX_SWITCH_OVERHEAD_S,
        )


def live_snapshot() -> Any:
    """Return the planner's snapshot of the live cluster (the workflow's selector)."""
    from rollmux_web.workflow.selectors import cluster_snapshot

    return cluster_snapshot()


def whatif_preview(*, user: Any, data: dict[str, Any], slo: float | None) -> Preview:
    """Return the planner's answer for a job described by cleaned form data, on the live cluster."""
    from rollmux_web.workflow.selectors import time_scale_of
    from scheduler.planner import place

    # The job's effective time scale, as the live planner will see it once submitted
    # (rollmux_web.workflow.converters.job_profile): it only shares a group on its clock.
    runner = data.get("runner") or Job._meta.get_field("runner").get_default()
    profile = JobProfile(
        id=PREVIEW_JOB_ID,
        arrival_s=0.0,
        iterations=data.get("iterations") or 1,
        rollout_gpus=data["rollout_gpus"],
        train_gpus=data["train_gpus"],
        t_roll_max_s=data["t_roll_max_s"],
        t_roll_min_s=data.get("t_roll_min_s"),
        t_train_max_s=data["t_train_max_s"],
        t_train_min_s=data.get("t_train_min_s"),
        host_mem_gb=data["host_mem_gb"],
        slo=slo or 1.0,
        tenant=data.get("tenant") or "default",
        time_scale=time_scale_of(runner, data.get("time_scale")),
    )
    try:
        state = live_snapshot()
        result = place(
            profile, state, policy="rollmux", max_group_size=settings.ROLLMUX_MAX_GROUP_SIZE
        )
    except Exception as exc:  # the preview must never break the submit form
        return Preview(hint=f"The planner could not answer: {exc}")
    status = PlacementStatus(result.status).name
    if result.status != PlacementStatus.FIT or result.placement is None:
        return Preview(status=status, reason=result.reason)
    pl = result.placement
    members = _label_members(user, state, result.predicted_slowdown, own_slo=profile.slo)
    group = str(pl.group_id) if pl.group_id is not None else ""
    return Preview(
        status=status,
        reason=result.reason,
        strategy=str(pl.strategy).replace("_", " "),
        group=group,
        group_visible=bool(group) and _group_visible(user, group),
        marginal_cost_per_hour=float(result.marginal_cost_per_hour),
        rollout_nodes=list(pl.rollout_nodes),
        train_nodes=list(pl.train_nodes),
        new_nodes=list(pl.new_nodes),
        members=members,
    )


def _group_visible(user: Any, group: str) -> bool:
    from rollmux_web.workflow.selectors import visible_groups

    return group.isdigit() and visible_groups(user=user).filter(pk=int(group)).exists()


def _label_members(
    user: Any, state: Any, slowdowns: dict[str, float], *, own_slo: float
) -> list[PreviewMember]:
    """Name the jobs in the predicted slowdowns (other tenants' jobs stay anonymous)."""
    slos: dict[str, float] = {PREVIEW_JOB_ID: own_slo}
    for g in getattr(state, "groups", ()):
        for m in g.members:
            slos[str(m.job.id)] = m.job.slo
    ids = []
    for key in slowdowns:
        try:
            ids.append(int(str(key).removeprefix("job-")))
        except ValueError:
            continue
    visible = (
        None if sees_all_tenants(user) else set(visible_tenants(user).values_list("id", flat=True))
    )
    names = {
        str(pk): (name if visible is None or tid in visible else "another tenant's job")
        for pk, name, tid in Job.objects.filter(pk__in=ids).values_list("id", "name", "tenant_id")
    }
    out = []
    for key, value in sorted(slowdowns.items(), key=lambda kv: kv[0] != PREVIEW_JOB_ID):
        is_new = key == PREVIEW_JOB_ID
        label = "this job" if is_new else names.get(str(key).removeprefix("job-"), f"job {key}")
        out.append(
            PreviewMember(label=label, slowdown=float(value), slo=slos.get(str(key)), is_new=is_new)
        )
    return out


# --------------------------------------------------------------------------- simulator runs


class TraceInvalid(ValueError):
    """The trace is not in the format: `message` names the line and the field."""


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


def queue_trace(*, user: Any) -> str:
    """Return the queued and running jobs the user may see as a trace (arrival = submission order)."""
    qs = Job.objects.filter(
        status__in=[JobStatus.QUEUED, JobStatus.PLACED, JobStatus.RUNNING]
    ).select_related("tenant", "slo_class")
    if not sees_all_tenants(user):
        qs = qs.filter(tenant__in=visible_tenants(user))
    jobs = list(qs.order_by("submitted_at", "id"))
    if not jobs:
        return ""
    first = jobs[0].submitted_at
    lines = []
    for j in jobs:
        running = j.status != JobStatus.QUEUED
        remaining = max(1, j.iterations - j.iterations_done) if running else j.iterations
        lines.append(
            json.dumps(
                {
                    "id": f"job-{j.pk}",
                    "tenant": j.tenant.name,
                    "arrival_s": 0.0 if running else (j.submitted_at - first).total_seconds(),
                    "iterations": remaining,
                    "rollout_gpus": j.rollout_gpus,
                    "train_gpus": j.train_gpus,
                    "t_roll_max_s": j.t_roll_max_s,
                    "t_roll_min_s": j.t_roll_min_s,
                    "t_train_max_s": j.t_train_max_s,
                    "t_train_min_s": j.t_train_min_s,
                    "host_mem_gb": j.host_mem_gb,
                    "slo": j.slo_class.slowdown,
                    "model": j.model,
                }
            )
        )
    return "\n".join(lines) + "\n"


def whatif_start(
    *, user: Any, source: str, trace_text: str, policies: list[str], seed: int
) -> WhatIfRun:
    """Create a what-if run and queue the simulator task after the commit."""
    from rollmux_web.reports.tasks import run_whatif

    tenant = (
        ""
        if sees_all_tenants(user)
        else ",".join(visible_tenants(user).values_list("name", flat=True))
    )
    with transaction.atomic():
        run = WhatIfRun.objects.create(
            created_by=user,
            tenant=tenant,
            source=source,
            trace_text=trace_text,
            policies=policies,
            seed=seed,
        )
        if run_whatif.app.conf.task_always_eager:
            # Embedded mode runs tasks in this process: a simulation can take minutes, so
            # it gets a thread of its own; the request returns and the run's page polls
            # its progress, as with a worker.
            transaction.on_commit(lambda: _simulate_on_a_thread(run.pk))
        else:
            transaction.on_commit(lambda: run_whatif.delay(run.pk))
    return run


def _simulate_on_a_thread(run_id: int) -> None:
    from django.db import connection

    from rollmux_web.reports.tasks import run_whatif

    def run() -> None:
        try:
            run_whatif(run_id)
        finally:
            connection.close()  # this thread's own connection

    threading.Thread(target=run, name=f"rollmux-whatif-{run_id}", daemon=True).start()


def policy_errors(jobs: list[JobProfile], policies: list[str]) -> list[str]:
    """Return why some of the chosen policies cannot run on this trace (empty: all can)."""
    from scheduler.sim.policies import OPTIMAL_MAX_JOBS

    if "optimal" in policies and len(jobs) > OPTIMAL_MAX_JOBS:
        return [
            f"optimal searches at most {OPTIMAL_MAX_JOBS} jobs exhaustively and this trace "
            f"has {len(jobs)}: untick optimal or simulate a smaller trace."
        ]
    return []


def whatif_runs(*, user: Any) -> list[WhatIfRun]:
    """Return the user's own runs (admins and finance see every run)."""
    qs = WhatIfRun.objects.all()
    if not sees_all_tenants(user):
        qs = qs.filter(created_by=user)
    return list(qs.defer("trace_text").order_by("-created_at")[:30])


def whatif_run(*, user: Any, run_id: int) -> WhatIfRun:
    from django.http import Http404

    qs = WhatIfRun.objects.filter(pk=run_id)
    if not sees_all_tenants(user):
        qs = qs.filter(created_by=user)
    run = qs.first()
    if run is None:
        raise Http404("no such what-if run")
    return run


@dataclass
class PolicyRow:
    name: str
    colour: str
    metrics: dict[str, Any]


@dataclass
class WhatIfComparison:
    rows: list[PolicyRow]
    ratios: dict[str, float]
    charts: list[tuple[str, list[tuple[str, float, str]], str, str]]  # title, items, unit, fmt


# the charts: (metric key, title, unit, format, scale applied to the value), in the units the
# side-by-side table uses
COMPARED = (
    ("total_cost_usd", "Total cost", "", "${:,.0f}", 1.0),
    ("avg_cost_per_hour_usd", "Average cost per hour", "", "${:,.2f}/h", 1.0),
    ("slo_attainment", "SLO attainment (durations as drawn)", "", "{:.1%}", 1.0),
    ("mean_slowdown", "Mean slowdown", "", "{:.2f}×", 1.0),
    ("makespan_h", "Makespan", "", "", 3600.0),  # durations: unit picked from the values
    ("mean_queue_delay_s", "Mean queue delay", "", "", 1.0),
)


def _duration_unit(longest_s: float) -> tuple[str, float]:
    """Return (unit, seconds per unit) to chart durations up to `longest_s` (as `_duration`)."""
    if longest_s < 120:
        return "s", 1.0
    if longest_s < 2 * 3600:
        return "min", 60.0
    if longest_s < 3 * 86400:
        return "h", 3600.0
    return "days", 86400.0


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:,.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 86400:,.1f} days"


def _pairs(value: dict[str, Any], fmt: Any = str) -> str:
    return " · ".join(f"{str(k).replace('_', ' ')} {fmt(v)}" for k, v in value.items())


def _pct(x: Any) -> str:
    return f"{float(x):.1%}"


# (label, how to show a policy's figures); the metric keys are the simulator's (`--json`)
TABLE: tuple[tuple[str, Any], ...] = (
    ("Jobs completed", lambda m: f"{m.get('completed', 0):,} of {m.get('jobs', 0):,}"),
    ("Total cost", lambda m: f"${m['total_cost_usd']:,.0f}"),
    ("Average cost per hour", lambda m: f"${m['avg_cost_per_hour_usd']:,.2f}/h"),
    ("Makespan", lambda m: _duration(float(m["makespan_h"]) * 3600)),
    ("Peak GPUs", lambda m: _pairs(m["peak_gpus"], lambda v: f"{v:,}")),
    ("SLO attainment (durations as drawn)", lambda m: _pct(m["slo_attainment"])),
    ("SLO attainment (planned, worst case)", lambda m: _pct(m["slo_attainment_vs_profile"])),
    ("Mean slowdown", lambda m: f"{m['mean_slowdown']:.2f}×"),
    ("p99 slowdown", lambda m: f"{m['p99_slowdown']:.2f}×"),
    ("Bubble fraction", lambda m: _pairs(m["bubble_fraction"], _pct)),
    ("Admissions", lambda m: _pairs(m["admissions"])),
    ("Decision latency", lambda m: _pairs(m["decision_latency_ms"], lambda v: f"{v:,.2f} ms")),
    ("Mean queue delay", lambda m: _duration(float(m["mean_queue_delay_s"]))),
    ("Jobs that waited", lambda m: f"{m['jobs_that_waited']:,}"),
    ("Iterations completed", lambda m: f"{m['iterations_completed']:,}"),
    ("Iterations per dollar", lambda m: f"{m['iterations_per_dollar']:.4f}"),
    ("Infeasible jobs", lambda m: f"{len(m['infeasible']):,}"),
    ("Jobs never started", lambda m: f"{len(m['never_started']):,}"),
)


def table(cmp: WhatIfComparison) -> list[tuple[str, list[str]]]:
    """Return the side-by-side table: a labelled row per figure, one formatted cell per policy
    (a figure a policy did not report shows as a dash)."""
    out = []
    for label, show in TABLE:
        cells = []
        for row in cmp.rows:
            try:
                cells.append(show(row.metrics))
            except (KeyError, TypeError, ValueError, AttributeError):
                cells.append("—")
        if any(c != "—" for c in cells):
            out.append((label, cells))
    return out


def compare(result: dict[str, Any]) -> WhatIfComparison:
    """Return the policies side by side and the bar charts to draw from a simulator result."""
    from rollmux_web.reports.svg import policy_colour
    from scheduler.sim.policies import ordered

    policies = result.get("policies") or {}
    names = ordered(list(policies))  # the report's order; then any name it does not know
    names += [name for name in policies if name not in names]
    rows = [PolicyRow(name, policy_colour(name), policies[name]) for name in names]
    charts = []
    for key, title, unit, fmt, scale in COMPARED:
        items = [
            (r.name, float(r.metrics[key]) * scale, r.colour)
            for r in rows
            if isinstance(r.metrics.get(key), int | float)
        ]
        if items and not fmt:  # a duration in seconds: the unit that reads best
            unit, per = _duration_unit(max(v for _, v, _ in items))
            items = [(name, v / per, colour) for name, v, colour in items]
            fmt = "{:,.1f}"
        if items:
            charts.append((title, items, unit, fmt))
    return WhatIfComparison(rows=rows, ratios=dict(result.get("ratios") or {}), charts=charts)


def claim_run(run_id: int) -> bool:
    """Move a pending run to running; False when another worker already has it."""
    return (
        WhatIfRun.objects.filter(pk=run_id, status=WhatIfRun.Status.PENDING).update(
            status=WhatIfRun.Status.RUNNING, progress=0.0
        )
        == 1
    )


def finish_run(run_id: int, *, result: dict[str, Any] | None, error: str = "") -> None:
    WhatIfRun.objects.filter(pk=run_id).update(
        status=WhatIfRun.Status.FAILED if error else WhatIfRun.Status.DONE,
        progress=1.0 if not error else WhatIfRun.objects.get(pk=run_id).progress,
        result=result,
        error=error,
        finished_at=datetime.now(tz=timezone.get_current_timezone()),
    )
