"""Prometheus metrics (rollmux_ prefix) and the middleware that times API requests."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest

SUBMISSIONS = Counter("rollmux_job_submissions", "Jobs submitted", ["tenant", "channel"])
API_LATENCY = Histogram(
    "rollmux_api_request_seconds", "API request latency", ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)


class MetricsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        start = time.perf_counter()
        response = self.get_response(request)
        if request.path.startswith("/api/"):
            match = getattr(request, "resolver_match", None)
            route = match.route if match else "unmatched"
            API_LATENCY.labels(request.method, route, str(response.status_code)).observe(time.perf_counter() - start)
        return response


def metrics_view(request: HttpRequest) -> HttpResponse:
    # gauges computed from the database at scrape time live in the jobs app
    from rollmux_web.jobs.metrics import refresh_job_gauges

    refresh_job_gauges()
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
