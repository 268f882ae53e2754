"""Role checks for pages (the API uses rollmux_web.api.permissions)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.http.response import HttpResponseBase

from rollmux_web.accounts.selectors import is_admin, user_role

View = Callable[..., HttpResponseBase]


def role_required(*, admin: bool = False) -> Callable[[View], View]:
    """Require a logged-in user with a role (and the admin role if `admin`); else 403."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if user_role(request.user) is None or (admin and not is_admin(request.user)):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapper

    return decorator
