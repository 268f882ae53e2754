"""Inventory pages: everyone with a role reads; admins edit (through the services)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from rollmux_web.accounts.decorators import role_required
from rollmux_web.accounts.selectors import is_admin
from rollmux_web.inventory import selectors, services
from rollmux_web.inventory.forms import ClusterForm, GpuTypeForm, NodeForm
from rollmux_web.inventory.models import Cluster, GpuType, Node, NodeState


@role_required()
def index(request: HttpRequest) -> HttpResponse:
    gpu_types = [(g, selectors.gpu_type_current_price(g)) for g in selectors.gpu_type_list()]
    context = {
        "gpu_types": gpu_types,
        "clusters": selectors.cluster_list(),
        "nodes": selectors.node_list(),
        "node_states": NodeState.choices,
        "can_edit": is_admin(request.user),
    }
    return render(request, "inventory/index.html", context)


def form_page(
    request: HttpRequest, form: Any, title: str, save: Any, back: str = "inventory:index"
) -> HttpResponse:
    """Validate, run the service, map its field errors onto the form, re-render on error."""
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():
                save(form.cleaned_data)
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            return redirect(back)
    status = 400 if request.method == "POST" else 200
    context = {"form": form, "title": title, "back_url": reverse(back)}
    return render(request, "inventory/form.html", context, status=status)


@role_required(admin=True)
@require_http_methods(["GET", "POST"])
def gpu_type_new(request: HttpRequest) -> HttpResponse:
    form = GpuTypeForm(request.POST or None)
    return form_page(
        request,
        form,
        "New GPU type",
        lambda d: services.gpu_type_create(actor=request.user, **d),
    )


@role_required(admin=True)
@require_http_methods(["GET", "POST"])
def gpu_type_edit(request: HttpRequest, pk: int) -> HttpResponse:
    gpu_type = get_object_or_404(GpuType, pk=pk)
    initial = {
        "name": gpu_type.name,
        "gpus_per_node": gpu_type.gpus_per_node,
        "host_mem_gb": gpu_type.host_mem_gb,
        "price_per_gpu_hour": selectors.gpu_type_current_price(gpu_type),
    }
    form = GpuTypeForm(request.POST or None, initial=initial)
    return form_page(
        request,
        form,
        f"Edit GPU type {gpu_type.name}",
        lambda d: services.gpu_type_update(actor=request.user, gpu_type_id=pk, data=d),
    )


@role_required(admin=True)
@require_http_methods(["GET", "POST"])
def cluster_new(request: HttpRequest) -> HttpResponse:
    form = ClusterForm(request.POST or None)
    return form_page(
        request, form, "New pool", lambda d: services.cluster_create(actor=request.user, **d)
    )


@role_required(admin=True)
@require_http_methods(["GET", "POST"])
def cluster_edit(request: HttpRequest, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster, pk=pk)
    initial = {
        "name": cluster.name,
        "kind": cluster.kind,
        "gpu_type": cluster.gpu_type,
        "ray_address": cluster.ray_address,
    }
    form = ClusterForm(request.POST or None, initial=initial)
    return form_page(
        request,
        form,
        f"Edit pool {cluster.name}",
        lambda d: services.cluster_update(actor=request.user, cluster_id=pk, data=d),
    )


@role_required(admin=True)
@require_http_methods(["GET", "POST"])
def node_new(request: HttpRequest) -> HttpResponse:
    form = NodeForm(request.POST or None)
    return form_page(
        request, form, "New node", lambda d: services.node_create(actor=request.user, **d)
    )


@role_required(admin=True)
@require_http_methods(["GET", "POST"])
def node_edit(request: HttpRequest, pk: int) -> HttpResponse:
    node = get_object_or_404(Node, pk=pk)
    initial = {
        "name": node.name,
        "cluster": node.cluster,
        "gpus": node.gpus,
        "host_mem_gb": node.host_mem_gb,
        "state": node.state,
    }
    form = NodeForm(request.POST or None, initial=initial)
    return form_page(
        request,
        form,
        f"Edit node {node.name}",
        lambda d: services.node_update(
            actor=request.user, node_id=pk, data={**d, "gpu_type": d["cluster"].gpu_type}
        ),
    )


@role_required(admin=True)
@require_POST
def node_state(request: HttpRequest, pk: int) -> HttpResponse:
    """Set a node's state; htmx gets the updated row back, a plain form a redirect."""
    get_object_or_404(Node, pk=pk)
    error = None
    try:
        node = services.node_set_state(
            actor=request.user, node_id=pk, state=request.POST.get("state", "")
        )
    except ValidationError as exc:
        error = "; ".join(exc.messages)
        node = Node.objects.select_related("cluster", "gpu_type").get(pk=pk)
    if request.htmx:  # type: ignore[attr-defined]
        context = {"n": node, "node_states": NodeState.choices, "can_edit": True, "error": error}
        return render(request, "inventory/index.html#node-row", context)
    return redirect("inventory:index")
