"""Parse and validate workload traces and cluster specs (trace-format.md, v1).

One optional field beyond v1's table: `t_sync_s` (number >= 0, default 0), the job's
weight-sync seconds per iteration (JobProfile.t_sync_s). v1 readers ignore it as an
unknown field; a trace without it reads exactly as before.

Both readers validate the whole input before returning anything, so a caller
never gets half a file: the simulator's command line, the benchmarks and the
web app's what-if upload all go through `parse_trace_text` / `parse_cluster_json`
and show `TraceError`'s message, which names the line and the field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scheduler.model import ClusterSpec, GpuType, JobProfile

__all__ = [
    "TraceError",
    "cluster_to_dict",
    "default_cluster",
    "job_to_dict",
    "load_cluster",
    "load_trace",
    "parse_cluster_json",
    "parse_trace_text",
]


class TraceError(Exception):
    """Reject a trace or cluster file; `line` (1-based) and `field` say where."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None):
        where = []
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field '{field}'")
        full = f"{', '.join(where)}: {message}" if where else message
        super().__init__(full)
        self.line = line
        self.field = field
        self.detail = message


# The example cluster of trace-format.md: the paper's testbed (41 nodes of 8 GPUs per
# pool = 328 GPUs each) with prices keeping H800 = 2.85 x H20.
DEFAULT_CLUSTER_JSON = """{"rollout_gpu_type": "H20", "train_gpu_type": "H800",
 "gpu_types": {
   "H20":  {"price_per_gpu_hour": 1.85, "gpus_per_node": 8, "host_mem_gb": 2048, "nodes": 41},
   "H800": {"price_per_gpu_hour": 5.28, "gpus_per_node": 8, "host_mem_gb": 2048, "nodes": 41}},
 "switch_overhead_s": 2.0}
"""


# Bounds of a trace line's numbers: far above any real job, and the same as a submitted
# job's (rollmux_web.jobs.spec; a test checks they agree), so a trace that passes here
# cannot overflow the simulator later (a 1e308 duration was accepted at upload and failed
# the run) and a unit mistake (milliseconds for seconds, 1e-320 s) is refused by name.
MAX_ITERATIONS = 1_000_000
MAX_GPUS = 100_000
MIN_PHASE_S = 0.001
MAX_PHASE_S = 30 * 24 * 3600.0
MIN_HOST_MEM_GB = 0.001
MAX_HOST_MEM_GB = 1_000_000.0
MAX_ARRIVAL_S = 10 * 365 * 24 * 3600.0
MAX_SLO = 1000.0


def _is_number(value: Any) -> bool:
    # bool is an int subclass in Python; JSON true/false is never a number here.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(
    obj: Mapping[str, Any],
    name: str,
    line: int | None,
    *,
    required: bool = True,
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    maximum: float | None = None,
    prefix: str = "",
) -> float | None:
    field = prefix + name
    if name not in obj or obj[name] is None:
        if required:
            raise TraceError("is required", line=line, field=field)
        return None
    value = obj[name]
    if not _is_number(value):
        raise TraceError(f"must be a number, got {json.dumps(value)}", line=line, field=field)
    if not math.isfinite(value):
        raise TraceError("must be a finite number", line=line, field=field)
    if minimum is not None and value < minimum:
        raise TraceError(f"must be >= {minimum:g}, got {value:g}", line=line, field=field)
    if exclusive_minimum is not None and value <= exclusive_minimum:
        raise TraceError(f"must be > {exclusive_minimum:g}, got {value:g}", line=line, field=field)
    if maximum is not None and value > maximum:
        raise TraceError(f"must be <= {maximum:g}, got {value:g}", line=line, field=field)
    return float(value)


def _integer(
    obj: Mapping[str, Any],
    name: str,
    line: int | None,
    *,
    required: bool = True,
    minimum: int = 1,
    maximum: int | None = None,
    prefix: str = "",
) -> int | None:
    field = prefix + name
    if name not in obj or obj[name] is None:
        if required:
            raise TraceError("is required", line=line, field=field)
        return None
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"must be an integer, got {json.dumps(value)}", line=line, field=field)
    if value < minimum:
        raise TraceError(f"must be >= {minimum}, got {value}", line=line, field=field)
    if maximum is not None and value > maximum:
        raise TraceError(f"must be <= {maximum:,}, got {value:,}", line=line, field=field)
    return value


