"""Pages of the reports app: thin views over the selectors; htmx requests get partials."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods

from rollmux_web.htmx import HtmxHttpRequest, render_partial
from rollmux_web.listing import choice, page_counted, page_of, requested_page
from rollmux_web.quotas.models import SloClass
from rollmux_web.reports import (
    exports,
    selectors,
    svg,
    whatif_present,
    whatif_runs,
    whatif_selectors,
    whatif_services,
)
from rollmux_web.reports.forms import DateRangeForm, PreviewForm, WhatIfForm, month_shortcuts
from rollmux_web.reports.models import WhatIfRun, queue_scope_label
from rollmux_web.reports.selectors.archived import archive_file_uri, archived_notes
from rollmux_web.workflow import archive_store
from rollmux_web.workflow.access import group_get_for_user, job_get_for_user
from scheduler.collector import gc_paused


@login_required
@require_GET
@gc_paused()  # at a fleet's size its groups' meta-iterations and the last day's costs
def overview(request: HtmxHttpRequest) -> HttpResponse:
    data = selectors.cluster_overview(user=request.user)
    template = "reports/overview.html#live" if request.htmx else "reports/overview.html"
    return render(request, template, {"o": data})


# --------------------------------------------------------------------------- timelines


# the chart card's width in CSS px, kept by static/js/timeline.js for the next page's chart
WIDTH_COOKIE = "gantt_width"


def _width(request: HttpRequest) -> int | None:
    """Return the chart width the page asked for (?width=, else the cookie timeline.js
    keeps), or None if it has not said (no JavaScript, or the first chart it shows)."""
    for raw in (request.GET.get("width"), request.COOKIES.get(WIDTH_COOKIE)):
        try:
            return int(raw or "")
        except ValueError:
            continue
    return None


def _timeline_page(
    request: HtmxHttpRequest, *, build: Any, template: str, extra: dict[str, Any]
) -> HttpResponse:
    start, end = request.GET.get("start"), request.GET.get("end")
    error = ""
    asked = _width(request)
    width = selectors.DEFAULT_WIDTH if asked is None else asked
    try:
        tl = build(start=start, end=end, width=width)
    except selectors.ReportInputError as exc:
        error = f"{exc.field}: {exc.message}"  # names the box (start, end), as the ranges do
        tl = build(start=None, end=None, width=width)
    ctx = {"tl": tl, "chart": svg.timeline_svg(tl, fitted=asked is not None), "error": error}
    ctx |= extra
    ctx["zoom"] = _zoom_links(tl)
    if request.htmx:
        return render_partial(request, f"{template}#chart", ctx, stop_polling=not tl.live)
    return render(request, template, ctx)


# the first and last moments a window's links can name (datetime's own range, in UTC)
EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(microsecond=0, tzinfo=UTC)


def _zoom_links(tl: selectors.Timeline) -> dict[str, str]:
    """Return query strings to zoom in/out and pan, computed on the server."""
    span = tl.t1 - tl.t0
    mid = tl.t0 + span / 2

    def iso(t: datetime, sep: str = "T") -> str:
        # (not strftime's %Y: it writes the year 1 as "1", which the window's parser refuses)
        return t.replace(tzinfo=None).isoformat(sep, timespec="seconds")

    def q(a: datetime, b: datetime) -> str:
        return f"?start={iso(a)}&end={iso(b)}"

    def at(t: datetime, by: timedelta) -> datetime:
        # a window on the calendar's first or last days zooms out and pans only to its edge
        try:
            return t + by
        except OverflowError:
            return EARLIEST if by < timedelta(0) else LATEST

    return {
        "in": q(at(mid, -span / 4), at(mid, span / 4)),
        "out": q(at(mid, -span), at(mid, span)),
        "left": q(at(tl.t0, -span / 2), at(tl.t1, -span / 2)),
        "right": q(at(tl.t0, span / 2), at(tl.t1, span / 2)),
        # the window picker's fields: 24-hour UTC, as every time on the page
        "start": iso(tl.t0, " "),
        "end": iso(tl.t1, " "),
    }


@login_required
@require_GET
def group_list(request: HttpRequest) -> HttpResponse:
    errors: list[str] = []
    state = choice(request.GET, "state", selectors.GROUP_STATES, "all", errors)
    page = page_of(
        selectors.visible_group_ids(user=request.user, state=state), 50, request.GET, errors
    )
    ctx = {
        "groups": selectors.group_rows(user=request.user, groups=page.object_list),
        "page": page,
        "state": state,
        "states": selectors.GROUP_STATES,
        "errors": errors,
    }
    return render(request, "reports/groups.html", ctx, status=400 if errors else 200)


@login_required
@require_GET
def group_timeline(request: HtmxHttpRequest, group_id: int) -> HttpResponse:
    group = group_get_for_user(user=request.user, group_id=group_id)

    def build(**kw: Any) -> selectors.Timeline:
        return selectors.group_timeline(user=request.user, group_id=group_id, group=group, **kw)

    members = selectors.group_list_members(user=request.user, group=group)
    return _timeline_page(
        request,
        build=build,
        template="reports/group_timeline.html",
        extra={
            "group": group,
            "members": members,
            "profile_run": any(m["profile"] for m in members),
            "archived": archived_notes(user=request.user, group_id=group_id),
        },
    )


@login_required
@require_GET
def job_timeline(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job = job_get_for_user(user=request.user, job_id=job_id)

    def build(**kw: Any) -> selectors.Timeline:
        return selectors.job_timeline(user=request.user, job_id=job_id, **kw)

    return _timeline_page(
        request,
        build=build,
        template="reports/job_timeline.html",
        extra={"job": job, "archived": archived_notes(user=request.user, job_id=job_id)},
    )


@login_required
@require_GET
def job_outcome(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """A finished job's achieved slowdown and cost: the job page loads it (htmx), the
    link beside it shows it as a page of its own."""
    ctx = {"outcome": selectors.job_outcome(user=request.user, job_id=job_id)}
    if request.htmx:
        return render(request, "reports/job_outcome.html#outcome", ctx)
    return render(request, "reports/job_outcome.html", ctx)


@login_required
@require_GET
def job_archive_file(request: HttpRequest, job_id: int, index: int) -> FileResponse:
    """Download one of a job's archive files (Parquet) through the app: its URI (file://,
    s3://, ...) is one a browser cannot open from this page, or reach at all."""
    uri = archive_file_uri(user=request.user, job_id=job_id, index=index)
    if uri is None:
        raise Http404("no such archive file")
    try:
        stream, name = archive_store.open_file(uri)
    except FileNotFoundError:
        raise Http404(f"the archive file is no longer at {uri}") from None
    return FileResponse(
        stream, as_attachment=True, filename=name, content_type="application/vnd.apache.parquet"
    )


