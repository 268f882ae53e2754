"""REST API of fair share (issue 22): the queue in planning order with each job's position
and why, and each tenant's share per GPU type. Reads only (`workflow.fairshare`)."""

from __future__ import annotations

from dataclasses import asdict

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from rollmux_web.accounts.access import visible_tenant_ids
from rollmux_web.accounts.models import Tenant
from rollmux_web.api.permissions import HasRole
from rollmux_web.workflow import fairshare
from rollmux_web.workflow.api import AUTH_ERRORS


class QueueRowSerializer(serializers.Serializer):
    position = serializers.IntegerField(help_text="1 = planned next")
    hidden = serializers.BooleanField(help_text="another tenant's job: its position only")
    id = serializers.IntegerField(source="job_id", allow_null=True)
    name = serializers.CharField()
    tenant = serializers.CharField()
    priority = serializers.IntegerField(allow_null=True)
    why = serializers.CharField(help_text="its place in the order, e.g. '3rd in the queue; ...'")
    waiting = serializers.CharField(help_text="why it is not placed yet")
    submitted_at = serializers.DateTimeField(allow_null=True)


class QueueView(GenericAPIView):
    """The queued jobs in the order the planner takes them (priority, then each tenant's
    weighted share, then submission time); another tenant's job shows its position only."""

    permission_classes = [HasRole]
    serializer_class = QueueRowSerializer
    pagination_class = None

    @extend_schema(
        summary="The queue in planning order, with each job's position and why",
        responses={200: QueueRowSerializer(many=True), **AUTH_ERRORS},
    )
    def get(self, request: Request) -> Response:
        rows = fairshare.queue_view(request.user, timezone.now())
        return Response(QueueRowSerializer(rows, many=True).data)


class ShareRowSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    gpu_type = serializers.CharField()
    nominal = serializers.IntegerField(help_text="nominal quota (GPUs)")
    unlimited = serializers.BooleanField(help_text="no GPU cap: nominal is the pool's capacity")
    borrowing_limit = serializers.IntegerField()
    lending_limit = serializers.IntegerField(allow_null=True)
    weight = serializers.FloatField()
    held = serializers.IntegerField(help_text="GPUs its placed and running jobs hold")
    borrowed = serializers.IntegerField(help_text="GPUs held above nominal")
    lent = serializers.IntegerField(help_text="GPUs of its nominal quota others borrow")
    usage_gpu_hours = serializers.FloatField(help_text="busy GPU-hours, decayed (half-life)")
    share = serializers.FloatField(allow_null=True, help_text="weighted share (1 = its share)")
    borrowed_share = serializers.FloatField(help_text="what the no-loop rule compares")


class FairShareView(GenericAPIView):
    """Each tenant's share per GPU type: nominal, borrowed, lent, decayed usage and share
    (researchers: their tenants')."""

    permission_classes = [HasRole]
    serializer_class = ShareRowSerializer
    pagination_class = None

    @extend_schema(
        summary="Fair share per tenant and GPU type",
        responses={200: ShareRowSerializer(many=True), **AUTH_ERRORS},
    )
    def get(self, request: Request) -> Response:
        ids = visible_tenant_ids(request.user)
        names = None
        if ids is not None:
            names = set(Tenant.objects.filter(pk__in=ids).values_list("name", flat=True))
        rows = []
        for row in fairshare.share_rows(timezone.now(), names):
            data = asdict(row)
            data["share"] = None if row.share == float("inf") else row.share
            rows.append(data)
        return Response(ShareRowSerializer(rows, many=True).data)
