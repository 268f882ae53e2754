"""Prometheus metrics (rollmux_ prefix, Prometheus naming: base units in the name, `_total`
for counters, histograms for latencies) and the middleware that times API requests.

Two kinds of series:
- process metrics (this module): counters and histograms observed where the event happens.
  The web app counts submissions and API requests; the Celery workers, which run planning
  passes and the group controller, count admissions, waits, switches and resubmissions and
  serve them on their own port (`workers/metrics_exporter.py`). Under gunicorn (or a
  prefork Celery pool) set PROMETHEUS_MULTIPROC_DIR so every process's samples are summed.
- database gauges (`rollmux_web.metrics_db`): jobs, pools, quotas and cost, read from the
  database on each scrape of /metrics, so they are right whichever process answers. The
  /metrics view is there too: it reads every app, while this module imports none (the
  apps' services count events here).

Access: /metrics needs `Authorization: Bearer <ROLLMUX_METRICS_TOKEN>` when the token is
set; without a token it is open in embedded mode only and refused (401) with
ROLLMUX_EMBEDDED=false. Expose it only on an internal network either way (the counts per
tenant are not public).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
)

# Latency buckets in seconds: admission decisions are sub-millisecond to tens of ms
# (bench/planner_latency.py), switches tens of ms to seconds (bench/control_plane.py).
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
SWITCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
API_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Waits from submission to admission: seconds (a free cluster) to a day (a full one).
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)

SUBMISSIONS = Counter("rollmux_job_submissions", "Jobs submitted", ["tenant", "channel"])
API_LATENCY = Histogram(
    "rollmux_api_request_duration_seconds",
    "API request duration, by route pattern",
    ["method", "route", "status"],
    buckets=API_BUCKETS,
)
ADMISSION_ATTEMPTS = Counter(
    "rollmux_admission_attempts",
    "Placement decisions the planner made for a queued job, by result (fit, retry, infeasible)",
    ["result"],
)
ADMISSION_DURATION = Histogram(
    "rollmux_admission_attempt_duration_seconds",
    "Time the planner took for one placement decision (Algorithm 1), by result",
    ["result"],
    buckets=FAST_BUCKETS,
)
ADMISSION_WAIT = Histogram(
    "rollmux_admission_wait_time_seconds",
    "Time from submission (or resubmission) to placement, by SLO class",
    ["slo_class"],
    buckets=WAIT_BUCKETS,
)
PHASE_SWITCH = Histogram(
    "rollmux_phase_switch_latency_seconds",
    "Time from a phase's end (its host's clock) to the controller dispatching the next phase",
    buckets=SWITCH_BUCKETS,
)
NOTIFICATIONS = Counter(
    "rollmux_notification_deliveries",
    "Notification delivery attempts, by channel (email, webhook) and outcome",
    ["channel", "outcome"],
)
PREEMPTIONS = Counter(
    "rollmux_preemptions",
    "Jobs preempted at an iteration boundary (checkpoint, then yield) for a queued job, by "
    "reason: reclaim (it was within its tenant's nominal quota), fair_share, priority",
    ["reason"],
)
RESUBMISSIONS = Counter(
    "rollmux_job_resubmissions",
    "Jobs put back in the queue after a failed phase or a down node, by reason",
    ["reason"],
)


def observe_admission(result: str, seconds: float) -> None:
    """Count one placement decision and its duration (result: fit, retry or infeasible)."""
    ADMISSION_ATTEMPTS.labels(result).inc()
    ADMISSION_DURATION.labels(result).observe(seconds)


def observe_wait(slo_class: str, seconds: float) -> None:
    """Record how long a job waited for its placement."""
    ADMISSION_WAIT.labels(slo_class).observe(max(seconds, 0.0))


def observe_switch(phase_finished_at: float) -> None:
    """Record a phase switch: from the reported end (epoch seconds) to now."""
    PHASE_SWITCH.observe(max(time.time() - phase_finished_at, 0.0))


def count_delivery(channel: str, outcome: str) -> None:
    """Count one notification delivery attempt (outcome: sent, retrying, failed)."""
    NOTIFICATIONS.labels(channel, outcome).inc()


def count_resubmission(reason: str) -> None:
    """Count a job put back in the queue (reason: failed, lost (its host died) or node_down)."""
    RESUBMISSIONS.labels(reason).inc()


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


def process_registry() -> CollectorRegistry:
    """Return the registry of this process's counters, summed over every process of the
    server (or worker pool) when PROMETHEUS_MULTIPROC_DIR is set."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return registry
    return REGISTRY
