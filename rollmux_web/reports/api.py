"""REST endpoints of the reports app: the same selectors as the pages, as JSON."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from rollmux_web.reports import selectors
from rollmux_web.reports.forms import DateRangeForm

RANGE_PARAMS = [
    OpenApiParameter("start", str, description="first day (YYYY-MM-DD, UTC); default: month start"),
    OpenApiParameter("end", str, description="last day, inclusive (YYYY-MM-DD); default: today"),
]


def _range(request: Request) -> tuple[Any, Any]:
    form = DateRangeForm(request.query_params)
    if not form.is_valid():
        raise serializers.ValidationError({k: [str(e) for e in v] for k, v in form.errors.items()})
    return form.cleaned_data["start"], form.cleaned_data["end"]


class CostReportApi(APIView):  # type: ignore[misc]
    """Cost per tenant, job and GPU type over a date range (money as strings, USD)."""

    @extend_schema(parameters=RANGE_PARAMS, responses={200: dict})
    def get(self, request: Request) -> Response:
        start, end = _range(request)
        report = selectors.cost_report(user=request.user, start=start, end=end)
        return Response(selectors.cost_report_json(report))


class SloReportApi(APIView):  # type: ignore[misc]
    """SLO attainment per tenant and class, and each job's measured slowdown."""

    @extend_schema(parameters=RANGE_PARAMS, responses={200: dict})
    def get(self, request: Request) -> Response:
        start, end = _range(request)
        report = selectors.slo_report(user=request.user, start=start, end=end)
        return Response(selectors.slo_report_json(report))
