from __future__ import annotations

from typing import Any

from django.http import HttpRequest


def persona(request: HttpRequest) -> dict[str, Any]:
    """Expose the user's role to every template (nav links depend on it)."""
    user = getattr(request, "user", None)
    role = None
    if user is not None and user.is_authenticated:
        profile = getattr(user, "profile", None)
        role = profile.role if profile else None
    return {"rollmux_role": role}
