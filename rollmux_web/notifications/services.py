"""Writes of the notifications app: subscriptions, the fan-out of an event to the matching
subscriptions, and one delivery attempt by email or signed webhook.

An event (rollmux_web/events.py) reaches this app after the commit that made it true
(`on_event`), which hands it to the `notifications.fan_out` task; the task creates one
Delivery row per matching subscription (unique per event key, so an event published twice
is delivered once) and enqueues `notifications.deliver` for each. A delivery claims its
row with a conditional UPDATE, so a task run twice sends once; a failure the receiver may
get over (a refused connection, a timeout, HTTP 5xx/408/429, an SMTP error) is retried
with exponential backoff by Celery, up to ROLLMUX_NOTIFY_MAX_ATTEMPTS tries.
"""

from __future__ import annotations

import logging
import secrets
import smtplib
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlparse

import urllib3
from django.conf import settings
from django.core import signing as django_signing
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from rollmux_web import events, metrics
from rollmux_web.accounts.access import visible_tenant_ids
from rollmux_web.accounts.models import Tenant
from rollmux_web.accounts.selectors import is_admin
from rollmux_web.audit.services import audit_record
from rollmux_web.notifications import destinations
from rollmux_web.notifications.destinations import (
    check_webhook_url,
    destination_refusal,
    post_pinned,
    resolve_destination,
    webhook_request,
)
from rollmux_web.notifications.models import (
    Channel,
    Delivery,
    DeliveryStatus,
    Scope,
    Subscription,
)

log = logging.getLogger(__name__)
BUDGET_THRESHOLDS = ((0.8, events.BUDGET_80), (1.0, events.BUDGET_100))
TEST_KIND = "test"
CONFIRM_KIND = "confirm"  # the one delivery an email address gets before it is confirmed
CONFIRM_SALT = "rollmux.notifications.confirm"
CONFIRM_MAX_AGE_S = 7 * 24 * 3600


class DeliveryError(Exception):
    """A failure worth retrying (the receiver may be back later)."""


class PermanentDeliveryError(DeliveryError):
    """A failure no retry mends (a refused address, HTTP 4xx, a private destination)."""


# --- subscriptions ---------------------------------------------------------------------------


