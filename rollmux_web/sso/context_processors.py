from typing import Any

from django.conf import settings
from django.http import HttpRequest


def sso(request: HttpRequest) -> dict[str, Any]:
    """Tell the login page whether to offer SSO and whether passwords are break-glass only."""
    return {
        "sso_enabled": settings.ROLLMUX_SSO,
        "sso_label": settings.ROLLMUX_SSO_LABEL,
        "password_login": settings.ROLLMUX_PASSWORD_LOGIN,
    }
