"""The job spec: the one list of a submission's fields, with bounds, help text and defaults.

Field names are those of the trace format (docs/spec/trace-format.md) plus name, tenant,
slo_class, runner, model, priority and time_scale. The API serializer, the submit form, the
audit view, the job record and the CLI derive from `SPEC`; add a field here and they all
follow.

Stdlib only, so a client (the CLI) or a worker can import it without Django: `SPEC`,
`SPEC_FIELDS`, `spec_field(name)`, `PHASE_TIME_FIELDS`, `EXAMPLE_SPEC`,
`unknown_field_errors(keys)`, `READ_ONLY_JOB_FIELDS` (what a job record carries beside its
spec) and `runner_permitted(name, allowlist)` (the rule for runners by import path).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# (stdlib only too: the runner names and the allowlist rule are the neutral contract's)
from rollmux_contract.runners import BUILTIN_RUNNERS, RUNNER_IMPORT_PATH, runner_permitted
from rollmux_web.formatting import MAX_REPORTED_KEY, unknown_key

__all__ = ["BUILTIN_RUNNERS", "MAX_REPORTED_KEY", "RUNNER_IMPORT_PATH", "runner_permitted"]

# Bounds keep values inside the database column types and catch unit mistakes (a duration
# in milliseconds, memory in MB, 1e-320 s); they are far from any real job. The trace format
# has the same ones (scheduler.trace; tests/web/test_input_limits.py checks they agree).
MAX_ITERATIONS = 1_000_000
MAX_GPUS = 100_000
MAX_PHASE_S = 30 * 24 * 3600.0
MAX_HOST_MEM_GB = 1_000_000.0
MAX_TIME_SCALE = 1_000_000.0
MAX_PRIORITY = 1000
MAX_EMULATED_DRIFT = 10.0
MAX_SLO = 1000.0  # (the trace format's `slo`; a submission names an SLO class instead)
MIN_PHASE_S = 0.001  # a millisecond: 1e-320 s is a unit mistake, not a phase
MIN_HOST_MEM_GB = 0.001  # a megabyte
MAX_ARRIVAL_S = 10 * 365 * 24 * 3600.0  # (the trace format's `arrival_s`)

# A time scale divides every phase time; below this a 30-day phase would last millennia
# (1e-300 overflowed the emulated runner's sleep and failed the job three times).
MIN_TIME_SCALE = 0.01


@dataclass(frozen=True)
class SpecField:
    """One field of a job submission.

    `kind` is the JSON type ("text", "int" or "float"); `default` applies when the field is
    left out (None: no default, or null for an optional field); `min_value`/`max_value` are
    inclusive bounds (`unit` words their messages).
    `reference` fields name another row (a tenant, an SLO class) and are stored as that row.
    `example` is the example job of docs/api.md's value (None: not in the example).
    """

    name: str
    label: str
    kind: str
    help: str
    required: bool = True
    default: Any = None
    max_length: int | None = None
    min_value: float | None = None
    max_value: float | None = None
    unit: str = ""
    reference: bool = False
    example: Any = None  # the example job of docs/api.md; what the submit form starts with


SPEC: tuple[SpecField, ...] = (
    SpecField(
        "name", "Name", "text", "a human name for the job", max_length=128, example="grpo-7b"
    ),
    SpecField(
        "tenant",
        "Tenant",
        "text",
        "owning tenant by name; defaults to the submitter's only tenant",
        required=False,
        max_length=64,
        reference=True,
    ),
    SpecField(
        "slo_class",
        "SLO class",
        "text",
        'tolerated slowdown under sharing: an SLO class by name, e.g. "silver"',
        max_length=32,
        reference=True,
        example="silver",
    ),
    SpecField(
        "runner",
        "Runner",
        "text",
        f"{', '.join(BUILTIN_RUNNERS)} or an allowed import path package.module:ClassName",
        required=False,
        default="emulated",
        max_length=200,
        example="emulated",
    ),
    SpecField(
        "model",
        "Model",
        "text",
        "free text, shown in reports; for hf-grpo it sets the Llama model size: llama-0.1M (the "
        "default), llama-2M, ... up to 1,000M or 1B",
        required=False,
        default="",
        max_length=128,
    ),
    SpecField(
        "iterations",
        "Iterations",
        "int",
        "on-policy iterations",
        min_value=1,
        max_value=MAX_ITERATIONS,
        example=20,
    ),
    SpecField(
        "rollout_gpus",
        "Rollout GPUs",
        "int",
        "GPUs of the rollout pool type; a multiple of its node size",
        max_value=MAX_GPUS,
        example=8,
    ),
    SpecField(
        "train_gpus",
        "Training GPUs",
        "int",
        "GPUs of the training pool type; a multiple of its node size",
        max_value=MAX_GPUS,
        example=8,
    ),
    SpecField(
        "t_roll_max_s",
        "Rollout max (s)",
        "float",
        "worst-case solo rollout, profile seconds; leave all four phase times out to have "
        "the job profiled first",
        required=False,
        min_value=MIN_PHASE_S,
        max_value=MAX_PHASE_S,
        unit="seconds",
        example=300,
    ),
    SpecField(
        "t_roll_min_s",
        "Rollout min (s)",
        "float",
        "default: the max",
        required=False,
        min_value=MIN_PHASE_S,
        max_value=MAX_PHASE_S,
        unit="seconds",
    ),
    SpecField(
        "t_train_max_s",
        "Training max (s)",
        "float",
        "worst-case solo training, profile seconds; leave all four phase times out to have "
        "the job profiled first",
        required=False,
        min_value=MIN_PHASE_S,
        max_value=MAX_PHASE_S,
        unit="seconds",
        example=120,
    ),
    SpecField(
        "t_train_min_s",
        "Training min (s)",
        "float",
        "default: the max",
        required=False,
        min_value=MIN_PHASE_S,
        max_value=MAX_PHASE_S,
        unit="seconds",
    ),
    SpecField(
        "host_mem_gb",
        "Host memory (GB)",
        "float",
        "resident host memory on each node, GB",
        min_value=MIN_HOST_MEM_GB,
        max_value=MAX_HOST_MEM_GB,
        unit="GB",
        example=400,
    ),
    SpecField(
        "priority",
        "Priority",
        "int",
        "higher is planned first",
        required=False,
        default=0,
        min_value=-MAX_PRIORITY,
        max_value=MAX_PRIORITY,
    ),
    SpecField(
        "time_scale",
        "Time scale",
        "float",
        f"emulation speed-up, {MIN_TIME_SCALE:g} to {MAX_TIME_SCALE:,.0f}; blank or null = the "
        "server default",
        required=False,
        min_value=MIN_TIME_SCALE,
        max_value=MAX_TIME_SCALE,
        unit="speed-up factor",
    ),
    SpecField(
        "emulated_drift",
        "Emulated drift",
        "float",
        "emulated runner only: iteration i of n runs (1 + this x i/(n-1)) times its drawn "
        "phase times (the paper's increasing drift template; 0 = none)",
        required=False,
        default=0.0,
        min_value=0.0,
        max_value=MAX_EMULATED_DRIFT,
        unit="factor",
    ),
)
SPEC_FIELDS: tuple[str, ...] = tuple(f.name for f in SPEC)
_BY_NAME = {f.name: f for f in SPEC}

# The four phase times, as (max, min) per phase kind: a min left out defaults to its max.
# A spec gives both maxima (and either min, or neither), or none of the four: then the job
# is profiled first (status `profiling`) and its measured times become its estimates.
PHASE_TIME_FIELDS = (("t_roll_max_s", "t_roll_min_s"), ("t_train_max_s", "t_train_min_s"))
PHASE_TIME_NAMES = tuple(n for pair in PHASE_TIME_FIELDS for n in pair)


def missing_phase_times(given: Iterable[str]) -> list[str]:
    """Return the phase-time fields a spec lacks when it gives some of the four: both
    maxima are needed once any is given (a min alone has no max to default from); [] when it
    gives none (the job is profiled) or enough."""
    have = set(given) & set(PHASE_TIME_NAMES)
    if not have:
        return []
    return [hi for hi, _ in PHASE_TIME_FIELDS if hi not in have]


# The example job of docs/api.md (and the API schema's): what a first submission looks like.
EXAMPLE_SPEC: dict[str, Any] = {f.name: f.example for f in SPEC if f.example is not None}

# Trace-file fields (docs/spec/trace-format.md) a submission has no use for, with why.
TRACE_ONLY_FIELDS = {
    "arrival_s": "arrival_s is a trace-file field (when the simulator submits the job); "
    "a submitted job arrives now.",
}

# Fields of a job record (jobs.serializers.JobSerializer) that only the server sets. Sent
# with a submission they are ignored, not refused: a record read from the API
# (`GET /jobs/42/`) can be edited and submitted again, as DRF ignores read-only fields on
# input and `kubectl --validate=strict` refuses only fields the schema does not have. Any
# other key is refused: a typo ("time_scal") must not silently run the job at the default.
JOB_RECORD_FIELDS: tuple[str, ...] = (
    "id",
    "name",
    "tenant",
    "submitter",
    "slo_class",
    "slo",
    *(n for n in SPEC_FIELDS if n not in ("name", "tenant", "slo_class")),
    "duration_source",
    "measured",
    "drift",
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
READ_ONLY_JOB_FIELDS = frozenset(JOB_RECORD_FIELDS) - frozenset(SPEC_FIELDS)


def spec_field(name: str) -> SpecField:
    """Return the field called `name` (KeyError for anything else)."""
    return _BY_NAME[name]


def unknown_field_errors(keys: Iterable[Any]) -> dict[str, list[str]]:
    """Return an error per key that is neither a spec field nor a read-only job field
    (`unknown_key`; a field of the trace format only says where it belongs)."""
    errors: dict[str, list[str]] = {}
    for key in keys:
        name = str(key)
        if name in _BY_NAME or name in READ_ONLY_JOB_FIELDS:
            continue
        shown, message = unknown_key(name, SPEC_FIELDS, TRACE_ONLY_FIELDS.get(name))
        errors[shown] = message
    return errors


def spec_values(job: Any) -> dict[str, Any]:
    """Return a job record's spec as plain values (references by name): the audit view."""
    out: dict[str, Any] = {}
    for f in SPEC:
        value = getattr(job, f.name)
        out[f.name] = getattr(value, "name", value) if f.reference else value
    return out


def parse_error_text(exc: Exception) -> str:
    """Return what is wrong with a spec file that YAML could not parse, and where: "expected
    ',' or ']', but got '<stream end>' at line 2, column 1 (while parsing a flow sequence
    from line 1, column 7)" (PyYAML's first line alone, "while parsing a flow sequence",
    names neither the problem nor the place)."""
    problem = getattr(exc, "problem", None)
    if not problem:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = str(problem)
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        text += f" at line {mark.line + 1}, column {mark.column + 1}"
    context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context:
        text += f" ({context}"
        if start is not None:
            text += f" from line {start.line + 1}, column {start.column + 1}"
        text += ")"
    return text