def subscription_create(
    *,
    user: Any,
    channel: str,
    target: str,
    events_wanted: list[str],
    scope: str = Scope.MINE,
    tenant: Tenant | None = None,
) -> Subscription:
    """Subscribe `user` (or one of their tenants) to events; ValidationError names the field.

    Scopes: `mine` (the user's own jobs), `tenant` (every job and budget of a tenant the user
    may see), `cluster` (every tenant and the nodes; admins only). A webhook gets a new
    random signing secret.
    """
    errors: dict[str, list[str]] = {}
    target = (target or "").strip()
    most = Subscription._meta.get_field("target").max_length or 0
    if channel not in Channel.values:
        errors["channel"] = ["Choose email or webhook."]
    elif len(target) > most:  # (the column's length: longer would fail the INSERT)
        errors["target"] = [f"Use at most {most} characters; this one has {len(target)}."]
    elif channel == Channel.EMAIL:
        try:
            validate_email(target)
        except ValidationError:
            errors["target"] = ["Enter a valid email address."]
    else:
        try:
            check_webhook_url(target)
        except ValidationError as exc:
            errors.update(exc.message_dict)
        else:
            refusal = destination_refusal(target)
            if refusal:
                errors["target"] = [f"Refused: {refusal}."]
    unknown = [e for e in events_wanted if e not in events.KINDS]
    if unknown or not events_wanted:
        errors["events"] = [
            f"Unknown event {unknown[0]!r}." if unknown else "Choose at least one event."
        ]
    if events.NODE_DOWN in events_wanted and scope != Scope.CLUSTER and "events" not in errors:
        # a node is no tenant's: only a cluster-scope subscription (admins) is ever sent it
        errors["events"] = [
            f"“{events.KINDS[events.NODE_DOWN]}” is sent to cluster-scope subscriptions only"
            " (admins): choose the cluster as what it is about, or leave it out."
        ]
    if scope not in Scope.values:
        errors["scope"] = ["Choose my jobs, a tenant or the cluster."]
    elif scope == Scope.TENANT:
        visible = visible_tenant_ids(user)
        if tenant is None or (visible is not None and tenant.pk not in visible):
            errors["tenant"] = ["Choose one of your tenants."]
    elif scope == Scope.CLUSTER and not is_admin(user):
        errors["scope"] = ["Only admins may subscribe to the whole cluster."]
    if not errors:
        twice = _already_sent(user, channel, target, scope, tenant, set(events_wanted))
        if twice:
            errors["events"] = [twice]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        _lock_owner(user.pk)  # the caps below hold under concurrent requests of one user
        cap = _subscription_cap_error(user, channel, target)
        confirmed = channel == Channel.WEBHOOK or address_confirmed(user, target)
        awaiting = (
            not confirmed
            and not Subscription.objects.filter(
                owner=user, channel=Channel.EMAIL, target__iexact=target, confirmed_at=None
            ).exists()
        )
        if not cap and awaiting:  # its confirmation is a send the user asked for
            cap = _asked_rate_error(user)
        if cap:
            raise ValidationError({"target": [cap]})
        sub = Subscription.objects.create(
            owner=user,
            scope=scope,
            tenant=tenant if scope == Scope.TENANT else None,
            channel=channel,
            target=target,
            secret=secrets.token_urlsafe(32) if channel == Channel.WEBHOOK else "",
            events=sorted(set(events_wanted)),
            confirmed_at=timezone.now() if confirmed else None,
        )
        if awaiting:  # (a second subscription to an address awaiting its link waits too)
            _confirmation(sub, asked_by=user)  # queued by the caller, else by the sweep
        _subscriptions_changed()  # now (this transaction's own events) and once committed
        transaction.on_commit(_subscriptions_changed)
        audit_record(
            actor=user,
            action="notification.subscribe",
            obj=sub,
            tenant=sub.tenant.name if sub.tenant else "",
            after={"channel": channel, "target": target, "scope": scope, "events": sub.events},
        )
    return sub


def _lock_owner(user_id: int) -> None:
    from django.contrib.auth import get_user_model

    list(get_user_model().objects.select_for_update().filter(pk=user_id).values_list("pk"))


def address_confirmed(user: Any, address: str) -> bool:
    """Return whether `address` may get notifications of `user`: the user's own account
    address, or one whose owner followed a confirmation link sent for this user."""
    own = (getattr(user, "email", "") or "").strip()
    if own and own.lower() == address.strip().lower():
        return True
    return Subscription.objects.filter(
        owner=user,
        channel=Channel.EMAIL,
        target__iexact=address.strip(),
        confirmed_at__isnull=False,
    ).exists()


def _subscription_cap_error(user: Any, channel: str, target: str) -> str:
    """Why `user` may not add this subscription now (a cap per user), or ""."""
    mine = Subscription.objects.filter(owner=user)
    most = settings.ROLLMUX_NOTIFY_MAX_SUBSCRIPTIONS
    if mine.count() >= most:
        return (
            f"You have {most} subscriptions, the most one user may have "
            "(ROLLMUX_NOTIFY_MAX_SUBSCRIPTIONS): remove one first."
        )
    if channel == Channel.EMAIL and not address_confirmed(user, target):
        pending = {
            t.lower()
            for t in mine.filter(channel=Channel.EMAIL, confirmed_at=None).values_list(
                "target", flat=True
            )
        } - {target.lower()}
        most = settings.ROLLMUX_NOTIFY_MAX_UNCONFIRMED
        if len(pending) >= most:
            return (
                f"{len(pending)} of your email addresses await confirmation "
                f"({', '.join(sorted(pending))}), the most one user may have "
                "(ROLLMUX_NOTIFY_MAX_UNCONFIRMED): follow their links, or remove them first."
            )
    return ""


