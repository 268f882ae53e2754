from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms

from rollmux_web.accounts.models import Tenant
from rollmux_web.inventory.forms import NameChoiceField
from rollmux_web.inventory.models import GpuType
from rollmux_web.quotas.models import Quota
from rollmux_web.quotas.services import (
    MAX_MONTHLY_GPU_HOURS,
    MAX_QUOTA_GPUS,
    MAX_SLOWDOWN,
    MAX_WEIGHT,
    MIN_WEIGHT,
    QUOTA_FIELDS,
    quota_errors,
)


class SloClassForm(forms.Form):
    name = forms.SlugField(max_length=32)
    slowdown = forms.FloatField(
        min_value=1.0,
        max_value=MAX_SLOWDOWN,
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
    # the upper bounds are the API's (services.MAX_*): the page stores nothing the API refuses
    max_gpus = forms.IntegerField(
        min_value=0,
        max_value=MAX_QUOTA_GPUS,
        required=False,
        label="Nominal quota (max GPUs at once)",
        help_text="Empty = no limit.",
    )
    # no min_value: the service refuses a negative one naming the field (as the API does)
    borrowing_limit = forms.IntegerField(
        max_value=MAX_QUOTA_GPUS,
        required=False,
        initial=0,
        label="Borrowing limit (GPUs)",
        help_text="GPUs beyond the nominal quota it may use while others leave them idle.",
    )
    lending_limit = forms.IntegerField(
        max_value=MAX_QUOTA_GPUS,
        required=False,
        label="Lending limit (GPUs)",
        help_text="GPUs of its nominal quota others may borrow; empty = all.",
    )
    weight = forms.FloatField(
        max_value=MAX_WEIGHT,
        required=False,
        initial=1.0,
        label="Fair-share weight",
        help_text=f"At least {MIN_WEIGHT:f}.",
    )
    monthly_gpu_hours = forms.FloatField(
        min_value=0,
        max_value=MAX_MONTHLY_GPU_HOURS,
        required=False,
        label="Monthly GPU-hours",
        help_text="Empty = no limit.",
    )
    monthly_budget_usd = forms.DecimalField(
        min_value=Decimal("0"),
        max_digits=14,
        decimal_places=2,
        required=False,
        label="Monthly budget ($)",
        help_text="Empty = no limit.",
    )

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if self.errors:
            # The form is invalid, so the service will not run: ask its checks of the fields
            # that cleaned now, so one submit names every mistake (a valid form gets the
            # same checks from the service, which writes nothing when one fails).
            quota = Quota(**{f: cleaned[f] for f in QUOTA_FIELDS if f in cleaned})
            for field, msgs in quota_errors(quota).items():
                if field not in self.errors:
                    self.add_error(field, msgs)
        return cleaned

    def clean_borrowing_limit(self) -> int:
        value = self.cleaned_data.get("borrowing_limit")
        return 0 if value is None else value

    def clean_weight(self) -> float:
        value = self.cleaned_data.get("weight")
        return 1.0 if value is None else value
