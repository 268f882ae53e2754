"""The reward curve on the job page in headless Chromium (issue 21 item 2): drawn by the
server, one curve across the job's attempts, tooltips with JavaScript, readable without."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from rollmux_web.jobs.models import JobStatus
from tests.browser.support import ARTIFACTS, browser_login
from tests.workers.builders import make_job, record_curve

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def curve_job(world: Any) -> Any:
    job = make_job(world, name="grpo-curve", runner="toy-rl", iterations=7,
                   status=JobStatus.COMPLETED)  # fmt: skip
    # a first attempt of 3 iterations, then a resubmission that carries on from stored iteration 3 (the page's 4)
    record_curve(job, [[0.1, 0.2, 0.3], [0.35, 0.5, 0.65, 0.8]])
    return job


def test_the_job_page_draws_one_reward_curve_across_attempts_with_tooltips(
    curve_job: Any, page: Any, live_server: Any
) -> None:
    browser_login(page, live_server, "bob")
    page.goto(f"{live_server.url}/jobs/{curve_job.pk}/")
    curve = page.locator("#reward-curve svg.reward-curve")
    expect(curve).to_be_visible()
    box = curve.bounding_box()
    assert box is not None and box["width"] > 400 and box["height"] > 100
    expect(curve.locator("circle.point")).to_have_count(7)
    expect(curve.locator("polyline.reward")).to_have_count(1)  # one curve, both attempts
    expect(curve.locator("line.attempt")).to_have_count(1)
    expect(curve.locator("text", has_text="attempt 2")).to_be_visible()
    # the points rise left to right: later iterations drawn higher (smaller y)
    ys = [float(c.get_attribute("cy") or 0) for c in curve.locator("circle.point").all()]
    assert ys == sorted(ys, reverse=True)
    curve.locator("circle.point").nth(4).hover()  # stored iteration 4: the fifth
    expect(page.locator("#tooltip")).to_contain_text("iteration 5: reward 0.5 ± 0.1, attempt 2")
    expect(page.locator("#training-latest [data-metric='reward_mean']")).to_have_text("0.8")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#training").screenshot(path=str(ARTIFACTS / "reward-curve.png"))


def test_the_reward_curve_reads_without_javascript(
    curve_job: Any, chromium_browser: Any, live_server: Any
) -> None:
    context = chromium_browser.new_context(
        java_script_enabled=False, viewport={"width": 1200, "height": 900}
    )
    try:
        page = context.new_page()
        page.set_default_timeout(15000)
        browser_login(page, live_server, "alice")
        page.goto(f"{live_server.url}/jobs/{curve_job.pk}/")
        curve = page.locator("#reward-curve svg.reward-curve")
        expect(curve).to_be_visible()
        expect(curve.locator("circle.point")).to_have_count(7)
        expect(page.locator("#reward-curve figcaption")).to_contain_text(
            "Mean reward over 7 iterations (1 to 7): 0.1 at the first, 0.8 at the last"
        )
        expect(curve.locator("text.y-tick").first).to_have_text("0")
    finally:
        context.close()