ASKED_ACTION = "notification.send"  # the audit record of a test or confirmation sent


def _asked_rate_error(user: Any) -> str:
    """Why `user` may ask for no more test or confirmation sends this hour
    (ROLLMUX_NOTIFY_TESTS_PER_HOUR), or "". Counted in the audit log, which outlives the
    subscriptions (deleting one and subscribing again must not reset the count)."""
    from rollmux_web.audit.models import AuditEntry

    most = settings.ROLLMUX_NOTIFY_TESTS_PER_HOUR
    since = timezone.now() - timedelta(hours=1)
    asked = AuditEntry.objects.filter(actor_id=user.pk, action=ASKED_ACTION, at__gte=since)
    if asked.count() < most:
        return ""
    first = asked.order_by("at").values_list("at", flat=True).first() or since
    wait_s = max(0.0, (first + timedelta(hours=1) - timezone.now()).total_seconds())
    return (
        f"{most} test or confirmation sends in the last hour, the most per user "
        f"(ROLLMUX_NOTIFY_TESTS_PER_HOUR): try again in {int(wait_s // 60) + 1} minutes."
    )


def confirm_token(sub: Subscription) -> str:
    """Return the token of the link that confirms `sub`'s email address (signed, 7 days)."""
    return django_signing.dumps({"s": sub.pk, "a": sub.target.lower()}, salt=CONFIRM_SALT)


def _confirmation(sub: Subscription, *, asked_by: Any) -> Delivery:
    """Create the delivery that asks the address's owner to confirm it (the only thing an
    unconfirmed address is sent)."""
    from django.urls import reverse

    key = f"{CONFIRM_KIND}:{secrets.token_hex(8)}"
    url = _link(reverse("notifications:confirm", args=[confirm_token(sub)]))
    payload = {
        "event": CONFIRM_KIND,
        "title": "confirm this address",
        "key": key,
        "at": timezone.now().isoformat(),
        "message": (
            f"RollMux user {asked_by.username} asked to send notifications to {sub.target}. "
            f"Nothing else is sent here unless you confirm within 7 days: {url} "
            "(ignore this message if you did not expect it)."
        ),
        "confirm_url": url,
    }
    delivery = Delivery.objects.create(
        subscription=sub, event_kind=CONFIRM_KIND, event_key=key, payload=payload
    )
    audit_record(actor=asked_by, action=ASKED_ACTION, obj=sub, after={"kind": CONFIRM_KIND})
    return delivery


def subscription_confirm(*, token: str, apply: bool) -> Subscription:
    """Return the subscription a confirmation token names (ValidationError when the token
    is bad, expired or its address changed); with `apply`, confirm the address for every
    subscription of its owner to it."""
    try:
        data = django_signing.loads(token, salt=CONFIRM_SALT, max_age=CONFIRM_MAX_AGE_S)
    except django_signing.SignatureExpired:
        raise ValidationError("This confirmation link has expired: send a new one.") from None
    except django_signing.BadSignature:
        raise ValidationError("This confirmation link is not valid.") from None
    sub = Subscription.objects.select_related("owner").filter(pk=data.get("s")).first()
    if sub is None or sub.target.lower() != data.get("a"):
        raise ValidationError("This confirmation link is for a subscription that is gone.")
    if apply and sub.confirmed_at is None:
        with transaction.atomic():
            now = timezone.now()
            Subscription.objects.filter(
                owner_id=sub.owner_id,
                channel=Channel.EMAIL,
                target__iexact=sub.target,
                confirmed_at=None,
            ).update(confirmed_at=now)
            sub.confirmed_at = now
            audit_record(
                actor=None, action="notification.confirm", obj=sub, after={"target": sub.target}
            )
    return sub


