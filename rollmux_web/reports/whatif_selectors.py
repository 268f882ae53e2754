"""What-if reads: the planner's answer for a job not yet submitted, the queue as a trace, runs.

The planner (`scheduler.planner.place`, with the live levers: `workflow.levers.place_job`)
and the live snapshot (`rollmux_web.workflow.selectors.planner_input`) belong to other parts of the product;
a failure of either degrades to a hint in the preview instead of a 500.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from django.http import Http404

from rollmux_web.accounts.access import JobRef, member_label, visible_tenant_ids
from rollmux_web.accounts.selectors import sees_all_tenants, visible_tenants
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.jobs.spec import SPEC
from rollmux_web.reports.models import WhatIfRun
from rollmux_web.workflow.access import groups_for_user
from rollmux_web.workflow.converters import job_profile
from rollmux_web.workflow.levers import place_job
from rollmux_web.workflow.selectors import planned_as, planner_input
from scheduler.model import JobProfile, PlacementStatus
from scheduler.trace import job_to_dict

PREVIEW_JOB_ID = "what-if"


@dataclass
class PreviewMember:
    label: str
    slowdown: float
    slo: float | None
    is_new: bool
    # the chance it meets its SLO in the group (scheduler.stochastic, via the planner)
    slo_probability: float | None = None


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


def preview_profile(data: dict[str, Any], *, slo: float) -> JobProfile:
    """Return the core profile of a job described by cleaned form data, as the live planner
    will see it once submitted: the same converter (`workflow.converters.job_profile`)
    over an unsaved job built from the spec's fields (so its effective time scale, the
    clock it may share a group on, is the live one)."""
    values = {
        f.name: data[f.name] if data.get(f.name) not in (None, "") else f.default
        for f in SPEC
        if not f.reference and f.name in data
    }
    values["iterations"] = values.get("iterations") or 1
    job = Job(**{k: v for k, v in values.items() if v is not None})
    profile = job_profile(job, slo=slo, tenant=data.get("tenant") or "default")
    return replace(profile, id=PREVIEW_JOB_ID, arrival_s=0.0)


def whatif_preview(*, user: Any, data: dict[str, Any], slo: float | None) -> Preview:
    """Return the planner's answer for a job described by cleaned form data, on the live cluster."""
    profile = preview_profile(data, slo=slo or 1.0)
    try:
        # what the live pass would decide: its snapshot, its levers (workflow.levers)
        state, progress = planner_input()
        result = place_job(planned_as(profile), state, progress)
    except Exception as exc:  # the preview must never break the submit form
        return Preview(hint=f"The planner could not answer: {exc}")
    status = PlacementStatus(result.status).name
    if result.status != PlacementStatus.FIT or result.placement is None:
        return Preview(status=status, reason=result.reason)
    pl = result.placement
    members = _label_members(
        user,
        state,
        result.predicted_slowdown,
        own_slo=profile.slo,
        chances=getattr(result, "slo_probability", None) or {},
    )
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
    return group.isdigit() and groups_for_user(user=user).filter(pk=int(group)).exists()


def _label_members(
    user: Any,
    state: Any,
    slowdowns: dict[str, float],
    *,
    own_slo: float,
    chances: dict[str, float],
) -> list[PreviewMember]:
    """Name the jobs in the predicted slowdowns (other tenants' jobs stay anonymous)."""
    slos: dict[str, float] = {PREVIEW_JOB_ID: own_slo}
    for g in getattr(state, "groups", ()):
        for m in g.members:
            slos[str(m.job.id)] = m.job.slo
    ids = [int(key) for key in slowdowns if str(key).isdigit()]  # live job ids are str(pk)
    viewer = visible_tenant_ids(user)
    names = {
        str(pk): member_label(JobRef(pk, name, tid), viewer)
        for pk, name, tid in Job.objects.filter(pk__in=ids).values_list("id", "name", "tenant_id")
    }
    out = []
    for key, value in sorted(slowdowns.items(), key=lambda kv: kv[0] != PREVIEW_JOB_ID):
        is_new = key == PREVIEW_JOB_ID
        label = "this job" if is_new else names.get(str(key), "a job")
        out.append(
            PreviewMember(
                label=label,
                slowdown=float(value),
                slo=slos.get(str(key)),
                is_new=is_new,
                slo_probability=chances.get(str(key)),
            )
        )
    return out


def queue_trace(*, user: Any) -> str:
    """Return the queued and running jobs the user may see as a trace of the queue now.

    Every job is there now, so each arrives at 0, in submission order (a trace's jobs are
    taken by arrival, then line). The phases are profile seconds, the planner's clock and the
    submit form's preview's; an arrival at the job's wall-clock seconds after the first
    submission mixed the two clocks (a 20x job's profile runs twenty times faster) and had a
    job that already waits arrive later in the simulation.
    """
    qs = Job.objects.filter(
        status__in=[JobStatus.QUEUED, JobStatus.PLACED, JobStatus.RUNNING]
    ).select_related("tenant", "slo_class")
    if not sees_all_tenants(user):
        qs = qs.filter(tenant__in=visible_tenants(user))
    jobs = list(qs.order_by("submitted_at", "id"))
    if not jobs:
        return ""
    lines = []
    for j in jobs:
        # the converter the live planner uses: its remaining iterations, its SLO and clock
        profile = job_profile(j)
        line = job_to_dict(replace(profile, id=f"job-{j.pk}", arrival_s=0.0))
        lines.append(json.dumps(line | {"model": j.model}))
    return "\n".join(lines) + "\n"


def whatif_runs(*, user: Any) -> list[WhatIfRun]:
    """Return the user's own runs (admins and finance see every run)."""
    qs = WhatIfRun.objects.all()
    if not sees_all_tenants(user):
        qs = qs.filter(created_by=user)
    return list(qs.defer("trace_text").order_by("-created_at")[:30])


def whatif_run(*, user: Any, run_id: int) -> WhatIfRun:
    """Return one of the user's runs (any run for admins and finance), else 404."""
    qs = WhatIfRun.objects.filter(pk=run_id)
    if not sees_all_tenants(user):
        qs = qs.filter(created_by=user)
    run = qs.first()
    if run is None:
        raise Http404("no such what-if run")
    return run
