"""Audit log API (admins only)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import viewsets

from rollmux_web.api.permissions import AdminOnly
from rollmux_web.api.schema import ErrorDocumentingAutoSchema
from rollmux_web.audit import selectors
from rollmux_web.audit.serializers import AuditEntrySerializer

# what the filter accepts, so schema-driven clients send what validates
DATE_OR_DATETIME = {
    "anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}]
}


@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter(
                "action", OpenApiTypes.STR, description="action or its prefix, e.g. quota"
            ),
            OpenApiParameter("actor", OpenApiTypes.STR, description="username"),
            OpenApiParameter("object_type", OpenApiTypes.STR),
            OpenApiParameter("tenant", OpenApiTypes.STR),
            OpenApiParameter(
                "since", DATE_OR_DATETIME, description="date or ISO datetime (inclusive)"
            ),
            OpenApiParameter(
                "until", DATE_OR_DATETIME, description="date (whole day included) or ISO datetime"
            ),
        ]
    )
)
class AuditEntryViewSet(viewsets.ReadOnlyModelViewSet):
    """Who changed what, when, with the state before and after."""

    permission_classes = [AdminOnly]
    schema = ErrorDocumentingAutoSchema()
    # Any segment reaches the view, so a malformed id is a JSON 404, not Django's HTML one.
    lookup_value_regex = "[^/]+"
    serializer_class = AuditEntrySerializer

    def get_queryset(self) -> Any:
        if self.action == "list":
            return selectors.audit_list(selectors.parse_filters(self.request.query_params))
        return selectors.audit_list(selectors.AuditFilters())
