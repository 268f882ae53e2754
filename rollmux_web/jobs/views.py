"""Job pages: list, detail (live), submit form with inline validation, spec-file upload.

Views stay thin: they parse the request, call a service or selector and pick a template
or partial (an htmx request gets the partial, a normal request the page).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import yaml
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from rollmux_web.accounts.selectors import can_submit, sees_all_tenants, visible_tenants
from rollmux_web.htmx import HtmxHttpRequest, render_partial
from rollmux_web.inventory.models import PoolKind
from rollmux_web.inventory.selectors import runner_allowlist
from rollmux_web.jobs.curve import curve_geometry, curve_svg, metric_text
from rollmux_web.jobs.models import JobStatus
from rollmux_web.jobs.runners import time_scale_of
from rollmux_web.jobs.selectors import (
    DEFAULT_ORDERING,
    duration_suggestion,
    job_archive,
    job_drift,
    job_get,
    job_list,
    job_phase_summary,
    job_ray_placement,
    placement_history,
    pool_limits,
    solo_cost_per_iteration,
    training_curve,
    training_latest,
)
from rollmux_web.jobs.serializers import JobSpecSerializer
from rollmux_web.jobs.services import QUOTA_CODES, JobRejected, job_cancel, job_submit
from rollmux_web.jobs.spec import (
    BUILTIN_RUNNERS,
    EXAMPLE_SPEC,
    MAX_TIME_SCALE,
    MIN_TIME_SCALE,
    PHASE_TIME_NAMES,
    SPEC,
    SPEC_FIELDS,
    SpecField,
    parse_error_text,
    spec_field,
)
from rollmux_web.jobs.spec_yaml import load_spec_text
from rollmux_web.listing import choice, page_of
from rollmux_web.quotas.models import SloClass


def _db_text(value: str) -> str:
    # PostgreSQL text cannot hold NUL; a NUL in a filter must not become a 500
    return value.replace("\x00", "")


@dataclass(frozen=True)
class FormField:
    """How the submit form shows one spec field (jobs.spec holds the field itself)."""

    name: str
    label: str
    kind: str  # text | number | select
    help: str
    step: str
    required: bool
    max_length: int | None  # the spec's limits, as the input's maxlength, min and max
    min_value: float | None
    max_value: float | None


def _form_field(f: SpecField) -> FormField:
    kind = "select" if f.reference else "number" if f.kind in ("int", "float") else "text"
    step = "1" if f.kind == "int" else "any"
    return FormField(
        f.name, f.label, kind, f.help, step, f.required, f.max_length, f.min_value, f.max_value
    )


FORM_FIELDS = tuple(_form_field(f) for f in SPEC)
OPTIONAL_NUMBERS = {f.name for f in SPEC if not f.required and f.kind != "text"}


def spec_from_post(data: Any) -> dict[str, Any]:
    """Return a job spec from form data: blank optional fields are left out."""
    spec: dict[str, Any] = {}
    for name in SPEC_FIELDS:
        value = data.get(name)
        if value is None:
            continue
        value = value.strip()
        if value == "" and (name in OPTIONAL_NUMBERS or name == "tenant"):
            continue
        spec[name] = value
    return spec


def _field_errors(user: Any, spec: dict[str, Any], name: str) -> list[str]:
    """Return the messages for one field, exactly as a full submission reports them.

    The serializer runs its cross-field checks (min above max, tenant) on every field that
    is valid on its own, so inline validation and "Submit job" show the same errors.
    """
    ser = JobSpecSerializer(data=spec, context={"user": user})
    if ser.is_valid():
        return []
    return [str(m) for m in ser.errors.get(name, [])]


def _hints(allowed: list[str]) -> dict[str, str]:
    """Return the form's hints that depend on the cluster and the settings: the node size
    of each pool, the host-memory limit, the default time scale and the allowed runners."""
    pools = pool_limits()
    hints: dict[str, str] = {}
    for name, kind, label in (
        ("rollout_gpus", PoolKind.ROLLOUT, "rollout pool"),
        ("train_gpus", PoolKind.TRAIN, "training pool"),
    ):
        p = pools.get(kind)
        if p is not None:
            hints[name] = (
                f"a multiple of {p.gpus_per_node} (one {p.gpu_type} node has {p.gpus_per_node} "
                f"GPUs; the {label} has {p.nodes} nodes)"
            )
    mems = [p.host_mem_gb for p in pools.values()]
    if mems:
        hints["host_mem_gb"] = (
            f"resident state on each node; at most {min(mems):g} GB (what a node has)"
        )
    scale = f"{settings.ROLLMUX_TIME_SCALE:g}"
    hints["time_scale"] = (
        f"emulation speed-up, {MIN_TIME_SCALE:g} to {MAX_TIME_SCALE:,.0f}; blank = the server "
        f"default, {scale}x for emulated and toy-rl (1x for other runners)"
    )
    registered = f"; registered: {', '.join(allowed)}" if allowed else ""
    hints["runner"] = (
        f"{', '.join(BUILTIN_RUNNERS)} or package.module:ClassName of a registered package"
        f"{registered}"
    )
    for name in ("t_roll_max_s", "t_train_max_s"):
        phase = "rollout" if name.startswith("t_roll") else "training"
        hints[name] = (
            f"worst-case solo {phase}, in profile seconds (at time scale {scale} an emulated "
            f"job runs it {scale}x faster in wall-clock time); leave all four phase times "
            "blank to have the job profiled first"
        )
    return hints


def _form_context(
    request: HttpRequest, values: dict[str, Any], errors: dict[str, list[str]]
) -> dict[str, Any]:
    tenants = list(visible_tenants(request.user).values_list("name", flat=True))
    choices = {
        "tenant": tenants,
        "slo_class": list(SloClass.objects.values_list("name", flat=True)),
    }
    allowed = runner_allowlist()
    hints = _hints(allowed)
    fields = [
        {
            "f": f,
            "help": hints.get(f.name, f.help),
            "value": values.get(f.name, ""),
            "errors": errors.get(f.name, []),
            "choices": choices.get(f.name, []),
        }
        for f in FORM_FIELDS
    ]
    return {
        "fields": fields,
        "non_field_errors": errors.get("non_field_errors", []),
        "runners": [*BUILTIN_RUNNERS, *(r for r in allowed if ":" in r)],
        "max_bytes": settings.SPEC_FILE_MAX_BYTES,
    }


def _require_submitter(request: HttpRequest) -> None:
    if not can_submit(request.user):
        raise PermissionDenied("Your role may not submit jobs.")


# The form starts with the example job of docs/api.md, without its name.
DEFAULTS = {k: str(v) for k, v in EXAMPLE_SPEC.items() if k != "name"}


@login_required
@require_http_methods(["GET", "POST"])
def job_new(request: HttpRequest) -> HttpResponse:
    """Show the submit form; on POST submit the job or show every field's error."""
    _require_submitter(request)
    if request.method == "POST":
        spec = spec_from_post(request.POST)
        try:
            job = job_submit(user=request.user, spec=spec, channel="form")
        except JobRejected as exc:
            ctx = _form_context(request, dict(request.POST.items()), exc.fields)
            ctx["quota_refused"] = exc.code in QUOTA_CODES
            return render(request, "jobs/new.html", ctx, status=exc.http_status)
        return redirect("jobs:detail", job_id=job.pk)
    values = dict(DEFAULTS)
    values.update(request.GET.dict())
    return render(request, "jobs/new.html", _form_context(request, values, {}))


