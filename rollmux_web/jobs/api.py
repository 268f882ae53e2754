"""REST API for jobs: list/submit, detail, cancel. Thin: services write, selectors read."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from rollmux_web.accounts.selectors import visible_tenants
from rollmux_web.api.errors import error_response
from rollmux_web.api.schema import ApiErrorSerializer
from rollmux_web.jobs.models import JobStatus
from rollmux_web.jobs.selectors import (
    DEFAULT_ORDERING,
    ORDERINGS,
    job_get,
    job_list,
    jobs_drift,
    jobs_measured,
)
from rollmux_web.jobs.serializers import JobSerializer, JobSubmitRequestSerializer
from rollmux_web.jobs.services import JobRejected, job_cancel, job_submit


def _err(description: str) -> OpenApiResponse:
    return OpenApiResponse(ApiErrorSerializer, description=description)


AUTH_ERRORS = {
    401: _err("not authenticated (missing or invalid token)"),
    403: _err("not allowed for your role"),
}


class JobFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=JobStatus.choices, required=False)
    tenant = serializers.CharField(required=False, max_length=64)
    ordering = serializers.ChoiceField(choices=sorted(ORDERINGS), required=False)

    def validate_tenant(self, value: str) -> str:
        """Refuse a tenant the caller may not see (an empty list would read as "none
        running"); the words are the submission's, whether or not such a tenant exists."""
        names = sorted(visible_tenants(self.context["user"]).values_list("name", flat=True))
        if value not in names:
            yours = ", ".join(names) or "none"
            raise serializers.ValidationError(
                f"Unknown tenant {value!r}: the tenants you may see are {yours}."
            )
        return value


JOB_ID = OpenApiParameter("job_id", OpenApiTypes.INT, OpenApiParameter.PATH)
NOT_FOUND = _err("no such job (or another tenant's)")


def _job_id(raw: str) -> int:
    """Return the job id of a path segment; anything but a positive id is a (JSON) 404."""
    if not raw.isascii() or not raw.isdigit() or not 0 < int(raw) < 2**63:
        raise NotFound()
    return int(raw)


def _rejected(exc: JobRejected) -> Response:
    return error_response(exc.code, exc.message, exc.fields, exc.http_status)


class JobListCreateView(GenericAPIView):
    serializer_class = JobSerializer

    @extend_schema(
        summary="List jobs of the tenants you may see",
        parameters=[
            OpenApiParameter("status", OpenApiTypes.STR, enum=list(JobStatus.values)),
            OpenApiParameter("tenant", OpenApiTypes.STR, description="tenant name"),
            OpenApiParameter(
                "ordering",
                OpenApiTypes.STR,
                enum=sorted(ORDERINGS),
                description=f"default {DEFAULT_ORDERING}",
            ),
        ],
        responses={
            200: JobSerializer(many=True),
            400: _err("bad filter"),
            404: _err("page out of range"),
            **AUTH_ERRORS,
        },
    )
    def get(self, request: Request) -> Response:
        filters = JobFilterSerializer(data=request.query_params, context={"user": request.user})
        filters.is_valid(raise_exception=True)
        qs = job_list(
            user=request.user,
            status=filters.validated_data.get("status", ""),
            tenant=filters.validated_data.get("tenant", ""),
            ordering=filters.validated_data.get("ordering", DEFAULT_ORDERING),
        )
        page = self.paginate_queryset(qs)
        jobs_measured(list(page or []))  # the page's measured stats in one query
        jobs_drift(list(page or []))  # and its drift in another
        return self.get_paginated_response(JobSerializer(page, many=True).data)

    @extend_schema(
        summary="Submit a job",
        description=(
            "Fields are those of the trace format plus name, slo_class (by name), runner, "
            "tenant (by name; defaults to your only tenant), priority and time_scale. "
            "t_roll_min_s and t_train_min_s default to the max. Any other field is refused "
            "(400, `fields` names it and suggests the closest real field), except the "
            "read-only fields of a job record (id, status, ...), which are ignored so a record "
            "from GET can be submitted again. A refused quota or budget answers 403 with code "
            "quota_exceeded or budget_exceeded and a message naming the limit, its value, what "
            "the tenant's live jobs request or its jobs used this month, and what the job asks."
        ),
        request=JobSubmitRequestSerializer,
        examples=[
            OpenApiExample(
                "GRPO on a 7B model",
                request_only=True,
                value={
                    "name": "grpo-7b",
                    "slo_class": "silver",
                    "runner": "emulated",
                    "iterations": 180,
                    "rollout_gpus": 8,
                    "train_gpus": 16,
                    "t_roll_max_s": 330.0,
                    "t_roll_min_s": 210.0,
                    "t_train_max_s": 120.0,
                    "host_mem_gb": 600,
                    "model": "qwen2.5-7b",
                },
            )
        ],
        responses={
            201: JobSerializer,
            400: _err("invalid spec: `fields` names each bad field"),
            401: AUTH_ERRORS[401],
            403: _err("your role may not submit, or a quota/budget refuses the job"),
        },
    )
    def post(self, request: Request) -> Response:
        try:
            job = job_submit(user=request.user, spec=request.data, channel="api")
        except JobRejected as exc:
            return _rejected(exc)
        setattr(job, "placements_newest_first", [])  # noqa: B010  (new job: no placement yet)
        setattr(job, "measured_stats", {})  # noqa: B010  (nor a phase)
        setattr(job, "drift_list", [])  # noqa: B010
        return Response(JobSerializer(job).data, 201)


class JobDetailView(GenericAPIView):
    serializer_class = JobSerializer

    @extend_schema(
        summary="One job",
        parameters=[JOB_ID],
        responses={200: JobSerializer, 404: NOT_FOUND, **AUTH_ERRORS},
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = job_get(user=request.user, job_id=_job_id(job_id))
        return Response(JobSerializer(job).data)


class JobCancelView(GenericAPIView):
    serializer_class = JobSerializer

    @extend_schema(
        summary="Cancel a job",
        description=(
            "A queued job is cancelled at once; a placed or running job gets cancel_requested "
            "and stops at its next phase boundary."
        ),
        request=None,
        parameters=[JOB_ID],
        responses={
            200: JobSerializer,
            404: NOT_FOUND,
            409: _err("the job already ended"),
            **AUTH_ERRORS,
        },
    )
    def post(self, request: Request, job_id: str) -> Response:
        try:
            job = job_cancel(user=request.user, job_id=_job_id(job_id))
        except JobRejected as exc:
            return _rejected(exc)
        return Response(JobSerializer(job_get(user=request.user, job_id=job.pk)).data)
