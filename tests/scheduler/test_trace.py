"""Trace and cluster-spec validation (trace-format.md v1): every bad input names line + field."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.cluster import cluster_nodes
from scheduler.model import Pool
from scheduler.sim.__main__ import main as sim_main
from scheduler.trace import (
    TraceError,
    cluster_to_dict,
    default_cluster,
    job_to_dict,
    load_cluster,
    load_trace,
    parse_cluster_json,
    parse_trace_text,
)

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "docs" / "spec"  # a copy of the shared trace-format spec and its examples
EXAMPLE_TRACE = SPEC / "example.jsonl"
EXAMPLE_CLUSTER = SPEC / "cluster-example.json"

GOOD = {
    "id": "job-1",
    "arrival_s": 0,
    "iterations": 3,
    "rollout_gpus": 8,
    "train_gpus": 16,
    "t_roll_max_s": 300.0,
    "t_roll_min_s": 200.0,
    "t_train_max_s": 100.0,
    "host_mem_gb": 400,
    "slo": 1.5,
}


def line(**changes: object) -> str:
    obj = dict(GOOD)
    for key, value in changes.items():
        if value is ...:
            obj.pop(key, None)
        else:
            obj[key] = value
    return json.dumps(obj)


def test_example_trace_parses_sorted_by_arrival() -> None:
    jobs = load_trace(EXAMPLE_TRACE)
    assert [j.id for j in jobs] == [
        "math-7b-a",
        "math-7b-b",
        "swe-agent-14b",
        "game-3b",
        "rlvr-32b",
    ]
    assert jobs[1].t_roll_min_s is None and jobs[1].roll_min == jobs[1].t_roll_max_s
    assert jobs[0].tenant == "math" and jobs[0].model == "qwen2.5-7b"


def test_comments_blank_lines_and_unknown_fields_are_accepted() -> None:
    text = "# header\n\n" + line(extra="ignored", tenant=None) + "\n   \n"
    (job,) = parse_trace_text(text)
    assert job.tenant == "default"
    assert job.train_gpus == 16


def test_lines_need_not_be_sorted() -> None:
    text = line(id="late", arrival_s=50) + "\n" + line(id="early", arrival_s=5)
    assert [j.id for j in parse_trace_text(text)] == ["early", "late"]


def test_job_round_trips_through_the_writer() -> None:
    jobs = load_trace(EXAMPLE_TRACE)
    text = "\n".join(json.dumps(job_to_dict(j)) for j in jobs)
    assert parse_trace_text(text) == jobs


BAD_TRACE_CASES = [
    # (name, bad line, field, words the message must contain)
    ("bad_json", '{"id": "x", "arrival_s": 0,', None, "bad JSON"),
    ("not_an_object", "[1, 2]", None, "JSON object"),
    ("missing_id", line(id=...), "id", "required"),
    ("empty_id", line(id=" "), "id", "empty"),
    ("id_not_string", line(id=7), "id", "string"),
    ("missing_iterations", line(iterations=...), "iterations", "required"),
    ("iterations_is_text", line(iterations="ten"), "iterations", "integer"),
    ("iterations_is_float", line(iterations=2.5), "iterations", "integer"),
    ("iterations_zero", line(iterations=0), "iterations", ">= 1"),
    ("arrival_negative", line(arrival_s=-1), "arrival_s", ">= 0"),
    ("arrival_is_bool", line(arrival_s=True), "arrival_s", "number"),
    ("negative_duration", line(t_roll_max_s=-5), "t_roll_max_s", ">= 0.001"),
    ("zero_train_duration", line(t_train_max_s=0), "t_train_max_s", ">= 0.001"),
    ("negative_min_duration", line(t_train_min_s=-1), "t_train_min_s", ">= 0.001"),
    ("roll_min_above_max", line(t_roll_min_s=400), "t_roll_min_s", "above t_roll_max_s"),
    (
        "train_min_above_max",
        line(t_train_min_s=150),
        "t_train_min_s",
        "above t_train_max_s",
    ),
    ("rollout_gpus_not_node_multiple", line(rollout_gpus=12), "rollout_gpus", "multiple"),
    ("train_gpus_not_node_multiple", line(train_gpus=4), "train_gpus", "multiple"),
    ("gpus_zero", line(rollout_gpus=0), "rollout_gpus", ">= 1"),
    ("slo_below_one", line(slo=0.9), "slo", ">= 1"),
    ("slo_missing", line(slo=...), "slo", "required"),
    ("host_mem_zero", line(host_mem_gb=0), "host_mem_gb", ">= 0.001"),
    ("duration_infinite", line(t_roll_max_s=1e999), "t_roll_max_s", "finite"),
    ("tenant_not_string", line(tenant=3), "tenant", "string"),
]


@pytest.mark.parametrize(
    ("bad", "field", "words"),
    [case[1:] for case in BAD_TRACE_CASES],
    ids=[case[0] for case in BAD_TRACE_CASES],
)
def test_bad_trace_line_names_line_and_field(bad: str, field: str | None, words: str) -> None:
    text = "# two good lines first, so nothing may come back from half a file\n"
    text += line(id="a") + "\n" + line(id="b") + "\n" + bad + "\n" + line(id="c") + "\n"
    with pytest.raises(TraceError) as info:
        parse_trace_text(text)
    error = info.value
    assert error.line == 4
    assert error.field == field
    assert "line 4" in str(error)
    if field is not None:
        assert f"'{field}'" in str(error)
    assert words in str(error)


def test_duplicate_id_names_both_lines() -> None:
    text = line(id="same") + "\n" + line(id="other") + "\n" + line(id="same")
    with pytest.raises(TraceError) as info:
        parse_trace_text(text)
    assert (info.value.line, info.value.field) == (3, "id")
    assert "first used on line 1" in str(info.value)


def test_empty_trace_is_rejected() -> None:
    with pytest.raises(TraceError, match="no jobs"):
        parse_trace_text("# nothing\n\n")


def test_node_size_comes_from_the_cluster_spec() -> None:
    spec_text = EXAMPLE_CLUSTER.read_text().replace('"gpus_per_node": 8', '"gpus_per_node": 4')
    spec = parse_cluster_json(spec_text)
    (job,) = parse_trace_text(line(rollout_gpus=12, train_gpus=4), spec)
    assert job.rollout_gpus == 12
    with pytest.raises(TraceError) as info:
        parse_trace_text(line(rollout_gpus=12))
    assert "H20 node size (8 GPUs per node)" in str(info.value)


def test_example_cluster_matches_the_default() -> None:
    spec = load_cluster(EXAMPLE_CLUSTER)
    assert spec == default_cluster()
    assert spec.rollout.name == "H20" and spec.train.nodes == 41
    assert spec.train.price_per_gpu_hour / spec.rollout.price_per_gpu_hour == pytest.approx(
        2.85, abs=0.01
    )
    assert parse_cluster_json(json.dumps(cluster_to_dict(spec))) == spec


def test_cluster_nodes_materialise_unbounded_pools() -> None:
    spec = parse_cluster_json(
        EXAMPLE_CLUSTER.read_text().replace('"nodes": 41}}', '"nodes": null}}')
    )
    assert spec.train.nodes is None
    nodes = cluster_nodes(spec, unbounded={Pool.TRAIN: 3})
    assert sum(n.pool is Pool.ROLLOUT for n in nodes) == 41
    train = [n for n in nodes if n.pool is Pool.TRAIN]
    assert len(train) == 3 and train[0].price_per_hour == pytest.approx(8 * 5.28)
    assert len({n.name for n in nodes}) == len(nodes)


def _cluster(**changes: object) -> str:
    obj = json.loads(EXAMPLE_CLUSTER.read_text())
    for path, value in changes.items():
        target = obj
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[key]
        if value is ...:
            target.pop(keys[-1])
        else:
            target[keys[-1]] = value
    return json.dumps(obj, indent=1)


BAD_CLUSTER_CASES = [
    ("bad_json", '{"rollout_gpu_type": "H20",\n "gpu_types": }', None, "bad JSON"),
    ("not_object", "[]", None, "JSON object"),
    ("missing_gpu_types", _cluster(gpu_types=...), "gpu_types", "required"),
    ("unknown_rollout_type", _cluster(rollout_gpu_type="A100"), "rollout_gpu_type", "A100"),
    (
        "price_zero",
        _cluster(gpu_types__H20__price_per_gpu_hour=0),
        "gpu_types.H20.price_per_gpu_hour",
        "> 0",
    ),
    (
        "price_text",
        _cluster(gpu_types__H800__price_per_gpu_hour="5"),
        "gpu_types.H800.price_per_gpu_hour",
        "number",
    ),
    (
        "node_size_float",
        _cluster(gpu_types__H20__gpus_per_node=7.5),
        "gpu_types.H20.gpus_per_node",
        "integer",
    ),
    ("nodes_negative", _cluster(gpu_types__H800__nodes=-1), "gpu_types.H800.nodes", ">= 0"),
    (
        "host_mem_missing",
        _cluster(gpu_types__H800__host_mem_gb=...),
        "gpu_types.H800.host_mem_gb",
        "required",
    ),
    ("switch_negative", _cluster(switch_overhead_s=-2), "switch_overhead_s", ">= 0"),
    (
        "rollout_speed_zero",
        _cluster(gpu_types__H800__rollout_speed_factor=0),
        "gpu_types.H800.rollout_speed_factor",
        "> 0",
    ),
]


def test_the_rollout_speed_factor_is_optional_and_round_trips() -> None:
    from scheduler.trace import cluster_to_dict

    assert parse_cluster_json(_cluster()).train.rollout_speed_factor == 1.0
    slow = parse_cluster_json(_cluster(gpu_types__H800__rollout_speed_factor=1.5))
    assert slow.train.rollout_speed_factor == 1.5 and slow.rollout.rollout_speed_factor == 1.0
    again = parse_cluster_json(json.dumps(cluster_to_dict(slow)))
    assert again == slow


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [case[1:] for case in BAD_CLUSTER_CASES],
    ids=[case[0] for case in BAD_CLUSTER_CASES],
)
def test_bad_cluster_names_line_and_field(text: str, field: str | None, words: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_cluster_json(text)
    error = info.value
    assert error.field == field
    assert error.line is not None and "line " in str(error)
    assert words in str(error)
    if field is not None:
        # the reported line holds the offending key (or, when it is missing, the
        # object that lacks it; a missing top-level key points at line 1)
        parts = field.split(".")
        key = parts[-2] if words == "required" and len(parts) > 1 else parts[-1]
        reported = text.splitlines()[error.line - 1]
        assert f'"{key}"' in reported or error.line == 1


def test_cluster_line_points_at_the_nested_field() -> None:
    text = _cluster(gpu_types__H800__nodes=-1)
    with pytest.raises(TraceError) as info:
        parse_cluster_json(text)
    target = text.splitlines()[info.value.line - 1]  # type: ignore[operator]
    assert '"nodes": -1' in target


# --- the command line: exit code 2, message on stderr, nothing simulated ----------


def _cli(*args: str, process: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the simulator's command line: in this process (its `main`, what `python -m
    scheduler.sim` runs), or with `process` as its own process (once: the exit code)."""
    if process:
        return subprocess.run(
            [sys.executable, "-m", "scheduler.sim", *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = sim_main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ('{"id": "x",', None),
        (line(t_roll_max_s=-5), "t_roll_max_s"),
        (line(t_roll_min_s=900), "t_roll_min_s"),
        (line(train_gpus=12), "train_gpus"),
        (line(id="a"), "id"),  # duplicate of the first line
        (line(iterations="many"), "iterations"),
    ],
    ids=["bad_json", "negative", "min_above_max", "not_node_multiple", "duplicate", "mistyped"],
)
def test_cli_rejects_bad_trace_with_exit_code_2(
    tmp_path: Path, bad: str, field: str | None
) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text(line(id="a") + "\n" + bad + "\n")
    out = tmp_path / "report.json"
    proc = _cli("--trace", str(trace), "--policy", "all", "--seed", "1", "--json", str(out))
    assert proc.returncode == 2, proc.stderr
    assert "line 2" in proc.stderr
    if field:
        assert f"field '{field}'" in proc.stderr
    assert proc.stdout == ""
    assert not out.exists()


def test_cli_rejects_bad_cluster_with_exit_code_2(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(_cluster(gpu_types__H20__gpus_per_node=0))
    proc = _cli(
        "--trace", str(EXAMPLE_TRACE), "--cluster", str(cluster), "--policy", "rollmux",
        "--seed", "1")  # fmt: skip
    assert proc.returncode == 2
    assert "field 'gpu_types.H20.gpus_per_node'" in proc.stderr and "line " in proc.stderr
    assert proc.stdout == ""


def test_cli_rejects_unknown_policy_and_missing_file(tmp_path: Path) -> None:
    proc = _cli("--trace", str(EXAMPLE_TRACE), "--policy", "fastest", "--seed", "1", process=True)
    assert proc.returncode == 2 and "fastest" in proc.stderr  # the process's exit code
    proc = _cli("--trace", str(tmp_path / "nope.jsonl"), "--policy", "all", "--seed", "1")
    assert proc.returncode == 2 and "cannot read trace" in proc.stderr
