"""Subscriptions (who wants which events, how) and deliveries (the log of every attempt)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from rollmux_web import events as event_kinds
from rollmux_web.accounts.models import Tenant


class Channel(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook"


class Scope(models.TextChoices):
    MINE = "mine", "My jobs"
    TENANT = "tenant", "A tenant's jobs and budgets"
    CLUSTER = "cluster", "Every tenant and the nodes (admins)"


class Subscription(models.Model):
    """Send these events, within this scope, to one email address or webhook URL."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="notification_subscriptions",
    )
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.MINE)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="subscriptions"
    )
    channel = models.CharField(max_length=16, choices=Channel.choices)
    target = models.CharField(max_length=500, help_text="email address or https:// URL")
    # the webhook's signing key (HMAC-SHA256); shown to its owner, who configures the receiver
    secret = models.CharField(max_length=64, blank=True)
    events = models.JSONField(default=list)
    active = models.BooleanField(default=True)
    # when the address's owner followed the confirmation link (null: nothing but the
    # confirmation is sent to it); a webhook, or the owner's own account address, at creation
    confirmed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.channel} to {self.target} ({self.scope})"

    @property
    def secret_prefix(self) -> str:
        """Return what the page shows of the signing secret after it was shown once."""
        return f"{self.secret[:6]}…" if self.secret else ""

    @property
    def event_labels(self) -> list[str]:
        """Return the events in the words the form offers them in ("job done", not the key)."""
        return [event_kinds.KINDS.get(k, k) for k in self.events]


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    RETRYING = "retrying", "Retrying"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class Delivery(models.Model):
    """One event for one subscription, with what became of it (one row however many tries)."""

    subscription_id: int
    subscription = models.ForeignKey(
        Subscription, on_delete=models.CASCADE, related_name="deliveries"
    )
    event_kind = models.CharField(max_length=32)
    event_key = models.CharField(max_length=200)
    payload = models.JSONField()
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING, db_index=True
    )
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    next_try_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # an event reaches a subscription once, whoever publishes it how often
            models.UniqueConstraint(fields=["subscription", "event_key"], name="uniq_delivery")
        ]

    def __str__(self) -> str:
        return f"{self.event_label} for subscription {self.subscription_id} ({self.status})"

    @property
    def event_label(self) -> str:
        """Return the event in the form's words ("job done"; a test delivery stays "test")."""
        return event_kinds.KINDS.get(self.event_kind, self.event_kind)
