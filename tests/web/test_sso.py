"""Single sign-on end to end: a real OpenID Connect provider (django-oidc-provider in a
second Django process on loopback), RollMux's login page in headless Chromium, the claim
rule mapping groups to tenants and roles; and the break-glass password rule."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from rollmux_web.sso.claims import ClaimRule, map_claims, parse_roles
from tests.workers.builders import wait_for

ROOT = Path(__file__).resolve().parents[2]
PROVIDER_PORT = 8183  # this checkout's ports (PROTOCOL: ops 8180-8189)
CLIENT_ID, CLIENT_SECRET = "rollmux-test", "test-client-secret-0123456789"


# --- the claim rule (pure) -------------------------------------------------------------------

RULE = ClaimRule()
KNOWN = ("vision", "speech")


@pytest.mark.parametrize(
    ("claims", "role", "tenants", "refused"),
    [
        ({"preferred_username": "dora", "groups": ["rollmux-tenant-vision", "x"]},
         "researcher", ("vision",), ""),
        ({"preferred_username": "ed", "groups": "rollmux-tenant-vision rollmux-tenant-speech"},
         "researcher", ("speech", "vision"), ""),
        ({"preferred_username": "ops", "groups": ["rollmux-admins", "rollmux-finance"]},
         "admin", (), ""),  # the strongest role wins; admins need no tenant
        ({"preferred_username": "fin", "groups": ["rollmux-finance"]}, "finance", (), ""),
        ({"preferred_username": "ghost", "groups": ["rollmux-tenant-nowhere"]},
         "researcher", (), "unknown here: nowhere"),  # tenants are never created by a login
        ({"preferred_username": "nobody", "groups": []}, "researcher", (), "names no RollMux tenant"),
        ({"groups": ["rollmux-admins"]}, "admin", (), "no usable 'preferred_username'"),
    ],
)  # fmt: skip
def test_the_claim_rule_maps_groups_to_a_role_and_tenants(claims, role, tenants, refused):
    ident = map_claims(claims, RULE, KNOWN)
    assert (ident.role, ident.tenants) == (role, tenants)
    assert (refused in ident.refusal) if refused else ident.refusal == ""


def test_the_claim_rule_is_configurable():
    rule = ClaimRule(
        username_claim="email",
        tenants_claim="teams",
        tenant_pattern=r"^(?P<tenant>[a-z]+)@gpu$",
        role_claim="roles",
        roles=parse_roles("platform=admin, billing=finance"),
    )
    ident = map_claims(
        {"email": "d@x.org", "teams": ["speech@gpu"], "roles": ["billing"]}, rule, KNOWN
    )
    assert (ident.username, ident.role, ident.tenants) == ("d@x.org", "finance", ("speech",))
    with pytest.raises(ValueError, match="'platform=root'"):
        parse_roles("platform=root")


# --- end to end against a real provider, in Chromium -----------------------------------------


@pytest.fixture
def provider(live_server: Any, tmp_path: Path) -> Iterator[str]:
    """Start the test OpenID provider with RollMux's callback as its client's redirect URI."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.oidc_provider_site.settings",
        "OIDC_PROVIDER_DB": str(tmp_path / "idp.sqlite3"),
    }
    redirect = f"{live_server.url}/sso/callback/"
    subprocess.run(
        [sys.executable, "-m", "tests.oidc_provider_site.setup", redirect, CLIENT_ID, CLIENT_SECRET],
        env=env, cwd=ROOT, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    log = (tmp_path / "idp.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{PROVIDER_PORT}", "--noreload"],
        env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{PROVIDER_PORT}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(
                f"{base}/openid/.well-known/openid-configuration", timeout=1
            ):
                return True
        except OSError:
            return False

    try:
        wait_for(up, timeout=30, interval=0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture
def sso_settings(settings: Any, provider: str) -> None:
    settings.ROLLMUX_SSO = True
    settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = CLIENT_ID, CLIENT_SECRET
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = f"{provider}/openid/authorize"
    settings.OIDC_OP_TOKEN_ENDPOINT = f"{provider}/openid/token"
    settings.OIDC_OP_USER_ENDPOINT = f"{provider}/openid/userinfo"
    settings.OIDC_OP_JWKS_ENDPOINT = f"{provider}/openid/jwks"
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "rollmux_web.sso.backends.OIDCBackend",
    ]


def _sso_login(browser: Any, live_server: Any, username: str, password: str) -> Any:
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(15000)
    page.goto(f"{live_server.url}/accounts/login/")
    page.click("#sso-login")
    page.wait_for_url(f"http://127.0.0.1:{PROVIDER_PORT}/login/**")
    page.fill("#idp-username", username)
    page.fill("#idp-password", password)
    page.click("#idp-submit")
    page.wait_for_url(f"{live_server.url}/**")
    page.wait_for_load_state("networkidle")
    return context, page


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sso_logs_a_user_in_with_the_tenants_and_role_of_their_claims(
    world: Any, live_server: Any, sso_settings: None, chromium_browser: Any
) -> None:
    from tests.browser.support import ARTIFACTS

    context, page = _sso_login(chromium_browser, live_server, "dora", "idp-dora-pass")
    try:
        assert page.url.rstrip("/") == live_server.url  # LOGIN_REDIRECT_URL: the overview
        assert page.locator("header").inner_text().count("dora") >= 1
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "sso-dora-overview.png"))
    finally:
        context.close()
    dora = User.objects.get(username="dora")
    assert not dora.has_usable_password()  # an SSO user has no password here
    assert dora.profile.role == "researcher"
    assert sorted(dora.profile.tenants.values_list("name", flat=True)) == ["vision"]
    assert dora.email == "dora@idp.example.internal"

    # a user whose groups name no tenant is refused, and told why, on the login page
    context, page = _sso_login(chromium_browser, live_server, "nobody", "idp-nobody-pass")
    try:
        assert "/accounts/login/" in page.url
        text = page.locator("main").inner_text()
        assert "Single sign-on did not log you in" in text and "names no RollMux tenant" in text
    finally:
        context.close()
    assert not User.objects.filter(username="nobody").exists()

    # an IdP identity never takes over a local account of the same name
    context, page = _sso_login(chromium_browser, live_server, "alice", "idp-alice-pass")
    try:
        assert "a local account is already called 'alice'" in page.locator("main").inner_text()
    finally:
        context.close()
    assert User.objects.get(username="alice").has_usable_password()


