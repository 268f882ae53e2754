"""The SSO endpoints: start the OIDC login, its callback, and where a refused login lands.
Thin wrappers around mozilla-django-oidc's views that answer 404 while SSO is off."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from rollmux_web.sso.backends import REFUSAL_SESSION_KEY


def _enabled() -> None:
    if not settings.ROLLMUX_SSO:
        raise Http404("Single sign-on is not configured")


def login_start(request: HttpRequest) -> HttpResponse:
    """Send the browser to the identity provider (with state and nonce in the session)."""
    _enabled()
    return OIDCAuthenticationRequestView.as_view()(request)  # type: ignore[no-any-return]


def login_callback(request: HttpRequest) -> HttpResponse:
    """Take the provider's answer: code -> tokens -> claims -> user (OIDCBackend)."""
    _enabled()
    return OIDCAuthenticationCallbackView.as_view()(request)  # type: ignore[no-any-return]


def login_failed(request: HttpRequest) -> HttpResponse:
    """Show why single sign-on did not log the user in, on the login page."""
    reason = request.session.pop(REFUSAL_SESSION_KEY, "") if hasattr(request, "session") else ""
    messages.error(
        request,
        f"Single sign-on did not log you in: {reason}."
        if reason
        else "Single sign-on did not log you in (the identity provider refused or the login expired).",
    )
    return redirect(settings.LOGIN_URL)
