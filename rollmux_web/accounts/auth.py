"""API token authentication: `Authorization: Bearer <key>` (or `Token <key>`)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions

from rollmux_web.accounts.models import ApiToken
from rollmux_web.accounts.services import token_touch


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keywords = ("bearer", "token")

    def authenticate(self, request: Any) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].decode(errors="ignore").lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'")
        key = header[1].decode(errors="ignore")
        # one query: the token, its user and the user's profile (the role every view checks)
        token = (
            ApiToken.objects.select_related("user", "user__profile")
            .filter(digest=ApiToken.hash_key(key), revoked_at__isnull=True)
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked token")
        now = timezone.now()
        if token.expired(now):
            raise exceptions.AuthenticationFailed(
                f"Token {token.prefix}… expired at {token.expires_at:%Y-%m-%d %H:%M} UTC: run "
                "`rollmux login` or create a new one at /accounts/tokens/"
            )
        token_touch(token=token, now=now)
        return token.user, token

    def authenticate_header(self, request: Any) -> str:
        return 'Bearer realm="api"'
