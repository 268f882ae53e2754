"""Django admin for tenants and memberships (/django-admin/): who belongs to which team, with
which role. Quotas, prices and nodes are edited on RollMux's own pages, which audit them."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.utils import timezone

from rollmux_web.accounts.models import ApiToken, Profile, Tenant
from rollmux_web.audit.services import audit_record


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "created_at"]
    search_fields = ["name", "display_name"]


class ProfileInline(admin.StackedInline):
    model = Profile
    can_delete = False
    filter_horizontal = ["tenants"]
    verbose_name = verbose_name_plural = "RollMux role and tenants"


def _membership(user: User) -> dict[str, Any] | None:
    profile = Profile.objects.filter(user_id=user.pk).first()
    if profile is None:
        return None
    return {
        "username": user.username,
        "role": profile.role,
        "tenants": sorted(profile.tenants.values_list("name", flat=True)),
    }


class RollmuxUserAdmin(UserAdmin):
    inlines = [ProfileInline]
    list_display = ["username", "email", "role", "is_active", "last_login"]

    def save_related(self, request: Any, form: Any, formsets: Any, change: bool) -> None:
        """Save the profile inline and audit a change of role or tenants (who may use what)."""
        user = form.instance
        before = _membership(user)
        super().save_related(request, form, formsets, change)
        after = _membership(user)
        if after != before:
            audit_record(
                actor=request.user,
                action="membership.update",
                obj=user,
                before=before,
                after=after,
            )

    @admin.display(description="role")
    def role(self, user: User) -> str:
        profile = getattr(user, "profile", None)
        return profile.role if profile else "—"


admin.site.unregister(User)
admin.site.register(User, RollmuxUserAdmin)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are created by their owners (the key is shown once); admins can only revoke."""

    list_display = ["prefix", "user", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["user__username", "prefix", "name"]
    readonly_fields = [
        "user",
        "name",
        "prefix",
        "digest",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    actions = ["revoke"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: Any, queryset: Any) -> None:
        queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
