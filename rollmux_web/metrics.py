"""Prometheus metrics (rollmux_ prefix) and the middleware that times API requests.

Counters and histograms live in the process registry. Under gunicorn with several
workers set PROMETHEUS_MULTIPROC_DIR so every worker's samples are summed at scrape
time. Gauges about jobs and the inventory are read from the database on each scrape,
so they are right whichever process answers.

Access: /metrics is open unless ROLLMUX_METRICS_TOKEN is set, in which case the
scraper must send `Authorization: Bearer <token>`. Expose it only on an internal
network either way (the counts per tenant are not public information).
"""

from __future__ import annotations

import hmac
import os
import re
import time
from collections.abc import Callable, Iterator

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

SUBMISSIONS = Counter("rollmux_job_submissions", "Jobs submitted", ["tenant", "channel"])
API_LATENCY = Histogram(
    "rollmux_api_request_seconds",
    "API request latency",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)


_REGEX_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)")


def route_label(route: str) -> str:
    """Return one spelling for path() and regex (DRF router) routes: `api/v1/nodes/<pk>/`."""
    return _REGEX_GROUP.sub(r"<\1>", route).replace("^", "").replace("$", "").replace("\\", "")


class MetricsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        start = time.perf_counter()
        response = self.get_response(request)
        if request.path.startswith("/api/"):
            match = getattr(request, "resolver_match", None)
            # The route pattern, not the path: ids in paths would explode the label set.
            route = route_label(match.route) if match else "unmatched"
            API_LATENCY.labels(request.method, route, str(response.status_code)).observe(
                time.perf_counter() - start
            )
        return response


class InventoryCollector(Collector):
    """Report rollmux_nodes{gpu_type, state} and rollmux_gpu_price_dollars{gpu_type}."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from rollmux_web.inventory.models import Node, NodeState
        from rollmux_web.inventory.selectors import current_prices

        nodes = GaugeMetricFamily(
            "rollmux_nodes", "Nodes by GPU type and state", labels=["gpu_type", "state"]
        )
        counts = {
            (r["gpu_type__name"], r["state"]): r["n"]
            for r in Node.objects.values("gpu_type__name", "state").annotate(n=Count("id"))
        }
        prices = current_prices()
        for gpu_type in sorted(set(prices) | {g for g, _ in counts}):
            for state in NodeState.values:
                nodes.add_metric([gpu_type, state], counts.get((gpu_type, state), 0))
        yield nodes
        price = GaugeMetricFamily(
            "rollmux_gpu_price_dollars", "Current price per GPU-hour", labels=["gpu_type"]
        )
        for name, value in sorted(prices.items()):
            price.add_metric([name], float(value))
        yield price


def _database_registry() -> CollectorRegistry:
    from rollmux_web.jobs.metrics import JobCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector())
    registry.register(InventoryCollector())
    return registry


def _process_metrics() -> bytes:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest(REGISTRY)


def _authorized(request: HttpRequest) -> bool:
    token = getattr(settings, "ROLLMUX_METRICS_TOKEN", "")
    if not token:
        return True
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve the Prometheus exposition: process counters plus gauges read from the database."""
    if not _authorized(request):
        response = HttpResponse("metrics token required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body = _process_metrics() + generate_latest(_database_registry())
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