# --- break-glass password login ----------------------------------------------------------


@pytest.mark.django_db
def test_password_login_can_be_kept_for_admins_only(world: Any, client: Any, settings: Any) -> None:
    from rest_framework.test import APIClient

    settings.ROLLMUX_PASSWORD_LOGIN = "admins"
    resp = client.post("/accounts/login/", {"username": "alice", "password": "demo-alice"})
    assert resp.status_code == 200 and "_auth_user_id" not in client.session
    assert "Password login is for admins only" in resp.content.decode()
    api = APIClient()
    refused = api.post("/api/v1/auth/token/", {"username": "alice", "password": "demo-alice"})
    assert refused.status_code in (400, 401), refused.content
    resp = client.post("/accounts/login/", {"username": "admin", "password": "demo-admin"})
    assert resp.status_code == 302 and client.session["_auth_user_id"] == str(world.admin.pk)
    assert api.post(
        "/api/v1/auth/token/", {"username": "admin", "password": "demo-admin"}
    ).status_code in (200, 201)
    settings.ROLLMUX_PASSWORD_LOGIN = "all"
    client.logout()
    resp = client.post("/accounts/login/", {"username": "alice", "password": "demo-alice"})
    assert resp.status_code == 302


@pytest.mark.django_db
def test_sso_endpoints_are_404_while_sso_is_off(client: Any, settings: Any) -> None:
    settings.ROLLMUX_SSO = False
    assert client.get("/sso/login/").status_code == 404
    assert client.get("/sso/callback/?code=x&state=y").status_code == 404
    assert 'id="sso-login"' not in client.get("/accounts/login/").content.decode()
