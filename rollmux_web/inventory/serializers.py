"""Inventory API shapes. Writes go through services (validation, history, audit)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from rollmux_web.api.fields import KnownFieldsMixin, NameRelatedField
from rollmux_web.inventory import selectors, services
from rollmux_web.inventory.models import (
    Cluster,
    GpuPrice,
    GpuType,
    Node,
    NodeState,
    PoolKind,
    RunnerPackage,
)

MAX_GPUS = services.MAX_GPUS_PER_NODE
MAX_MEM_GB = services.MAX_MEM_GB


class GpuPriceSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuPrice
        fields = ["price_per_gpu_hour", "effective_from"]
        read_only_fields = fields


class GpuTypeSerializer(KnownFieldsMixin, serializers.ModelSerializer):
    name = serializers.CharField(max_length=32)
    gpus_per_node = serializers.IntegerField(min_value=1, max_value=MAX_GPUS)
    host_mem_gb = serializers.FloatField(
        min_value=0.001, max_value=MAX_MEM_GB, help_text="host memory per node, GB"
    )
    price_per_gpu_hour = serializers.DecimalField(
        max_digits=10,
        decimal_places=4,
        min_value=Decimal("0.0001"),  # the schema's minimum; 4 decimals, so "more than 0"
        max_value=services.MAX_PRICE_PER_GPU_HOUR,
        error_messages={
            "min_value": services.PRICE_NOT_POSITIVE,
            "max_value": services.PRICE_TOO_HIGH,
            "max_whole_digits": services.PRICE_TOO_HIGH,
        },
        help_text=(
            "current price in $ per GPU-hour, more than 0; a change is appended to the "
            "history, effective now"
        ),
    )
    price_history = serializers.SerializerMethodField()

    class Meta:
        model = GpuType
        fields = [
            "id",
            "name",
            "gpus_per_node",
            "host_mem_gb",
            "price_per_gpu_hour",
            "price_history",
        ]
        read_only_fields = ["id", "price_history"]

    def to_representation(self, instance: GpuType) -> dict[str, Any]:
        # The current price is not a column: it is the latest row of the price history.
        instance.price_per_gpu_hour = selectors.gpu_type_current_price(instance)  # type: ignore[attr-defined]
        return super().to_representation(instance)  # type: ignore[no-any-return]

    @extend_schema_field(GpuPriceSerializer(many=True))
    def get_price_history(self, instance: GpuType) -> list[dict[str, Any]]:
        rows = sorted(instance.prices.all(), key=lambda p: p.effective_from)
        return list(GpuPriceSerializer(rows, many=True).data)

    def validate_price_per_gpu_hour(self, value: Decimal) -> Decimal:
        return services.check_price(value)  # the form's and the services' message

    def validate_name(self, value: str) -> str:
        pk = None if self.instance is None else self.instance.pk
        if taken := services.name_taken(GpuType, value, noun="A GPU type", pk=pk):
            raise serializers.ValidationError(taken)
        return value

    def create(self, validated_data: dict[str, Any]) -> GpuType:
        return services.gpu_type_create(actor=self.context["request"].user, **validated_data)

    def update(self, instance: GpuType, validated_data: dict[str, Any]) -> GpuType:
        return services.gpu_type_update(
            actor=self.context["request"].user, gpu_type_id=instance.pk, data=validated_data
        )


class ClusterSerializer(KnownFieldsMixin, serializers.ModelSerializer):
    name = serializers.CharField(max_length=64)
    kind = serializers.ChoiceField(choices=PoolKind.choices, help_text="rollout or train")
    gpu_type = NameRelatedField(queryset=GpuType.objects.all())
    ray_address = serializers.CharField(
        max_length=255, help_text="Ray address of the pool, or 'local'"
    )
    node_count = serializers.IntegerField(read_only=True, default=0)
    nodes_up = serializers.IntegerField(read_only=True, default=0)

    class Meta:
        model = Cluster
        fields = ["id", "name", "kind", "gpu_type", "ray_address", "node_count", "nodes_up"]
        read_only_fields = ["id", "node_count", "nodes_up"]

    def validate_name(self, value: str) -> str:
        pk = None if self.instance is None else self.instance.pk
        if taken := services.name_taken(Cluster, value, noun="A pool", pk=pk):
            raise serializers.ValidationError(taken)
        return value

    def create(self, validated_data: dict[str, Any]) -> Cluster:
        cluster = services.cluster_create(actor=self.context["request"].user, **validated_data)
        return selectors.cluster_list().get(pk=cluster.pk)  # with its node counts

    def update(self, instance: Cluster, validated_data: dict[str, Any]) -> Cluster:
        cluster = services.cluster_update(
            actor=self.context["request"].user, cluster_id=instance.pk, data=validated_data
        )
        return selectors.cluster_list().get(pk=cluster.pk)


class NodeSerializer(KnownFieldsMixin, serializers.ModelSerializer):
    name = serializers.CharField(max_length=64)
    cluster = NameRelatedField(queryset=Cluster.objects.all(), help_text="pool name")
    gpu_type = NameRelatedField(
        queryset=GpuType.objects.all(),
        required=False,
        help_text="defaults to the pool's",
    )
    gpus = serializers.IntegerField(min_value=1, max_value=MAX_GPUS, required=False)
    host_mem_gb = serializers.FloatField(min_value=0.001, max_value=MAX_MEM_GB, required=False)
    state = serializers.ChoiceField(choices=NodeState.choices, required=False)
    ray_resource = serializers.CharField(read_only=True)
    ray_label = serializers.CharField(
        read_only=True, help_text="the label of the Ray node that serves it (ray start --labels)"
    )
    state_reason = serializers.CharField(
        read_only=True, help_text="why the platform set its state (e.g. its Ray node died)"
    )

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "cluster",
            "gpu_type",
            "gpus",
            "host_mem_gb",
            "state",
            "state_reason",
            "ray_label",
            "ray_resource",
            "updated_at",
        ]
        read_only_fields = ["id", "state_reason", "ray_label", "ray_resource", "updated_at"]

    def validate_name(self, value: str) -> str:
        pk = None if self.instance is None else self.instance.pk
        if taken := services.name_taken(Node, value, noun="A node", pk=pk):
            raise serializers.ValidationError(taken)
        return value

    def create(self, validated_data: dict[str, Any]) -> Node:
        return services.node_create(actor=self.context["request"].user, **validated_data)

    def update(self, instance: Node, validated_data: dict[str, Any]) -> Node:
        return services.node_update(
            actor=self.context["request"].user, node_id=instance.pk, data=validated_data
        )


class RunnerPackageSerializer(KnownFieldsMixin, serializers.ModelSerializer):
    path = serializers.CharField(
        max_length=200,
        help_text=(
            'a package or module ("acme_rl", "acme_rl.runners": jobs may name any class under '
            'it) or one class ("acme_rl.runners:GrpoRunner")'
        ),
    )
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)

    class Meta:
        model = RunnerPackage
        fields = ["id", "path", "description", "created_at"]
        read_only_fields = ["id", "created_at"]

    def create(self, validated_data: dict[str, Any]) -> RunnerPackage:
        return services.runner_package_create(actor=self.context["request"].user, **validated_data)