def _already_sent(
    user: Any, channel: str, target: str, scope: str, tenant: Tenant | None, wanted: set[str]
) -> str:
    """Why a new subscription would deliver an event twice to the same destination (one of
    the user's subscriptions with this channel, target and scope already sends it), or ""."""
    same = Subscription.objects.filter(
        owner=user, channel=channel, target__iexact=target, scope=scope, active=True,
        tenant=tenant if scope == Scope.TENANT else None,
    ).order_by("pk")  # fmt: skip
    for sub in same:
        both = sorted(wanted & set(sub.events))
        if both:
            labels = ", ".join(events.KINDS.get(k, k) for k in both)
            return (
                f"Already sent to {target} by your subscription #{sub.pk}: {labels}. "
                "Remove it there, or choose other events."
            )
    return ""


def _own(user: Any, subscription_id: int) -> Subscription:
    from rollmux_web.notifications.selectors import subscription_get

    sub = subscription_get(user=user, subscription_id=subscription_id)
    if sub.owner_id != user.pk and not is_admin(user):
        raise PermissionDenied("Only its owner or an admin may change a subscription.")
    return sub


def subscription_delete(*, user: Any, subscription_id: int) -> None:
    """Remove a subscription (its owner or an admin) and its delivery log."""
    with transaction.atomic():
        sub = _own(user, subscription_id)
        audit_record(
            actor=user,
            action="notification.unsubscribe",
            obj=sub,
            before={"channel": sub.channel, "target": sub.target, "scope": sub.scope},
        )
        sub.delete()


def subscription_rotate_secret(*, user: Any, subscription_id: int) -> Subscription:
    """Give a webhook a new signing secret (the old one stops verifying at once)."""
    sub = _own(user, subscription_id)
    if sub.channel != Channel.WEBHOOK:
        raise ValidationError({"channel": ["Only a webhook has a secret."]})
    sub.secret = secrets.token_urlsafe(32)
    sub.save(update_fields=["secret"])
    audit_record(actor=user, action="notification.rotate_secret", obj=sub)
    return sub


def send_test(*, user: Any, subscription_id: int) -> Delivery:
    """Create a test delivery to a subscription (shows up in the log like any other), or
    for an email address awaiting confirmation a new confirmation; ValidationError over
    ROLLMUX_NOTIFY_TESTS_PER_HOUR sends to the owner's destinations in the last hour."""
    with transaction.atomic():
        sub = _own(user, subscription_id)
        _lock_owner(user.pk)  # (so concurrent clicks cannot pass the count together)
        limited = _asked_rate_error(user)
        if limited:
            raise ValidationError(limited)
        if sub.channel == Channel.EMAIL and sub.confirmed_at is None:
            return _confirmation(sub, asked_by=user)
        delivery = _test_delivery(sub, user)
        audit_record(actor=user, action=ASKED_ACTION, obj=sub, after={"kind": TEST_KIND})
        return delivery


def _test_delivery(sub: Subscription, user: Any) -> Delivery:
    key = f"{TEST_KIND}:{secrets.token_hex(8)}"
    payload = {
        "event": TEST_KIND,
        "title": "test delivery",
        "key": key,
        "at": timezone.now().isoformat(),
        "message": f"A test delivery to {sub.target}, asked for by {user.username}.",
    }
    return Delivery.objects.create(
        subscription=sub, event_kind=TEST_KIND, event_key=key, payload=payload
    )


# --- events -> deliveries --------------------------------------------------------------------


# Whether any subscription exists, remembered for a few seconds: every domain event asks,
# and the group controller publishes inside its phase-end path, whose database round trips
# are counted (tests/workers/test_controller_queries.py). A subscription made in another
# process is seen within SUBSCRIBED_TTL_S; one made in this process at once.
SUBSCRIBED_TTL_S = 10.0
_subscribed: list[tuple[float, bool]] = []
_subscribed_lock = threading.Lock()


def anyone_subscribed() -> bool:
    """Return whether any active subscription exists (cached for SUBSCRIBED_TTL_S)."""
    now = time.monotonic()
    with _subscribed_lock:
        if _subscribed and now - _subscribed[0][0] < SUBSCRIBED_TTL_S:
            return _subscribed[0][1]
    answer = Subscription.objects.filter(active=True).exists()
    with _subscribed_lock:
        _subscribed[:] = [(now, answer)]
    return answer


