"""Inventory API: read for every role, write for admins (services do the work)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from rollmux_web.api.fields import query_choice, query_text
from rollmux_web.api.permissions import AdminWritesOthersRead
from rollmux_web.api.schema import ErrorDocumentingAutoSchema
from rollmux_web.inventory import selectors, services
from rollmux_web.inventory.models import NodeState
from rollmux_web.inventory.serializers import (
    ClusterSerializer,
    GpuTypeSerializer,
    NodeSerializer,
    RunnerPackageSerializer,
)

WRITE_METHODS = ["get", "post", "put", "patch", "head", "options"]


class GpuTypeViewSet(viewsets.ModelViewSet):
    """GPU types with their current price and price history."""

    permission_classes = [AdminWritesOthersRead]
    schema = ErrorDocumentingAutoSchema()
    # Any segment reaches the view, so a malformed id is a JSON 404, not Django's HTML one.
    lookup_value_regex = "[^/]+"
    serializer_class = GpuTypeSerializer
    http_method_names = WRITE_METHODS

    def get_queryset(self) -> Any:
        return selectors.gpu_type_list().order_by("name")


class ClusterViewSet(viewsets.ModelViewSet):
    """Pools: a rollout pool and a training pool, each behind a Ray address."""

    permission_classes = [AdminWritesOthersRead]
    schema = ErrorDocumentingAutoSchema()
    # Any segment reaches the view, so a malformed id is a JSON 404, not Django's HTML one.
    lookup_value_regex = "[^/]+"
    serializer_class = ClusterSerializer
    http_method_names = WRITE_METHODS

    def get_queryset(self) -> Any:
        return selectors.cluster_list().order_by("kind", "name")


@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter("cluster", OpenApiTypes.STR, description="pool name"),
            OpenApiParameter("gpu_type", OpenApiTypes.STR, description="GPU type name"),
            OpenApiParameter("state", OpenApiTypes.STR, enum=NodeState.values),
        ]
    )
)
class NodeViewSet(viewsets.ModelViewSet):
    """Nodes of the pools; setting `state` to drained or down wakes the workflow."""

    permission_classes = [AdminWritesOthersRead]
    schema = ErrorDocumentingAutoSchema()
    # Any segment reaches the view, so a malformed id is a JSON 404, not Django's HTML one.
    lookup_value_regex = "[^/]+"
    serializer_class = NodeSerializer
    http_method_names = WRITE_METHODS

    def get_queryset(self) -> Any:
        params = self.request.query_params
        return selectors.node_list(
            cluster=query_text(params, "cluster"),
            gpu_type=query_text(params, "gpu_type"),
            state=query_choice(params, "state", list(NodeState.values)),
        ).order_by("cluster__kind", "name")


class RunnerPackageViewSet(viewsets.ModelViewSet):
    """The runner allowlist: besides the built-ins (emulated, toy-rl, external), a job may
    name an import path "package.module:Class" that an entry covers (checked at submission
    without importing it). Admins add and remove entries; an entry is not edited."""

    permission_classes = [AdminWritesOthersRead]
    schema = ErrorDocumentingAutoSchema()
    lookup_value_regex = "[^/]+"
    serializer_class = RunnerPackageSerializer
    http_method_names = ["get", "post", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        return selectors.runner_package_list()

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        entry = self.get_object()
        services.runner_package_delete(actor=request.user, entry_id=entry.pk)
        return Response(status=204)
