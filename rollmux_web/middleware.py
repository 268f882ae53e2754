"""Error responses that must not depend on DEBUG or on which layer noticed the problem.

1. A body over DATA_UPLOAD_MAX_MEMORY_SIZE: 413 in the API's JSON error shape under /api/
   (checked from Content-Length before anything reads the body; a chunked body that grows
   past the limit is caught when Django refuses to read it), a plain 413 page elsewhere.
2. A query parameter given twice on /api/ is a 400 naming it: every API parameter takes one
   value (the OpenAPI schema says so), and silently using the last one would hide a bug.
3. With DEBUG on (`make run`), a page that does not exist still gets the branded 404 page,
   not Django's debug page listing every URL pattern; the API keeps its JSON 404.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from django.template import loader

from rollmux_web.api.errors import error_json

TOO_LARGE = "request_too_large"


def _too_large(request: HttpRequest) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    message = f"The request body is larger than the {limit:,} bytes this server accepts."
    if request.path.startswith("/api/"):
        return error_json(TOO_LARGE, message, None, 413)
    return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")


def _repeated(names: list[str]) -> HttpResponse:
    fields = {n: ["Give this parameter once."] for n in names}
    return error_json("invalid", f"{names[0]}: Give this parameter once.", fields, 400)


def _branded_404(request: HttpRequest) -> HttpResponse:
    return HttpResponse(loader.render_to_string("404.html", request=request), status=404)


class ErrorShapeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if limit is not None and length > limit:
            return _too_large(request)
        if request.path.startswith("/api/"):
            repeated = sorted(k for k, v in request.GET.lists() if len(v) > 1)
            if repeated:
                return _repeated(repeated)
        response = self.get_response(request)
        if (
            settings.DEBUG
            and response.status_code == 404
            and getattr(request, "resolver_match", None) is None
            and not request.path.startswith(("/api/", settings.STATIC_URL))
        ):
            return _branded_404(request)  # no route matched: Django's technical 404 otherwise
        return response

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if isinstance(exc, RequestDataTooBig):
            return _too_large(request)
        if settings.DEBUG and isinstance(exc, Http404) and not request.path.startswith("/api/"):
            return _branded_404(request)
        return None