def _subscriptions_changed() -> None:
    with _subscribed_lock:
        _subscribed.clear()


def _matches(sub: Subscription, event: events.Event, visible: dict[int, set[int] | None]) -> bool:
    if event.kind not in sub.events:
        return False
    if sub.scope == Scope.CLUSTER:
        return is_admin(sub.owner)
    if sub.scope == Scope.TENANT:
        if event.tenant_id is None or event.tenant_id != sub.tenant_id:
            return False
        # the owner must still see the tenant (a member who left gets nothing more)
        if sub.owner_id not in visible:
            visible[sub.owner_id] = visible_tenant_ids(sub.owner)
        seen = visible[sub.owner_id]
        return seen is None or event.tenant_id in seen
    return event.user_id is not None and event.user_id == sub.owner_id


def _link(path: str) -> str:
    base = settings.ROLLMUX_PUBLIC_URL.rstrip("/")
    return f"{base}{path}" if base else path


def event_payload(event: events.Event) -> dict[str, Any]:
    """Return what a delivery says about an event: the kind, a sentence, the job or node."""
    from rollmux_web.inventory.models import Node
    from rollmux_web.jobs.models import Job

    d = event.detail
    payload: dict[str, Any] = {
        "event": event.kind,
        "title": events.KINDS[event.kind],
        "key": event.key,
        "at": timezone.now().isoformat(),
        "detail": d,
    }
    payload["tenant"] = (
        Tenant.objects.filter(pk=event.tenant_id).values_list("name", flat=True).first()
        if event.tenant_id is not None
        else None
    )
    subject = ""
    if event.job_id is not None:
        job = Job.objects.select_related("slo_class").filter(pk=event.job_id).first()
        if job is not None:
            subject = f"Job {job.name} (#{job.pk})"
            payload["job"] = {
                "id": job.pk,
                "name": job.name,
                "status": job.status,
                "reason": job.reason,
                "iterations_done": job.iterations_done,
                "iterations": job.iterations,
                "url": _link(f"/jobs/{job.pk}/"),
            }
    if event.node_id is not None:
        node = Node.objects.select_related("cluster").filter(pk=event.node_id).first()
        if node is not None:
            subject = f"Node {node.name}"
            payload["node"] = {"name": node.name, "pool": node.cluster.name, "state": node.state}
    payload["message"] = _sentence(event, subject, payload)
    return payload


def _sentence(event: events.Event, subject: str, payload: dict[str, Any]) -> str:
    d, job = event.detail, payload.get("job") or {}
    kind = event.kind
    if kind == events.JOB_PLACED:
        return (
            f"{subject} was placed in group {d.get('group')} by {d.get('strategy', '')}, "
            f"predicted slowdown {d.get('predicted_slowdown', 1.0):.2f}x."
        )
    if kind == events.JOB_COMPLETED:
        return (
            f"{subject} is done: {job.get('iterations_done')}/{job.get('iterations')} iterations."
        )
    if kind in (events.JOB_FAILED, events.JOB_RESUBMITTED):
        verb = "failed" if kind == events.JOB_FAILED else "was resubmitted"
        return f"{subject} {verb}: {d.get('reason') or job.get('reason') or ''}".rstrip(": ")
    if kind == events.JOB_DRIFTING:
        return (
            f"{subject}: its {d.get('phase')} of iteration {d.get('iteration')} took "
            f"{d.get('profile_s', 0):.0f} profile seconds, more than its declared worst case "
            f"of {d.get('declared_s', 0):.0f} s; its estimates (and its group's) no longer hold."
        )
    if kind == events.JOB_SLO_MISSED:
        return (
            f"{subject} missed its SLO: mean iteration {d.get('slowdown', 0):.2f}x its solo "
            f"time, {d.get('slo_class')} tolerates {d.get('slo')}x."
        )
    if kind == events.JOB_PREEMPTED:
        return f"{subject} was preempted: {d.get('reason') or job.get('reason') or ''}".rstrip(": ")
    if kind in (events.BUDGET_80, events.BUDGET_100):
        return (
            f"Tenant {payload.get('tenant')} has used {d.get('percent', 0):.0f}% of its "
            f"{d.get('gpu_type')} {d.get('what')} this month ({d.get('used')} of {d.get('limit')})."
        )
    if kind == events.NODE_DOWN:
        return f"{subject} ({(payload.get('node') or {}).get('pool')}) is down; its jobs are resubmitted."
    return subject


