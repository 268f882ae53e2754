"""REST endpoints of the reports app: the same selectors as the pages, as JSON."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from rollmux_web.reports import exports, selectors
from rollmux_web.reports.forms import DateRangeForm
from scheduler.collector import gc_paused

RANGE_PARAMS = [
    OpenApiParameter(
        "start", OpenApiTypes.DATE, description="first day (YYYY-MM-DD, UTC); default: month start"
    ),
    OpenApiParameter(
        "end", OpenApiTypes.DATE, description="last day, inclusive (YYYY-MM-DD); default: today"
    ),
]
# the reports' jobs a page (the cost report's `by_job` and `lines`, the SLO report's `jobs`)
PAGE_SIZE, MAX_PAGE_SIZE = 500, 5000


def page_params(what: str) -> list[OpenApiParameter]:
    """The `page` and `page_size` parameters of a report whose `what` is paged by job."""
    return [
        OpenApiParameter("page", OpenApiTypes.INT, description=f"the page of {what}; default 1"),
        OpenApiParameter(
            "page_size",
            OpenApiTypes.INT,
            description=f"jobs a page (1 to {MAX_PAGE_SIZE}); default {PAGE_SIZE}",
        ),
    ]


MONEY = {"help_text": "USD with two decimals, as a string (exact)"}
ROUNDING = (
    "Rounding: in a row of `by_tenant`, `by_gpu_type` or `by_stage`, `busy_cost` and "
    "`idle_cost` are each the exact sum rounded half-up to the cent once, and `cost` is "
    "their sum; `total` is the `by_tenant` rows added up (so `by_gpu_type` can be a cent "
    "a row off it). `lines` are billing lines, billed per tenant with a running "
    "remainder (a tenant's lines in a fixed order, finished jobs first in the order they "
    "ended; each line's cents are the tenant's exact sum so far rounded, minus the same "
    "before it), so a tenant's lines add up exactly to its `by_tenant` row and all lines "
    "to `total` (as the FOCUS CSV and Parquet rows do), a line is less than a cent off its "
    "own exact amount, and a finished job's lines never change between two runs; the "
    "counterfactuals of a row or line are its exact ones rounded once. "
    "`burn_down[].spent` for the report's own month is the "
    "tenant's `by_tenant` cost. A job's profiling run is billed on lines of its own "
    "(`stage` profile; its production run's lines are `stage` run); `by_stage` sums each "
    "stage (exact, rounded once), and `by_job` gives each job's profiling run, production "
    "run and total from its billed lines (`cost` = `profile_cost` + `run_cost`); a row of "
    "`total`, `by_tenant`, `by_gpu_type` or `by_stage` carries `profile_cost`, the part of "
    "its cost its profiling runs make."
)
PAGING = (
    " Paging: `by_job` and `lines` hold one page of the range's jobs (`page`, `page_size`; "
    "`jobs_count` and `pages` say how many) and that page's lines; everything else is the "
    "whole range's. The cents of a line do not depend on the page; the lines of all pages "
    "add up to `total`."
)


class CostTotalsSerializer(serializers.Serializer):  # type: ignore[misc,unused-ignore]
    key = serializers.CharField()
    gpu_hours = serializers.CharField()
    busy_gpu_hours = serializers.CharField()
    idle_gpu_hours = serializers.CharField()
    cost = serializers.CharField(**MONEY)
    busy_cost = serializers.CharField(**MONEY)
    idle_cost = serializers.CharField(help_text="the idle (bubble) share of allocated nodes")
    solo_disagg_cost = serializers.CharField(help_text="the same work on dedicated pools")
    colocated_cost = serializers.CharField(help_text="the same work on co-located training GPUs")
    saving_vs_solo_disagg = serializers.CharField(**MONEY)
    saving_vs_colocated = serializers.CharField(**MONEY)
    profile_cost = serializers.CharField(
        help_text="of `cost`, the part its jobs' profiling runs make (exact, rounded once)"
    )


class CostLineSerializer(CostTotalsSerializer):
    key = None
    profile_cost = None
    tenant = serializers.CharField()
    job_id = serializers.IntegerField()
    job = serializers.CharField()
    gpu_type = serializers.CharField()
    stage = serializers.ChoiceField(
        choices=["profile", "run"],
        help_text="profile: the job's profiling run (its own group); run: its production run",
    )
    groups = serializers.ListField(child=serializers.IntegerField())


class JobCostSerializer(serializers.Serializer):  # type: ignore[misc,unused-ignore]
    tenant = serializers.CharField()
    job_id = serializers.IntegerField()
    job = serializers.CharField()
    profile_gpu_hours = serializers.CharField(help_text="GPU-hours of its profiling run")
    profile_cost = serializers.CharField(help_text="USD billed for its profiling run")
    run_gpu_hours = serializers.CharField(help_text="GPU-hours of its production run")
    run_cost = serializers.CharField(help_text="USD billed for its production run")
    gpu_hours = serializers.CharField(help_text="profile_gpu_hours + run_gpu_hours")
    cost = serializers.CharField(help_text="profile_cost + run_cost (its billed lines' sum)")


class BurnDownSerializer(serializers.Serializer):  # type: ignore[misc,unused-ignore]
    tenant = serializers.CharField()
    month = serializers.DateField()
    budget = serializers.CharField(allow_null=True)
    spent = serializers.CharField(
        help_text="USD spent this month to date (for the report's own month: the tenant row)"
    )


class CostReportSerializer(serializers.Serializer):  # type: ignore[misc,unused-ignore]
    start = serializers.DateField()
    end = serializers.DateField()
    currency = serializers.CharField()
    total = CostTotalsSerializer()
    by_tenant = CostTotalsSerializer(many=True)
    by_gpu_type = CostTotalsSerializer(many=True)
    by_stage = CostTotalsSerializer(many=True, help_text="profiling runs, then production runs")
    by_job = JobCostSerializer(many=True, help_text="the page's jobs (`page`, `page_size`)")
    lines = CostLineSerializer(many=True, help_text="the billing lines of the page's jobs")
    jobs_count = serializers.IntegerField(help_text="jobs in the range (all pages)")
    page = serializers.IntegerField()
    pages = serializers.IntegerField()
    page_size = serializers.IntegerField()
    burn_down = BurnDownSerializer(many=True)


class SloAttainmentSerializer(serializers.Serializer):  # type: ignore[misc,unused-ignore]
    tenant = serializers.CharField()
    slo_class = serializers.CharField()
    finished = serializers.IntegerField()
    met = serializers.IntegerField()
    attainment = serializers.FloatField(allow_null=True)
    attainment_vs_profile = serializers.FloatField(allow_null=True)
    in_progress = serializers.IntegerField()
    cancelled_or_failed = serializers.IntegerField()


class JobSloSerializer(serializers.Serializer):  # type: ignore[misc,unused-ignore]
    job_id = serializers.IntegerField()
    job = serializers.CharField()
    tenant = serializers.CharField()
    slo_class = serializers.CharField()
    slo = serializers.FloatField(help_text="the SLO class's value when the job was admitted")
    slo_now = serializers.FloatField(
        allow_null=True, help_text="the class's value today, when it changed since (else null)"
    )
    solo_source = serializers.CharField(help_text="how the solo iteration time was obtained")
    profile_source = serializers.CharField(help_text="declared, profiled or learned")
    status = serializers.CharField()
    iterations_measured = serializers.IntegerField()
    mean_iteration_s = serializers.FloatField()
    solo_iteration_s = serializers.FloatField()
    profile_iteration_s = serializers.FloatField()
    slowdown_vs_solo = serializers.FloatField()
    slowdown_vs_profile = serializers.FloatField()
    met = serializers.BooleanField(allow_null=True, help_text="null: cancelled or failed (n/a)")
    groups = serializers.ListField(child=serializers.IntegerField())


class SloReportSerializer(serializers.Serializer):  # type: ignore[misc,unused-ignore]
    start = serializers.DateField()
    end = serializers.DateField()
    overall = SloAttainmentSerializer()
    attainment = SloAttainmentSerializer(many=True)
    jobs = JobSloSerializer(many=True, help_text="the page's jobs (`page`, `page_size`)")
    jobs_count = serializers.IntegerField(help_text="jobs in the range (all pages)")
    violations_count = serializers.IntegerField(help_text="jobs that missed their SLO (all pages)")
    page = serializers.IntegerField()
    pages = serializers.IntegerField()
    page_size = serializers.IntegerField()


BAD_RANGE = OpenApiResponse(description="a reversed range, one over 366 days, or not a date")


def _range(request: Request) -> tuple[Any, Any]:
    form = DateRangeForm(request.query_params)
    if not form.is_valid():
        raise serializers.ValidationError({k: [str(e) for e in v] for k, v in form.errors.items()})
    return form.cleaned_data["start"], form.cleaned_data["end"]


class CostReportApi(APIView):  # type: ignore[misc,unused-ignore]
    """Cost per tenant, job and GPU type over a date range (money as strings, USD)."""

    @extend_schema(
        parameters=[*RANGE_PARAMS, *page_params("jobs (`by_job`, `lines`)")],
        responses={200: CostReportSerializer, 400: BAD_RANGE},
        description=ROUNDING + PAGING,
    )
    @gc_paused()  # ~30,000 lines a month at a fleet's size, as the page
    def get(self, request: Request) -> Response:
        start, end = _range(request)
        page, size = _page(request)
        report = selectors.cost_report_page(
            user=request.user, start=start, end=end, page=page, page_size=size
        )
        _page_exists(page, size, report.jobs_count or 0)
        return Response(exports.cost_report_json(report, page=page, page_size=size))


def _page(request: Request) -> tuple[int, int]:
    """Return the `page` and `page_size` a report's request asks for (400 naming a bad one)."""
    page = _int_param(request, "page", 1, 1, None)
    return page, _int_param(request, "page_size", PAGE_SIZE, 1, MAX_PAGE_SIZE)


