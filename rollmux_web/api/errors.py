"""One error shape for the whole API: {"error": {"code", "message", "fields"}}."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import ProtectedError
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            out.update(_flatten(value, name))
    elif isinstance(detail, list):
        if all(not isinstance(v, dict | list) for v in detail):
            out[prefix or "non_field_errors"] = [str(v) for v in detail]
        else:
            for i, value in enumerate(detail):
                out.update(_flatten(value, f"{prefix}[{i}]" if prefix else str(i)))
    else:
        out[prefix or "non_field_errors"] = [str(detail)]
    return out


def error_body(code: str, message: str, fields: dict[str, list[str]] | None) -> dict[str, Any]:
    """Return the API's error shape (api/schema.ApiErrorSerializer documents it)."""
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def error_response(
    code: str, message: str, fields: dict[str, list[str]] | None, http_status: int
) -> Response:
    return Response(error_body(code, message, fields), status=http_status)


def error_json(
    code: str, message: str, fields: dict[str, list[str]] | None, http_status: int
) -> JsonResponse:
    """The error shape outside DRF (middleware, the login lockout)."""
    return JsonResponse(error_body(code, message, fields), status=http_status)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        detail = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        exc = exceptions.ValidationError(detail=detail)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, ProtectedError):
        # Deleting a row others still refer to (an SLO class jobs use): a conflict, not a 500.
        users = sorted({str(o._meta.verbose_name_plural) for o in exc.protected_objects})
        return error_response(
            "protected",
            f"Still in use by {', '.join(users) or 'other records'}; cannot delete.",
            None,
            status.HTTP_409_CONFLICT,
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        first = next(iter(fields.items()), ("", ["invalid input"]))
        message = (
            f"{first[0]}: {first[1][0]}"
            if first[0] and first[0] != "non_field_errors"
            else first[1][0]
        )
        return error_response("invalid", message, fields, status.HTTP_400_BAD_REQUEST)
    assert isinstance(exc, exceptions.APIException)
    code = exc.get_codes() if isinstance(exc.get_codes(), str) else "error"
    detail = exc.detail
    message = str(detail) if not isinstance(detail, dict | list) else "request failed"
    resp = error_response(str(code), message, None, response.status_code)
    for header in ("WWW-Authenticate", "Retry-After", "Allow"):
        if header in response:
            resp[header] = response[header]
    return resp