def create_deliveries(event: events.Event) -> list[int]:
    """Create one pending delivery per matching subscription; return the new ones' ids
    (a subscription that already has this event key gets nothing new)."""
    subs = [
        s
        for s in Subscription.objects.filter(
            active=True, confirmed_at__isnull=False
        ).select_related("owner")
        if event.kind in s.events
    ]
    visible: dict[int, set[int] | None] = {}
    subs = [s for s in subs if _matches(s, event, visible)]
    if not subs:
        return []
    payload = event_payload(event)
    created = []
    # deliveries per owner in the last hour: over ROLLMUX_NOTIFY_DELIVERIES_PER_HOUR a
    # delivery is logged as not sent (an approximate cap: concurrent fan-outs may pass it
    # by a few; they take no lock, so that events never wait on each other)
    most = settings.ROLLMUX_NOTIFY_DELIVERIES_PER_HOUR
    since = timezone.now() - timedelta(hours=1)
    recent: dict[int, int] = {}
    for sub in subs:
        if sub.owner_id not in recent:
            recent[sub.owner_id] = Delivery.objects.filter(
                subscription__owner_id=sub.owner_id, created_at__gte=since
            ).count()
        over = recent[sub.owner_id] >= most
        defaults: dict[str, Any] = {"event_kind": event.kind, "payload": payload}
        if over:
            defaults |= {
                "status": DeliveryStatus.FAILED,
                "last_error": f"not sent: {most} deliveries in the last hour, the most per "
                "user (ROLLMUX_NOTIFY_DELIVERIES_PER_HOUR)",
            }
        delivery, new = Delivery.objects.get_or_create(
            subscription=sub, event_key=event.key[:200], defaults=defaults
        )
        if new:
            recent[sub.owner_id] += 1
            if over:
                metrics.count_delivery(sub.channel, "failed")
            else:
                created.append(delivery.pk)
    return created


def fan_out(event: events.Event) -> list[int]:
    """Turn an event into deliveries (return their ids, to be queued once committed), with
    the events it implies: a job done late (SLO missed), a tenant's budget crossing 80% or
    100% (any job event of the tenant)."""
    implied: list[events.Event] = []
    if event.kind == events.JOB_COMPLETED and event.job_id is not None:
        missed = slo_missed_event(event.job_id)
        if missed is not None:
            implied.append(missed)
    if event.tenant_id is not None and event.kind.startswith("job."):
        implied += budget_events(tenant_ids=[event.tenant_id])
    ids: list[int] = []
    with transaction.atomic():
        for e in (event, *implied):
            ids += create_deliveries(e)
    return ids


def slo_missed_event(job_id: int) -> events.Event | None:
    """Return a job.slo_missed event if the finished job's measured slowdown (the SLO
    report's figure: mean iteration over its solo iteration) is above its SLO."""
    from rollmux_web.jobs.models import Job
    from rollmux_web.reports.selectors.slo import slo_report

    job = Job.objects.select_related("submitter", "slo_class").filter(pk=job_id).first()
    if job is None or job.started_at is None:
        return None
    now = timezone.now()
    report = slo_report(
        user=job.submitter, start=job.started_at.date(), end=now.date(), now=now, job_id=job_id
    )
    row = next((j for j in report.jobs if j.job_id == job_id), None)
    if row is None or row.met:
        return None
    return events.Event(
        kind=events.JOB_SLO_MISSED,
        key=f"{events.JOB_SLO_MISSED}:{job_id}",
        tenant_id=job.tenant_id,
        user_id=job.submitter_id,
        job_id=job_id,
        detail={
            "slowdown": round(row.slowdown_vs_solo, 4),
            "slo": row.slo,
            "slo_class": row.slo_class,
            "iterations_measured": row.iterations_measured,
        },
    )


