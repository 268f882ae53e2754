"""In headless Chromium: alice submits a job through the form, fixing a field error first."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from playwright.sync_api import expect

from rollmux_web.jobs.models import Job, JobStatus
from tests.browser.support import ARTIFACTS, browser_login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    # the login below checks a real (fast) hash; PBKDF2 would only slow the setup
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_alice_fixes_a_field_error_submits_and_finds_her_job(
    page: Any, live_server: Any, world: Any
) -> None:
    browser_login(page, live_server, "alice")
    page.goto(f"{live_server.url}/jobs/new/")
    page.fill("#id_name", "browser-grpo")
    page.fill("#id_t_roll_max_s", "300")
    # the cost preview follows the form: (300 x 8 x 1.85 + 120 x 8 x 5.28) / 3600 = $2.64
    page.wait_for_selector("#solo-cost")
    assert "$2.64" in page.inner_text("#solo-cost")

    # 1. min above max: the inline (htmx) validation flags the field before submitting
    page.fill("#id_t_roll_min_s", "450")
    page.press("#id_t_roll_min_s", "Tab")
    page.wait_for_selector("#err-t_roll_min_s li")
    assert "Must be at most t_roll_max_s (300 s)" in page.inner_text("#err-t_roll_min_s")

    # 2. submitting anyway is refused with the same message, and nothing is saved
    page.click("#submit-job")
    page.wait_for_load_state("networkidle")
    assert page.inner_text("#err-t_roll_min_s").strip() == (
        "Must be at most t_roll_max_s (300 s), got 450 s."  # no raw key beside the label
    )
    assert page.input_value("#id_t_roll_min_s") == "450"
    assert not Job.objects.filter(name="browser-grpo").exists()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "submit-form-field-error.png"), full_page=True)

    # 3. fix it: the error goes away inline, then the submission lands on the job page
    page.fill("#id_t_roll_min_s", "200")
    page.press("#id_t_roll_min_s", "Tab")
    expect(page.locator("#err-t_roll_min_s li")).to_have_count(0)
    page.click("#submit-job")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="browser-grpo")
    assert job.status == JobStatus.QUEUED and job.t_roll_min_s == 200.0
    assert job.tenant.name == "vision" and job.submitter.username == "alice"
    assert "browser-grpo" in page.inner_text("h1")

    # 4. it is in the list; opening it from there shows its details
    page.goto(f"{live_server.url}/jobs/")
    row = page.locator(f"#job-{job.pk}")
    assert "queued" in row.inner_text()
    row.locator("a", has_text="browser-grpo").click()
    page.wait_for_url(f"{live_server.url}/jobs/{job.pk}/")
    assert page.inner_text("#job-status") == "queued"
    assert "200.0 – 300.0" in page.inner_text("main")


def test_after_make_run_alice_submits_the_readme_example_through_the_form(
    page: Any, live_server: Any
) -> None:
    # issue 11 item 5: on the `make run` demo the README's example was refused (the demo
    # filled vision's H800 quota, 48 of 48). The database here is what `make run` makes:
    # migrated, then `seed_demo --if-empty`.
    from django.core.management import call_command

    from rollmux_web.jobs.spec import EXAMPLE_SPEC

    call_command("seed_demo", "--if-empty", stdout=io.StringIO())
    browser_login(page, live_server, "alice")
    page.goto(f"{live_server.url}/jobs/new/")
    # the form starts with the README's example; only the name is left to type
    for name, value in EXAMPLE_SPEC.items():
        if name != "name":
            assert page.input_value(f"#id_{name}") == str(value), name
    # the preview's first answer already runs the quota checks (item 6): not refused
    page.wait_for_selector("#whatif .whatif-preview")
    assert "Would be refused" not in page.inner_text("#whatif")
    page.fill("#id_name", EXAMPLE_SPEC["name"])
    page.click("#submit-job")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name=EXAMPLE_SPEC["name"])
    assert job.submitter.username == "alice" and job.tenant.name == "vision"
    assert (job.iterations, job.rollout_gpus, job.train_gpus) == (20, 8, 8)
    assert job.status in (JobStatus.QUEUED, JobStatus.PLACED, JobStatus.RUNNING)
    assert EXAMPLE_SPEC["name"] in page.inner_text("h1")