def _string(
    obj: Mapping[str, Any], name: str, line: int | None, *, required: bool, default: str = ""
) -> str:
    if name not in obj or obj[name] is None:
        if required:
            raise TraceError("is required", line=line, field=name)
        return default
    value = obj[name]
    if not isinstance(value, str):
        raise TraceError(f"must be a string, got {json.dumps(value)}", line=line, field=name)
    if required and not value.strip():
        raise TraceError("must not be empty", line=line, field=name)
    return value


def _parse_job(obj: Mapping[str, Any], line: int, spec: ClusterSpec) -> JobProfile:
    """Validate one trace line (already a JSON object) into a JobProfile."""
    job_id = _string(obj, "id", line, required=True)
    tenant = _string(obj, "tenant", line, required=False, default="default") or "default"
    model = _string(obj, "model", line, required=False)
    arrival = _number(obj, "arrival_s", line, minimum=0.0, maximum=MAX_ARRIVAL_S)
    iterations = _integer(obj, "iterations", line, minimum=1, maximum=MAX_ITERATIONS)
    rollout_gpus = _integer(obj, "rollout_gpus", line, minimum=1, maximum=MAX_GPUS)
    train_gpus = _integer(obj, "train_gpus", line, minimum=1, maximum=MAX_GPUS)
    assert arrival is not None and iterations is not None
    assert rollout_gpus is not None and train_gpus is not None
    for name, gpus, gpu_type in (
        ("rollout_gpus", rollout_gpus, spec.rollout),
        ("train_gpus", train_gpus, spec.train),
    ):
        if gpus % gpu_type.gpus_per_node:
            raise TraceError(
                f"{gpus} is not a multiple of the {gpu_type.name} node size "
                f"({gpu_type.gpus_per_node} GPUs per node)",
                line=line,
                field=name,
            )
    roll_max = _number(obj, "t_roll_max_s", line, minimum=MIN_PHASE_S, maximum=MAX_PHASE_S)
    train_max = _number(obj, "t_train_max_s", line, minimum=MIN_PHASE_S, maximum=MAX_PHASE_S)
    assert roll_max is not None and train_max is not None
    roll_min = _number(
        obj, "t_roll_min_s", line, required=False, minimum=MIN_PHASE_S, maximum=MAX_PHASE_S
    )
    train_min = _number(
        obj, "t_train_min_s", line, required=False, minimum=MIN_PHASE_S, maximum=MAX_PHASE_S
    )
    for name, lo, hi, hi_name in (
        ("t_roll_min_s", roll_min, roll_max, "t_roll_max_s"),
        ("t_train_min_s", train_min, train_max, "t_train_max_s"),
    ):
        if lo is not None and lo > hi:
            raise TraceError(
                f"{lo:g} is above {hi_name} ({hi:g}); the minimum must not exceed the maximum",
                line=line,
                field=name,
            )
    host_mem = _number(obj, "host_mem_gb", line, minimum=MIN_HOST_MEM_GB, maximum=MAX_HOST_MEM_GB)
    slo = _number(obj, "slo", line, minimum=1.0, maximum=MAX_SLO)
    assert host_mem is not None and slo is not None
    # An extension of v1 (unknown fields are ignored, so older readers accept it): the
    # weight sync per iteration, default 0 (no sync phase; every v1 trace as before).
    sync = _number(obj, "t_sync_s", line, required=False, minimum=0.0, maximum=MAX_PHASE_S)
    return JobProfile(
        id=job_id,
        arrival_s=arrival,
        iterations=iterations,
        rollout_gpus=rollout_gpus,
        train_gpus=train_gpus,
        t_roll_max_s=roll_max,
        t_train_max_s=train_max,
        host_mem_gb=host_mem,
        slo=slo,
        t_roll_min_s=roll_min,
        t_train_min_s=train_min,
        tenant=tenant,
        model=model,
        t_sync_s=sync or 0.0,
    )


