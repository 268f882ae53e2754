"""Reads of the notifications app, scoped to what the user may see."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django.http import Http404

from rollmux_web.accounts.access import visible_tenant_ids
from rollmux_web.accounts.selectors import is_admin
from rollmux_web.notifications.models import Delivery, DeliveryStatus, Subscription


def subscriptions_for(user: Any) -> QuerySet[Subscription]:
    """Return the subscriptions the user may see: their own, and (for admins) every one;
    a member of a tenant also sees that tenant's subscriptions, never another tenant's."""
    qs = Subscription.objects.select_related("owner", "tenant")
    if is_admin(user):
        return qs
    tenant_ids = visible_tenant_ids(user)
    if tenant_ids is None:  # finance: their own and every tenant-scoped one
        return qs.filter(Q(owner=user) | Q(tenant__isnull=False))
    return qs.filter(Q(owner=user) | Q(tenant_id__in=tenant_ids))


def subscription_get(*, user: Any, subscription_id: int) -> Subscription:
    sub = subscriptions_for(user).filter(pk=subscription_id).first()
    if sub is None:
        raise Http404("No such subscription")
    return sub


def deliveries_for(user: Any, *, limit: int = 100) -> list[Delivery]:
    """Return the latest deliveries of the subscriptions the user may see (the log)."""
    return list(
        Delivery.objects.filter(subscription__in=subscriptions_for(user))
        .select_related("subscription")
        .order_by("-created_at", "-id")[:limit]
    )


def pending_confirmations(sub: Subscription) -> list[int]:
    """Return the ids of the subscription's confirmation deliveries not tried yet."""
    return list(
        Delivery.objects.filter(
            subscription=sub, event_kind="confirm", status=DeliveryStatus.PENDING
        ).values_list("pk", flat=True)
    )
