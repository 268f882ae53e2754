"""The notifications page: your subscriptions, a form to add one, the delivery log. Thin:
services write, selectors read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from rollmux_web import events
from rollmux_web.accounts.access import visible_tenant_ids
from rollmux_web.accounts.models import Tenant
from rollmux_web.accounts.selectors import is_admin, visible_tenants
from rollmux_web.notifications import selectors, services, tasks
from rollmux_web.notifications.models import Channel, Scope, Subscription


def _context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    scopes = [
        (v, label) for v, label in Scope.choices if v != Scope.CLUSTER or is_admin(request.user)
    ]
    return {
        "subscriptions": list(selectors.subscriptions_for(request.user)),
        "deliveries": selectors.deliveries_for(request.user),
        # "node down" only reaches cluster-scope subscriptions, which only admins make
        "kinds": [
            (k, f"{label} (cluster scope only)" if k == events.NODE_DOWN else label)
            for k, label in events.KINDS.items()
            if k != events.NODE_DOWN or is_admin(request.user)
        ],
        "channels": Channel.choices,
        "scopes": scopes,
        "tenants": list(visible_tenants(request.user)),
        "errors": {},
        "values": {"events": [], "scope": Scope.MINE, "channel": Channel.EMAIL},
        **extra,
    }


@login_required
@require_http_methods(["GET", "POST"])
def index(request: HttpRequest) -> HttpResponse:
    """List subscriptions and deliveries; POST adds a subscription."""
    if request.method == "POST":
        values: dict[str, Any] = {
            "channel": str(request.POST.get("channel", "")),
            "target": str(request.POST.get("target", "")),
            "scope": str(request.POST.get("scope", Scope.MINE)),
            "tenant": str(request.POST.get("tenant", "")),
            "events": [str(e) for e in request.POST.getlist("events")],
        }
        tenant = None
        if values["tenant"]:
            visible = visible_tenant_ids(request.user)
            tenant = Tenant.objects.filter(name=values["tenant"]).first()
            if tenant is not None and visible is not None and tenant.pk not in visible:
                tenant = None  # another tenant's name reads as no tenant at all
        try:
            sub = services.subscription_create(
                user=request.user,
                channel=values["channel"],
                target=values["target"],
                events_wanted=values["events"],
                scope=values["scope"],
                tenant=tenant,
            )
        except ValidationError as exc:
            ctx = _context(request, errors=exc.message_dict, values=values)
            return render(request, "notifications/index.html", ctx, status=400)
        if sub.confirmed_at is None:
            messages.success(
                request,
                f"Saved. A confirmation link was sent to {sub.target}: nothing else is sent "
                "there until it is followed.",
            )
        else:
            messages.success(request, f"Saved: notifications to {values['target']}.")
        _show_secret_once(request, sub)
        tasks.enqueue(selectors.pending_confirmations(sub))  # (committed: no atomic view)
        return redirect("notifications:index")
    # a webhook's secret is shown in full once, on the page after its creation or rotation
    new_secret = request.session.pop(NEW_SECRET_KEY, None)
    response = render(request, "notifications/index.html", _context(request, new_secret=new_secret))
    response["Cache-Control"] = "no-store"  # the page may show a new webhook secret
    return response


NEW_SECRET_KEY = "notifications.new_secret"


def _show_secret_once(request: HttpRequest, sub: Subscription) -> None:
    if sub.secret:
        request.session[NEW_SECRET_KEY] = {"id": sub.pk, "secret": sub.secret}


def _act(request: HttpRequest, done: str, action: Callable[[], object]) -> HttpResponse:
    try:
        action()
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, done)
    return redirect("notifications:index")


@login_required
@require_POST
def delete(request: HttpRequest, subscription_id: int) -> HttpResponse:
    return _act(
        request,
        "Subscription removed.",
        lambda: services.subscription_delete(user=request.user, subscription_id=subscription_id),
    )


@login_required
@require_POST
def rotate(request: HttpRequest, subscription_id: int) -> HttpResponse:
    def rotate_secret() -> None:
        sub = services.subscription_rotate_secret(
            user=request.user, subscription_id=subscription_id
        )
        _show_secret_once(request, sub)

    return _act(request, "New signing secret: update your receiver.", rotate_secret)


@login_required
@require_POST
def test(request: HttpRequest, subscription_id: int) -> HttpResponse:
    try:
        delivery = services.send_test(user=request.user, subscription_id=subscription_id)
    except ValidationError as exc:  # over the user's sends this hour
        messages.error(request, " ".join(exc.messages))
        return redirect("notifications:index")
    tasks.enqueue([delivery.pk])
    if delivery.event_kind == services.CONFIRM_KIND:
        messages.success(
            request,
            "Confirmation link sent again: the address gets nothing else until it is followed.",
        )
    else:
        messages.success(request, "Test delivery queued: see the log below.")
    return redirect("notifications:index")


@require_http_methods(["GET", "POST"])
def confirm(request: HttpRequest, token: str) -> HttpResponse:
    """Confirm an email address from the link mailed to it (no login: the recipient need
    not have an account). GET asks, POST confirms, so a mail scanner that follows links
    confirms nothing."""
    try:
        sub = services.subscription_confirm(token=token, apply=request.method == "POST")
    except ValidationError as exc:
        error = {"error": " ".join(exc.messages)}
        return render(request, "notifications/confirm.html", error, status=400)
    ctx: dict[str, Any] = {"sub": sub, "token": token, "done": sub.confirmed_at is not None}
    return render(request, "notifications/confirm.html", ctx)
