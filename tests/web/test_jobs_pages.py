"""Job pages: list, detail with live partial, submit form + inline validation, upload."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.jobs.services import job_submit
from tests.factories import job_spec

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    # PBKDF2 for five personas dominated setup; these tests use force_login
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def form_data(**overrides: Any) -> dict[str, str]:
    return {k: str(v) for k, v in job_spec(**overrides).items()}


def test_list_shows_visible_jobs_filters_and_polls(client_as: Any, world: Any) -> None:
    job_submit(user=world.alice, spec=job_spec(name="vision-job"), channel="t")
    job_submit(user=world.charlie, spec=job_spec(name="speech-job"), channel="t")
    html = client_as("bob").get("/jobs/").content.decode()
    assert "vision-job" in html and "speech-job" not in html
    assert 'hx-trigger="every 3s"' in html
    assert 'name="tenant"' not in html  # one tenant: no tenant filter
    # the htmx poll gets only the rows partial
    part = client_as("bob").get("/jobs/?sort=name", **HTMX).content.decode()
    assert "vision-job" in part and "<html" not in part


def test_admin_filters_by_tenant_and_status(client_as: Any, world: Any) -> None:
    job_submit(user=world.alice, spec=job_spec(name="vision-job"), channel="t")
    done = job_submit(user=world.charlie, spec=job_spec(name="speech-job"), channel="t")
    Job.objects.filter(pk=done.pk).update(status=JobStatus.FAILED, reason="node h20-1 went down")
    admin = client_as("admin")
    html = admin.get("/jobs/?tenant=speech").content.decode()
    assert 'name="tenant"' in html
    assert "speech-job" in html and "vision-job" not in html
    html = admin.get("/jobs/?status=failed").content.decode()
    assert "speech-job" in html and "node h20-1 went down" in html and "vision-job" not in html


def test_list_paginates(client_as: Any, world: Any) -> None:
    for i in range(27):
        job_submit(user=world.alice, spec=job_spec(name=f"sweep-{i:02d}"), channel="t")
    html = client_as("alice").get("/jobs/?sort=name").content.decode()
    assert "sweep-24" in html and "sweep-25" not in html and "page 1 of 2" in html
    html = client_as("alice").get("/jobs/?sort=name&page=2").content.decode()
    assert "sweep-26" in html and "sweep-00" not in html


def test_detail_page_and_live_partial_stop_polling_when_terminal(
    client_as: Any, world: Any
) -> None:
    job = job_submit(user=world.alice, spec=job_spec(name="detail-me"), channel="t")
    c = client_as("bob")
    html = c.get(f"/jobs/{job.pk}/").content.decode()
    assert "detail-me" in html and 'hx-trigger="every 2s"' in html and "Cancel job" in html
    assert "waiting for the planner" in html
    resp = c.get(f"/jobs/{job.pk}/", **HTMX)
    assert resp.status_code == 200 and "<html" not in resp.content.decode()
    Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, error="OOM on h800-1")
    resp = c.get(f"/jobs/{job.pk}/", **HTMX)
    assert resp.status_code == 286
    body = resp.content.decode()
    assert "OOM on h800-1" in body and "every 2s" not in body and "Cancel job" not in body


def test_cancel_from_the_page_needs_csrf_and_works(world: Any) -> None:
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    c = Client(enforce_csrf_checks=True)
    c.force_login(world.bob)
    assert c.post(f"/jobs/{job.pk}/cancel/").status_code == 403  # no token
    page = c.get(f"/jobs/{job.pk}/")
    token = page.cookies["csrftoken"].value
    resp = c.post(f"/jobs/{job.pk}/cancel/", {"csrfmiddlewaretoken": token})
    assert resp.status_code == 302
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED


def test_charlie_gets_404_on_every_job_page_and_partial(client_as: Any, world: Any) -> None:
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    c = client_as("charlie")
    assert c.get(f"/jobs/{job.pk}/").status_code == 404
    assert c.get(f"/jobs/{job.pk}/", **HTMX).status_code == 404
    assert c.post(f"/jobs/{job.pk}/cancel/").status_code == 404
    assert c.post(f"/jobs/{job.pk}/cancel/", **HTMX).status_code == 404
    assert str(job.pk) not in c.get("/jobs/", **HTMX).content.decode().split("job-rows")[1]
    assert Job.objects.get(pk=job.pk).status == JobStatus.QUEUED


def test_anonymous_is_sent_to_login(client: Client, world: Any) -> None:
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    for url in ("/jobs/", f"/jobs/{job.pk}/", "/jobs/new/", "/jobs/upload/"):
        resp = client.get(url)
        assert resp.status_code == 302 and "/accounts/login/" in resp["Location"], url
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 302
    assert Job.objects.get(pk=job.pk).status == JobStatus.QUEUED


def test_finance_cannot_reach_submission(client_as: Any, world: Any) -> None:
    c = client_as("finance")
    assert c.get("/jobs/new/").status_code == 403
    assert c.post("/jobs/new/", form_data(tenant="vision")).status_code == 403
    assert c.get("/jobs/upload/").status_code == 403
    assert c.post("/jobs/new/validate/?field=name", form_data()).status_code == 403
    assert "Submit a job" not in c.get("/jobs/").content.decode()
    assert Job.objects.count() == 0


def test_form_submits_and_redirects_to_the_job(client_as: Any, world: Any) -> None:
    c = client_as("alice")
    html = c.get("/jobs/new/").content.decode()
    assert 'id="whatif"' in html and 'hx-get="/whatif/preview/"' in html
    resp = c.post("/jobs/new/", form_data(name="from-form", t_roll_min_s="", time_scale=""))
    assert resp.status_code == 302
    job = Job.objects.get(name="from-form")
    assert resp["Location"] == f"/jobs/{job.pk}/"
    assert job.t_roll_min_s == job.t_roll_max_s and job.time_scale is None


def test_form_shows_field_errors_and_saves_nothing(client_as: Any, world: Any) -> None:
    resp = client_as("alice").post("/jobs/new/", form_data(rollout_gpus="12", iterations="x"))
    assert resp.status_code == 400
    html = resp.content.decode()
    assert "Must be a multiple of 8" in html
    assert "Enter a whole number." in html
    # beside its labelled field, a message does not repeat the raw key (QA polish)
    assert "rollout_gpus:" not in html and "iterations:" not in html
    assert 'value="12"' in html  # the user's input is kept
    assert Job.objects.count() == 0


def test_inline_validation_returns_the_field_partial(client_as: Any, world: Any) -> None:
    c = client_as("alice")
    bad = form_data(t_roll_min_s="500", host_mem_gb="")
    resp = c.post("/jobs/new/validate/?field=t_roll_min_s", bad, **HTMX)
    assert "<li>Must be at most t_roll_max_s (120 s), got 500 s.</li>" in resp.content.decode()
    resp = c.post("/jobs/new/validate/?field=host_mem_gb", bad, **HTMX)
    assert "<li>This field is required.</li>" in resp.content.decode()
    resp = c.post("/jobs/new/validate/?field=name", bad, **HTMX)
    assert resp.content.decode().strip() == ""
    resp = c.post("/jobs/new/validate/?field=tenant", form_data(tenant="speech"), **HTMX)
    assert "Unknown tenant" in resp.content.decode()
    assert c.post("/jobs/new/validate/?field=bogus", bad).status_code == 400


def test_cost_preview(client_as: Any, world: Any) -> None:
    resp = client_as("alice").get(
        "/jobs/new/preview/",
        {
            "rollout_gpus": 8,
            "train_gpus": 16,
            "t_roll_max_s": 360,
            "t_train_max_s": 120,
            "iterations": 10,
        },
        **HTMX,
    )
    html = resp.content.decode()
    # (360 s x 8 x $1.85 + 120 s x 16 x $5.28) / 3600 = $1.48 + $2.816 = $4.30
    assert "$4.30" in html
    # bubble: (120 x 8 x 1.85 + 360 x 16 x 5.28) / 3600 = $0.49 + $8.45 = $8.94
    assert "$8.94" in html
    assert "$42.96" in html  # 10 iterations busy


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_upload_submits_a_yaml_or_json_spec(client_as: Any, world: Any, fmt: str) -> None:
    spec = job_spec(name=f"uploaded-{fmt}")
    if fmt == "json":
        content = json.dumps(spec).encode()
    else:
        content = "\n".join(f"{k}: {v}" for k, v in spec.items()).encode()
    f = SimpleUploadedFile(f"spec.{fmt}", content)
    resp = client_as("alice").post("/jobs/upload/", {"file": f})
    assert resp.status_code == 302, resp.content.decode()
    assert Job.objects.filter(name=f"uploaded-{fmt}").count() == 1


def test_upload_gives_the_same_field_errors(client_as: Any, world: Any) -> None:
    content = json.dumps(job_spec(train_gpus=0, slo_class="tin")).encode()
    resp = client_as("alice").post("/jobs/upload/", {"file": SimpleUploadedFile("s.json", content)})
    assert resp.status_code == 400
    html = resp.content.decode()
    assert "train_gpus: Must be a positive number of GPUs, got 0." in html
    assert "slo_class: Unknown SLO class" in html
    assert Job.objects.count() == 0


def test_upload_refuses_a_5mb_file_and_garbage(client_as: Any, world: Any) -> None:
    big = b"name: x\n" + b"#" * (5 * 1024 * 1024)
    resp = client_as("alice").post("/jobs/upload/", {"file": SimpleUploadedFile("big.yaml", big)})
    assert resp.status_code == 400
    assert "file: The file is 5,242,888 bytes; the limit is" in resp.content.decode()
    for junk in (b"[1, 2]", b"{{{", b"\xff\xfe"):
        resp = client_as("alice").post(
            "/jobs/upload/", {"file": SimpleUploadedFile("j.yaml", junk)}
        )
        assert resp.status_code == 400 and "file: " in resp.content.decode()
    # what is wrong and where (PyYAML's first line alone said neither)
    resp = client_as("alice").post(
        "/jobs/upload/", {"file": SimpleUploadedFile("j.yaml", b"name: [unclosed\n")}
    )
    assert (
        "Not valid YAML or JSON: did not find expected &#x27;,&#x27; or &#x27;]&#x27; "
        "at line 2, column 1 (while parsing a flow sequence from line 1, column 7)"
    ) in resp.content.decode()
    assert Job.objects.count() == 0


def test_detail_shows_placement_and_phase_summary(client_as: Any, world: Any) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from rollmux_web.inventory.models import Node
    from rollmux_web.workflow.models import ExecutionGroup, PhaseRecord, Placement

    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    group = ExecutionGroup.objects.create()
    p = Placement.objects.create(
        job=job, group=group, strategy="rollout_scaling", predicted_slowdown=1.31
    )
    p.rollout_nodes.set(Node.objects.filter(name__in=["h20-0", "h20-1"]))
    p.train_nodes.set(Node.objects.filter(name="h800-3"))
    t0 = timezone.now()
    for i, (kind, secs, warm) in enumerate([("rollout", 100, False), ("train", 80, True)]):
        PhaseRecord.objects.create(
            job=job,
            group=group,
            placement=p,
            iteration=0,
            kind=kind,
            state="succeeded",
            warm_start=warm,
            queued_at=t0,
            started_at=t0 + timedelta(seconds=200 * i),
            finished_at=t0 + timedelta(seconds=200 * i + secs),
        )
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    html = client_as("alice").get(f"/jobs/{job.pk}/").content.decode()
    assert f'href="/groups/{group.pk}/"' in html
    assert "rollout scaling" in html and "h20-0, h20-1" in html and "h800-3" in html
    assert "1.310×" in html
    assert "at admission; members that join later can slow it down" in html  # not "now"
    assert "100.0" in html and "80.0" in html  # mean phase durations
    list_html = client_as("alice").get("/jobs/").content.decode()
    assert f">group {group.pk}<" in list_html  # one spelling: "group 18"


def test_nul_bytes_in_filters_and_form_values_are_not_server_errors(
    client_as: Any, world: Any
) -> None:
    c = client_as("alice")
    assert c.get("/jobs/", {"tenant": "vi\x00sion"}).status_code == 200
    resp = c.get("/jobs/", {"tenant": "vi\x00sion", "status": "\x00"})
    assert resp.status_code == 400 and "status:" in resp.content.decode()  # named, not a 500
    resp = c.get("/jobs/", {"status": "bogus"})
    assert resp.status_code == 400
    assert (
        "status: &#x27;bogus&#x27; is not one of profiling, queued, placed, running, completed, "
        "failed, cancelled (or empty: any)."  # (was "not one of , profiling, ...")
    ) in resp.content.decode()
    resp = c.post("/jobs/new/validate/?field=tenant", form_data(tenant="a\x00b"))
    assert resp.status_code == 200
    assert "<li>Null characters are not allowed.</li>" in resp.content.decode()
    resp = c.post("/jobs/new/", form_data(name="x\x00y", tenant="v\x00"))
    assert resp.status_code == 400
    assert "<li>Null characters are not allowed.</li>" in _field_error_html(
        resp.content.decode(), "name"
    )
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=bogus", "status:"),
        ("sort=bogus", "sort:"),
        ("page=abc", "page:"),
        ("page=9", "page:"),
    ],
)
def test_a_bad_list_filter_is_named_not_ignored(
    client_as: Any, world: Any, query: str, field: str
) -> None:
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    resp = client_as("alice").get(f"/jobs/?{query}")
    assert resp.status_code == 400
    html = resp.content.decode()
    assert field in html and job.name in html  # the list is still shown, unfiltered


def _field_error_html(html: str, name: str) -> str:
    import re

    m = re.search(rf'<div id="err-{name}" class="field-errors">(.*?)</div>', html, re.S)
    assert m is not None, f"no error slot for {name}"
    return m.group(1)


def _initial_form_values(html: str) -> dict[str, str]:
    """Return what the submit form sends as first rendered (inputs and selected options)."""
    import re

    values = dict(re.findall(r'<input id="id_\w+" name="(\w+)" value="([^"]*)"', html))
    for name, options in re.findall(
        r'<select id="id_\w+" name="(\w+)".*?>(.*?)</select>', html, re.S
    ):
        chosen = re.search(r'<option value="([^"]*)" selected>', options) or re.search(
            r'<option value="([^"]*)">', options
        )
        values[name] = chosen.group(1) if chosen else ""
    return values


def test_the_preview_of_the_first_render_runs_the_quota_checks(client_as: Any, world: Any) -> None:
    # issue 11 item 6: the form starts without a name, and the preview skipped the quota
    # check until a field changed ("joins group 5" first, "would be refused" after)
    from rollmux_web.quotas.models import Quota

    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, max_gpus=8)
    job_submit(user=world.bob, spec=job_spec(train_gpus=8), channel="t")
    c = client_as("alice")
    values = _initial_form_values(c.get("/jobs/new/").content.decode())
    assert values["name"] == "" and values["tenant"] == "vision" and values["train_gpus"] == "8"
    html = c.get("/whatif/preview/", values, **HTMX).content.decode()
    assert "Would be refused" in html and "at most 8 H800 GPUs at once" in html
    assert 'href="/quotas/"' in html
    # the same form, submitted, is refused with the same words and a link to the quotas
    resp = c.post("/jobs/new/", {**values, "name": "first"})
    assert resp.status_code == 403
    page = resp.content.decode()
    assert "at most 8 H800 GPUs at once" in page and 'id="quota-refused"' in page
    assert 'href="/quotas/"' in page


def test_the_phase_table_gives_measured_stats_in_wall_clock_and_profile_seconds(
    client_as: Any, world: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from rollmux_web.jobs.selectors import job_phase_summary
    from rollmux_web.workflow.models import ExecutionGroup, PhaseRecord, Placement

    job = job_submit(user=world.alice, spec=job_spec(time_scale=10.0), channel="t")
    group = ExecutionGroup.objects.create()
    p = Placement.objects.create(job=job, group=group, strategy="new_group")
    t0 = timezone.now()
    # three rollouts of 10, 12 and 20 s wall-clock; a failed one does not count as measured
    for i, (secs, state) in enumerate(
        [(10, "succeeded"), (12, "succeeded"), (20, "succeeded"), (50, "failed")]
    ):
        PhaseRecord.objects.create(
            job=job,
            group=group,
            placement=p,
            iteration=i,
            kind="rollout",
            state=state,
            queued_at=t0,
            started_at=t0,
            finished_at=t0 + timedelta(seconds=secs),
        )
    (row,) = job_phase_summary(job=job)
    st = row["stats"]
    assert (st.count, st.mean_s, st.p95_s, st.max_s) == (3, 14.0, 20.0, 20.0)
    assert (st.mean_profile_s, st.max_profile_s) == (140.0, 200.0)  # x time scale 10
    html = client_as("alice").get(f"/jobs/{job.pk}/").content.decode()
    assert "Wall-clock seconds" in html and "Profile seconds (wall-clock × time scale)" in html
    assert "Rollout estimate (profile s)" in html and "10×" in html
    assert "<strong>declared</strong>" in html
    assert '<td class="num">140.0</td>' in html


def test_the_form_hints_give_the_node_size_memory_limit_and_default_time_scale(
    client_as: Any, world: Any, settings: Any
) -> None:
    import re

    settings.ROLLMUX_TIME_SCALE = 20.0
    html = client_as("alice").get("/jobs/new/").content.decode()
    hint = dict(re.findall(r'<div class="help muted" id="help-(\w+)">([^<]*)</div>', html))
    assert "a multiple of 8 (one H20 node has 8 GPUs" in hint["rollout_gpus"]
    assert "a multiple of 8 (one H800 node has 8 GPUs" in hint["train_gpus"]
    assert "at most 2048 GB" in hint["host_mem_gb"]
    assert "the server default, 20x" in hint["time_scale"]
    assert "in profile seconds" in hint["t_roll_max_s"]


def test_a_phase_times_check_refreshes_the_other_phase_times_errors(
    client_as: Any, world: Any
) -> None:
    c = client_as("alice")
    blank = {n: "" for n in ("t_roll_max_s", "t_roll_min_s", "t_train_max_s", "t_train_min_s")}
    # all four blank: the job is profiled; no field keeps an error (out of band, all four)
    body = c.post(
        "/jobs/new/validate/?field=t_train_max_s", form_data() | blank, **HTMX
    ).content.decode()
    for other in ("t_roll_max_s", "t_roll_min_s", "t_train_min_s"):
        assert f'<div id="err-{other}" hx-swap-oob="innerHTML"></div>' in body
    # the training max alone: checking it flags the rollout max, out of band
    body = c.post(
        "/jobs/new/validate/?field=t_train_max_s",
        form_data() | blank | {"t_train_max_s": "120"},
        **HTMX,
    ).content.decode()
    oob = body.split('<div id="err-t_roll_max_s" hx-swap-oob="innerHTML">', 1)[1]
    assert "give both maxima" in oob.split("</div>", 1)[0]
    # any other field answers with its own partial only
    assert (
        "hx-swap-oob" not in c.post("/jobs/new/validate/?field=name", form_data()).content.decode()
    )


def test_the_form_says_the_model_name_sizes_an_hf_grpo_job(client_as: Any, world: Any) -> None:
    # QA pass 12: the Model field said only "free text, shown in reports", yet an hf-grpo
    # job's model name is its config (llama-2M builds a ~2M-parameter Llama; no size: 0.1M)
    html = client_as("alice").get("/jobs/new/").content.decode()
    assert "for hf-grpo it sets the Llama model size: llama-0.1M" in html