def _page_exists(page: int, size: int, count: int) -> int:
    """Return how many pages `count` jobs make; a 400 naming `page` when it is past them."""
    pages = exports.page_count(count, size)
    if page > pages:
        raise serializers.ValidationError({"page": [f"{page} is not a page (1 to {pages})."]})
    return pages


def _int_param(request: Request, name: str, default: int, lo: int, hi: int | None) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        value = lo - 1
    if value < lo or (hi is not None and value > hi):
        upto = "" if hi is None else f" to {hi}"
        raise serializers.ValidationError({name: [f"{raw!r} is not a whole number {lo}{upto}."]})
    return value


class ParquetRenderer(BaseRenderer):  # type: ignore[misc,unused-ignore]
    """Send a Parquet file the view has already built (bytes, passed through)."""

    media_type = exports.PARQUET_MEDIA_TYPE
    format = "parquet"
    charset = None
    render_style = "binary"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        return data if isinstance(data, bytes) else b""


class CostParquetApi(APIView):  # type: ignore[misc,unused-ignore]
    """The cost report's FinOps FOCUS rows as a Parquet file: the CSV's rows and columns.

    Timestamps in UTC, BilledCost / EffectiveCost / ListCost as decimal(18, 2),
    ConsumedQuantity as decimal(18, 4), the rest (Tags: a JSON object) as strings.
    """

    # one renderer: no `format` override to document or to answer 404 for; errors are
    # still JSON in the API's one shape {"error": ...} (finalize_response)
    renderer_classes = [ParquetRenderer]

    @extend_schema(
        parameters=RANGE_PARAMS,
        responses={(200, exports.PARQUET_MEDIA_TYPE): OpenApiTypes.BINARY, 400: BAD_RANGE},
    )
    def get(self, request: Request) -> Response:
        start, end = _range(request)
        report = selectors.cost_report(
            user=request.user, start=start, end=end, with_burn_down=False
        )
        filename = exports.focus_filename(report, "parquet")
        return Response(
            exports.focus_parquet(report),
            headers={"Content-Disposition": f'attachment; filename="{filename}"'},
        )

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        # the file when there is one, the JSON error otherwise, whatever the client accepted
        if isinstance(response, Response):
            renderer = ParquetRenderer() if isinstance(response.data, bytes) else JSONRenderer()
            request.accepted_renderer, request.accepted_media_type = renderer, renderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


class SloReportApi(APIView):  # type: ignore[misc,unused-ignore]
    """SLO attainment per tenant and class, and each job's measured slowdown."""

    @extend_schema(
        parameters=[*RANGE_PARAMS, *page_params("jobs (`jobs`)")],
        responses={200: SloReportSerializer, 400: BAD_RANGE},
        description=" Paging: `jobs` holds one page of the range's jobs in the report's order "
        "(tenant, SLO class, slowdown vs solo descending, newest first; `page`, `page_size`; "
        "`jobs_count` and `pages` say how many); the attainment and `violations_count` are "
        "the whole range's.",
    )
    @gc_paused()  # as the page
    def get(self, request: Request) -> Response:
        start, end = _range(request)
        page, size = _page(request)
        # (a fleet's month is ~14,800 jobs: ordered, counted and paged in SQL, as the page)
        report = selectors.slo_report_page(
            user=request.user, start=start, end=end, page=page, vpage=None, page_size=size
        )
        pages = _page_exists(page, size, report.jobs_count)
        paging = {"page": page, "pages": pages, "page_size": size}
        return Response(selectors.slo_report_json(report) | paging)