def budget_events(
    *, tenant_ids: list[int] | None = None, now: datetime | None = None
) -> list[events.Event]:
    """Return the budget events that hold now: a tenant's monthly GPU-hours or dollars on a
    GPU type at or above 80% / 100% of the limit (each at most once a month, by its key)."""
    from rollmux_web.quotas.selectors import quota_usage

    now = now or timezone.now()
    tenants = (
        Tenant.objects.all() if tenant_ids is None else Tenant.objects.filter(pk__in=tenant_ids)
    )
    month = f"{now:%Y-%m}"
    out = []
    for usage in quota_usage(tenants=tenants, now=now):
        q = usage.quota
        checks = (
            ("GPU-hours", usage.gpu_hours_month, q.monthly_gpu_hours, "{:.1f}"),
            (
                "budget",
                usage.usd_month,
                float(q.monthly_budget_usd) if q.monthly_budget_usd is not None else None,
                "${:,.2f}",
            ),
        )
        for what, used, limit, fmt in checks:
            if not limit:
                continue
            ratio = used / limit
            for threshold, kind in BUDGET_THRESHOLDS:
                if ratio >= threshold:
                    out.append(
                        events.Event(
                            kind=kind,
                            key=f"{kind}:{q.tenant_id}:{q.gpu_type.name}:{what}:{month}",
                            tenant_id=q.tenant_id,
                            detail={
                                "gpu_type": q.gpu_type.name,
                                "what": what,
                                "used": fmt.format(used),
                                "limit": fmt.format(limit),
                                "percent": round(100 * ratio, 1),
                                "month": month,
                            },
                        )
                    )
    return out


# --- one delivery ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    status: str  # sent, retrying, failed, skipped
    retry_in_s: float | None = None


def backoff_s(attempt: int) -> float:
    """Return the wait before try `attempt + 1`: base x 2^(attempt - 1), capped."""
    base = settings.ROLLMUX_NOTIFY_BACKOFF_S
    return float(min(base * 2 ** max(attempt - 1, 0), settings.ROLLMUX_NOTIFY_BACKOFF_MAX_S))


def _send_email(sub: Subscription, payload: dict[str, Any]) -> None:
    subject = (
        f"[RollMux] {payload.get('title', payload.get('event'))}: {payload.get('message', '')}"
    )
    lines = [payload.get("message", "")]
    if payload.get("confirm_url"):
        lines += ["", f"Confirm: {payload['confirm_url']}"]
    if (payload.get("job") or {}).get("url"):
        lines += ["", f"Job: {payload['job']['url']}"]
    lines += ["", f"Event {payload.get('event')} ({payload.get('key')}) at {payload.get('at')}.",
              "You get this because of a RollMux notification subscription; manage it on /notifications/."]  # fmt: skip
    try:
        send_mail(subject[:200], "\n".join(lines), settings.DEFAULT_FROM_EMAIL, [sub.target])
    except smtplib.SMTPRecipientsRefused as exc:
        raise PermanentDeliveryError(f"the mail server refused {sub.target}") from exc
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryError(f"mail server: {type(exc).__name__}: {exc}"[:300]) from exc


