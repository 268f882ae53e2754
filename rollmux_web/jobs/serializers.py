"""Job spec validation shared by the submit form, the API and spec-file upload.

One serializer checks every field so the three channels give the same messages.
Field names are those of the trace format (docs/spec/trace-format.md) plus
name, slo_class, runner, tenant, priority and time_scale.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Max
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import SkipField

from rollmux_web.accounts.models import Tenant
from rollmux_web.accounts.selectors import visible_tenants
from rollmux_web.inventory.models import Cluster, PoolKind
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.quotas.models import SloClass
from rollmux_web.workflow.converters import pool_node_counts
from workers.runners import BUILTIN_RUNNERS

# "package.module:ClassName": dotted module path, a colon, a class name
RUNNER_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")

# Upper bounds keep values inside the database column types and catch unit mistakes
# (a duration in milliseconds, memory in MB); they are far above any real job.
MAX_ITERATIONS = 1_000_000
MAX_GPUS = 100_000
MAX_PHASE_S = 30 * 24 * 3600.0
MAX_HOST_MEM_GB = 1_000_000.0
MAX_TIME_SCALE = 1_000_000.0
MAX_PRIORITY = 1000

SPEC_FIELDS = (
    "name",
    "tenant",
    "slo_class",
    "runner",
    "model",
    "priority",
    "iterations",
    "rollout_gpus",
    "train_gpus",
    "t_roll_max_s",
    "t_roll_min_s",
    "t_train_max_s",
    "t_train_min_s",
    "host_mem_gb",
    "time_scale",
)
# Trace-file fields (docs/spec/trace-format.md) a submission has no use for, with why.
TRACE_ONLY_FIELDS = {
    "arrival_s": "arrival_s is a trace-file field (when the simulator submits the job); "
    "a submitted job arrives now.",
}
MAX_REPORTED_KEY = 64  # an unknown key is echoed in the error; a 1 MB key is cut short


def unknown_field_errors(keys: Any) -> dict[str, list[str]]:
    """Return an error per key that is neither a spec field nor a read-only job field.

    Each message suggests the closest spec field when one is close
    (difflib.get_close_matches), e.g. "time_scal" -> "did you mean time_scale?".
    """
    errors: dict[str, list[str]] = {}
    for key in keys:
        name = str(key)
        if name in SPEC_FIELDS or name in READ_ONLY_JOB_FIELDS:
            continue
        close = difflib.get_close_matches(name.lower(), SPEC_FIELDS, n=1)
        if name in TRACE_ONLY_FIELDS:
            hint = TRACE_ONLY_FIELDS[name]
        elif close:
            hint = f"did you mean {close[0]}?"
        else:
            hint = f"the fields are {', '.join(SPEC_FIELDS)}."
        shown = name if 0 < len(name) <= MAX_REPORTED_KEY else repr(name[:MAX_REPORTED_KEY])
        errors[shown] = [f"Unknown field; {hint}"]
    return errors


def _encodable(value: str) -> None:
    # Lone surrogates decode from JSON but cannot be stored (or even sent) as UTF-8.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise serializers.ValidationError("Contains characters that are not valid UTF-8.") from None


class _Text(serializers.CharField):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("validators", []).append(_encodable)
        super().__init__(**kwargs)


class _Strict:
    """Reject JSON booleans where a number is expected (DRF would coerce True to 1)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool):
            self.fail("invalid")  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc]


class StrictIntegerField(_Strict, serializers.IntegerField):
    pass


class StrictFloatField(_Strict, serializers.FloatField):
    pass


class PoolLimits(NamedTuple):
    """What a submission is checked against, per pool kind."""

    gpu_type: str
    gpus_per_node: int
    host_mem_gb: float  # the largest node's host memory
    nodes: int  # capacity: nodes up or drained (what the planner counts; down ones not)
    nodes_down: int


