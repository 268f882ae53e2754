"""What a first-time user tripped on (issue 24 item 19), in headless Chromium: a phone does
not scroll /notifications/ sideways, a wide table says it scrolls, and a completed job's
page loads its achieved slowdown and cost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import expect

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.notifications.models import Subscription
from tests.browser.support import ARTIFACTS, browser_login
from tests.reports.builders import allocate, make_group, make_job, phase, place

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

T0 = datetime(2026, 3, 10, tzinfo=UTC)
M = timedelta(minutes=1)
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True}


def finished_job(world: Any) -> Job:
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


def page_width(page: Any) -> list[int]:
    return page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )


def test_on_a_phone_notifications_fit_and_wide_tables_say_they_scroll(
    world: Any, chromium_browser: Any, live_server: Any
) -> None:
    context = chromium_browser.new_context(**PHONE)
    phone = context.new_page()
    phone.set_default_timeout(60000)  # (a loaded machine: the first page can be slow)
    try:
        browser_login(phone, live_server, "alice")
        Subscription.objects.create(
            owner=world.alice, channel="webhook", secret="s" * 43, events=["job.placed"],
            target="https://hooks.example.org/services/T0000000/B0000000/XXXXXXXXXXXXXXXXXXXXXX",
        )  # fmt: skip
        finished_job(world)
        phone.goto(f"{live_server.url}/notifications/")
        scroll, width = page_width(phone)
        phone.screenshot(path=str(ARTIFACTS / "polish-notifications-phone.png"), full_page=True)
        assert scroll <= width, (scroll, width)  # it scrolled sideways: 60-column input, code
        phone.goto(f"{live_server.url}/reports/cost/?start=2026-03-10&end=2026-03-10")
        lines = phone.locator("table.cost-lines")
        expect(lines).to_have_class("cost-lines scrolls")
        cue = phone.locator("table.cost-lines + .scroll-cue")
        expect(cue).to_be_visible()
        expect(cue).to_have_text("Scroll the table sideways for more columns →")
        assert page_width(phone)[0] <= width  # the table scrolls, not the page
        phone.screenshot(path=str(ARTIFACTS / "polish-cost-phone.png"), full_page=True)
    finally:
        context.close()


def test_wide_screens_show_no_scroll_cue_and_a_finished_job_its_outcome(
    world: Any, page: Any, live_server: Any
) -> None:
    job = finished_job(world)
    browser_login(page, live_server, "alice")
    page.goto(f"{live_server.url}/reports/cost/?start=2026-03-10&end=2026-03-10")
    expect(page.locator(".scroll-cue")).to_have_count(0)
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    outcome = page.locator("#job-outcome")
    expect(outcome).to_contain_text("1.250× its solo time")
    expect(outcome).to_contain_text("$57.04")
    page.screenshot(path=str(ARTIFACTS / "polish-job-outcome.png"), full_page=True)