def parse_trace_text(text: str, spec: ClusterSpec | None = None) -> list[JobProfile]:
    """Parse a JSON Lines trace, validating every line against `spec` (default cluster).

    Blank lines and lines starting with `#` are skipped; unknown fields are ignored.
    Raise TraceError (naming the line and field) on the first invalid line; nothing
    is returned from a file that has one. Jobs come back sorted by (arrival_s, line).
    """
    spec = spec or default_cluster()
    jobs: list[tuple[float, int, JobProfile]] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise TraceError(
                f"bad JSON ({exc.msg} at column {exc.colno})", line=number, field=None
            ) from None
        except RecursionError:
            # json's decoder recurses once per `[` or `{`: a line of 100,000 exhausts the stack
            raise TraceError("bad JSON (nested too deeply)", line=number) from None
        except ValueError as exc:  # e.g. an integer of more than 4,300 digits
            raise TraceError(f"bad JSON ({str(exc).splitlines()[0]})", line=number) from None
        if not isinstance(obj, dict):
            raise TraceError(
                f"each line must be a JSON object, got {type(obj).__name__}", line=number
            )
        job = _parse_job(obj, number, spec)
        if job.id in seen:
            raise TraceError(
                f"duplicate id '{job.id}' (first used on line {seen[job.id]})",
                line=number,
                field="id",
            )
        seen[job.id] = number
        jobs.append((job.arrival_s, number, job))
    if not jobs:
        raise TraceError("the trace has no jobs (every line is blank or a comment)")
    jobs.sort(key=lambda item: (item[0], item[1]))
    return [job for _, _, job in jobs]


