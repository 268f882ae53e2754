"""Tenant scoping in one place: every read of tenant-owned data goes through these."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from rollmux_web.accounts.models import Role, Tenant


def user_role(user: Any) -> str | None:
    """Return the user's role, or None for anonymous users and users without a profile."""
    if user is None or not user.is_authenticated:
        return None
    profile = getattr(user, "profile", None)
    return profile.role if profile is not None else None


def sees_all_tenants(user: Any) -> bool:
    return user_role(user) in (Role.ADMIN, Role.FINANCE)


def is_admin(user: Any) -> bool:
    return user_role(user) == Role.ADMIN


def can_submit(user: Any) -> bool:
    """Researchers and admins submit and cancel; finance is read-only."""
    return user_role(user) in (Role.RESEARCHER, Role.ADMIN)


def visible_tenants(user: Any) -> QuerySet[Tenant]:
    """Return the tenants whose jobs, costs and reports the user may see."""
    role = user_role(user)
    if role is None:
        return Tenant.objects.none()
    if role in (Role.ADMIN, Role.FINANCE):
        return Tenant.objects.all()
    return Tenant.objects.filter(members__user=user)