def _trace_response(data: dict[str, Any], filename: str) -> HttpResponse:
    response = JsonResponse(data)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
@require_GET
def group_trace(request: HttpRequest, group_id: int) -> HttpResponse:
    data = selectors.group_trace(user=request.user, group_id=group_id)
    return _trace_response(data, f"group-{group_id}.trace.json")


@login_required
@require_GET
def job_trace(request: HttpRequest, job_id: int) -> HttpResponse:
    data = selectors.job_trace(user=request.user, job_id=job_id)
    return _trace_response(data, f"job-{job_id}.trace.json")


# --------------------------------------------------------------------------- cost and SLO


def _shortcuts() -> list[tuple[str, Any, Any]]:
    return month_shortcuts(timezone.now().date())


def _range(request: HttpRequest) -> tuple[DateRangeForm, Any, Any]:
    form = DateRangeForm(request.GET or None)
    if not request.GET:
        form = DateRangeForm({})
    if form.is_valid():
        return form, form.cleaned_data["start"], form.cleaned_data["end"]
    return form, None, None


COST_JOBS_PER_PAGE = 200


@login_required
@require_GET
@gc_paused()  # a month at a fleet's size holds ~30,000 lines: no collector scans while it renders
def cost_report(request: HttpRequest) -> HttpResponse:
    form, start, end = _range(request)
    ctx: dict[str, Any] = {"form": form, "report": None, "shortcuts": _shortcuts()}
    if start is not None:
        # a month of a fleet lists ~14,500 jobs: the two per-job tables show a page of jobs
        # (the totals, charts and exports are the whole range's); a page that is not one
        # is named and page 1 shown
        errors: list[str] = []
        number = requested_page(request.GET)
        report = selectors.cost_report_page(
            user=request.user, start=start, end=end, page=number, page_size=COST_JOBS_PER_PAGE
        )
        count = report.jobs_count or 0
        jobs_page = page_counted(
            report.by_job, count, number, COST_JOBS_PER_PAGE, request.GET, errors
        )
        if jobs_page is None:
            if number != 1:
                report = selectors.cost_report_page(
                    user=request.user, start=start, end=end, page=1, page_size=COST_JOBS_PER_PAGE
                )
            jobs_page = page_counted(report.by_job, count, 1, COST_JOBS_PER_PAGE, {}, [])
        ctx["report"] = report
        ctx["query"] = f"start={start:%Y-%m-%d}&end={end:%Y-%m-%d}"
        ctx["jobs_page"] = jobs_page
        ctx["page_lines"] = report.lines
        ctx["page_errors"] = errors
        ctx["tenant_chart"] = svg.bar_chart_svg(
            "Cost per tenant",
            [(t.label, float(t.cost), "#2f5bea") for t in report.by_tenant],
            unit="USD",
        )
        ctx["compare_chart"] = svg.bar_chart_svg(
            "Same work, three ways",
            [
                ("RollMux (actual)", float(report.total.cost), "#2f5bea"),
                ("Dedicated pools", float(report.total.solo_disagg_cost), "#98a2b3"),
                ("Co-located", float(report.total.colocated_cost), "#f79009"),
            ],
            unit="USD",
        )
        ctx["burn_charts"] = [
            (
                b,
                svg.burn_down_svg(
                    b.tenant,
                    b.daily_cumulative,
                    b.budget,
                    days_in_month=_days_in_month(b.month_start),
                ),
            )
            for b in report.burn_down
        ]
    return render(request, "reports/cost.html", ctx, status=200 if form.is_valid() else 400)


