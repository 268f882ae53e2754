from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from rollmux_web.accounts.models import Tenant
from rollmux_web.api.fields import KnownFieldsMixin, NameRelatedField
from rollmux_web.inventory.models import GpuType
from rollmux_web.inventory.services import name_taken
from rollmux_web.quotas import selectors, services
from rollmux_web.quotas.models import Quota, SloClass


class SloClassSerializer(KnownFieldsMixin, serializers.ModelSerializer):
    name = serializers.SlugField(max_length=32)
    slowdown = serializers.FloatField(
        min_value=1.0,
        max_value=services.MAX_SLOWDOWN,
        help_text="tolerated slowdown: co-execution iteration time / solo iteration time (>= 1.0)",
    )
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    preemptible = serializers.BooleanField(
        required=False,
        help_text=(
            "may its jobs be preempted (at an iteration boundary, after a checkpoint) to admit "
            "a job within its tenant's nominal quota; default yes, gold no"
        ),
    )

    class Meta:
        model = SloClass
        fields = ["id", "name", "slowdown", "description", "preemptible"]
        read_only_fields = ["id"]

    def validate_name(self, value: str) -> str:
        pk = None if self.instance is None else self.instance.pk
        if taken := name_taken(SloClass, value, noun="An SLO class", pk=pk):
            raise serializers.ValidationError(taken)
        return value

    def create(self, validated_data: dict[str, Any]) -> SloClass:
        return services.slo_class_create(actor=self.context["request"].user, **validated_data)

    def update(self, instance: SloClass, validated_data: dict[str, Any]) -> SloClass:
        return services.slo_class_update(
            actor=self.context["request"].user, slo_class_id=instance.pk, data=validated_data
        )


class QuotaSerializer(KnownFieldsMixin, serializers.ModelSerializer):
    tenant = NameRelatedField(queryset=Tenant.objects.all())
    gpu_type = NameRelatedField(queryset=GpuType.objects.all())
    max_gpus = serializers.IntegerField(
        min_value=0,
        max_value=services.MAX_QUOTA_GPUS,
        allow_null=True,
        required=False,
        help_text="nominal quota: GPUs of this type in use at once; null = no limit",
    )
    borrowing_limit = serializers.IntegerField(
        max_value=services.MAX_QUOTA_GPUS,
        required=False,
        help_text="GPUs beyond the nominal quota it may use when others leave them idle (>= 0)",
    )
    lending_limit = serializers.IntegerField(
        max_value=services.MAX_QUOTA_GPUS,
        allow_null=True,
        required=False,
        help_text="GPUs of its nominal quota others may borrow (<= max_gpus); null = all",
    )
    weight = serializers.FloatField(
        max_value=services.MAX_WEIGHT,
        required=False,
        help_text=f"fair-share weight, {services.MIN_WEIGHT:f} to {services.MAX_WEIGHT:,.0f}; default 1",
    )
    monthly_gpu_hours = serializers.FloatField(
        min_value=0,
        max_value=services.MAX_MONTHLY_GPU_HOURS,
        allow_null=True,
        required=False,
        help_text="GPU-hours per calendar month; null = no limit",
    )
    monthly_budget_usd = serializers.DecimalField(
        max_digits=14,
        decimal_places=2,
        min_value=Decimal("0"),
        allow_null=True,
        required=False,
        help_text="dollars per calendar month; null = no limit",
    )

    usage = serializers.SerializerMethodField(
        help_text=(
            "what the tenant uses of this quota now (the numbers a submission is checked "
            "against): gpus_requested by its live jobs, gpu_hours_month and usd_month of busy "
            "GPU time since the 1st (UTC, at today's price)"
        )
    )

    class Meta:
        model = Quota
        fields = ["id", *services.QUOTA_FIELDS, "usage"]  # the fields the service writes and audits
        read_only_fields = ["id", "usage"]
        validators: list[Any] = []  # the service reports the duplicate on gpu_type

    @extend_schema_field(
        {
            "type": "object",
            "properties": {
                "gpus_requested": {"type": "integer"},
                "gpus_left": {"type": "integer", "nullable": True},
                "gpu_hours_month": {"type": "number"},
                "usd_month": {"type": "string"},
            },
        }
    )
    def get_usage(self, quota: Quota) -> dict[str, Any]:
        usages = self.context.setdefault("_usage", {})
        if quota.tenant_id not in usages:  # one pass per tenant, shared by its quotas
            found = selectors.quota_usage(tenants=[quota.tenant], now=timezone.now())
            usages[quota.tenant_id] = {u.quota.pk: u for u in found}
        u = usages[quota.tenant_id].get(quota.pk)
        if u is None:
            return {}
        return {
            "gpus_requested": u.gpus_requested,
            "gpus_left": u.gpus_left,
            "gpu_hours_month": round(u.gpu_hours_month, 4),
            "usd_month": f"{u.usd_month:.2f}",  # rounded as /quotas/ and refusals print it
        }

    def create(self, validated_data: dict[str, Any]) -> Quota:
        return services.quota_create(actor=self.context["request"].user, **validated_data)

    def update(self, instance: Quota, validated_data: dict[str, Any]) -> Quota:
        return services.quota_update(
            actor=self.context["request"].user, quota_id=instance.pk, data=validated_data
        )