def _send_webhook(sub: Subscription, delivery: Delivery) -> int:
    refusal, address = resolve_destination(sub.target)
    if refusal:
        raise PermanentDeliveryError(f"refused: {refusal}")
    if address is None:
        raise DeliveryError(f"{urlparse(sub.target).hostname} does not resolve")
    body, headers = webhook_request(sub, delivery)
    try:
        status = post_pinned(sub.target, address, body, headers)
    except urllib3.exceptions.NewConnectionError as exc:  # (a TimeoutError subclass)
        raise DeliveryError("could not connect") from exc
    except urllib3.exceptions.TimeoutError as exc:
        raise DeliveryError(f"no answer within {destinations.WEBHOOK_TIMEOUT_S:g} s") from exc
    except (urllib3.exceptions.ProtocolError, urllib3.exceptions.SSLError, OSError) as exc:
        raise DeliveryError("could not connect") from exc
    except urllib3.exceptions.HTTPError as exc:
        raise DeliveryError(f"could not connect ({type(exc).__name__})") from exc
    if 200 <= status < 300:
        return status
    error = f"HTTP {status}"
    if status in (408, 429) or status >= 500:
        raise DeliveryError(error)
    raise PermanentDeliveryError(error)


def deliver(delivery_id: int) -> Outcome:
    """Try one delivery once: claim it, send it, record what happened."""
    now = timezone.now()
    claimed = Delivery.objects.filter(
        pk=delivery_id, status__in=(DeliveryStatus.PENDING, DeliveryStatus.RETRYING)
    ).update(status=DeliveryStatus.SENDING, attempts=F("attempts") + 1, updated_at=now)
    if not claimed:
        return Outcome("skipped")  # another worker has it, or it is done
    delivery = Delivery.objects.select_related("subscription").get(pk=delivery_id)
    sub = delivery.subscription
    code: int | None = None
    try:
        if sub.confirmed_at is None and delivery.event_kind != CONFIRM_KIND:
            raise PermanentDeliveryError(f"not sent: {sub.target} is not confirmed yet")
        if sub.channel == Channel.EMAIL:
            _send_email(sub, delivery.payload)
        else:
            code = _send_webhook(sub, delivery)
    except DeliveryError as exc:
        permanent = isinstance(exc, PermanentDeliveryError)
        last = delivery.attempts >= settings.ROLLMUX_NOTIFY_MAX_ATTEMPTS
        fields: dict[str, Any] = {"last_error": str(exc)[:500], "updated_at": timezone.now()}
        if str(exc).startswith("HTTP "):
            fields["response_status"] = int(str(exc).split()[1])
        if permanent or last:
            Delivery.objects.filter(pk=delivery_id).update(
                status=DeliveryStatus.FAILED, next_try_at=None, **fields
            )
            metrics.count_delivery(sub.channel, "failed")
            return Outcome("failed")
        wait = backoff_s(delivery.attempts)
        Delivery.objects.filter(pk=delivery_id).update(
            status=DeliveryStatus.RETRYING, next_try_at=now + timedelta(seconds=wait), **fields
        )
        metrics.count_delivery(sub.channel, "retrying")
        return Outcome("retrying", wait)
    Delivery.objects.filter(pk=delivery_id).update(
        status=DeliveryStatus.SENT,
        sent_at=timezone.now(),
        response_status=code,
        last_error="",
        next_try_at=None,
    )
    metrics.count_delivery(sub.channel, "sent")
    return Outcome("sent")


STUCK_AFTER = timedelta(minutes=10)  # a delivery "sending" this long lost its worker


def sweep(*, now: datetime | None = None) -> list[int]:
    """The beat's safety net: return the deliveries to queue now (retries that are due,
    deliveries whose worker died or whose message was lost, new budget alerts: every
    tenant's budgets are checked)."""
    now = now or timezone.now()
    Delivery.objects.filter(status=DeliveryStatus.SENDING, updated_at__lt=now - STUCK_AFTER).update(
        status=DeliveryStatus.RETRYING, next_try_at=now
    )
    due = list(
        Delivery.objects.filter(status=DeliveryStatus.RETRYING, next_try_at__lte=now).values_list(
            "pk", flat=True
        )
    ) + list(
        Delivery.objects.filter(
            status=DeliveryStatus.PENDING, created_at__lt=now - timedelta(minutes=1)
        ).values_list("pk", flat=True)
    )
    created: list[int] = []
    with transaction.atomic():
        for event in budget_events(now=now):
            created += create_deliveries(event)
    return due + created
