"""What a first-time user tripped on (issue 24 item 19), page by page, without a browser
(the phone layout is checked in Chromium: tests/browser/test_first_user_polish.py)."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.apps import apps
from django.db import models

from rollmux_web.audit.models import AuditEntry
from rollmux_web.jobs.models import Job, JobStatus
from tests.factories import job_spec
from tests.reports.builders import allocate, make_group, make_job, phase, place

T0 = datetime(2026, 3, 10, tzinfo=UTC)
M = timedelta(minutes=1)


def test_every_model_of_the_app_says_what_it_is() -> None:
    # the audit log named objects "Quota object (3)": Django's default __str__
    ours = [m for m in apps.get_models() if m.__module__.startswith("rollmux_web.")]
    assert ours
    default = [m.__name__ for m in ours if m.__str__ is models.Model.__str__]
    assert default == []


@pytest.mark.django_db
def test_the_audit_log_names_a_quota_by_tenant_and_gpu_type(world: Any) -> None:
    from rollmux_web.quotas.services import quota_create

    quota_create(actor=world.admin, tenant=world.vision, gpu_type=world.h20, max_gpus=64)
    entry = AuditEntry.objects.get(action="quota.create")
    assert entry.object_name == "quota vision on H20"
    assert "object (" not in str(entry)


@pytest.mark.django_db
def test_a_bad_number_is_worded_as_the_app_words_it(world: Any, api_as: Any) -> None:
    resp = api_as("alice").post(
        "/api/v1/jobs/", job_spec(iterations=0, rollout_gpus="x", t_roll_max_s="slow", name=""),
        format="json",
    )  # fmt: skip
    fields = resp.json()["error"]["fields"]
    assert fields["iterations"] == ["Must be at least 1."]
    assert fields["rollout_gpus"] == ["Enter a whole number."]
    assert fields["t_roll_max_s"] == ["Enter a number."]
    assert fields["name"] == ["This field is required."]
    words = " ".join(m for ms in fields.values() for m in ms)
    for drf in ("A valid", "Ensure this value", "may not be blank"):
        assert drf not in words


@pytest.mark.django_db
def test_the_preview_lists_every_invalid_field(world: Any, client_as: Any) -> None:
    # the summary listed 3 of 6 errors: the ones the preview itself reads
    bad = {
        "name": "probe", "slo_class": "silver", "tenant": "vision", "rollout_gpus": "12",
        "train_gpus": "-8", "iterations": "0", "t_roll_max_s": "300", "t_roll_min_s": "900",
        "t_train_max_s": "200", "t_train_min_s": "150", "host_mem_gb": "0", "time_scale": "0",
    }  # fmt: skip
    hint = html.unescape(client_as("alice").get("/whatif/preview/", bad).content.decode())
    for label in (
        "Rollout GPUs:", "Training GPUs:", "Iterations:", "Rollout min (s):", "Host memory",
        "Time scale",
    ):  # fmt: skip
        assert label in hint, label


@pytest.mark.django_db
def test_the_solo_cost_preview_says_an_emulated_job_is_billed_in_wall_time(
    world: Any, client_as: Any
) -> None:
    q = {k: str(v) for k, v in job_spec(runner="emulated", time_scale=20).items()}
    page = client_as("alice").get("/jobs/new/preview/", q).content.decode()
    assert 'id="time-scale-note"' in page and "emulated at 20× speed" in page
    assert "about 1/20 of these figures" in page
    real = {**q, "runner": "toy-rl", "time_scale": "1"}
    assert (
        'id="time-scale-note"'
        not in client_as("alice").get("/jobs/new/preview/", real).content.decode()
    )


@pytest.mark.django_db
def test_api_floats_carry_no_binary_noise(world: Any, api_as: Any) -> None:
    job = make_job(world, name="noisy", t_roll_max_s=float("57.040000000000006"), t_roll_min_s=1.5)
    job.refresh_from_db()
    assert repr(job.t_roll_max_s) == "57.040000000000006"  # (wall-clock x time scale)
    body = api_as("alice").get(f"/api/v1/jobs/{job.pk}/").content.decode()
    assert '"t_roll_max_s":57.04' in body and "57.040000000000006" not in body


def _completed_shared_job(world: Any) -> Job:
    job = make_job(world, name="finished", status=JobStatus.COMPLETED, slo_class=world.bronze)
    g = make_group(created=T0, released=T0 + 60 * M)
    allocate(g, "h20-0", T0, T0 + 60 * M)
    allocate(g, "h800-0", T0, T0 + 60 * M)
    pl = place(g, job, rollout=["h20-0"], train=["h800-0"], joined=T0, left=T0 + 60 * M)
    for i in range(2):
        start = T0 + i * 30 * M
        phase(pl, iteration=i, kind="rollout", nodes=["h20-0"], start=start, minutes=10)
        phase(pl, iteration=i, kind="train", nodes=["h800-0"], start=start + 10 * M, minutes=10)
    Job.objects.filter(pk=job.pk).update(finished_at=T0 + 60 * M, iterations_done=2)
    return job


@pytest.mark.django_db
def test_a_completed_jobs_page_shows_its_achieved_slowdown_and_cost(
    world: Any, client_as: Any
) -> None:
    job = _completed_shared_job(world)
    c = client_as("alice")
    page = c.get(f"/jobs/{job.pk}/").content.decode()
    assert f'hx-get="/timeline/jobs/{job.pk}/outcome/"' in page
    assert f'href="/timeline/jobs/{job.pk}/outcome/"' in page  # (also without JavaScript)
    part = html.unescape(c.get(f"/timeline/jobs/{job.pk}/outcome/", HTTP_HX_REQUEST="true")
                         .content.decode())  # fmt: skip
    part = re.sub(r"<[^>]+>", "", part)
    # two iterations of 10 + 10 min, 30 min apart: 25 min each against 20 alone = 1.25x
    assert "1.250× its solo time" in part and "SLO of 2.0×: met" in part
    # one H20 and one H800 node for an hour, all of it its own: 8 x (1.85 + 5.28)
    assert "$57.04" in part and "<html" not in part
    # on dedicated pools its phases alone would cost $38.03: the loss said in words
    assert "$38.03: RollMux costs $19.01 more (negative:" in part
    assert client_as("charlie").get(f"/timeline/jobs/{job.pk}/outcome/").status_code == 404


@pytest.mark.django_db
def test_cost_rows_carry_job_ids_and_a_negative_saving_is_explained(
    world: Any, client_as: Any
) -> None:
    job = _completed_shared_job(world)
    page = client_as("alice").get("/reports/cost/?start=2026-03-10&end=2026-03-10").content
    text = html.unescape(page.decode())
    assert f"#{job.pk}</span>" in text
    assert 'id="saving-note"' in text and "It is negative where the job paid more" in text
    assert 'class="num loss"' in text  # alone in its group for an hour: a loss, marked


@pytest.mark.django_db
def test_a_one_member_group_says_plainly_there_is_nothing_to_reclaim(
    world: Any, client_as: Any
) -> None:
    job = _completed_shared_job(world)
    gid = job.placements.get().group_id
    page = html.unescape(client_as("alice").get(f"/groups/{gid}/").content.decode())
    assert "one job here: it runs as it would alone" in page
    assert "share of bubbles reclaimed" not in page and "reclaimed: " not in page


@pytest.mark.django_db
def test_the_window_picker_is_24_hour_text_not_a_locale_picker(world: Any, client_as: Any) -> None:
    job = _completed_shared_job(world)
    page = client_as("alice").get(f"/timeline/jobs/{job.pk}/").content.decode()
    assert 'type="datetime-local"' not in page
    assert 'name="start" value="2026-03-10 00:00:00"' in page
    # the value it shows is what the server reads back
    again = (
        client_as("alice")
        .get(
            f"/timeline/jobs/{job.pk}/",
            {"start": "2026-03-10 00:10:00", "end": "2026-03-10 00:50:00"},
        )
        .content.decode()
    )
    assert 'name="start" value="2026-03-10 00:10:00"' in again and 'role="alert"' not in again