@login_required
@require_POST
def job_validate(request: HttpRequest) -> HttpResponse:
    """Return the error partial of one field (?field=NAME) for the values in the form."""
    _require_submitter(request)
    name = request.GET.get("field", "")
    if name not in SPEC_FIELDS:
        return HttpResponse(f"Unknown field {name[:40]!r}", status=400)
    spec = spec_from_post(request.POST)
    if name not in PHASE_TIME_NAMES:
        errors = _field_errors(request.user, spec, name)
        return render(request, "jobs/new.html#field_error", {"name": name, "errors": errors})
    # the four phase times are checked together (both maxima or none): the others' errors
    # are refreshed out of band, so clearing one never leaves a stale error on another
    ser = JobSpecSerializer(data=spec, context={"user": request.user})
    all_errors = {} if ser.is_valid() else ser.errors

    def part(field: str) -> str:
        errors = [str(m) for m in all_errors.get(field, [])]
        return render_to_string(
            "jobs/new.html#field_error", {"name": field, "errors": errors}, request=request
        )

    html = part(name) + "".join(
        f'<div id="err-{other}" hx-swap-oob="innerHTML">{part(other)}</div>'
        for other in PHASE_TIME_NAMES
        if other != name
    )
    return HttpResponse(html)


def _number(data: Any, name: str) -> float | None:
    """Return a preview number within its spec field's bounds (None: not one; "inf" made
    int() raise, a 500)."""
    try:
        value = float(data.get(name, ""))
    except (TypeError, ValueError):
        return None
    f = spec_field(name)
    if not math.isfinite(value) or value < 0 or value > (f.max_value or math.inf):
        return None
    return value


