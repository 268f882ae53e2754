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

import ipaddress
import json
import logging
import secrets
import smtplib
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlparse

import requests
from django.conf import settings
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
from rollmux_web.notifications import signing
from rollmux_web.notifications.models import (
    Channel,
    Delivery,
    DeliveryStatus,
    Scope,
    Subscription,
)

log = logging.getLogger(__name__)
WEBHOOK_TIMEOUT_S = 10.0
BUDGET_THRESHOLDS = ((0.8, events.BUDGET_80), (1.0, events.BUDGET_100))
TEST_KIND = "test"


class DeliveryError(Exception):
    """A failure worth retrying (the receiver may be back later)."""


class PermanentDeliveryError(DeliveryError):
    """A failure no retry mends (a refused address, HTTP 4xx, a private destination)."""


# --- subscriptions ---------------------------------------------------------------------------


def _check_webhook_url(url: str) -> None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValidationError({"target": ["Use an http:// or https:// URL with a host."]})
    if parsed.username or parsed.password:
        raise ValidationError(
            {"target": ["Put no credentials in the URL: the signature authenticates."]}
        )


def destination_refusal(url: str) -> str:
    """Return why the server will not post to `url`, or "": a URL whose host resolves to a
    loopback, private, link-local or reserved address is refused (it would let any user
    make the server call its own network) unless ROLLMUX_WEBHOOK_ALLOW_PRIVATE is set."""
    if settings.ROLLMUX_WEBHOOK_ALLOW_PRIVATE:
        return ""
    host = urlparse(url).hostname or ""
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return ""  # not resolvable now: the delivery fails (and retries) instead
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global:
            return f"{host} resolves to {address}, a non-public address"
    return ""


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
    if channel not in Channel.values:
        errors["channel"] = ["Choose email or webhook."]
    elif channel == Channel.EMAIL:
        try:
            validate_email(target)
        except ValidationError:
            errors["target"] = ["Enter a valid email address."]
    else:
        try:
            _check_webhook_url(target)
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
        sub = Subscription.objects.create(
            owner=user,
            scope=scope,
            tenant=tenant if scope == Scope.TENANT else None,
            channel=channel,
            target=target,
            secret=secrets.token_urlsafe(32) if channel == Channel.WEBHOOK else "",
            events=sorted(set(events_wanted)),
        )
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
    """Queue a test delivery to a subscription (shows up in the log like any other)."""
    sub = _own(user, subscription_id)
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
        for s in Subscription.objects.filter(active=True).select_related("owner")
        if event.kind in s.events
    ]
    visible: dict[int, set[int] | None] = {}
    subs = [s for s in subs if _matches(s, event, visible)]
    if not subs:
        return []
    payload = event_payload(event)
    created = []
    for sub in subs:
        delivery, new = Delivery.objects.get_or_create(
            subscription=sub,
            event_key=event.key[:200],
            defaults={"event_kind": event.kind, "payload": payload},
        )
        if new:
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
    report = slo_report(user=job.submitter, start=job.started_at.date(), end=now.date(), now=now)
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


def webhook_request(
    sub: Subscription, delivery: Delivery, *, now: float | None = None
) -> tuple[bytes, dict[str, str]]:
    """Return the body and headers of a webhook delivery, signed with the endpoint's secret."""
    body = json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True).encode()
    timestamp = int(time.time() if now is None else now)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "RollMux-Webhook/1",
        signing.EVENT_HEADER: delivery.event_kind,
        signing.DELIVERY_HEADER: str(delivery.pk),
        signing.TIMESTAMP_HEADER: str(timestamp),
        signing.SIGNATURE_HEADER: signing.sign(sub.secret, timestamp, body),
    }
    return body, headers


def _send_webhook(sub: Subscription, delivery: Delivery) -> int:
    refusal = destination_refusal(sub.target)
    if refusal:
        raise PermanentDeliveryError(f"refused: {refusal}")
    body, headers = webhook_request(sub, delivery)
    try:
        resp = requests.post(
            sub.target, data=body, headers=headers, timeout=WEBHOOK_TIMEOUT_S, allow_redirects=False
        )
    except requests.Timeout as exc:
        raise DeliveryError(f"no answer within {WEBHOOK_TIMEOUT_S:g} s") from exc
    except requests.ConnectionError as exc:
        raise DeliveryError("could not connect") from exc
    except requests.RequestException as exc:
        raise PermanentDeliveryError(f"{type(exc).__name__}") from exc
    if 200 <= resp.status_code < 300:
        return resp.status_code
    error = f"HTTP {resp.status_code}"
    if resp.status_code in (408, 429) or resp.status_code >= 500:
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
