"""Accounts: login pages, API tokens (page and POST /api/v1/auth/token/), /me/, /tenants/."""

from __future__ import annotations

import logging

import pytest
from rest_framework.test import APIClient

from rollmux_web.accounts.models import ApiToken
from rollmux_web.audit.models import AuditEntry

pytestmark = pytest.mark.django_db


def test_login_page_has_the_form_and_logs_in(client, world):
    page = client.get("/accounts/login/")
    html = page.content.decode()
    assert 'name="username"' in html and 'name="password"' in html
    assert 'type="submit"' in html
    resp = client.post("/accounts/login/", {"username": "alice", "password": "demo-alice"})
    assert resp.status_code == 302
    assert client.session.get("_auth_user_id") == str(world.alice.pk)


def test_login_with_wrong_password_shows_an_error(client, world):
    resp = client.post("/accounts/login/", {"username": "alice", "password": "nope"})
    assert resp.status_code == 200
    assert "errorlist" in resp.content.decode()
    assert "_auth_user_id" not in client.session


def test_logout_is_a_post(client_as):
    client = client_as("alice")
    assert client.get("/accounts/logout/").status_code == 405
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/accounts/tokens/").status_code == 302  # back to login


def test_token_page_creates_a_token_shown_once_and_stores_only_a_digest(client_as, world):
    client = client_as("bob")
    resp = client.post("/accounts/tokens/", {"name": "laptop"})
    assert resp.status_code == 200
    assert resp["Cache-Control"] == "no-store"
    token = ApiToken.objects.filter(user=world.bob, name="laptop").get()
    html = resp.content.decode()
    start = html.index("rmx_")
    key = html[start : start + 47]
    assert ApiToken.hash_key(key) == token.digest
    assert key not in str(list(ApiToken.objects.values()))  # only the digest is stored
    # the key works for the API, and is not shown again
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/v1/me/").json()["username"] == "bob"
    assert key not in client.get("/accounts/tokens/").content.decode()


def test_revoked_token_stops_working(client_as, world):
    client = client_as("alice")
    token = ApiToken.objects.get(user=world.alice)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {world.tokens['alice']}")
    assert api.get("/api/v1/me/").status_code == 200
    resp = client.post(f"/accounts/tokens/{token.pk}/revoke/")
    assert resp.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert api.get("/api/v1/me/").status_code == 401
    assert AuditEntry.objects.filter(action="token.revoke", actor=world.alice).exists()


def test_cannot_revoke_another_users_token(client_as, world):
    bobs = ApiToken.objects.get(user=world.bob)
    resp = client_as("alice").post(f"/accounts/tokens/{bobs.pk}/revoke/")
    assert resp.status_code == 404
    bobs.refresh_from_db()
    assert bobs.revoked_at is None


def test_token_revoke_with_htmx_returns_the_panel(client_as, world):
    token = ApiToken.objects.get(user=world.alice)
    resp = client_as("alice").post(f"/accounts/tokens/{token.pk}/revoke/", HTTP_HX_REQUEST="true")
    html = resp.content.decode()
    assert resp.status_code == 200
    assert 'id="token-panel"' in html and "<html" not in html
    assert "revoked" in html


def test_token_page_requires_login(client, world):
    resp = client.get("/accounts/tokens/")
    assert resp.status_code == 302 and "/accounts/login/" in resp["Location"]


def test_token_endpoint_returns_a_working_token(world, caplog):
    caplog.set_level(logging.DEBUG)
    api = APIClient()
    resp = api.post(
        "/api/v1/auth/token/", {"username": "charlie", "password": "demo-charlie"}, format="json"
    )
    assert resp.status_code == 201
    body = resp.json()
    assert body["user"]["username"] == "charlie"
    assert body["user"]["tenants"] == ["speech"]
    key = body["token"]
    assert ApiToken.objects.filter(user=world.charlie, digest=ApiToken.hash_key(key)).exists()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/v1/me/").json()["role"] == "researcher"
    assert "demo-charlie" not in caplog.text and key not in caplog.text


@pytest.mark.parametrize(
    "payload",
    [
        {"username": "charlie", "password": "wrong"},
        {"username": "nobody", "password": "demo-nobody"},
    ],
    ids=["wrong-password", "unknown-user"],
)
def test_token_endpoint_refuses_bad_credentials_with_the_error_shape(world, payload, caplog):
    caplog.set_level(logging.DEBUG)
    before = ApiToken.objects.count()
    resp = APIClient().post("/api/v1/auth/token/", payload, format="json")
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["code"] == "invalid"
    assert err["message"] == "Invalid username or password."
    assert ApiToken.objects.count() == before
    assert payload["password"] not in caplog.text


