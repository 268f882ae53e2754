"""Quotas and SLO class pages: researchers see their tenants' quotas; admins edit."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from rollmux_web.accounts.decorators import role_required
from rollmux_web.accounts.selectors import is_admin
from rollmux_web.inventory.views import form_page
from rollmux_web.quotas import selectors, services
from rollmux_web.quotas.forms import QuotaForm, SloClassForm
from rollmux_web.quotas.models import Quota, SloClass


@role_required()
def index(request: HttpRequest) -> HttpResponse:
    """Show SLO classes and each visible quota with its usage (what submission checks)."""
    context = {
        "slo_classes": selectors.slo_class_list(),
        "usages": selectors.quota_usage_list(user=request.user, now=timezone.now()),
        "can_edit": is_admin(request.user),
    }
    return render(request, "quotas/index.html", context)


@role_required(admin=True)
@require_http_methods(["GET", "POST"])
def slo_class_new(request: HttpRequest) -> HttpResponse:
    form = SloClassForm(request.POST or None)
    return form_page(
        request,
        form,
        "New SLO class",
        lambda d: services.slo_class_create(actor=request.user, **d),
        back="quotas:index",
    )


@role_required(admin=True)
@require_http_methods(["GET", "POST"])
def slo_class_edit(request: HttpRequest, pk: int) -> HttpResponse:
    slo = get_object_or_404(SloClass, pk=pk)
    initial = {
        "name": slo.name,
        "slowdown": slo.slowdown,
        "description": slo.description,
        "preemptible": slo.preemptible,
    }
    form = SloClassForm(request.POST or None, initial=initial)
    return form_page(
        request,
        form,
        f"Edit SLO class {slo.name}",
        lambda d: services.slo_class_update(actor=request.user, slo_class_id=pk, data=d),
        back="quotas:index",
    )


@role_required(admin=True)
@require_http_methods(["GET", "POST"])
def quota_new(request: HttpRequest) -> HttpResponse:
    form = QuotaForm(request.POST or None)
    return form_page(
        request,
        form,
        "New quota",
        lambda d: services.quota_create(actor=request.user, **d),
        back="quotas:index",
    )


@role_required(admin=True)
@require_http_methods(["GET", "POST"])
def quota_edit(request: HttpRequest, pk: int) -> HttpResponse:
    quota = get_object_or_404(Quota.objects.select_related("tenant", "gpu_type"), pk=pk)
    initial = {
        "tenant": quota.tenant,
        "gpu_type": quota.gpu_type,
        "max_gpus": quota.max_gpus,
        "monthly_gpu_hours": quota.monthly_gpu_hours,
        "monthly_budget_usd": quota.monthly_budget_usd,
        "borrowing_limit": quota.borrowing_limit,
        "lending_limit": quota.lending_limit,
        "weight": quota.weight,
    }
    form = QuotaForm(request.POST or None, initial=initial)
    return form_page(
        request,
        form,
        f"Edit quota {quota.tenant} / {quota.gpu_type}",
        lambda d: services.quota_update(actor=request.user, quota_id=pk, data=d),
        back="quotas:index",
    )


@role_required(admin=True)
@require_POST
def quota_delete(request: HttpRequest, pk: int) -> HttpResponse:
    get_object_or_404(Quota, pk=pk)
    services.quota_delete(actor=request.user, quota_id=pk)
    return redirect("quotas:index")
