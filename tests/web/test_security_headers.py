"""Browser-side hardening: a strict CSP the pages keep, /metrics closed in production,
previews that keep the CSRF token out of query strings."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((ROOT / "templates").rglob("*.html"))

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: str(p.relative_to(ROOT)))
def test_templates_have_no_inline_script_style_or_handler(path: Path) -> None:
    # the Content-Security-Policy (script-src and style-src 'self') would block them
    text = path.read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), "inline <script>"
    assert "<style" not in text, "inline <style>"
    assert not re.search(r"\son[a-z]+=", text), "inline event handler"
    assert not re.search(r"\sstyle=", text), "style attribute"


def test_svg_charts_carry_no_style_attribute() -> None:
    assert " style=" not in (ROOT / "rollmux_web" / "reports" / "svg.py").read_text()


def test_every_page_response_has_the_strict_csp(client_as: Any) -> None:
    resp = client_as("alice").get("/jobs/new/")
    csp = resp["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "unsafe" not in csp
    # htmx is told not to insert its own <style> element (the policy would refuse it)
    assert 'name="htmx-config"' in resp.content.decode()


def test_metrics_need_the_token_outside_embedded_mode(
    client: Any, world: Any, settings: Any
) -> None:
    settings.ROLLMUX_EMBEDDED = False
    settings.ROLLMUX_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 401
    settings.ROLLMUX_METRICS_TOKEN = "scrape-0123456789abcdef"
    assert client.get("/metrics").status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-0123456789abcdef")
    assert ok.status_code == 200 and b"rollmux_nodes" in ok.content


def test_form_previews_leave_the_csrf_token_out_of_their_get_query(client_as: Any) -> None:
    html = client_as("alice").get("/jobs/new/").content.decode()
    previews = re.findall(r"<[^>]*hx-get=[^>]*hx-include=[^>]*>", html)
    assert len(previews) >= 2  # the placement preview and the what-if preview
    for tag in previews:
        assert 'hx-params="not csrfmiddlewaretoken"' in tag, tag
