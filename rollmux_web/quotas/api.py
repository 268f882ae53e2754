"""SLO classes (everyone reads, admins write) and quotas (tenant-scoped reads, admin writes)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import viewsets

from rollmux_web.api.fields import query_text
from rollmux_web.api.permissions import AdminWritesOthersRead
from rollmux_web.api.schema import ErrorDocumentingAutoSchema
from rollmux_web.quotas import selectors, services
from rollmux_web.quotas.models import Quota, SloClass
from rollmux_web.quotas.serializers import QuotaSerializer, SloClassSerializer


class SloClassViewSet(viewsets.ModelViewSet):
    """SLO classes: the slowdown a job tolerates versus running alone."""

    permission_classes = [AdminWritesOthersRead]
    schema = ErrorDocumentingAutoSchema()
    # Any segment reaches the view, so a malformed id is a JSON 404, not Django's HTML one.
    lookup_value_regex = "[^/]+"
    serializer_class = SloClassSerializer

    def get_queryset(self) -> Any:
        return selectors.slo_class_list()

    def perform_destroy(self, instance: SloClass) -> None:
        services.slo_class_delete(actor=self.request.user, slo_class_id=instance.pk)


@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter("tenant", OpenApiTypes.STR, description="tenant name"),
            OpenApiParameter("gpu_type", OpenApiTypes.STR, description="GPU type name"),
        ]
    )
)
class QuotaViewSet(viewsets.ModelViewSet):
    """Per tenant and GPU type: GPUs at once, monthly GPU-hours and dollars (null = no limit).

    Researchers see their tenants' quotas (another tenant's is a 404); admin and
    finance see all; only admins write.
    """

    permission_classes = [AdminWritesOthersRead]
    schema = ErrorDocumentingAutoSchema()
    # Any segment reaches the view, so a malformed id is a JSON 404, not Django's HTML one.
    lookup_value_regex = "[^/]+"
    serializer_class = QuotaSerializer

    def get_queryset(self) -> Any:
        params = self.request.query_params
        return selectors.quota_list(
            user=self.request.user,
            tenant=query_text(params, "tenant"),
            gpu_type=query_text(params, "gpu_type"),
        )

    def perform_destroy(self, instance: Quota) -> None:
        services.quota_delete(actor=self.request.user, quota_id=instance.pk)
