"""In headless Chromium: the API docs page (Swagger UI) renders its operations under the
site's strict Content-Security-Policy (no inline style or script allowed on it either),
without one violation, for an anonymous reader (the schema and its docs are public)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__violations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sample || ""}`);
});
"""


def test_the_api_docs_render_under_the_strict_policy_without_violations(
    page: Any, live_server: Any, world: Any
) -> None:
    console: list[str] = []
    page.on(
        "console",
        lambda msg: console.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    page.add_init_script(RECORD_VIOLATIONS)
    # (a long wait: the live server's first request imports the URL configuration, seconds
    # on a busy machine)
    resp = page.goto(f"{live_server.url}/api/docs/", timeout=90_000)
    policy = resp.headers["content-security-policy"]
    assert "style-src 'self'" in policy and "unsafe-inline" not in policy
    # the operations render (the start-up script and the bundle ran) ...
    page.wait_for_selector(".opblock-tag-section", timeout=30_000)
    # ... and an operation opens with its parameters, bodies and examples
    page.click(".opblock-summary >> nth=0")
    page.wait_for_selector(".opblock-body", timeout=30_000)
    page.click("section.models h4")  # the schemas, rendered on demand
    page.wait_for_load_state("networkidle")
    assert page.locator(".opblock").count() > 10
    # the page's own style (a file now) applies
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(250, 250, 250)"
    assert page.evaluate("window.__violations") == []
    assert console == []
