"""Tenants, roles and API tokens."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.conf import settings
from django.db import models


class Tenant(models.Model):
    """A team. Jobs, quotas and costs belong to a tenant."""

    name = models.SlugField(max_length=64, unique=True)
    display_name = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    RESEARCHER = "researcher", "Researcher"  # submit, cancel and see their tenants' jobs
    ADMIN = "admin", "Admin"  # everything, all tenants
    FINANCE = "finance", "Finance"  # read-only: all reports and costs


class Profile(models.Model):
    """A user's global role and the tenants they belong to."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.RESEARCHER)
    tenants = models.ManyToManyField(Tenant, related_name="members", blank=True)

    def __str__(self) -> str:
        return f"{self.user} ({self.role})"

    @property
    def sees_all_tenants(self) -> bool:
        return self.role in (Role.ADMIN, Role.FINANCE)


class ApiToken(models.Model):
    """A per-user API token. Only a SHA-256 digest is stored; the key is shown once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=64, default="default")
    prefix = models.CharField(max_length=12, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # null: never expires (ROLLMUX_TOKEN_TTL_DAYS=0)
    expires_at = models.DateTimeField(null=True, blank=True)
    # minted by POST /api/v1/auth/token/ (`rollmux login`): capped per user
    via_login = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    @staticmethod
    def hash_key(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @staticmethod
    def new_key() -> str:
        return "rmx_" + secrets.token_urlsafe(32)