def _days_in_month(d: Any) -> int:
    import calendar

    return calendar.monthrange(d.year, d.month)[1]


def _cost_export(
    request: HttpRequest,
    *,
    render: Callable[[selectors.CostReport], str | bytes],
    content_type: str,
    extension: str,
) -> HttpResponse:
    """Answer a FOCUS file download; a bad range is a 400 naming the field, as plain text."""
    form, start, end = _range(request)
    if start is None:
        errors = "; ".join(f"{k}: {' '.join(str(x) for x in v)}" for k, v in form.errors.items())
        return HttpResponse(f"Bad range: {errors}\n", status=400, content_type="text/plain")
    report = selectors.cost_report(user=request.user, start=start, end=end, with_burn_down=False)
    response = HttpResponse(render(report), content_type=content_type)
    filename = exports.focus_filename(report, extension)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
@require_GET
def cost_csv(request: HttpRequest) -> HttpResponse:
    return _cost_export(
        request, render=exports.focus_csv, content_type="text/csv; charset=utf-8", extension="csv"
    )


@login_required
@require_GET
def cost_parquet(request: HttpRequest) -> HttpResponse:
    return _cost_export(
        request,
        render=exports.focus_parquet,
        content_type=exports.PARQUET_MEDIA_TYPE,
        extension="parquet",
    )


SLO_JOBS_PER_PAGE = 200


