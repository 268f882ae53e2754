"""Write side of accounts: API tokens (only a digest is stored; the key is shown once)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.http import Http404
from django.utils import timezone

from rollmux_web.accounts.models import ApiToken
from rollmux_web.audit.services import audit_record


@transaction.atomic
def token_create(*, user: Any, name: str = "default") -> tuple[ApiToken, str]:
    """Create an API token for the user and return it with its key (never stored in clear)."""
    name = (name or "default").strip()[:64] or "default"
    key = ApiToken.new_key()
    token = ApiToken.objects.create(
        user=user, name=name, prefix=key[:12], digest=ApiToken.hash_key(key)
    )
    # The prefix identifies the token in the audit log; the key itself is never recorded.
    audit_record(
        actor=user,
        action="token.create",
        obj=token,
        after={"name": token.name, "prefix": token.prefix},
    )
    return token, key


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