def test_token_endpoint_names_missing_fields(world):
    resp = APIClient().post("/api/v1/auth/token/", {"username": "alice"}, format="json")
    assert resp.status_code == 400
    assert "password" in resp.json()["error"]["fields"]


def test_me_shows_role_and_tenants(api_as):
    me = api_as("alice").get("/api/v1/me/").json()
    assert me["role"] == "researcher"
    assert me["tenants"] == ["vision"] and me["visible_tenants"] == ["vision"]
    assert me["can_submit"] and not me["is_admin"]
    fin = api_as("finance").get("/api/v1/me/").json()
    assert fin["role"] == "finance" and not fin["can_submit"]
    assert fin["visible_tenants"] == ["speech", "vision"]


def test_tenants_are_scoped(api_as):
    names = lambda c: [t["name"] for t in c.get("/api/v1/tenants/").json()["results"]]  # noqa: E731
    assert names(api_as("alice")) == ["vision"]
    assert names(api_as("charlie")) == ["speech"]
    assert names(api_as("admin")) == ["speech", "vision"]
    assert names(api_as("finance")) == ["speech", "vision"]
    assert api_as("charlie").get("/api/v1/tenants/vision/").status_code == 404
    assert api_as("alice").get("/api/v1/tenants/vision/").status_code == 200


@pytest.mark.parametrize("path", ["/api/v1/me/", "/api/v1/tenants/", "/api/v1/tenants/vision/"])
def test_anonymous_callers_are_refused(world, path):
    resp = APIClient().get(path)
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "not_authenticated"


def test_bad_token_is_401(world):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION="Bearer rmx_not-a-token")
    assert api.get("/api/v1/me/").status_code == 401


def test_token_endpoint_refuses_users_without_a_role_or_inactive(world, django_user_model):
    django_user_model.objects.create_user(username="norole", password="demo-norole")
    world.bob.is_active = False
    world.bob.save()
    api = APIClient()
    for name in ("norole", "bob"):
        resp = api.post(
            "/api/v1/auth/token/", {"username": name, "password": f"demo-{name}"}, format="json"
        )
        assert resp.status_code == 400
        assert resp.json()["error"]["message"] == "Invalid username or password."


def test_token_endpoint_ignores_session_and_csrf(client_as):
    # A logged-in browser session does not turn the endpoint into a CSRF target: it always
    # asks for the password and never reads the session.
    client = client_as("alice")
    client.handler.enforce_csrf_checks = True
    resp = client.post(
        "/api/v1/auth/token/",
        {"username": "alice", "password": "wrong"},
        content_type="application/json",
    )
    assert resp.status_code == 400


def test_django_admin_manages_tenants_and_roles(client, world):
    world.admin.is_staff = world.admin.is_superuser = True
    world.admin.save()
    client.force_login(world.admin)
    assert client.get("/django-admin/accounts/tenant/").status_code == 200
    page = client.get(f"/django-admin/auth/user/{world.alice.pk}/change/").content.decode()
    assert "RollMux role and tenants" in page
    assert client.get("/django-admin/accounts/apitoken/add/").status_code == 403


def test_role_and_tenant_changes_in_django_admin_are_audited(client, world):
    from rollmux_web.accounts.models import Profile

    world.admin.is_staff = world.admin.is_superuser = True
    world.admin.save()
    client.force_login(world.admin)
    url = f"/django-admin/auth/user/{world.charlie.pk}/change/"
    page = client.get(url)
    form = page.context["adminform"].form
    data = {
        k: v
        for k, v in form.initial.items()
        if v is not None
        and k not in ("password", "groups", "user_permissions", "last_login", "date_joined")
    }
    data.update(
        {
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
            "profile-TOTAL_FORMS": "1",
            "profile-INITIAL_FORMS": "1",
            "profile-MIN_NUM_FORMS": "0",
            "profile-MAX_NUM_FORMS": "1",
            "profile-0-id": str(world.charlie.profile.pk),
            "profile-0-user": str(world.charlie.pk),
            "profile-0-role": "researcher",
            "profile-0-tenants": [str(world.speech.pk), str(world.vision.pk)],
        }
    )
    resp = client.post(url, data)
    assert resp.status_code == 302, resp.context["adminform"].form.errors if resp.context else resp
    assert sorted(
        Profile.objects.get(user=world.charlie).tenants.values_list("name", flat=True)
    ) == ["speech", "vision"]
    entry = AuditEntry.objects.get(action="membership.update")
    assert entry.actor == world.admin
    assert entry.before["tenants"] == ["speech"] and entry.after["tenants"] == ["speech", "vision"]