def load_trace(path: str | Path, spec: ClusterSpec | None = None) -> list[JobProfile]:
    """Read and validate a trace file; see `parse_trace_text`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason})") from None
    return parse_trace_text(text, spec)


def _field_line(text: str, *names: str) -> int | None:
    """Return the 1-based line where the key path `names` appears in `text`, best effort.

    A cluster spec is one JSON object, so errors cannot carry a line from the parser;
    we find each key in turn after the previous one, which is right for any file
    that does not repeat a key name inside an earlier sibling.
    """
    pos = 0
    for name in names:
        match = re.compile(r'"' + re.escape(name) + r'"\s*:').search(text, pos)
        if match is None:
            return None if pos == 0 else text.count("\n", 0, pos) + 1
        pos = match.start()
    return text.count("\n", 0, pos) + 1


def _parse_gpu_type(name: str, obj: Any, text: str) -> GpuType:
    prefix = f"gpu_types.{name}."
    if not isinstance(obj, dict):
        raise TraceError(
            f"must be an object, got {json.dumps(obj)}",
            line=_field_line(text, "gpu_types", name),
            field=f"gpu_types.{name}",
        )

    def line_of(key: str) -> int | None:
        return (
            _field_line(text, "gpu_types", name, key)
            if key in obj
            else _field_line(text, "gpu_types", name)
        )

    def num(key: str, **kw: Any) -> float | None:
        try:
            return _number(obj, key, None, prefix=prefix, **kw)
        except TraceError as exc:
            raise TraceError(exc.detail, line=line_of(key), field=exc.field) from None

    def integer(key: str, **kw: Any) -> int | None:
        try:
            return _integer(obj, key, None, prefix=prefix, **kw)
        except TraceError as exc:
            raise TraceError(exc.detail, line=line_of(key), field=exc.field) from None

    price = num("price_per_gpu_hour", exclusive_minimum=0.0)
    gpus_per_node = integer("gpus_per_node", minimum=1)
    host_mem = num("host_mem_gb", exclusive_minimum=0.0)
    nodes = integer("nodes", required=False, minimum=0)
    speed = num("rollout_speed_factor", required=False, exclusive_minimum=0.0)
    assert price is not None and gpus_per_node is not None and host_mem is not None
    return GpuType(
        name=name,
        price_per_gpu_hour=price,
        gpus_per_node=gpus_per_node,
        host_mem_gb=host_mem,
        nodes=nodes,
        rollout_speed_factor=1.0 if speed is None else speed,
    )


def parse_cluster_json(text: str) -> ClusterSpec:
    """Parse and validate a cluster spec (one JSON object); raise TraceError naming line+field."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"bad JSON ({exc.msg} at column {exc.colno})", line=exc.lineno) from None
    except RecursionError:
        raise TraceError("bad JSON (nested too deeply)") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise TraceError(f"bad JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(obj, dict):
        raise TraceError(
            f"the cluster spec must be a JSON object, got {type(obj).__name__}", line=1
        )

    def fail(message: str, *path: str) -> TraceError:
        return TraceError(message, line=_field_line(text, *path), field=".".join(path))

    for key in ("rollout_gpu_type", "train_gpu_type"):
        if key not in obj:
            raise TraceError("is required", line=1, field=key)
        if not isinstance(obj[key], str) or not obj[key]:
            raise fail(f"must be a GPU type name, got {json.dumps(obj[key])}", key)
    types = obj.get("gpu_types")
    if types is None:
        raise TraceError("is required", line=1, field="gpu_types")
    if not isinstance(types, dict) or not types:
        raise fail("must be a non-empty object of GPU types", "gpu_types")
    parsed: dict[str, GpuType] = {}
    for name, value in types.items():
        parsed[name] = _parse_gpu_type(name, value, text)
    for key in ("rollout_gpu_type", "train_gpu_type"):
        if obj[key] not in parsed:
            raise fail(f"'{obj[key]}' is not one of gpu_types ({', '.join(sorted(parsed))})", key)
    switch = obj.get("switch_overhead_s", 2.0)
    if switch is None:
        switch = 2.0
    if not _is_number(switch) or not math.isfinite(switch) or switch < 0:
        raise fail(f"must be a number >= 0, got {json.dumps(switch)}", "switch_overhead_s")
    return ClusterSpec(
        rollout=parsed[obj["rollout_gpu_type"]],
        train=parsed[obj["train_gpu_type"]],
        switch_overhead_s=float(switch),
    )


def load_cluster(path: str | Path) -> ClusterSpec:
    """Read and validate a cluster spec file; see `parse_cluster_json`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason})") from None
    return parse_cluster_json(text)


def default_cluster() -> ClusterSpec:
    """Return the example cluster of trace-format.md (41 H20 + 41 H800 nodes)."""
    return parse_cluster_json(DEFAULT_CLUSTER_JSON)


def job_to_dict(job: JobProfile) -> dict[str, Any]:
    """Render a job as one trace line's object (inverse of the parser)."""
    out: dict[str, Any] = {
        "id": job.id,
        "tenant": job.tenant,
        "arrival_s": job.arrival_s,
        "iterations": job.iterations,
        "rollout_gpus": job.rollout_gpus,
        "train_gpus": job.train_gpus,
        "t_roll_max_s": job.t_roll_max_s,
        "t_train_max_s": job.t_train_max_s,
    }
    if job.t_roll_min_s is not None:
        out["t_roll_min_s"] = job.t_roll_min_s
    if job.t_train_min_s is not None:
        out["t_train_min_s"] = job.t_train_min_s
    out["host_mem_gb"] = job.host_mem_gb
    out["slo"] = job.slo
    if job.model:
        out["model"] = job.model
    if job.t_sync_s:
        out["t_sync_s"] = job.t_sync_s
    return out


def cluster_to_dict(spec: ClusterSpec) -> dict[str, Any]:
    """Render a spec in the cluster file format (inverse of `parse_cluster_json`)."""
    types: dict[str, Any] = {}
    for gpu_type in (spec.rollout, spec.train):
        types[gpu_type.name] = {
            "price_per_gpu_hour": gpu_type.price_per_gpu_hour,
            "gpus_per_node": gpu_type.gpus_per_node,
            "host_mem_gb": gpu_type.host_mem_gb,
            "nodes": gpu_type.nodes,
        }
        if gpu_type.rollout_speed_factor != 1.0:
            types[gpu_type.name]["rollout_speed_factor"] = gpu_type.rollout_speed_factor
    return {
        "rollout_gpu_type": spec.rollout.name,
        "train_gpu_type": spec.train.name,
        "gpu_types": types,
        "switch_overhead_s": spec.switch_overhead_s,
    }
