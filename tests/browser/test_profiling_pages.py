"""The profiling run in headless Chromium (issue 13 item 1): its own cost line, the job's
total as profiling run + production run, and its phases marked on the job's Gantt."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import expect

from rollmux_web.reports.selectors import cost_report
from tests.browser.support import ARTIFACTS, browser_login
from tests.reports.builders import profiled_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

T0 = datetime(2026, 3, 10, tzinfo=UTC)


def test_the_cost_page_bills_the_profiling_run_as_its_own_line(
    world: Any, page: Any, live_server: Any
) -> None:
    job, _prof, _prod = profiled_job(world, t0=T0)
    report = cost_report(user=world.finance, start=T0.date(), end=T0.date())
    (jc,) = report.by_job
    browser_login(page, live_server, "finance")
    page.goto(f"{live_server.url}/reports/cost/?start=2026-03-10&end=2026-03-10")
    row = page.locator(f"#cost-jobs tr[data-job='{job.pk}']")
    expect(row.locator(".profile-cost")).to_have_text(f"${jc.profile.cost:,.2f}")
    expect(row.locator(".run-cost")).to_have_text(f"${jc.run.cost:,.2f}")
    expect(row.locator(".job-total")).to_have_text(f"${jc.profile.cost + jc.run.cost:,.2f}")
    expect(page.locator("#total-cost")).to_have_text(f"${report.total.cost:,.2f}")
    expect(page.locator("table.cost-lines tr[data-stage='profile']")).to_have_count(2)
    expect(page.locator("table.cost-lines tr[data-stage='profile'] .badge").first).to_have_text(
        "profiling run"
    )
    expect(page.locator("#by-stage")).to_be_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "profiling-cost.png"), full_page=True)


def test_the_jobs_gantt_draws_its_profiling_run_dashed_with_a_tooltip(
    world: Any, page: Any, live_server: Any
) -> None:
    job, _prof, _prod = profiled_job(world, t0=T0)
    browser_login(page, live_server, "alice")
    page.goto(
        f"{live_server.url}/timeline/jobs/{job.pk}/"
        "?start=2026-03-10T00:00:00&end=2026-03-10T01:30:00"
    )
    profile_bars = page.locator("svg.timeline .bar.profile")
    expect(profile_bars).to_have_count(2)
    expect(page.locator("svg.timeline .bar:not(.profile)")).to_have_count(2)
    profile_bars.first.hover()
    expect(page.locator("#tooltip")).to_contain_text("profiling run · iteration 1")
    expect(page.locator(".legend")).to_contain_text("profiling run (dashed outline")
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    expect(page.locator("#phase-summary tr[data-stage='profile']")).to_have_count(2)
    expect(page.locator("#phase-summary tr[data-stage='profile'] .badge").first).to_have_text(
        "profiling run"
    )


def test_a_live_profiling_run_is_named_on_the_overview_and_its_group_page(
    world: Any, page: Any, live_server: Any
) -> None:
    from tests.reports.builders import allocate, make_group, make_job, place

    job = make_job(world, name="being-profiled", status="profiling")
    g = make_group(created=T0)
    allocate(g, "h20-0", T0, None)
    allocate(g, "h800-0", T0, None)
    place(g, job, rollout=["h20-0"], train=["h800-0"], joined=T0, strategy="profile")
    browser_login(page, live_server, "alice")
    page.goto(f"{live_server.url}/")
    row = page.locator("table.groups tr", has=page.locator(f"a[href='/groups/{g.pk}/']"))
    expect(row.locator(".badge.profiling")).to_have_text("profiling run")
    page.goto(f"{live_server.url}/groups/{g.pk}/")
    expect(page.locator("h1")).to_contain_text(f"Profiling run, group {g.pk}")
    expect(page.locator("#profile-note")).to_be_visible()
    expect(page.locator("#timeline-chart")).not_to_contain_text("share of bubbles reclaimed")
