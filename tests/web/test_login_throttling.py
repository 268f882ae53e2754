"""Login lockout (django-axes), API rate limits, token expiry and the cap on login tokens."""

from __future__ import annotations

import uuid
from datetime import UTC, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from rollmux_web.accounts.models import ApiToken
from rollmux_web.audit.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _five_failures(settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 5  # (the rate-limit counters start empty: tests/conftest.py)


def _token(client: Any, username: str, password: str, addr: str = "10.0.0.1") -> Any:
    return client.post(
        "/api/v1/auth/token/",
        {"username": username, "password": password},
        format="json",
        REMOTE_ADDR=addr,
    )


def test_the_token_endpoint_locks_a_username_out_after_five_failures(world: Any) -> None:
    api = APIClient()
    for i in range(4):
        # from four addresses: the username alone is what gets locked
        assert _token(api, "alice", "wrong", f"10.0.0.{i}").status_code == 400
    assert _token(api, "alice", "wrong", "10.0.0.8").status_code == 429  # the fifth failure
    resp = _token(api, "alice", "demo-alice", "10.0.9.9")  # the right password, too late
    assert resp.status_code == 429
    err = resp.json()["error"]
    assert err["code"] == "login_locked_out" and "try again in 15 minutes" in err["message"]
    assert int(resp["Retry-After"]) == 15 * 60
    # bob is not locked out by alice's failures
    assert _token(api, "bob", "demo-bob", "10.0.9.9").status_code == 201
    entry = AuditEntry.objects.filter(action="auth.lockout").first()
    assert entry is not None
    assert entry.after["username"] == "alice" and entry.after["path"] == "/api/v1/auth/token/"


def test_the_token_endpoint_locks_an_address_out_whatever_the_usernames(world: Any) -> None:
    api = APIClient()
    for i in range(4):
        assert _token(api, f"guess{i}", "wrong", "10.1.1.1").status_code == 400
    assert _token(api, "guess4", "wrong", "10.1.1.1").status_code == 429
    assert _token(api, "bob", "demo-bob", "10.1.1.1").status_code == 429
    assert _token(api, "bob", "demo-bob", "10.1.1.2").status_code == 201


def test_the_login_form_locks_out_with_a_clear_429_page(client: Any, world: Any) -> None:
    for _ in range(4):
        resp = client.post("/accounts/login/", {"username": "charlie", "password": "nope"})
        assert resp.status_code == 200
    resp = client.post("/accounts/login/", {"username": "charlie", "password": "nope"})
    assert resp.status_code == 429
    resp = client.post("/accounts/login/", {"username": "charlie", "password": "demo-charlie"})
    assert resp.status_code == 429
    html = resp.content.decode()
    assert "Too many failed logins" in html and 'class="brand"' in html
    assert "_auth_user_id" not in client.session
    assert AuditEntry.objects.filter(action="auth.lockout", object_id="charlie").exists()


def test_a_success_resets_the_count(world: Any) -> None:
    api = APIClient()
    for _ in range(4):
        _token(api, "alice", "wrong")
    assert _token(api, "alice", "demo-alice").status_code == 201
    for _ in range(4):
        _token(api, "alice", "wrong")
    assert _token(api, "alice", "demo-alice").status_code == 201


def test_each_token_has_its_own_request_rate(api_as: Any, world: Any, settings: Any) -> None:
    settings.ROLLMUX_API_TOKEN_RATE = "3/min"
    alice, bob = api_as("alice"), api_as("bob")
    assert [alice.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 200]
    resp = alice.get("/api/v1/me/")
    assert resp.status_code == 429
    assert resp.json()["error"]["code"] == "throttled" and int(resp["Retry-After"]) >= 1
    assert bob.get("/api/v1/me/").status_code == 200


def test_the_rate_is_counted_in_redis_with_one_expiring_counter(
    api_as: Any, world: Any, settings: Any
) -> None:
    """Production's cache (Redis): the counter expires with its window and counts as the
    Django cache reads it."""
    import redis
    from django.core.cache import cache

    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": settings.REDIS_URL,
            "KEY_PREFIX": f"test-throttle-{uuid.uuid4().hex[:8]}",
        }
    }
    settings.ROLLMUX_API_TOKEN_RATE = "3/min"
    alice = api_as("alice")
    assert [alice.get("/api/v1/me/").status_code for _ in range(4)] == [200, 200, 200, 429]
    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = client.keys(f"{settings.CACHES['default']['KEY_PREFIX']}:*rmx-throttle:token:*")
    assert len(keys) == 1
    assert 0 < client.ttl(keys[0]) <= 61
    name = keys[0].decode().split(":", 2)[2]
    assert cache.get(name) == 4  # the cache reads the same integer
    client.delete(*keys)


