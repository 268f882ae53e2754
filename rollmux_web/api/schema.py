"""OpenAPI: the error shape and an AutoSchema that documents the error responses a view can give."""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny


class ApiErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField(
        help_text="machine-readable, e.g. invalid, not_found, permission_denied"
    )
    message = serializers.CharField(help_text="human-readable; names the first bad field")
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="per-field messages (empty unless the input was invalid)",
    )


@extend_schema_serializer(component_name="ApiError")
class ApiErrorSerializer(serializers.Serializer):
    """The single API error shape: {"error": {"code", "message", "fields"}}."""

    error = ApiErrorBodySerializer()


DESCRIPTIONS = {
    "400": "invalid input: a body field or a query parameter (fields name each problem); "
    "nothing was saved",
    "401": "not authenticated (missing, invalid or revoked token)",
    "403": "not allowed for your role",
    "404": "no such object (or another tenant's), or a page past the end",
    "409": "still in use; cannot delete",
    "413": "the request body is larger than the server accepts",
    "414": "the request line (path and query) is longer than the server accepts",
    "429": "too many requests for this token (or address): Retry-After says when to retry",
}


class ErrorDocumentingAutoSchema(AutoSchema):
    """Add the error responses the view can return to whatever success response it documents."""

    def _error_codes(self) -> list[str]:
        # 400 everywhere: a body or a parameter can be invalid on every operation (a query
        # parameter given twice is refused on all of them)
        codes: list[str] = ["400"]
        public = any(isinstance(p, AllowAny) for p in self.view.get_permissions())
        has_path_param = "{" in self.path
        if not public:
            codes += ["401", "403"]
        if has_path_param or (self.method == "GET" and self._is_list_view()):
            codes.append("404")
        if self.method == "DELETE":
            codes.append("409")
        if self.method in ("POST", "PUT", "PATCH"):
            codes.append("413")
        # Any request may meet the front server's limit on the request line and the rate
        # limits (per token, or per address when anonymous).
        codes += ["414", "429"]
        return codes

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        for code in self._error_codes():
            if code not in responses:
                response = self._get_response_for_code(
                    ApiErrorSerializer, code, direction=direction
                )
                response["description"] = DESCRIPTIONS[code]
                responses[code] = response
        return responses
