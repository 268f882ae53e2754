"""Serializers of jobs: the submission (validated field by field from jobs.spec) and the
job record. Validation is shared by the submit form, the API and spec-file upload, so the
three channels give the same messages.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import SkipField

from rollmux_web.accounts.models import Tenant
from rollmux_web.accounts.selectors import submission_tenant
from rollmux_web.api.fields import (
    FORM_TRANSPORT_FIELDS,
    StrictFloatField,
    StrictIntegerField,
    Utf8CharField,
)
from rollmux_web.inventory.models import PoolKind
from rollmux_web.inventory.selectors import runner_allowlist
from rollmux_web.jobs import spec
from rollmux_web.jobs.models import DurationSource, Job, JobStatus
from rollmux_web.jobs.selectors import PoolLimits, pool_limits
from rollmux_web.quotas.models import SloClass
from scheduler.model_shape import host_mem_refusal


def spec_serializer_field(f: spec.SpecField) -> serializers.Field:
    """Return the DRF field of a spec field (bounds, default and help from jobs.spec)."""
    kwargs: dict[str, Any] = {"help_text": f.help, "required": f.required}
    if not f.required:
        if f.default is not None:
            kwargs["default"] = f.default
        else:
            kwargs["allow_null"] = f.kind != "text"
    if f.kind == "text":
        kwargs["max_length"] = f.max_length
        kwargs["allow_blank"] = not f.required and not f.default
        if "default" not in kwargs and not f.required:
            kwargs.pop("allow_null", None)
        return Utf8CharField(**kwargs)
    for bound in ("min_value", "max_value"):
        if getattr(f, bound) is not None:
            kwargs[bound] = getattr(f, bound)
    if f.unit:
        kwargs["error_messages"] = {
            "min_value": f"Must be at least {{min_value}} ({f.unit}).",
            "max_value": f"Must be at most {{max_value:,.15g}} ({f.unit}).",
        }
    if f.kind == "int":
        return StrictIntegerField(**kwargs)
    return StrictFloatField(**kwargs)


# The fields the cross-field checks read: the phase times (min <= max) and the tenant.
CROSS_CHECKED = (
    *(n for pair in spec.PHASE_TIME_FIELDS for n in pair),
    "tenant",
    "runner",
    "model",
    "host_mem_gb",
)


class JobSpecSerializer(serializers.Serializer):
    """Validate a job submission; `context["user"]` is the submitter (tenant visibility)."""

    def get_fields(self) -> dict[str, serializers.Field]:
        return {f.name: spec_serializer_field(f) for f in spec.SPEC}

    # --- single fields -------------------------------------------------------

    def _pool(self, kind: str) -> PoolLimits | None:
        if not hasattr(self, "_pools"):
            # the submission's one read of the pools (context "pools"), else one query
            self._pools = pool_limits(self.context.get("pools"))
        return self._pools.get(kind)

    def validate_name(self, value: str) -> str:
        value = value.strip()
        if not value:
            raise serializers.ValidationError("This field is required.")
        return value

    def validate_slo_class(self, value: str) -> SloClass:
        slo = SloClass.objects.filter(name=value).first()
        if slo is None:
            known = ", ".join(SloClass.objects.values_list("name", flat=True)) or "none defined"
            raise serializers.ValidationError(f"Unknown SLO class {value!r} (known: {known}).")
        return slo

    def validate_runner(self, value: str) -> str:
        """Allow a built-in or an import path the admins' allowlist covers; nothing is
        imported here (a researcher's path must not run code in the web process)."""
        value = value.strip()
        if value == "external" and not settings.REDIS_URL:
            # its trainer is another process: it waits on the server's Redis for its grants
            raise serializers.ValidationError(
                "Runner 'external' needs the server's Redis (REDIS_URL), the channel its "
                "trainer's rollmux.phase waits on for phase grants; this server runs without "
                "one (embedded), so the trainer could never run a phase."
            )
        if spec.runner_permitted(value, ()):
            return value  # a built-in: the allowlist is not read
        allowed = runner_allowlist()
        if spec.runner_permitted(value, allowed):
            return value
        builtins = ", ".join(spec.BUILTIN_RUNNERS)
        if not spec.RUNNER_IMPORT_PATH.match(value):
            raise serializers.ValidationError(
                f"Unknown runner {value!r}: use one of {builtins} or an allowed import path "
                "'package.module:ClassName'."
            )
        registered = ", ".join(allowed) if allowed else "none yet"
        raise serializers.ValidationError(
            f"Runner {value!r} is not on the allowlist: use one of {builtins} or a class of a "
            f"registered runner package (registered: {registered}); an admin registers "
            "packages on /inventory/."
        )

    def _gpus(self, value: int, kind: str, label: str) -> int:
        if value <= 0:
            raise serializers.ValidationError(f"Must be a positive number of GPUs, got {value}.")
        limits = self._pool(kind)
        if limits is None:
            raise serializers.ValidationError(f"No {label} is configured.")
        gpu_type, per_node = limits.gpu_type, limits.gpus_per_node
        if value % per_node:
            raise serializers.ValidationError(
                f"Must be a multiple of {per_node} (GPUs per {gpu_type} node in the "
                f"{label}), got {value}."
            )
        need = value // per_node
        if need > limits.nodes:
            # The planner would fail it as INFEASIBLE: refuse it now, with the numbers.
            have = (
                f"the {label} has {limits.nodes} {gpu_type} nodes ({limits.nodes * per_node} GPUs)"
            )
            if limits.nodes_down:
                noun = "node" if limits.nodes_down == 1 else "nodes"
                have += f", not counting {limits.nodes_down} down {noun}"
            raise serializers.ValidationError(
                f"{value} GPUs need {need} {gpu_type} nodes; {have}: this job can never run here."
            )
        return value

    def validate_rollout_gpus(self, value: int) -> int:
        return self._gpus(value, PoolKind.ROLLOUT, "rollout pool")

    def validate_train_gpus(self, value: int) -> int:
        return self._gpus(value, PoolKind.TRAIN, "training pool")

    def validate_host_mem_gb(self, value: float) -> float:
        for kind, label in ((PoolKind.ROLLOUT, "rollout pool"), (PoolKind.TRAIN, "training pool")):
            limits = self._pool(kind)
            if limits is not None and value > limits.host_mem_gb:
                raise serializers.ValidationError(
                    f"{value:g} GB is more than any {label} node has ({limits.host_mem_gb:g} GB)."
                )
        return value

    def validate_tenant(self, value: str) -> str:
        return value.strip()

    # --- cross-field ----------------------------------------------------------

    def _cross_field_errors(
        self, values: dict[str, Any], invalid: set[str]
    ) -> tuple[dict[str, str], Tenant | None]:
        """Return the errors of checks that span fields, and the owning tenant.

        `values` holds the fields that are valid on their own; a check is skipped when
        one of its fields is in `invalid` (that field already shows its own error).
        """
        errors: dict[str, str] = {}
        for hi_name, lo_name in spec.PHASE_TIME_FIELDS:
            hi, lo = values.get(hi_name), values.get(lo_name)
            if hi is not None and lo is not None and lo > hi:
                errors[lo_name] = f"Must be at most {hi_name} ({hi:g} s), got {lo:g} s."
        # some phase times but not both maxima: name what is missing (none at all: profiled)
        given = [n for n in spec.PHASE_TIME_NAMES if values.get(n) is not None or n in invalid]
        for name in spec.missing_phase_times(given):
            errors[name] = (
                f"Required when other phase times are given ({', '.join(given)}): give both "
                "maxima, or leave all four phase times out to have the job profiled first."
            )
        if values.get("runner") == "hf-grpo" and not {"model", "host_mem_gb"} & invalid:
            # the real runner's resident state must fit the host memory the job declares
            refusal = host_mem_refusal(values.get("model") or "", float(values["host_mem_gb"]))
            if refusal:
                field = "model" if refusal.startswith("model:") else "host_mem_gb"
                errors[field] = refusal.removeprefix("model: ")
        tenant: Tenant | None = None
        if "tenant" not in invalid:
            tenant, error = submission_tenant(self.context.get("user"), values.get("tenant") or "")
            if error:
                errors["tenant"] = error
        return errors, tenant

    def _valid_values(
        self, data: Mapping[str, Any], invalid: set[str], names: tuple[str, ...] = CROSS_CHECKED
    ) -> dict[str, Any]:
        """Return those of `names` that are valid on their own (the others left out)."""
        out: dict[str, Any] = {}
        for name in names:
            if name in invalid:
                continue
            field = self.fields[name]
            try:
                value = field.run_validation(field.get_value(data))
                check = getattr(self, f"validate_{name}", None)
                value = check(value) if check is not None else value
            except (serializers.ValidationError, DjangoValidationError, SkipField):
                continue
            out[name] = value
        return out

    def values_valid_alone(self, names: tuple[str, ...]) -> dict[str, Any]:
        """Return those of `names` that are valid whatever the other fields say, the tenant
        resolved to its row (left out when it is not one the user may submit for)."""
        values = self._valid_values(self.initial_data, set(), names)
        if "tenant" in values:
            tenant, error = submission_tenant(self.context.get("user"), values["tenant"] or "")
            if error:
                del values["tenant"]
            else:
                values["tenant"] = tenant
        return values

    def to_internal_value(self, data: Any) -> Any:
        """Check every field, refuse unknown keys, and run the cross-field checks on the
        fields that are valid even when others are not.

        DRF stops before `validate()` when a single field fails, so a submission with a
        bad Training min and Rollout min above its max would report only the first; the
        form's inline validation reports both, and a submission must too.
        """
        if not isinstance(data, Mapping):
            return super().to_internal_value(data)  # DRF's "expected a dictionary" error
        try:
            attrs = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            errors: dict[str, Any] = dict(exc.detail)  # type: ignore[arg-type]
            values = self._valid_values(data, set(errors))
        else:
            errors, values = {}, attrs
        unknown = spec.unknown_field_errors(k for k in data if k not in FORM_TRANSPORT_FIELDS)
        if not errors and not unknown:
            return attrs
        cross, _ = self._cross_field_errors(values, set(errors))
        for name, message in cross.items():
            errors.setdefault(name, [message])
        raise serializers.ValidationError({**errors, **unknown})

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        errors, tenant = self._cross_field_errors(attrs, set())
        if errors:
            raise serializers.ValidationError(errors)
        for hi_name, lo_name in spec.PHASE_TIME_FIELDS:
            if attrs.get(lo_name) is None:
                attrs[lo_name] = attrs.get(hi_name)  # (None for a job to be profiled)
        attrs["tenant"] = tenant
        return attrs


class JobSubmitRequestSerializer(JobSpecSerializer):
    """The POST /api/v1/jobs/ body (documented separately for the schema)."""


class PlacementSerializer(serializers.Serializer):
    strategy = serializers.CharField()
    rollout_nodes = serializers.ListField(child=serializers.CharField())
    train_nodes = serializers.ListField(child=serializers.CharField())
    predicted_slowdown = serializers.FloatField()
    marginal_cost_per_hour = serializers.FloatField()


class MeasuredSerializer(serializers.Serializer):
    """What a job's finished phases of one kind measured (profiling run included)."""

    count = serializers.IntegerField()
    mean_s = serializers.FloatField(help_text="wall-clock seconds")
    p95_s = serializers.FloatField(help_text="wall-clock seconds")
    max_s = serializers.FloatField(help_text="wall-clock seconds")
    mean_profile_s = serializers.FloatField(help_text="profile seconds (wall-clock x time scale)")
    p95_profile_s = serializers.FloatField(help_text="profile seconds")
    max_profile_s = serializers.FloatField(help_text="profile seconds")


class DriftSerializer(serializers.Serializer):
    kind = serializers.CharField()
    recent_mean_s = serializers.FloatField(help_text="profile seconds, its last phases")
    worst_case_s = serializers.FloatField(help_text="the estimate admission planned on")
    window = serializers.IntegerField()


class JobSerializer(serializers.ModelSerializer):
    """A job record: trace-format fields plus identity, lifecycle and placement; the phase
    times are its estimates, `duration_source` says where they come from (null while a job
    submitted without them is profiled) and `measured` what its phases took so far."""

    tenant = serializers.CharField(source="tenant.name")
    submitter = serializers.CharField(source="submitter.username")
    slo_class = serializers.CharField(source="slo_class.name")
    slo = serializers.FloatField(source="slo_class.slowdown")
    status = serializers.ChoiceField(choices=JobStatus.choices)
    group = serializers.SerializerMethodField()
    placement = serializers.SerializerMethodField()
    duration_source = serializers.SerializerMethodField()
    measured = serializers.SerializerMethodField()
    drift = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = spec.JOB_RECORD_FIELDS
        read_only_fields = fields

    _prototypes: ClassVar[dict[type, dict[str, serializers.Field]]] = {}

    def get_fields(self) -> dict[str, serializers.Field]:
        """Copies of the fields ModelSerializer builds from the model, built once per class
        (building them reads the model's metadata field by field: most of the cost of
        serialising one job; a copy is an unbound field, as DRF's declared fields are)."""
        cls = type(self)
        built = JobSerializer._prototypes.get(cls)
        if built is None:
            built = JobSerializer._prototypes[cls] = super().get_fields()
        return copy.deepcopy(built)

    def _latest(self, job: Job) -> Any:
        from rollmux_web.jobs.selectors import latest_placement

        return latest_placement(job)

    @extend_schema_field(serializers.ChoiceField(choices=DurationSource.choices, allow_null=True))
    def get_duration_source(self, job: Job) -> str | None:
        return job.duration_source or None

    @extend_schema_field(serializers.DictField(child=MeasuredSerializer()))
    def get_measured(self, job: Job) -> dict[str, Any]:
        from rollmux_web.jobs.selectors import job_measured

        return {
            kind: {
                "count": st.count,
                "mean_s": st.mean_s,
                "p95_s": st.p95_s,
                "max_s": st.max_s,
                "mean_profile_s": st.mean_profile_s,
                "p95_profile_s": st.p95_profile_s,
                "max_profile_s": st.max_profile_s,
            }
            for kind, st in job_measured(job=job).items()
        }

    @extend_schema_field(DriftSerializer(many=True))
    def get_drift(self, job: Job) -> list[dict[str, Any]]:
        """The phase kinds whose recent mean runs above the worst case (empty: none)."""
        from rollmux_web.jobs.selectors import job_drift

        return [
            {
                "kind": d.kind,
                "recent_mean_s": d.recent_mean_s,
                "worst_case_s": d.worst_case_s,
                "window": d.window,
            }
            for d in job_drift(job=job)
        ]

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_group(self, job: Job) -> int | None:
        p = self._latest(job)
        return p.group_id if p is not None else None

    @extend_schema_field(PlacementSerializer(allow_null=True))
    def get_placement(self, job: Job) -> dict[str, Any] | None:
        p = self._latest(job)
        if p is None:
            return None
        return {
            "strategy": p.strategy,
            "rollout_nodes": sorted(n.name for n in p.rollout_nodes.all()),
            "train_nodes": sorted(n.name for n in p.train_nodes.all()),
            "predicted_slowdown": p.predicted_slowdown,
            "marginal_cost_per_hour": float(p.marginal_cost_per_hour),
        }