def test_anonymous_requests_to_the_token_endpoint_are_rate_limited(
    world: Any, settings: Any
) -> None:
    settings.ROLLMUX_API_ANON_RATE = "2/min"
    api = APIClient()
    assert _token(api, "alice", "demo-alice").status_code == 201
    assert _token(api, "bob", "demo-bob").status_code == 201
    assert _token(api, "bob", "demo-bob").status_code == 429
    assert _token(api, "bob", "demo-bob", "10.2.2.2").status_code == 201


def test_tokens_expire_and_the_page_says_when(client_as: Any, world: Any, settings: Any) -> None:
    settings.ROLLMUX_TOKEN_TTL_DAYS = 30
    resp = _token(APIClient(), "alice", "demo-alice")
    key = resp.json()["token"]
    token = ApiToken.objects.get(digest=ApiToken.hash_key(key))
    assert token.expires_at is not None
    assert abs((token.expires_at - timezone.now()) - timedelta(days=30)) < timedelta(minutes=1)
    assert resp.json()["expires_at"].startswith(token.expires_at.strftime("%Y-%m-%d"))
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/v1/me/").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    resp = api.get("/api/v1/me/")
    assert resp.status_code == 401 and "expired" in resp.json()["error"]["message"]
    token.refresh_from_db()
    html = client_as("alice").get("/accounts/tokens/").content.decode()
    assert "<th>Expires</th>" in html and "expire 30 days after" in html
    assert f"expired {token.expires_at.astimezone(UTC):%Y-%m-%d}" in html


def test_repeated_logins_keep_at_most_the_cap_of_live_cli_tokens(world: Any, settings: Any) -> None:
    settings.ROLLMUX_CLI_TOKENS_PER_USER = 3
    keys = [_token(APIClient(), "bob", "demo-bob").json()["token"] for _ in range(5)]
    live = ApiToken.objects.filter(user=world.bob, via_login=True, revoked_at__isnull=True)
    assert live.count() == 3
    assert {t.digest for t in live} == {ApiToken.hash_key(k) for k in keys[-3:]}
    # the token made on the tokens page is not a login token: untouched
    assert ApiToken.objects.filter(user=world.bob, via_login=False, revoked_at=None).count() == 1
    old = APIClient()
    old.credentials(HTTP_AUTHORIZATION=f"Bearer {keys[0]}")
    assert old.get("/api/v1/me/").status_code == 401
    assert AuditEntry.objects.filter(action="token.revoke", after__why="cap").count() == 2


def test_a_read_request_does_not_write_last_used_at_each_time(api_as: Any, world: Any) -> None:
    api = api_as("alice")
    api.get("/api/v1/me/")
    first = ApiToken.objects.get(user=world.alice).last_used_at
    assert first is not None
    with CaptureQueriesContext(connection) as ctx:
        for _ in range(3):
            assert api.get("/api/v1/jobs/").status_code == 200
    writes = [q["sql"] for q in ctx.captured_queries if not q["sql"].startswith("SELECT")]
    assert writes == []
    # a minute later the next request records the use again
    ApiToken.objects.filter(user=world.alice).update(last_used_at=first - timedelta(seconds=61))
    api.get("/api/v1/me/")
    assert ApiToken.objects.get(user=world.alice).last_used_at > first


