"""A job spec with an unknown field is refused (API, upload, CLI), naming the field and the
closest real one; read-only fields of a job record are ignored. After "Submit job" every
invalid field shows its error, worded as inline validation words it (QA F6, F7)."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from rollmux_cli import cli
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.jobs.serializers import JobSerializer
from rollmux_web.jobs.spec import READ_ONLY_JOB_FIELDS, SPEC_FIELDS
from tests.factories import job_spec

HTMX = {"HTTP_HX_REQUEST": "true"}


def submit(client: Any, spec: dict[str, Any]) -> Any:
    return client.post("/api/v1/jobs/", spec, format="json")


# --- API ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_refuses_misspelt_fields_naming_each_with_the_closest_field(
    api_as: Any, world: Any
) -> None:
    resp = submit(api_as("alice"), job_spec(time_scal=1, priorty=9))
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["code"] == "invalid"
    assert err["fields"] == {
        "time_scal": ["Unknown field; did you mean time_scale?"],
        "priorty": ["Unknown field; did you mean priority?"],
    }
    assert err["message"] == "time_scal: Unknown field; did you mean time_scale?"
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_an_unknown_field_without_a_close_match_lists_the_fields(api_as: Any, world: Any) -> None:
    resp = submit(api_as("alice"), job_spec(bogus_field=1))
    assert resp.status_code == 400
    (message,) = resp.json()["error"]["fields"]["bogus_field"]
    assert message.startswith("Unknown field; the fields are name, tenant, slo_class,")
    assert "time_scale" in message
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_a_trace_file_arrival_time_is_refused_with_why(api_as: Any, world: Any) -> None:
    resp = submit(api_as("alice"), job_spec(arrival_s=30, id="j1"))  # id: read-only, ignored
    assert resp.json()["error"]["fields"] == {
        "arrival_s": [
            "Unknown field; arrival_s is a trace-file field (when the simulator submits the "
            "job); a submitted job arrives now."
        ]
    }


@pytest.mark.django_db
def test_unknown_fields_are_reported_with_every_other_error(api_as: Any, world: Any) -> None:
    # one invalid field, one cross-field error (min above max) and one typo: all three named
    spec = job_spec(rollout_gpus=12, t_roll_min_s=500, time_scal=1)
    resp = submit(api_as("alice"), spec)
    assert resp.status_code == 400
    fields = resp.json()["error"]["fields"]
    assert set(fields) == {"rollout_gpus", "t_roll_min_s", "time_scal"}
    assert fields["t_roll_min_s"] == ["Must be at most t_roll_max_s (120 s), got 500 s."]
    # a spec otherwise valid is refused for the typo alone, with its cross-field error
    resp = submit(api_as("alice"), job_spec(t_train_min_s=500, Time_Scale=2))
    assert resp.json()["error"]["fields"] == {
        "t_train_min_s": ["Must be at most t_train_max_s (100 s), got 500 s."],
        "Time_Scale": ["Unknown field; did you mean time_scale?"],
    }
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_read_only_fields_of_a_job_record_are_ignored_so_a_record_can_be_resubmitted(
    api_as: Any, world: Any
) -> None:
    client = api_as("alice")
    first = submit(client, job_spec(name="original", time_scale=50))
    assert first.status_code == 201
    record = client.get(f"/api/v1/jobs/{first.json()['id']}/").json()
    record.update(name="copy", status="completed", iterations_done=99, attempts=7)
    resp = submit(client, record)
    assert resp.status_code == 201, resp.json()
    copy = Job.objects.get(name="copy")
    assert copy.pk != record["id"]
    assert (copy.status, copy.iterations_done, copy.attempts) == (JobStatus.QUEUED, 0, 0)
    assert copy.time_scale == 50


def test_read_only_and_spec_fields_cover_the_job_record() -> None:
    # a field added to the job record must be classified: settable (spec) or read-only
    assert set(JobSerializer.Meta.fields) == set(SPEC_FIELDS) | READ_ONLY_JOB_FIELDS
    assert not set(SPEC_FIELDS) & READ_ONLY_JOB_FIELDS


@pytest.mark.django_db
def test_a_huge_unknown_key_is_cut_short_in_the_error(api_as: Any, world: Any) -> None:
    resp = submit(api_as("alice"), job_spec(**{"x" * 5000: 1}))
    assert resp.status_code == 400
    (key,) = resp.json()["error"]["fields"]
    assert len(key) < 100 and key.startswith("'xxx")


# --- spec-file upload -----------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_upload_refuses_unknown_fields(client_as: Any, world: Any, fmt: str) -> None:
    spec = job_spec(name="typo", bogus_field=1, time_scal=1)
    if fmt == "json":
        content = json.dumps(spec).encode()
    else:
        content = "".join(f"{k}: {v}\n" for k, v in spec.items()).encode()
    resp = client_as("alice").post(
        "/jobs/upload/", {"file": SimpleUploadedFile(f"spec.{fmt}", content)}
    )
    assert resp.status_code == 400
    html = resp.content.decode()
    assert "time_scal: Unknown field; did you mean time_scale?" in html
    assert "bogus_field: Unknown field; the fields are" in html
    assert Job.objects.count() == 0


# --- CLI (through the API of a live server) ----------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_cli_submit_prints_the_unknown_field(
    world: Any, live_server: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("ROLLMUX_CONFIG", str(tmp_path / "token"))
    monkeypatch.setenv("ROLLMUX_URL", live_server.url)
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    path = tmp_path / "spec.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in job_spec(time_scal=1).items()))
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    code = cli.main(["submit", str(path)], out=out)
    assert code == 1
    assert "  time_scal: Unknown field; did you mean time_scale?" in err.getvalue()
    assert Job.objects.count() == 0


# --- the submit form: every invalid field shows its error after "Submit job" -------------------


def _field_error_html(html: str, name: str) -> str:
    """Return the error list rendered for one field of the form ('' if none)."""
    m = re.search(rf'<div id="err-{name}" class="field-errors">(.*?)</div>', html, re.S)
    assert m is not None, f"no error slot for {name}"
    return m.group(1).strip()


@pytest.mark.django_db
def test_form_submit_shows_a_cross_field_error_next_to_another_fields_error(
    client_as: Any, world: Any
) -> None:
    # QA F7: Rollout min 500 (max 120) and Training min -5
    data = {k: str(v) for k, v in job_spec(name="qa-form-1").items()}
    data.update(t_roll_min_s="500", t_train_min_s="-5")
    c = client_as("alice")
    resp = c.post("/jobs/new/", data)
    assert resp.status_code == 400
    html = resp.content.decode()
    for name, wording in (
        ("t_roll_min_s", "<li>Must be at most t_roll_max_s (120 s), got 500 s.</li>"),
        ("t_train_min_s", "<li>Must be at least 0.001 (seconds).</li>"),
    ):
        after_submit = _field_error_html(html, name)
        assert wording in after_submit
        # the same list, word for word, that inline validation shows under the field
        inline = c.post(f"/jobs/new/validate/?field={name}", data, **HTMX).content.decode()
        # (a phase time's check also refreshes the other phase times' errors out of band)
        own = inline.split('<div id="err-', 1)[0]
        assert own.strip() == after_submit
        for other, wording_other in (
            ("t_roll_min_s", "Must be at most t_roll_max_s"),
            ("t_train_min_s", "Must be at least 0.001 (seconds)"),
        ):
            if other != name:  # the out-of-band refresh shows the other field's error too
                oob = inline.split(f'<div id="err-{other}" hx-swap-oob="innerHTML">', 1)[1]
                assert wording_other in oob.split("</div>", 1)[0]
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_form_submit_shows_the_tenant_error_with_other_errors(client_as: Any, world: Any) -> None:
    data = {k: str(v) for k, v in job_spec(tenant="speech").items()}
    data.update(iterations="0")
    html = client_as("alice").post("/jobs/new/", data).content.decode()
    assert "Unknown tenant &#x27;speech&#x27;" in _field_error_html(html, "tenant")
    assert "Must be at least 1." in _field_error_html(html, "iterations")
