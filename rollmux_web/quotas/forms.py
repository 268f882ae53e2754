from __future__ import annotations

from decimal import Decimal

from django import forms

from rollmux_web.accounts.models import Tenant
from rollmux_web.inventory.forms import NameChoiceField
from rollmux_web.inventory.models import GpuType


class SloClassForm(forms.Form):
    name = forms.SlugField(max_length=32)
    slowdown = forms.FloatField(
        min_value=1.0,
        max_value=100.0,
        label="Tolerated slowdown",
        help_text="Co-execution iteration time / solo iteration time; 1.0 tolerates none.",
    )
    description = forms.CharField(max_length=200, required=False)
    preemptible = forms.BooleanField(
        required=False,
        initial=True,
        help_text="Its jobs may be preempted at an iteration boundary (after a checkpoint) "
        "for a job within its tenant's nominal quota.",
    )


class QuotaForm(forms.Form):
    tenant = NameChoiceField(queryset=Tenant.objects.all(), to_field_name="name")
    gpu_type = NameChoiceField(
        queryset=GpuType.objects.all(), to_field_name="name", label="GPU type"
    )
    max_gpus = forms.IntegerField(
        min_value=0, required=False, label="Max GPUs at once", help_text="Empty = no limit."
    )
    monthly_gpu_hours = forms.FloatField(
        min_value=0, required=False, label="Monthly GPU-hours", help_text="Empty = no limit."
    )
    monthly_budget_usd = forms.DecimalField(
        min_value=Decimal("0"),
        max_digits=14,
        decimal_places=2,
        required=False,
        label="Monthly budget ($)",
        help_text="Empty = no limit.",
    )