def test_a_login_presenting_its_previous_token_replaces_it(world: Any) -> None:
    first = _token(APIClient(), "charlie", "demo-charlie").json()["token"]
    again = APIClient()
    again.credentials(HTTP_AUTHORIZATION=f"Bearer {first}")
    second = _token(again, "charlie", "demo-charlie").json()["token"]
    live = ApiToken.objects.filter(user=world.charlie, via_login=True, revoked_at__isnull=True)
    assert [t.digest for t in live] == [ApiToken.hash_key(second)]
    assert AuditEntry.objects.filter(action="token.revoke", after__why="replaced").count() == 1
    # another user's key in the header revokes nothing of theirs
    _token(again, "alice", "demo-alice")
    assert ApiToken.objects.filter(digest=ApiToken.hash_key(second), revoked_at=None).exists()


@pytest.mark.django_db(transaction=True)
def test_rollmux_login_twice_leaves_one_live_cli_token(
    world: Any, live_server: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    import io

    from rollmux_cli import cli

    monkeypatch.setenv("ROLLMUX_CONFIG", str(tmp_path / "cfg" / "token"))
    monkeypatch.setenv("ROLLMUX_URL", live_server.url)
    monkeypatch.delenv("ROLLMUX_TOKEN", raising=False)
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "demo-bob")
    for _ in range(3):
        assert cli.main(["login", "--username", "bob"], out=io.StringIO()) == 0
    stored = (tmp_path / "cfg" / "token").read_text().strip()
    live = ApiToken.objects.filter(user=world.bob, via_login=True, revoked_at__isnull=True)
    assert [t.digest for t in live] == [ApiToken.hash_key(stored)]


def test_the_api_keeps_answering_while_the_rate_limit_counter_is_unreachable(
    api_as: Any, world: Any, settings: Any, caplog: Any
) -> None:
    """Redis down (here: a closed port): the throttles fail open, log the outage once and
    count each request they let through; with Redis back they count again."""
    import logging
    import socket

    from prometheus_client import REGISTRY

    from rollmux_web.accounts.throttling import counter_outage

    with socket.socket() as s:  # a port nobody listens on once this closes
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    redis_cache = "django.core.cache.backends.redis.RedisCache"
    settings.CACHES = {
        "default": {"BACKEND": redis_cache, "LOCATION": f"redis://127.0.0.1:{closed}/0"}
    }
    settings.ROLLMUX_API_TOKEN_RATE = "3/min"
    counter_outage.reset()

    def unavailable(scope: str) -> float:
        name = "rollmux_rate_limit_unavailable_total"
        return REGISTRY.get_sample_value(name, {"scope": scope}) or 0.0

    token_before, anon_before = unavailable("token"), unavailable("anon")
    alice = api_as("alice")
    try:
        with caplog.at_level(logging.WARNING, logger="rollmux_web.accounts.throttling"):
            assert [alice.get("/api/v1/me/").status_code for _ in range(5)] == [200] * 5
            # the token endpoint (anonymous, its own throttle) works too
            assert _token(APIClient(), "bob", "demo-bob").status_code in (200, 201)
        assert unavailable("token") - token_before == 5
        assert unavailable("anon") - anon_before == 1
        outages = [r for r in caplog.records if "rate limits are off" in r.getMessage()]
        assert len(outages) == 1, [r.getMessage() for r in caplog.records]
        assert str(closed) in outages[0].getMessage() or "onnect" in outages[0].getMessage()

        # Redis is back: counted and limited again
        counter_outage.reset()
        settings.CACHES = {
            "default": {
                "BACKEND": redis_cache,
                "LOCATION": settings.REDIS_URL,
                "KEY_PREFIX": f"test-outage-{uuid.uuid4().hex[:8]}",
            }
        }
        assert [alice.get("/api/v1/me/").status_code for _ in range(4)] == [200, 200, 200, 429]
    finally:
        counter_outage.reset()