@login_required
@require_GET
@gc_paused()  # a month at a fleet's size holds ~15,000 jobs' rows: as the cost report
def slo_report(request: HttpRequest) -> HttpResponse:
    form, start, end = _range(request)
    ctx: dict[str, Any] = {"form": form, "report": None, "shortcuts": _shortcuts()}
    if start is not None:
        # a fleet's month lists ~14,500 jobs: the per-job table and the violations show a
        # page of them each (?page=, ?vpage=; the attainment, the violations' count and
        # the chart are all of them), ordered, counted and paged in SQL; a page that is
        # not one is named and page 1 shown
        errors: list[str] = []
        number = requested_page(request.GET)
        vnumber = requested_page(request.GET, name="vpage")
        report = selectors.slo_report_page(
            user=request.user,
            start=start,
            end=end,
            page=number,
            vpage=vnumber,
            page_size=SLO_JOBS_PER_PAGE,
        )
        jobs_page = page_counted(
            report.jobs, report.jobs_count, number, SLO_JOBS_PER_PAGE, request.GET, errors
        )
        violations_page = page_counted(
            report.violations,
            report.violations_count,
            vnumber,
            SLO_JOBS_PER_PAGE,
            request.GET,
            errors,
            name="vpage",
        )
        if jobs_page is None or violations_page is None:
            again = selectors.slo_report_page(
                user=request.user,
                start=start,
                end=end,
                page=1 if jobs_page is None else number,
                vpage=1 if violations_page is None else vnumber,
                page_size=SLO_JOBS_PER_PAGE,
            )
            if jobs_page is None:
                jobs_page = page_counted(again.jobs, again.jobs_count, 1, SLO_JOBS_PER_PAGE, {}, [])
            if violations_page is None:
                violations_page = page_counted(
                    again.violations, again.violations_count, 1, SLO_JOBS_PER_PAGE, {}, []
                )
        assert jobs_page is not None and violations_page is not None  # (page 1 always is)
        ctx["report"] = report
        ctx["query"] = f"start={start:%Y-%m-%d}&end={end:%Y-%m-%d}"
        ctx["page_errors"] = errors
        ctx["jobs_page"] = jobs_page
        ctx["violations_page"] = violations_page
        selectors.with_groups([*jobs_page, *violations_page])
        ctx["chart"] = svg.bar_chart_svg(
            "SLO attainment per tenant and class (finished jobs)",
            [
                (f"{a.tenant} / {a.slo_class}", a.attainment or 0.0, "#12b76a")
                for a in report.attainment
                if a.finished
            ],
            fmt="{:.0%}",
        )
    return render(request, "reports/slo.html", ctx, status=200 if form.is_valid() else 400)


# --------------------------------------------------------------------------- what-if


def _spec_of(request: HttpRequest) -> dict[str, str]:
    from rollmux_web.jobs.spec import SPEC_FIELDS

    return {k: v for k in SPEC_FIELDS if (v := request.GET.get(k, "").strip())}


def _quota_refusal(request: HttpRequest) -> str:
    from rollmux_web.jobs.services import quota_refusal

    return quota_refusal(user=request.user, spec=_spec_of(request))


def _submission_errors(request: HttpRequest) -> dict[str, list[str]]:
    """Return the job submission's field errors for the preview's query (nothing saved)."""
    from rollmux_web.jobs.serializers import JobSpecSerializer

    ser = JobSpecSerializer(data=_spec_of(request), context={"user": request.user})
    if ser.is_valid():
        return {}
    return {f: [str(m) for m in msgs] for f, msgs in ser.errors.items()}


def _field_label(name: str) -> str:
    """Return a field's label as the submit form shows it ("Training GPUs", not train_gpus)."""
    from rollmux_web.jobs.spec import spec_field

    try:
        return spec_field(name).label
    except KeyError:
        return name.replace("_", " ")


