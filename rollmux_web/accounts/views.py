"""Account pages: API tokens (login/logout are Django's auth views)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from rollmux_web.accounts.selectors import user_tokens
from rollmux_web.accounts.services import token_create, token_revoke


def _context(request: HttpRequest, new_key: str | None) -> dict[str, Any]:
    now = timezone.now()
    tokens = list(user_tokens(request.user))
    for t in tokens:
        t.is_expired = t.expired(now)  # type: ignore[attr-defined]
    return {
        "tokens": tokens,
        "new_key": new_key,
        "token_ttl_days": settings.ROLLMUX_TOKEN_TTL_DAYS,
        "cli_token_cap": settings.ROLLMUX_CLI_TOKENS_PER_USER,
    }


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    """List the user's tokens; POST creates one and shows its key once."""
    new_key = None
    if request.method == "POST":
        _, new_key = token_create(user=request.user, name=request.POST.get("name", ""))
    context = _context(request, new_key)
    template = "accounts/tokens.html#token-panel" if request.htmx else "accounts/tokens.html"  # type: ignore[attr-defined]
    response = render(request, template, context)
    # A page that shows a secret must not be cached anywhere.
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def token_revoke_view(request: HttpRequest, token_id: int) -> HttpResponse:
    token_revoke(user=request.user, token_id=token_id)
    if request.htmx:  # type: ignore[attr-defined]
        return render(
            request,
            "accounts/tokens.html#token-panel",
            _context(request, None),
        )
    return redirect("accounts:tokens")
