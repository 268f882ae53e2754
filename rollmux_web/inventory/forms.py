from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms

from rollmux_web.inventory.models import Cluster, GpuType, NodeState, PoolKind
from rollmux_web.inventory.services import (
    MAX_GPUS_PER_NODE,
    MAX_MEM_GB,
    PRICE_TOO_HIGH,
    check_price,
)


class NameChoiceField(forms.ModelChoiceField):
    """A row chosen by name; a NUL byte (which PostgreSQL refuses in a lookup) is invalid."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and "\x00" in value:
            raise forms.ValidationError(
                self.error_messages["invalid_choice"], code="invalid_choice"
            )
        return super().to_python(value)


class GpuTypeForm(forms.Form):
    name = forms.CharField(max_length=32)
    # the upper bounds are the API's (services.MAX_*): the page stores nothing the API refuses
    gpus_per_node = forms.IntegerField(
        min_value=1, max_value=MAX_GPUS_PER_NODE, label="GPUs per node"
    )
    host_mem_gb = forms.FloatField(
        min_value=0.001, max_value=MAX_MEM_GB, label="Host memory per node (GB)"
    )
    price_per_gpu_hour = forms.DecimalField(
        max_digits=10,
        decimal_places=4,
        label="Price per GPU-hour ($)",
        help_text="More than 0. A change applies from now on; past costs keep the old price.",
        error_messages={"max_whole_digits": PRICE_TOO_HIGH},
    )

    def clean_price_per_gpu_hour(self) -> Decimal:
        return check_price(self.cleaned_data["price_per_gpu_hour"])


class ClusterForm(forms.Form):
    name = forms.CharField(max_length=64)
    kind = forms.ChoiceField(choices=PoolKind.choices)
    gpu_type = NameChoiceField(queryset=GpuType.objects.all(), to_field_name="name")
    ray_address = forms.CharField(max_length=255, initial="local")


class NodeForm(forms.Form):
    name = forms.CharField(max_length=64)
    cluster = NameChoiceField(queryset=Cluster.objects.all(), to_field_name="name", label="Pool")
    gpus = forms.IntegerField(min_value=1, max_value=MAX_GPUS_PER_NODE, label="GPUs")
    host_mem_gb = forms.FloatField(min_value=0.001, max_value=MAX_MEM_GB, label="Host memory (GB)")
    state = forms.ChoiceField(choices=NodeState.choices, initial=NodeState.UP)


class RunnerPackageForm(forms.Form):
    path = forms.CharField(
        max_length=200,
        label="Package, module or class",
        help_text=(
            "acme_rl or acme_rl.runners: jobs may name any class under it "
            "(acme_rl.runners:GrpoRunner); acme_rl.runners:GrpoRunner: only that class."
        ),
    )
    description = forms.CharField(max_length=200, required=False)
