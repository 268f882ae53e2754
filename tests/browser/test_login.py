"""In headless Chromium: an admin logs in, changes a GPU price and a node state, and finds
both changes in the audit log; a wrong password shows an error."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import expect

from rollmux_web.inventory.models import GpuPrice, Node
from rollmux_web.inventory.selectors import current_prices
from tests.browser.support import ARTIFACTS, browser_login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_admin_changes_a_price_and_sees_it_in_the_audit_log(
    page: Any, live_server: Any, world: Any, monkeypatch: Any
) -> None:
    triggered: list[int] = []
    monkeypatch.setattr("workers.triggers.node_state_changed", triggered.append)
    browser_login(page, live_server, "admin")
    assert page.locator(".topbar .role").inner_text() == "admin"

    page.click("nav >> text=Inventory")
    h20_row = page.locator("#gpu-types tr", has_text="H20")
    assert "$1.85" in h20_row.inner_text()
    h20_row.locator("text=Edit").click()

    # a negative price is refused with a field error, and nothing changes
    page.fill("input[name=price_per_gpu_hour]", "-1")
    page.click("main button[type=submit]")  # not the Log out button in the top bar
    assert "Price per GPU-hour" in page.locator("#error-price_per_gpu_hour").inner_text()
    assert GpuPrice.objects.filter(gpu_type=world.h20).count() == 1

    page.fill("input[name=price_per_gpu_hour]", "2.30")
    page.click("main button[type=submit]")
    page.wait_for_url(f"{live_server.url}/inventory/")
    assert "$2.30" in page.locator("#gpu-types tr", has_text="H20").inner_text()
    assert current_prices()["H20"] == Decimal("2.30")

    # drain a node in place (htmx swaps the row)
    node = Node.objects.get(name="h20-2")
    page.select_option(f"#node-{node.pk} select[name=state]", "drained")
    # locator waits, not wait_for_function: its string predicate is an eval, which the CSP forbids
    expect(page.locator(f"#node-{node.pk} select[name=state]")).to_have_value("drained")
    page.wait_for_timeout(300)
    node.refresh_from_db()
    assert node.state == "drained" and triggered == [node.pk]
    page.screenshot(path=str(ARTIFACTS / "login-inventory.png"), full_page=True)

    page.click("nav >> text=Audit")
    price_row = page.locator('tr.audit-row[data-action="price.change"]')
    assert price_row.count() == 1
    text = price_row.inner_text()
    assert "admin" in text and "1.8500 → 2.3000" in text
    assert (
        page.locator('tr.audit-row[data-action="node.state"]').inner_text().count("up → drained")
        == 1
    )

    # filter by action through htmx
    page.select_option("#f-action", "price.change")
    page.click("form.filters button[type=submit]")
    expect(page.locator("tr.audit-row")).to_have_count(1)
    assert "action=price.change" in page.url


def test_wrong_password_shows_an_error(page: Any, live_server: Any, world: Any) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", "not-the-password")
    page.click("button[type=submit]")
    assert page.locator(".errorlist").is_visible()
    assert "/accounts/login/" in page.url


def test_researcher_creates_and_revokes_a_token(page: Any, live_server: Any, world: Any) -> None:
    from rest_framework.test import APIClient

    from rollmux_web.accounts.models import ApiToken

    browser_login(page, live_server, "alice")
    page.click(".topbar .user >> text=alice")
    page.fill("#id_token_name", "laptop")
    page.click("#token-panel button[type=submit]")
    key = page.locator("#new-token").inner_text().strip()
    assert key.startswith("rmx_")
    token = ApiToken.objects.get(user=world.alice, name="laptop")
    assert token.digest == ApiToken.hash_key(key)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/v1/me/").status_code == 200

    page.screenshot(path=str(ARTIFACTS / "login-token-created.png"), full_page=True)
    page.once("dialog", lambda d: d.accept())
    page.locator("#token-panel tr", has_text="laptop").locator("button", has_text="Revoke").click()
    page.wait_for_selector("#token-panel tr:has-text('laptop') >> text=revoked")
    assert page.locator("#new-token").count() == 0  # the key is not shown again
    assert api.get("/api/v1/me/").status_code == 401
