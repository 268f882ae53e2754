"""htmx in the views: django-htmx's request details and its "stop polling" response.

An htmx request gets a page's named partial, a normal request the whole page; a poll
of something that has finished (a job, a released group, a done what-if run) answers
286 (`HttpResponseStopPolling`) so the browser stops asking.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django_htmx.http import HttpResponseStopPolling
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request that went through django-htmx's middleware (`request.htmx` is truthy for htmx)."""

    htmx: HtmxDetails


def render_partial(
    request: HttpRequest,
    template: str,
    ctx: dict[str, Any],
    *,
    stop_polling: bool,
    status: int = 200,
) -> HttpResponse:
    """Render `template` (a partial) for an htmx poll; 286 when the poll should stop."""
    html = render_to_string(template, ctx, request=request)
    return HttpResponseStopPolling(html) if stop_polling else HttpResponse(html, status=status)
