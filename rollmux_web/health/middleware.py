"""Answer /healthz and /readyz before any other middleware runs."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from django.http import HttpRequest, HttpResponse

HEALTHZ = "/healthz"
READYZ = "/readyz"


def healthz() -> HttpResponse:
    return _json({"status": "ok"}, 200)


def readyz() -> HttpResponse:
    from rollmux_web.health.checks import run_checks

    checks = run_checks()
    failed = [c.name for c in checks if not c.ok]
    body = {
        "status": "ok" if not failed else "unavailable",
        "failed": failed,
        "checks": {c.name: {"ok": c.ok, "detail": c.detail, "seconds": c.seconds} for c in checks},
    }
    return _json(body, 503 if failed else 200)


def _json(body: Mapping[str, object], status: int) -> HttpResponse:
    response = HttpResponse(json.dumps(body) + "\n", status=status, content_type="application/json")
    response["Cache-Control"] = "no-store"
    return response


class HealthMiddleware:
    """Serve the probes first: no Host check (kubelet probes by pod IP), no HTTPS redirect,
    no session or login. GET and HEAD only; the rest goes down the stack unchanged."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method in ("GET", "HEAD"):
            if request.path_info == HEALTHZ:
                return healthz()
            if request.path_info == READYZ:
                return readyz()
        return self.get_response(request)
