"""Input that used to stall or crash the server is refused by name: YAML bombs and deep
nesting in every spec-file reader, every text field's length limit in every layer (walked
field by field), and bounds on every number (NaN, Infinity, 1e-320, 1e308)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile

from rollmux_cli.cli import CliError, load_spec
from rollmux_web.jobs import spec as job_spec_module
from rollmux_web.jobs.models import Job
from rollmux_web.jobs.serializers import JobSpecSerializer
from rollmux_web.jobs.spec import SPEC, parse_error_text
from rollmux_web.jobs.spec_yaml import LOADER, MAX_DEPTH, _PureLoader
from rollmux_web.jobs.spec_yaml import load_spec_text as load_spec_yaml
from scheduler import trace
from tests.factories import job_spec

# The 9-level "billion laughs": 9^9 list items once its aliases are followed (the field
# checks stringified it for 203 s, ~2.7 GB).
BILLION_LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)
DEEP_YAML = "name: x\nmodel: " + "[" * 10_000 + "]" * 10_000 + "\n"
TEXT_FIELDS = [f for f in SPEC if f.kind == "text"]
NUMBER_FIELDS = [f for f in SPEC if f.kind != "text"]


def _upload(client: Any, text: str) -> Any:
    return client.post("/jobs/upload/", {"file": SimpleUploadedFile("s.yaml", text.encode())})


# --- YAML bombs and nesting (items 1-2) -----------------------------------------------------


@pytest.mark.parametrize("loader", [LOADER, _PureLoader], ids=["libyaml", "pure-python"])
def test_the_yaml_guard_refuses_aliases_depth_and_size_naming_the_line(loader: type) -> None:
    def load_spec_text(text: str) -> Any:
        return load_spec_yaml(text, loader=loader)

    with pytest.raises(yaml.YAMLError) as bomb:
        load_spec_text(BILLION_LAUGHS)
    assert parse_error_text(bomb.value).startswith("an alias (*a) is not allowed")
    assert "at line 2," in parse_error_text(bomb.value)
    with pytest.raises(yaml.YAMLError) as deep:
        load_spec_text(DEEP_YAML)
    assert (
        f"nested more than {MAX_DEPTH} levels deep; a job spec is one mapping of fields at line 2"
        in parse_error_text(deep.value)
    )
    block = "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 200))
    with pytest.raises(yaml.YAMLError, match="nested more than"):
        load_spec_text(block)
    with pytest.raises(yaml.YAMLError, match="more than 2,000 values"):
        load_spec_text("[" + ",".join(["1"] * 5_000) + "]")
    with pytest.raises(yaml.YAMLError, match="4300 digits"):
        load_spec_text("iterations: " + "9" * 5000)
    # an anchor nobody refers to, and JSON, still read
    assert load_spec_text("name: &n x\n") == {"name": "x"}
    assert load_spec_text(json.dumps(job_spec())) == job_spec()


@pytest.mark.parametrize("loader", [LOADER, _PureLoader], ids=["libyaml", "pure-python"])
def test_a_field_given_twice_is_refused_naming_it_and_both_lines(loader: type) -> None:
    # YAML requires unique keys; PyYAML kept the last value without a word (QA pass 13)
    text = "name: a\niterations: 2\ntrain_gpus: 8\niterations: 5\n"
    with pytest.raises(yaml.YAMLError) as twice:
        load_spec_yaml(text, loader=loader)
    assert parse_error_text(twice.value).startswith(
        "the field iterations is given twice (lines 2 and 4); a spec gives each field once"
    )
    with pytest.raises(yaml.YAMLError, match="the field iterations is given twice"):
        load_spec_yaml('{"iterations": 2, "name": "a", "iterations": 5}', loader=loader)
    # the same key in two different mappings is no repetition
    assert load_spec_yaml("a: {x: 1}\nb: {x: 2}\n", loader=loader) == {
        "a": {"x": 1},
        "b": {"x": 2},
    }


def test_upload_refuses_a_field_given_twice_and_submits_nothing(client_as: Any, world: Any) -> None:
    text = yaml.safe_dump(job_spec(iterations=2)) + "iterations: 5\n"
    resp = _upload(client_as("alice"), text)
    assert resp.status_code == 400
    assert "the field iterations is given twice" in resp.content.decode()
    assert not Job.objects.exists()


def test_upload_refuses_a_yaml_bomb_and_deep_nesting_with_a_400_naming_the_line(
    client_as: Any, world: Any
) -> None:
    client = client_as("alice")
    resp = _upload(client, BILLION_LAUGHS)
    assert resp.status_code == 400
    assert "an alias (*a) is not allowed in a spec file" in resp.content.decode()
    resp = _upload(client, DEEP_YAML)
    assert resp.status_code == 400
    assert (
        f"nested more than {MAX_DEPTH} levels deep; a job spec is one mapping of fields at line 2"
        in resp.content.decode()
    )
    assert not Job.objects.exists()


def test_the_cli_refuses_a_yaml_bomb_before_any_request(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BILLION_LAUGHS)
    with pytest.raises(CliError, match=r"an alias \(\*a\) is not allowed .* at line 2"):
        load_spec(str(path))
    path.write_text(DEEP_YAML)
    with pytest.raises(CliError, match="nested more than"):
        load_spec(str(path))


def test_a_what_if_trace_line_of_100000_brackets_is_a_400_naming_the_line(
    client_as: Any, world: Any
) -> None:
    text = "# a comment\n" + "[" * 100_000 + "\n"
    with pytest.raises(trace.TraceError, match="line 2: bad JSON \\(nested too deeply\\)"):
        trace.parse_trace_text(text)
    resp = client_as("alice").post(
        "/whatif/",
        {
            "source": "upload",
            "policies": ["rollmux"],
            "seed": "0",
            "trace": SimpleUploadedFile("t.jsonl", text.encode()),
        },
    )
    assert resp.status_code == 400
    assert "line 2: bad JSON (nested too deeply)" in resp.content.decode()
    with pytest.raises(trace.TraceError, match="line 1: bad JSON \\(Exceeds the limit"):
        trace.parse_trace_text('{"iterations": ' + "9" * 5000 + "}")


def test_the_api_refuses_deep_json_with_a_400(api_as: Any, world: Any) -> None:
    resp = api_as("alice").post(
        "/api/v1/jobs/", data="[" * 100_000, content_type="application/json"
    )
    assert resp.status_code == 400
    assert "nested too deeply" in resp.json()["error"]["message"]


# --- string lengths (item 3) ----------------------------------------------------------------


def _db_max_length(name: str) -> int | None:
    field = Job._meta.get_field(name)
    if field.is_relation:  # a reference: the name column of the row it names
        return field.related_model._meta.get_field("name").max_length  # type: ignore[union-attr]
    return field.max_length  # type: ignore[no-any-return]


@pytest.mark.django_db
def test_every_text_field_has_one_length_limit_in_every_layer(client_as: Any, world: Any) -> None:
    from rest_framework.test import APIClient

    client = client_as("alice")
    form = client.get("/jobs/new/").content.decode()
    api = APIClient()
    api.force_authenticate(world.admin)
    schema = api.get("/api/schema/", {"format": "json"}).json()
    request_props = schema["components"]["schemas"]["JobSubmitRequestRequest"]["properties"]
    serializer_fields = JobSpecSerializer().fields
    assert TEXT_FIELDS
    for f in TEXT_FIELDS:
        assert f.max_length, f"{f.name} has no length limit in jobs.spec"
        assert _db_max_length(f.name) == f.max_length, f.name
        assert serializer_fields[f.name].max_length == f.max_length, f.name
        assert request_props[f.name]["maxLength"] == f.max_length, f.name
        if not f.reference:  # (a reference is a <select> of the names the database holds)
            tag = re.search(rf'<input id="id_{f.name}"[^>]*>', form)
            assert tag and f'maxlength="{f.max_length}"' in tag.group(0), f.name


@pytest.mark.django_db
@pytest.mark.parametrize("f", TEXT_FIELDS, ids=lambda f: f.name)
def test_one_character_over_the_limit_is_a_400_in_every_channel(
    f: Any, client_as: Any, api_as: Any, world: Any
) -> None:
    long = "x" * (f.max_length + 1)
    spec = job_spec(**{f.name: long})
    api = api_as("alice")
    for path in ("/api/v1/jobs/", "/api/v1/jobs/dry-run/"):
        resp = api.post(path, spec, format="json")
        assert resp.status_code == 400, (path, resp.content)
        assert f.name in resp.json()["error"]["fields"], (path, resp.json())
    client = client_as("alice")
    resp = client.post("/jobs/new/", {k: str(v) for k, v in spec.items()})
    assert resp.status_code == 400
    assert f'data-field="{f.name}"' in resp.content.decode()
    resp = _upload(client, json.dumps(spec))
    assert resp.status_code == 400
    assert f"{f.name}: " in resp.content.decode()
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_model_of_exactly_the_limit_is_stored_and_the_dry_run_agrees(
    api_as: Any, world: Any
) -> None:
    model = "m" * job_spec_module.spec_field("model").max_length  # type: ignore[operator]
    api = api_as("alice")
    assert (
        api.post("/api/v1/jobs/dry-run/", job_spec(model=model), format="json").status_code == 200
    )
    resp = api.post("/api/v1/jobs/", job_spec(model=model), format="json")
    assert resp.status_code == 201, resp.content
    assert Job.objects.get().model == model


# --- numbers (item 4) -----------------------------------------------------------------------


def test_every_number_field_is_bounded_on_both_sides() -> None:
    for f in NUMBER_FIELDS:
        assert f.max_value is not None, f.name
        if f.name not in ("rollout_gpus", "train_gpus"):  # (checked against the pools)
            assert f.min_value is not None, f.name


def test_the_trace_format_has_the_submission_s_bounds() -> None:
    s = job_spec_module
    assert (trace.MAX_ITERATIONS, trace.MAX_GPUS) == (s.MAX_ITERATIONS, s.MAX_GPUS)
    assert (trace.MIN_PHASE_S, trace.MAX_PHASE_S) == (s.MIN_PHASE_S, s.MAX_PHASE_S)
    assert (trace.MIN_HOST_MEM_GB, trace.MAX_HOST_MEM_GB) == (s.MIN_HOST_MEM_GB, s.MAX_HOST_MEM_GB)
    assert (trace.MAX_ARRIVAL_S, trace.MAX_SLO) == (s.MAX_ARRIVAL_S, s.MAX_SLO)


BAD_NUMBERS = [
    ("t_roll_max_s", "1e-320", "Must be at least 0.001 (seconds)"),
    ("host_mem_gb", "1e-320", "Must be at least 0.001 (GB)"),
    ("t_train_max_s", "1e308", "Must be at most 2,592,000 (seconds)"),
    ("host_mem_gb", "nan", "Must be a finite number"),
    ("time_scale", "inf", "Must be a finite number"),
    ("emulated_drift", "-inf", "Must be a finite number"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "raw", "message"), BAD_NUMBERS)
def test_bad_numbers_are_a_400_naming_the_field_in_the_form_and_the_upload(
    name: str, raw: str, message: str, client_as: Any, world: Any
) -> None:
    client = client_as("alice")
    data = {k: str(v) for k, v in job_spec(**{name: raw}).items()}
    resp = client.post("/jobs/new/", data)
    assert resp.status_code == 400
    html = resp.content.decode()
    errors = re.search(rf'<ul class="errorlist" data-field="{name}">(.*?)</ul>', html, re.S)
    assert errors and message in errors.group(1), html
    yaml_value = {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}.get(raw, raw)
    text = "\n".join(f"{k}: {v}" for k, v in {**job_spec(), name: yaml_value}.items())
    resp = _upload(client, text)
    assert resp.status_code == 400
    assert f"{name}: {message}" in resp.content.decode()
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_the_api_names_the_field_of_nan_infinity_and_out_of_range_numbers(
    api_as: Any, world: Any
) -> None:
    api = api_as("alice")
    body = json.dumps(job_spec()).replace('"host_mem_gb": 400.0', '"host_mem_gb": NaN')
    body = body.replace('"t_roll_max_s": 120.0', '"t_roll_max_s": -Infinity')
    for path in ("/api/v1/jobs/", "/api/v1/jobs/dry-run/"):
        resp = api.post(path, data=body, content_type="application/json")
        assert resp.status_code == 400
        fields = resp.json()["error"]["fields"]
        assert fields["host_mem_gb"] == ["Must be a finite number; JSON has no NaN (got NaN)."]
        assert fields["t_roll_max_s"] == [
            "Must be a finite number; JSON has no -Infinity (got -Infinity)."
        ]
    body = json.dumps(job_spec()).replace('"t_train_max_s": 100.0', '"t_train_max_s": 1e999')
    resp = api.post("/api/v1/jobs/", data=body, content_type="application/json")
    assert resp.json()["error"]["fields"]["t_train_max_s"] == ["Must be a finite number, got inf."]
    for name, value in (("t_roll_max_s", 1e-320), ("host_mem_gb", 1e308), ("iterations", 10**7)):
        resp = api.post("/api/v1/jobs/", job_spec(**{name: value}), format="json")
        assert resp.status_code == 400 and name in resp.json()["error"]["fields"], resp.json()
    assert not Job.objects.exists()


TRACE_LINE = {
    "id": "a",
    "arrival_s": 0,
    "iterations": 3,
    "rollout_gpus": 8,
    "train_gpus": 8,
    "t_roll_max_s": 100,
    "t_train_max_s": 50,
    "host_mem_gb": 100,
    "slo": 1.5,
}


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("t_roll_max_s", 1e308, "must be <= 2.592e+06, got 1e+308"),
        ("t_train_min_s", 1e-320, "must be >= 0.001, got 9.99989e-321"),
        ("host_mem_gb", 1e308, "must be <= 1e+06"),
        ("arrival_s", 1e308, "must be <= 3.1536e+08"),
        ("slo", 1e308, "must be <= 1000"),
        ("t_sync_s", 1e308, "must be <= 2.592e+06"),
        ("iterations", 10**7, "must be <= 1,000,000"),
        ("rollout_gpus", 8 * 10**6, "must be <= 100,000"),
        ("host_mem_gb", float("nan"), "must be a finite number"),
    ],
)
def test_a_what_if_trace_number_out_of_bounds_names_the_line_and_field(
    name: str, value: Any, message: str
) -> None:
    text = "# header\n" + json.dumps({**TRACE_LINE, name: value})
    with pytest.raises(trace.TraceError) as exc:
        trace.parse_trace_text(text)
    assert str(exc.value).startswith(f"line 2, field '{name}': {message}"), str(exc.value)


@pytest.mark.django_db
def test_the_what_if_upload_refuses_1e308_durations_at_upload(client_as: Any, world: Any) -> None:
    text = json.dumps({**TRACE_LINE, "t_roll_max_s": 1e308})
    resp = client_as("alice").post(
        "/whatif/",
        {
            "source": "upload",
            "policies": ["rollmux"],
            "seed": "0",
            "trace": SimpleUploadedFile("t.jsonl", text.encode()),
        },
    )
    assert resp.status_code == 400
    assert (
        "line 1, field &#x27;t_roll_max_s&#x27;: must be &lt;= 2.592e+06" in resp.content.decode()
    )


@pytest.mark.django_db
def test_the_cost_preview_ignores_numbers_out_of_bounds(client_as: Any, world: Any) -> None:
    client = client_as("alice")
    for raw in ("inf", "nan", "1e308", "-1"):
        resp = client.get(
            "/jobs/new/preview/",
            {"rollout_gpus": raw, "train_gpus": "8", "t_roll_max_s": "60", "t_train_max_s": "60",
             "iterations": raw},
        )  # fmt: skip
        assert resp.status_code == 200, raw