@login_required
@require_GET
def whatif_preview(request: HttpRequest) -> HttpResponse:
    """Answer the submit form's live preview: never a 500, a short hint on bad fields."""
    from rollmux_web.jobs.spec import PHASE_TIME_NAMES

    form = PreviewForm(request.GET)
    ctx: dict[str, Any] = {}
    if not form.is_valid():
        missing = [f for f, errs in form.errors.items() if any("required" in e for e in errs)]
        bad = {f: errs for f, errs in form.errors.items() if f not in missing}
        if bad:
            # every invalid field of the submission (not only the ones the preview reads),
            # in the form's order and the submission's own words (what each field shows
            # inline and after Submit)
            from rollmux_web.jobs.spec import SPEC_FIELDS

            words = _submission_errors(request)
            wrong = [(f, words[f]) for f in SPEC_FIELDS if f in words]
            wrong += [(f, [str(x) for x in e]) for f, e in bad.items() if f not in words]
            ctx["hint"] = " ".join(
                f"{_field_label(f)}: {' '.join(str(x) for x in e)}" for f, e in wrong
            )
        elif set(missing) <= set(PHASE_TIME_NAMES) and not any(
            request.GET.get(n, "").strip() for n in PHASE_TIME_NAMES
        ):
            # no phase times at all: a valid submission, profiled before it is planned
            refusal = _quota_refusal(request)
            ctx["hint"] = refusal or (
                "No phase times: the job is profiled first (alone on free nodes of its shape); "
                "the planner then places it on the measured times."
            )
        else:
            ctx["hint"] = (
                "Fill in "
                + ", ".join(_field_label(f) for f in missing)
                + " to see where this job would go."
            )
        return render(request, "reports/whatif_preview.html", ctx)
    refusal = _quota_refusal(request)
    if refusal:  # the planner's answer would not matter: the submission would be refused
        ctx["p"] = whatif_selectors.Preview(status="REFUSED", reason=refusal)
        return render(request, "reports/whatif_preview.html", ctx)
    slo_name = form.cleaned_data.get("slo_class") or ""
    slo = SloClass.objects.filter(name=slo_name).values_list("slowdown", flat=True).first()
    if slo is None:
        try:
            slo = float(slo_name) if slo_name else None
        except ValueError:
            slo = None
    if slo is None:
        slo = (
            SloClass.objects.order_by("slowdown").values_list("slowdown", flat=True).first() or 1.0
        )
    ctx["p"] = whatif_selectors.whatif_preview(user=request.user, data=form.cleaned_data, slo=slo)
    return render(request, "reports/whatif_preview.html", ctx)


@login_required
@require_http_methods(["GET", "POST"])
def whatif_page(request: HttpRequest) -> HttpResponse:
    status = 200
    queue_label = queue_scope_label(whatif_services.run_tenant(request.user))
    if request.method == "POST":
        form = WhatIfForm(request.POST, request.FILES, queue_label=queue_label)
        if form.is_valid():
            data = form.cleaned_data
            text = data.get("trace_text", "")
            if data["source"] == "queue":
                text = whatif_selectors.queue_trace(user=request.user)
                if not text:
                    form.add_error("source", "No job is queued or running: nothing to simulate.")
            if not form.errors:
                try:
                    jobs = whatif_runs.validate_trace(text)
                except whatif_runs.TraceInvalid as exc:
                    form.add_error("trace", f"The trace is not in the format: {exc}")
                else:
                    policies = list(data["policies"])  # (add_error drops it from data)
                    field = "trace" if data["source"] == "upload" else "source"
                    for error in whatif_runs.policy_errors(jobs, policies):
                        form.add_error("policies", error)
                    for error in whatif_runs.limit_errors(jobs, policies, text=text):
                        form.add_error(field, error)
            if not form.errors:
                for error in whatif_runs.queued_errors(whatif_services.run_tenant(request.user)):
                    form.add_error(None, error)
            if not form.errors:
                run = whatif_services.whatif_start(
                    user=request.user,
                    source=data["source"],
                    trace_text=text,
                    policies=list(data["policies"]),
                    seed=data["seed"],
                )
                messages.success(request, f"What-if run {run.pk} started.")
                return redirect(f"/whatif/{run.pk}/")
        status = 400
    else:
        form = WhatIfForm(queue_label=queue_label)
    runs = whatif_selectors.whatif_runs(user=request.user)
    return render(request, "reports/whatif.html", {"form": form, "runs": runs}, status=status)


@login_required
@require_GET
def whatif_detail(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run = whatif_selectors.whatif_run(user=request.user, run_id=run_id)
    ctx: dict[str, Any] = {"run": run}
    if run.status == WhatIfRun.Status.DONE and run.result:
        cmp = whatif_present.compare(run.result)
        ctx["cmp"] = cmp
        ctx["charts"] = [
            svg.bar_chart_svg(title, items, unit=unit, fmt=fmt)
            for title, items, unit, fmt in cmp.charts
        ]
        ctx["table"] = whatif_present.table(cmp)
    if request.htmx:
        finished = run.status in (WhatIfRun.Status.DONE, WhatIfRun.Status.FAILED)
        response = render_partial(
            request, "reports/whatif_run.html#progress", ctx, stop_polling=finished
        )
        if finished:
            response["HX-Refresh"] = "true"  # show the finished comparison in full
        return response
    return render(request, "reports/whatif_run.html", ctx)