def pool_limits() -> dict[str, PoolLimits]:
    """Return the limits of each pool kind.

    Two queries for both pools; a pool without nodes falls back to its GPU type's memory.
    The capacity is the live planner's (workflow.converters.pool_node_counts), so a job
    refused here is one the planner would call INFEASIBLE.
    """
    counts = pool_node_counts()
    out: dict[str, PoolLimits] = {}
    rows = (
        Cluster.objects.annotate(max_mem=Max("nodes__host_mem_gb"))
        .order_by("kind", "name")
        .values(
            "kind", "gpu_type__name", "gpu_type__gpus_per_node", "gpu_type__host_mem_gb", "max_mem"
        )
    )
    for r in rows:
        if r["kind"] not in out:  # the first pool of each kind (by name) sets the shape
            mem = r["max_mem"] if r["max_mem"] is not None else r["gpu_type__host_mem_gb"]
            nodes, down = counts.get(r["kind"], (0, 0))
            out[r["kind"]] = PoolLimits(
                r["gpu_type__name"], r["gpu_type__gpus_per_node"], float(mem), nodes, down
            )
    return out


class JobSpecSerializer(serializers.Serializer):
    """Validate a job submission; `context["user"]` is the submitter (tenant visibility)."""

    name = _Text(max_length=128, help_text="a human name for the job")
    tenant = _Text(
        max_length=64,
        required=False,
        allow_blank=True,
        help_text="owning tenant by name; defaults to the submitter's only tenant",
    )
    slo_class = _Text(max_length=32, help_text='SLO class by name, e.g. "silver"')
    runner = _Text(
        max_length=200,
        required=False,
        default="emulated",
        help_text='"emulated", "toy-rl" or an import path "package.module:ClassName"',
    )
    model = _Text(max_length=128, required=False, allow_blank=True, default="")
    priority = StrictIntegerField(
        required=False, default=0, min_value=-MAX_PRIORITY, max_value=MAX_PRIORITY
    )
    iterations = StrictIntegerField(min_value=1, max_value=MAX_ITERATIONS)
    rollout_gpus = StrictIntegerField(
        max_value=MAX_GPUS, help_text="GPUs of the rollout pool type; a multiple of its node size"
    )
    train_gpus = StrictIntegerField(
        max_value=MAX_GPUS, help_text="GPUs of the training pool type; a multiple of its node size"
    )
    t_roll_max_s = StrictFloatField(max_value=MAX_PHASE_S, help_text="worst-case solo rollout, s")
    t_roll_min_s = StrictFloatField(
        required=False, allow_null=True, max_value=MAX_PHASE_S, help_text="default: the max"
    )
    t_train_max_s = StrictFloatField(max_value=MAX_PHASE_S, help_text="worst-case solo training, s")
    t_train_min_s = StrictFloatField(
        required=False, allow_null=True, max_value=MAX_PHASE_S, help_text="default: the max"
    )
    host_mem_gb = StrictFloatField(
        max_value=MAX_HOST_MEM_GB, help_text="resident host memory on each node, GB"
    )
    time_scale = StrictFloatField(
        required=False,
        allow_null=True,
        max_value=MAX_TIME_SCALE,
        help_text="emulation speed-up (> 0); null = the server default",
    )

    # --- single fields -------------------------------------------------------

    def _pool(self, kind: str) -> PoolLimits | None:
        if not hasattr(self, "_pools"):
            self._pools = pool_limits()
        return self._pools.get(kind)

    def _positive(self, value: float, what: str) -> float:
        if value <= 0:
            raise serializers.ValidationError(f"Must be greater than 0 ({what}), got {value:g}.")
        return value

    def validate_t_roll_max_s(self, value: float) -> float:
        return self._positive(value, "seconds")

    def validate_t_train_max_s(self, value: float) -> float:
        return self._positive(value, "seconds")

    def validate_t_roll_min_s(self, value: float | None) -> float | None:
        return None if value is None else self._positive(value, "seconds")

    def validate_t_train_min_s(self, value: float | None) -> float | None:
        return None if value is None else self._positive(value, "seconds")

    def validate_time_scale(self, value: float | None) -> float | None:
        return None if value is None else self._positive(value, "speed-up factor")

    def validate_name(self, value: str) -> str:
        value = value.strip()
        if not value:
            raise serializers.ValidationError("This field may not be blank.")
        return value

    def validate_slo_class(self, value: str) -> SloClass:
        slo = SloClass.objects.filter(name=value).first()
        if slo is None:
            known = ", ".join(SloClass.objects.values_list("name", flat=True)) or "none defined"
            raise serializers.ValidationError(f"Unknown SLO class {value!r} (known: {known}).")
        return slo

    def validate_runner(self, value: str) -> str:
        value = value.strip()
        if value in BUILTIN_RUNNERS or RUNNER_IMPORT_PATH.match(value):
            return value
        raise serializers.ValidationError(
            f"Unknown runner {value!r}: use one of {', '.join(BUILTIN_RUNNERS)} or an import path "
            "'package.module:ClassName'."
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
        self._positive(value, "GB")
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
        for phase in ("roll", "train"):
            hi_name, lo_name = f"t_{phase}_max_s", f"t_{phase}_min_s"
            hi, lo = values.get(hi_name), values.get(lo_name)
            if hi is not None and lo is not None and lo > hi:
                errors[lo_name] = f"Must be at most {hi_name} ({hi:g} s), got {lo:g} s."
        tenant: Tenant | None = None
        if "tenant" not in invalid:
            tenants = visible_tenants(self.context.get("user"))
            name = values.get("tenant") or ""
            if name:
                tenant = tenants.filter(name=name).first()
                if tenant is None:
                    errors["tenant"] = f"Unknown tenant {name!r}, or not one you may submit for."
            else:
                mine = list(tenants[:2])
                if len(mine) == 1:
                    tenant = mine[0]
                else:
                    errors["tenant"] = (
                        "This field is required: you belong to several tenants."
                        if mine
                        else "This field is required: you belong to no tenant."
                    )
        return errors, tenant

    def _valid_values(self, data: Mapping[str, Any], invalid: set[str]) -> dict[str, Any]:
        """Return the cross-checked fields that are valid on their own (the others left out)."""
        out: dict[str, Any] = {}
        for name in ("t_roll_max_s", "t_roll_min_s", "t_train_max_s", "t_train_min_s", "tenant"):
            if name in invalid:
                continue
            field = self.fields[name]
            try:
                value = field.run_validation(field.get_value(data))
                value = getattr(self, f"validate_{name}")(value)
            except (serializers.ValidationError, DjangoValidationError, SkipField):
                continue
            out[name] = value
        return out

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
        unknown = unknown_field_errors(data.keys())
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
        for phase in ("roll", "train"):
            if attrs.get(f"t_{phase}_min_s") is None:
                attrs[f"t_{phase}_min_s"] = attrs[f"t_{phase}_max_s"]
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


class JobSerializer(serializers.ModelSerializer):
    """A job record: trace-format fields plus identity, lifecycle and placement."""

    tenant = serializers.CharField(source="tenant.name")
    submitter = serializers.CharField(source="submitter.username")
    slo_class = serializers.CharField(source="slo_class.name")
    slo = serializers.FloatField(source="slo_class.slowdown")
    status = serializers.ChoiceField(choices=JobStatus.choices)
    group = serializers.SerializerMethodField()
    placement = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = (
            "id",
            "name",
            "tenant",
            "submitter",
            "slo_class",
            "slo",
            "runner",
            "model",
            "priority",
            "iterations",
            "rollout_gpus",
            "train_gpus",
            "t_roll_max_s",
            "t_roll_min_s",
            "t_train_max_s",
            "t_train_min_s",
            "host_mem_gb",
            "time_scale",
            "status",
            "reason",
            "error",
            "cancel_requested",
            "iterations_done",
            "attempts",
            "submitted_at",
            "placed_at",
            "started_at",
            "finished_at",
            "updated_at",
            "group",
            "placement",
        )
        read_only_fields = fields

    def _latest(self, job: Job) -> Any:
        from rollmux_web.jobs.selectors import latest_placement

        return latest_placement(job)

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


# Fields of a job record (JobSerializer, above) that only the server sets. Sent with a
# submission they are ignored, not refused: a record read from the API (`GET /jobs/42/`)
# can be edited and submitted again, as DRF ignores read-only fields on input and
# `kubectl --validate=strict` refuses only fields the schema does not have. Any other key
# is refused: a typo ("time_scal") must not silently run the job at the default.
READ_ONLY_JOB_FIELDS = frozenset(JobSerializer.Meta.fields) - frozenset(SPEC_FIELDS)
