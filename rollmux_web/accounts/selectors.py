"""Tenant scoping in one place: every read of tenant-owned data goes through these."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from rollmux_web.accounts.models import ApiToken, Role, Tenant


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


def user_tokens(user: Any) -> QuerySet[ApiToken]:
    """Return the user's API tokens, newest first, revoked ones included."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")


def user_summary(user: Any) -> dict[str, Any]:
    """Return the user, role and visible tenants as plain data (for /api/v1/me/ and login)."""
    role = user_role(user)
    member_of = (
        list(Tenant.objects.filter(members__user=user).values_list("name", flat=True))
        if role is not None
        else []
    )
    return {
        "id": user.pk,
        "username": user.username,
        "role": role,
        "tenants": member_of,
        "visible_tenants": list(visible_tenants(user).values_list("name", flat=True)),
        "can_submit": can_submit(user),
        "is_admin": is_admin(user),
    }


def submission_tenant(user: Any, name: str) -> tuple[Tenant | None, str]:
    """Return the tenant a user submits for (by name, or their only tenant) and "", or
    None and why not: an unknown name, one they may not submit for, or no single default."""
    tenants = visible_tenants(user)
    if name:
        tenant = tenants.filter(name=name).first()
        if tenant is None:
            return None, f"Unknown tenant {name!r}, or not one you may submit for."
        return tenant, ""
    mine = list(tenants[:2])
    if len(mine) == 1:
        return mine[0], ""
    if mine:
        return None, "This field is required: you belong to several tenants."
    return None, "This field is required: you belong to no tenant."
