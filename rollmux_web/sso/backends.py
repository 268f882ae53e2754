"""Authentication backends: OpenID Connect (mozilla-django-oidc) with RollMux's claim rule,
and the password backend with the break-glass rule."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from rollmux_web.accounts.models import Profile, Role, Tenant
from rollmux_web.audit.services import audit_record
from rollmux_web.sso.claims import ClaimRule, Identity, map_claims, parse_roles

log = logging.getLogger(__name__)
REFUSAL_SESSION_KEY = "rollmux_sso_refusal"


def claim_rule() -> ClaimRule:
    """Return the claim rule of the settings (ROLLMUX_OIDC_*)."""
    return ClaimRule(
        username_claim=settings.ROLLMUX_OIDC_USERNAME_CLAIM,
        tenants_claim=settings.ROLLMUX_OIDC_TENANTS_CLAIM,
        tenant_pattern=settings.ROLLMUX_OIDC_TENANT_PATTERN,
        role_claim=settings.ROLLMUX_OIDC_ROLE_CLAIM,
        roles=parse_roles(settings.ROLLMUX_OIDC_ROLES),
    )


class OIDCBackend(OIDCAuthenticationBackend):  # type: ignore[misc]
    """Log in by OIDC; the claims decide the user's role and tenants at every login."""

    def identity(self, claims: dict[str, Any]) -> Identity:
        ident = map_claims(claims, claim_rule(), Tenant.objects.values_list("name", flat=True))
        if not ident.refusal:
            local = User.objects.filter(username=ident.username).first()
            if local is not None and local.has_usable_password():
                # never let an IdP identity take over a local (break-glass) account
                ident = Identity(
                    ident.username, ident.email, ident.role, ident.tenants,
                    refusal=f"a local account is already called {ident.username!r}",
                )  # fmt: skip
        return ident

    def _refuse(self, ident: Identity) -> None:
        log.warning("SSO login refused for %r: %s", ident.username, ident.refusal)
        request = getattr(self, "request", None)
        if request is not None and hasattr(request, "session"):
            request.session[REFUSAL_SESSION_KEY] = ident.refusal
        audit_record(
            actor=None,
            action="sso.refused",
            object_type="user",
            object_id=ident.username[:64],
            after={"reason": ident.refusal},
        )

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        if not super().verify_claims(claims):
            return False
        ident = self.identity(claims)
        if ident.refusal:
            self._refuse(ident)
            return False
        return True

    def filter_users_by_claims(self, claims: dict[str, Any]) -> QuerySet[User]:
        username = self.identity(claims).username
        return User.objects.filter(username=username) if username else User.objects.none()

    def create_user(self, claims: dict[str, Any]) -> User:
        ident = self.identity(claims)
        with transaction.atomic():
            user = User.objects.create_user(ident.username, email=ident.email)
            user.set_unusable_password()  # an SSO user has no password here
            user.save(update_fields=["password"])
            return self._apply(user, ident, created=True)

    def update_user(self, user: User, claims: dict[str, Any]) -> User:
        return self._apply(user, self.identity(claims), created=False)

    def _apply(self, user: User, ident: Identity, *, created: bool) -> User:
        """Set the role and tenants the claims give (the IdP is the source of truth)."""
        with transaction.atomic():
            profile, _ = Profile.objects.get_or_create(user=user)
            before = {
                "role": profile.role,
                "tenants": sorted(profile.tenants.values_list("name", flat=True)),
            }
            profile.role = Role(ident.role)
            profile.save(update_fields=["role"])
            profile.tenants.set(Tenant.objects.filter(name__in=ident.tenants))
            after = {"role": ident.role, "tenants": list(ident.tenants)}
            if ident.email and user.email != ident.email:
                user.email = ident.email
                user.save(update_fields=["email"])
            if created or before != after:
                audit_record(
                    actor=user,
                    action="sso.user_created" if created else "sso.user_updated",
                    obj=user,
                    before=None if created else before,
                    after=after,
                )
        return user


class PasswordBackend(ModelBackend):
    """Django's password backend; with ROLLMUX_PASSWORD_LOGIN=admins only admins (the
    break-glass accounts) may log in by password: everyone else uses SSO."""

    def user_can_authenticate(self, user: Any) -> bool:
        if not super().user_can_authenticate(user):
            return False
        if settings.ROLLMUX_PASSWORD_LOGIN == "admins":
            profile = getattr(user, "profile", None)
            return bool(user.is_superuser or (profile and profile.role == Role.ADMIN))
        return True
