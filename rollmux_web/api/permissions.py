"""Role-based permissions shared by the API views (roles live in accounts.Profile)."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission

from rollmux_web.accounts.selectors import is_admin, user_role


class HasRole(BasePermission):
    """Allow any authenticated user with a RollMux role (a profile)."""

    message = "Your account has no RollMux role; ask an admin."

    def has_permission(self, request: Any, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated) and (
            user_role(request.user) is not None
        )


class AdminWritesOthersRead(HasRole):
    """Let every role read; only admins create, change or delete."""

    message = "Only admins may change this."

    def has_permission(self, request: Any, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False
        return request.method in SAFE_METHODS or is_admin(request.user)


class AdminOnly(HasRole):
    """Let only admins read or write."""

    message = "Only admins may see this."

    def has_permission(self, request: Any, view: Any) -> bool:
        return super().has_permission(request, view) and is_admin(request.user)