@login_required
@require_GET
def job_preview(request: HttpRequest) -> HttpResponse:
    """Return the solo cost per iteration of the values in the form (partial)."""
    _require_submitter(request)
    values = {n: _number(request.GET, n) for n in ("rollout_gpus", "train_gpus")}
    values |= {n: _number(request.GET, n) for n in ("t_roll_max_s", "t_train_max_s")}
    iterations = _number(request.GET, "iterations")
    ctx: dict[str, Any] = {"ok": None not in values.values()}
    if ctx["ok"]:
        cost = solo_cost_per_iteration(
            rollout_gpus=int(values["rollout_gpus"] or 0),
            train_gpus=int(values["train_gpus"] or 0),
            t_roll_max_s=values["t_roll_max_s"] or 0.0,
            t_train_max_s=values["t_train_max_s"] or 0.0,
        )
        ctx["cost"] = cost
        ctx["iterations"] = int(iterations) if iterations else None
        ctx["total_busy"] = cost.busy_usd * iterations if iterations else None
        ctx["total_dedicated"] = cost.dedicated_usd * iterations if iterations else None
        iter_s = (values["t_roll_max_s"] or 0.0) + (values["t_train_max_s"] or 0.0)
        ctx["iteration_s"] = iter_s
        # these dollars are at profile time; an emulated run holds its nodes 1/scale as
        # long, and the cost report bills the wall-clock time it held them
        runner = request.GET.get("runner", "").strip()
        scale = _number(request.GET, "time_scale")
        ctx["time_scale"] = time_scale_of(runner, scale if scale and math.isfinite(scale) else None)
    ctx["profiled"] = not any(request.GET.get(n, "").strip() for n in PHASE_TIME_NAMES)
    ctx["profile_iterations"] = settings.ROLLMUX_PROFILE_ITERATIONS
    gpus = (values["rollout_gpus"], values["train_gpus"])
    tenant = request.GET.get("tenant", "").strip()[:64].replace("\x00", "")
    model = request.GET.get("model", "").strip()[:128].replace("\x00", "")
    if None not in gpus and tenant and model:
        ctx["suggestion"] = duration_suggestion(
            user=request.user,
            tenant=tenant,
            model=model,
            rollout_gpus=int(gpus[0] or 0),
            train_gpus=int(gpus[1] or 0),
        )
    return render(request, "jobs/new.html#preview", ctx)


@login_required
@require_http_methods(["GET", "POST"])
def job_upload(request: HttpRequest) -> HttpResponse:
    """Submit a job from an uploaded YAML or JSON spec file (same fields, same checks)."""
    _require_submitter(request)
    ctx: dict[str, Any] = {"max_bytes": settings.SPEC_FILE_MAX_BYTES, "errors": {}}
    if request.method == "GET":
        return render(request, "jobs/upload.html", ctx)
    upload = request.FILES.get("file")
    errors: dict[str, list[str]] = {}
    spec: Any = None
    if upload is None:
        errors["file"] = ["Choose a YAML or JSON spec file."]
    elif upload.size is not None and upload.size > settings.SPEC_FILE_MAX_BYTES:
        errors["file"] = [
            f"The file is {upload.size:,} bytes; the limit is "
            f"{settings.SPEC_FILE_MAX_BYTES:,} bytes."
        ]
    else:
        try:
            # YAML is a superset of JSON, so one parser reads both; aliases, deep nesting
            # and huge documents are refused while it reads (jobs.spec_yaml)
            spec = load_spec_text(upload.read().decode("utf-8"))
        except (UnicodeDecodeError, yaml.YAMLError) as exc:
            errors["file"] = [f"Not valid YAML or JSON: {parse_error_text(exc)}"]
        else:
            if not isinstance(spec, dict):
                errors["file"] = ["The file must hold one object of field names to values."]
    if not errors:
        try:
            job = job_submit(user=request.user, spec=spec, channel="upload")
        except JobRejected as exc:
            errors = exc.fields
            ctx["status"] = exc.http_status
        else:
            return redirect("jobs:detail", job_id=job.pk)
    ctx["errors"] = errors
    return render(request, "jobs/upload.html", ctx, status=ctx.get("status", 400))


SORTS = (("-submitted", "newest"), ("submitted", "oldest"), ("name", "name"), ("status", "status"))


