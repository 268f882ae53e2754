"""Write side of accounts: API tokens (only a digest is stored; the key is shown once)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from rollmux_web.accounts.models import ApiToken
from rollmux_web.audit.services import audit_record


def token_expiry(now: Any) -> Any:
    """Return when a token created now expires (None: ROLLMUX_TOKEN_TTL_DAYS=0, never)."""
    days = float(settings.ROLLMUX_TOKEN_TTL_DAYS)
    return now + timedelta(days=days) if days > 0 else None


@transaction.atomic
def token_create(
    *, user: Any, name: str = "default", via_login: bool = False, replaces: str = ""
) -> tuple[ApiToken, str]:
    """Create an API token for the user and return it with its key (never stored in clear).

    A token from a login (`rollmux login`, POST /api/v1/auth/token/) replaces the user's
    login token whose key the login presents (`replaces`: the CLI sends the one it stored),
    and counts against the user's cap of ROLLMUX_CLI_TOKENS_PER_USER live login tokens: the
    oldest beyond it are revoked, so logging in again and again does not pile up live
    credentials.
    """
    name = (name or "default").strip()[:64] or "default"
    now = timezone.now()
    key = ApiToken.new_key()
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=key[:12],
        digest=ApiToken.hash_key(key),
        expires_at=token_expiry(now),
        via_login=via_login,
    )
    # The prefix identifies the token in the audit log; the key itself is never recorded.
    audit_record(
        actor=user,
        action="token.create",
        obj=token,
        after={"name": token.name, "prefix": token.prefix, "expires_at": _iso(token.expires_at)},
    )
    if via_login:
        live = ApiToken.objects.filter(user=user, via_login=True, revoked_at__isnull=True)
        # the login's own previous token (`rollmux login` sends the one it stored): replaced
        old_own = live.filter(digest=ApiToken.hash_key(replaces)).first() if replaces else None
        if old_own is not None:
            ApiToken.objects.filter(pk=old_own.pk).update(revoked_at=now)
            audit_record(
                actor=user,
                action="token.revoke",
                obj=old_own,
                before={"name": old_own.name, "prefix": old_own.prefix, "revoked": False},
                after={
                    "name": old_own.name,
                    "prefix": old_own.prefix,
                    "revoked": True,
                    "why": "replaced",
                },
            )
        surplus = list(live.order_by("-created_at", "-id")[settings.ROLLMUX_CLI_TOKENS_PER_USER :])
        for old in surplus:
            ApiToken.objects.filter(pk=old.pk).update(revoked_at=now)
            audit_record(
                actor=user,
                action="token.revoke",
                obj=old,
                before={"name": old.name, "prefix": old.prefix, "revoked": False},
                after={"name": old.name, "prefix": old.prefix, "revoked": True, "why": "cap"},
            )
    return token, key


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def token_touch(*, token: ApiToken, now: Any) -> None:
    """Record that the token was used, at most once per ROLLMUX_TOKEN_TOUCH_S (not a write
    per request: a GET must not write)."""
    interval = float(settings.ROLLMUX_TOKEN_TOUCH_S)
    last = token.last_used_at
    if last is not None and (now - last).total_seconds() < interval:
        return
    # Conditional: of concurrent requests with the same stale value, one writes.
    stale = ApiToken.objects.filter(pk=token.pk)
    if last is None:
        stale = stale.filter(last_used_at__isnull=True)
    else:
        stale = stale.filter(last_used_at__lt=now - timedelta(seconds=interval))
    stale.update(last_used_at=now)


@transaction.atomic
def token_revoke(*, user: Any, token_id: int) -> ApiToken:
    """Revoke one of the user's own tokens; another user's token is a 404."""
    token = (
        ApiToken.objects.select_for_update()
        .filter(pk=token_id, user=user, revoked_at__isnull=True)
        .first()
    )
    if token is None:
        raise Http404("No such token")
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    audit_record(
        actor=user,
        action="token.revoke",
        obj=token,
        before={"name": token.name, "prefix": token.prefix, "revoked": False},
        after={"name": token.name, "prefix": token.prefix, "revoked": True},
    )
    return token
