"""REST API of the live workflow: a job's phase records and the co-execution groups."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from rollmux_web.api.schema import ApiErrorSerializer
from rollmux_web.workflow import selectors
from rollmux_web.workflow.models import IterationMetrics, PhaseRecord


def _err(description: str) -> OpenApiResponse:
    return OpenApiResponse(ApiErrorSerializer, description=description)


AUTH_ERRORS = {401: _err("not authenticated"), 403: _err("not allowed for your role")}


# the stored index, unchanged for API clients; every page and the CLI's words count from 1
# (rollmux_web.formatting.iteration_number)
ITERATION_HELP = (
    "the job's iteration: 0-based; pages show it + 1 (the job page, the Gantt, rollmux "
    "describe count iterations from 1)"
)


class PhaseSerializer(serializers.ModelSerializer):
    duration_s = serializers.SerializerMethodField()
    nodes = serializers.ListField(
        child=serializers.CharField(), source="node_names", read_only=True,
        help_text="the inventory nodes it ran on (a sync: the job's rollout nodes, the receivers)",
    )  # fmt: skip
    ray_node_ids = serializers.DictField(
        child=serializers.CharField(), read_only=True,
        help_text="per node, the id of the Ray node that ran it (empty: in-process dispatcher)",
    )  # fmt: skip
    gpu_ids = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()), read_only=True,
        help_text="per node, the GPU ids Ray gave the phase's workers there",
    )  # fmt: skip

    class Meta:
        model = PhaseRecord
        fields = [
            "id",
            "job",
            "group",
            "placement",
            "iteration",
            "kind",
            "nodes",
            "node_names",
            "ray_node_ids",
            "gpu_ids",
            "bytes_moved",
            "state",
            "warm_start",
            "queued_at",
            "started_at",
            "finished_at",
            "duration_s",
            "setup_s",
            "load_s",
            "work_s",
            "outcome",
            "metrics",
        ]
        # where the time went, as the host measured it (null: not split): the work is what
        # profiles and learned estimates read, set-up and load are a start's overhead
        extra_kwargs = {
            "iteration": {"help_text": ITERATION_HELP},
            "setup_s": {"help_text": "seconds of set-up: a cold start's workers and runner"},
            "load_s": {
                "help_text": "seconds of load: a warm start's reload, a cold start's restore"
            },
            "work_s": {"help_text": "seconds of the phase's own work (what profiles read)"},
        }

    def get_duration_s(self, obj: PhaseRecord) -> float | None:
        if obj.started_at and obj.finished_at:
            return float((obj.finished_at - obj.started_at).total_seconds())
        return None


class IterationMetricsSerializer(serializers.ModelSerializer):
    attempt = serializers.IntegerField(
        source="placement.attempt", read_only=True,
        help_text="the job's attempt (placement) whose phases reported them: the latest wins",
    )  # fmt: skip
    group = serializers.IntegerField(
        source="placement.group_id", read_only=True, help_text="the co-execution group it ran in"
    )

    class Meta:
        model = IterationMetrics
        fields = [
            "iteration",
            "attempt",
            "placement",
            "group",
            "reward_mean",
            "reward_std",
            "loss",
            "kl",
            "entropy",
            "tokens_per_s",
            "samples",
            "recorded_at",
        ]
        extra_kwargs = {"iteration": {"help_text": ITERATION_HELP}}


class GroupNodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    pool = serializers.CharField()
    gpu_type = serializers.CharField()
    gpus = serializers.IntegerField()
    state = serializers.CharField()
    since = serializers.DateTimeField()


class GroupMemberSerializer(serializers.Serializer):
    hidden = serializers.BooleanField(help_text="a member of a tenant you may not see")
    active = serializers.BooleanField()
    rollout_nodes = serializers.ListField(child=serializers.CharField())
    train_nodes = serializers.ListField(child=serializers.CharField())
    job = serializers.IntegerField(required=False)
    name = serializers.CharField(required=False)
    tenant = serializers.CharField(required=False)
    status = serializers.CharField(required=False)
    attempt = serializers.IntegerField(required=False)
    strategy = serializers.CharField(required=False)
    predicted_slowdown = serializers.FloatField(required=False)
    marginal_cost_per_hour = serializers.CharField(required=False)
    joined_at = serializers.DateTimeField(required=False)
    left_at = serializers.DateTimeField(required=False, allow_null=True)
    end_reason = serializers.CharField(required=False, allow_blank=True)
    iterations_done = serializers.IntegerField(required=False)
    iterations = serializers.IntegerField(required=False)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        if "left_at" not in instance:
            # another tenant's member carries no times (its nodes and `active` only): a
            # nullable field it lacks would read `null`, "has not left", for one that left
            data.pop("left_at", None)
        return data


class MetaIterationSerializer(serializers.Serializer):
    t_cycle_s = serializers.FloatField()
    t_load_s = serializers.FloatField()
    t_meta_s = serializers.FloatField()
    saturated = serializers.BooleanField()
    bottleneck = serializers.CharField()
    utilisation = serializers.DictField(child=serializers.FloatField())


class GroupSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    released_at = serializers.DateTimeField(allow_null=True)
    active = serializers.BooleanField()
    members = GroupMemberSerializer(many=True)
    nodes = GroupNodeSerializer(many=True)
    rollout_nodes = serializers.ListField(child=serializers.CharField())
    train_nodes = serializers.ListField(child=serializers.CharField())
    meta_iteration = MetaIterationSerializer(allow_null=True)


def _id(raw: str) -> int:
    if not raw.isascii() or not raw.isdigit() or not 0 < int(raw) < 2**63:
        raise NotFound()
    return int(raw)


class JobPhasesView(GenericAPIView):
    serializer_class = PhaseSerializer

    @extend_schema(
        summary="A job's phase records (every phase of every iteration, all attempts)",
        parameters=[OpenApiParameter("job_id", OpenApiTypes.INT, OpenApiParameter.PATH)],
        responses={
            200: PhaseSerializer(many=True),
            404: _err("no such job (or another tenant's), or page out of range"),
            **AUTH_ERRORS,
        },
    )
    def get(self, request: Request, job_id: str) -> Response:
        qs = selectors.job_phases(user=request.user, job_id=_id(job_id))
        page = self.paginate_queryset(qs)
        return self.get_paginated_response(PhaseSerializer(page, many=True).data)


class JobMetricsView(GenericAPIView):
    serializer_class = IterationMetricsSerializer

    @extend_schema(
        summary="A job's training metrics per iteration (its reward curve), across its attempts",
        description=(
            "One entry per iteration whose phases reported training metrics (reward_mean, "
            "reward_std, loss, kl, entropy, tokens_per_s, samples; null: not reported), in "
            "iteration order. A moved, yielded or resubmitted job's iterations continue "
            "across its placements; an iteration run again by a later attempt has that "
            "attempt's values."
        ),
        parameters=[OpenApiParameter("job_id", OpenApiTypes.INT, OpenApiParameter.PATH)],
        responses={
            200: IterationMetricsSerializer(many=True),
            404: _err("no such job (or another tenant's), or page out of range"),
            **AUTH_ERRORS,
        },
    )
    def get(self, request: Request, job_id: str) -> Response:
        qs = selectors.job_iteration_metrics(user=request.user, job_id=_id(job_id))
        page = self.paginate_queryset(qs)
        return self.get_paginated_response(IterationMetricsSerializer(page, many=True).data)


class _GroupFilter(serializers.Serializer):
    active = serializers.BooleanField(required=False, allow_null=True, default=None)


class GroupListView(GenericAPIView):
    serializer_class = GroupSerializer

    @extend_schema(
        summary="Co-execution groups with a member of a tenant you may see",
        parameters=[
            OpenApiParameter("active", OpenApiTypes.BOOL, description="only active/released")
        ],
        responses={
            200: GroupSerializer(many=True),
            400: _err("bad filter"),
            404: _err("page out of range"),
            **AUTH_ERRORS,
        },
    )
    def get(self, request: Request) -> Response:
        filters = _GroupFilter(data=request.query_params)
        filters.is_valid(raise_exception=True)
        qs = selectors.group_list(user=request.user, active=filters.validated_data["active"])
        page = self.paginate_queryset(qs)
        data = [selectors.group_data(g, user=request.user) for g in page or []]
        return self.get_paginated_response(GroupSerializer(data, many=True).data)


class GroupDetailView(GenericAPIView):
    serializer_class = GroupSerializer

    @extend_schema(
        summary="One co-execution group: members (past ones too) and nodes",
        parameters=[OpenApiParameter("group_id", OpenApiTypes.INT, OpenApiParameter.PATH)],
        responses={200: GroupSerializer, 404: _err("no such group (or not yours)"), **AUTH_ERRORS},
    )
    def get(self, request: Request, group_id: str) -> Response:
        group = selectors.group_get(user=request.user, group_id=_id(group_id))
        return Response(GroupSerializer(selectors.group_data(group, user=request.user)).data)
