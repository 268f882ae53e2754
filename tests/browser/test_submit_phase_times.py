"""In headless Chromium: clearing the phase times one by one to have a job profiled never
leaves a stale "give both maxima" error on a field (QA: the four are checked together)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.support import ARTIFACTS, browser_login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_clearing_both_maxima_clears_the_error_on_the_first(
    page: Any, live_server: Any, world: Any
) -> None:
    browser_login(page, live_server, "alice")
    page.goto(f"{live_server.url}/jobs/new/")
    page.fill("#id_name", "to-profile")
    page.fill("#id_t_roll_max_s", "300")
    page.fill("#id_t_train_max_s", "120")
    # 1. clear the rollout max only: it is flagged (the training max is still given)
    page.fill("#id_t_roll_max_s", "")
    page.press("#id_t_roll_max_s", "Tab")
    expect(page.locator("#err-t_roll_max_s li")).to_contain_text("give both maxima")
    # 2. clear the training max too: every phase time is blank, the job will be profiled,
    # and the rollout max's error goes with it (refreshed by the training max's check)
    page.fill("#id_t_train_max_s", "")
    page.press("#id_t_train_max_s", "Tab")
    expect(page.locator("#profiled-first")).to_be_visible()
    expect(page.locator("#err-t_roll_max_s li")).to_have_count(0)
    expect(page.locator("#err-t_train_max_s li")).to_have_count(0)
    # 3. give the training max back: now the rollout max is flagged again, from its neighbour
    page.fill("#id_t_train_max_s", "120")
    page.press("#id_t_train_max_s", "Tab")
    expect(page.locator("#err-t_roll_max_s li")).to_contain_text("give both maxima")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "submit-phase-times-errors.png"), full_page=True)