@login_required
@require_GET
def job_list_page(request: HtmxHttpRequest) -> HttpResponse:
    """List visible jobs with status/tenant filters, sorting and pages; rows poll via htmx."""
    errors: list[str] = []  # a bad filter is named, and the list shown without it
    status = choice(request.GET, "status", ["", *JobStatus.values], "", errors)
    tenant = _db_text(request.GET.get("tenant", "")[:64])
    sort = choice(request.GET, "sort", list(dict(SORTS)), DEFAULT_ORDERING, errors)
    qs = job_list(user=request.user, status=status, tenant=tenant, ordering=sort)
    page = page_of(qs, 25, request.GET, errors)
    query = {k: v for k, v in {"status": status, "tenant": tenant, "sort": sort}.items() if v}
    tenants = list(visible_tenants(request.user).values_list("name", flat=True))
    ctx = {
        "page": page,
        "jobs": page.object_list,
        "status": status,
        "tenant": tenant,
        "sort": sort,
        "sorts": SORTS,
        "statuses": JobStatus.choices,
        "tenants": tenants,
        "show_tenant_filter": sees_all_tenants(request.user) or len(tenants) > 1,
        "query": urlencode(query),
        "page_query": urlencode({**query, "page": page.number}),
        "can_submit": can_submit(request.user),
        "errors": errors,
    }
    status_code = 400 if errors else 200
    if request.htmx:
        return render(request, "jobs/list.html#rows", ctx, status=status_code)
    return render(request, "jobs/list.html", ctx, status=status_code)


def _detail_context(request: HttpRequest, job_id: int) -> dict[str, Any]:
    job = job_get(user=request.user, job_id=job_id)
    history = placement_history(job, request.user)
    placement = history[0] if history else None
    cost = (
        solo_cost_per_iteration(
            rollout_gpus=job.rollout_gpus,
            train_gpus=job.train_gpus,
            t_roll_max_s=job.t_roll_max_s,
            t_train_max_s=job.t_train_max_s,
        )
        if job.t_roll_max_s is not None and job.t_train_max_s is not None
        else None  # (profiling: no phase times yet)
    )
    phases = job_phase_summary(job=job)
    return {
        "job": job,
        "placement": placement,
        "rollout_nodes": sorted(n.name for n in placement.rollout_nodes.all()) if placement else [],
        "train_nodes": sorted(n.name for n in placement.train_nodes.all()) if placement else [],
        "earlier_placements": history[1:],
        "phases": phases,
        # (the page reads it only where no phase is left in the table: asked only then)
        "archive": None if phases else job_archive(job=job),
        "retention_days": settings.ROLLMUX_PHASE_RETENTION_DAYS,
        "ray": job_ray_placement(job=job),
        "time_scale": time_scale_of(job.runner, job.time_scale),
        "drift": job_drift(job=job),
        "cost": cost,
        "training": _training_context(job),
        "can_cancel": can_submit(request.user)
        and not job.is_terminal
        and not (job.cancel_requested and job.status != JobStatus.QUEUED),
    }


def _training_context(job: Any) -> dict[str, Any] | None:
    """The reward curve (SVG) and the last iteration's training metrics; None: none yet."""
    latest = training_latest(job=job)
    if latest is None:
        return None
    geo = curve_geometry(training_curve(job=job))
    return {
        "curve": curve_svg(geo) if geo is not None else None,
        "summary": geo.summary if geo is not None else "",
        "latest": latest,
        "metrics": [
            (name, metric_text(getattr(latest, name)))
            for name in latest.METRICS
            if getattr(latest, name) is not None
        ],
    }


@login_required
@require_GET
def job_detail(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """Show one job; an htmx poll gets the live partial, with 286 once the job has ended."""
    ctx = _detail_context(request, job_id)
    if request.htmx:
        return render_partial(
            request, "jobs/detail.html#live", ctx, stop_polling=ctx["job"].is_terminal
        )
    return render(request, "jobs/detail.html", ctx)


@login_required
@require_POST
def job_cancel_page(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """Cancel from the detail page (CSRF-protected POST)."""
    error = ""
    try:
        job_cancel(user=request.user, job_id=job_id)
    except JobRejected as exc:
        error = exc.message
    if request.htmx:
        ctx = _detail_context(request, job_id)
        ctx["cancel_error"] = error
        return render_partial(
            request, "jobs/detail.html#live", ctx, stop_polling=ctx["job"].is_terminal
        )
    if error:
        from django.contrib import messages

        messages.error(request, error)
    return redirect("jobs:detail", job_id=job_id)
