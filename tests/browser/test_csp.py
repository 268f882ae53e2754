"""In headless Chromium: the pages work under the strict Content-Security-Policy (no
violation reported on any of them), and the form previews send no CSRF token in a URL."""

from __future__ import annotations

from typing import Any

import pytest

from rollmux_web.jobs.services import job_submit
from tests.browser.support import browser_login
from tests.factories import job_spec

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAGES = ["/", "/jobs/", "/jobs/new/", "/groups/", "/quotas/", "/accounts/tokens/", "/api/docs/"]


def test_pages_raise_no_csp_violation_and_previews_keep_the_token_out_of_urls(
    page: Any, live_server: Any, world: Any
) -> None:
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    violations: list[str] = []
    page.on(
        "console",
        lambda msg: (
            violations.append(f"{page.url}: {msg.text}")
            if "Content Security Policy" in msg.text or "Content-Security-Policy" in msg.text
            else None
        ),
    )
    urls: list[str] = []
    page.on("request", lambda req: urls.append(req.url))
    browser_login(page, live_server, "admin")
    for path in [*PAGES, f"/jobs/{job.pk}/"]:
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
    # the submit form's previews ran (htmx works under the policy) ...
    page.goto(f"{live_server.url}/jobs/new/")
    page.fill("#id_name", "csp-check")
    page.press("#id_name", "Tab")
    page.wait_for_load_state("networkidle")
    previews = [u for u in urls if "/preview" in u]
    assert previews, urls
    # ... and none of their URLs carries the CSRF token
    assert not [u for u in urls if "csrfmiddlewaretoken" in u], previews
    assert not violations, violations
