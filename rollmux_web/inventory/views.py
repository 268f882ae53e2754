"""Inventory pages: everyone with a role reads; admins edit (through the services)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from rollmux_contract.runners import BUILTIN_RUNNERS
from rollmux_web.accounts.decorators import role_required
from rollmux_web.accounts.selectors import is_admin
from rollmux_web.inventory import selectors, services
from rollmux_web.inventory.forms import ClusterForm, GpuTypeForm, NodeForm, RunnerPackageForm
from rollmux_web.inventory.models import Cluster, GpuType, Node, NodeState, RunnerPackage
from rollmux_web.listing import page_of

NODES_PER_PAGE = 100


@role_required()
def index(request: HttpRequest) -> HttpResponse:
    """The inventory; its nodes a page at a time (NODES_PER_PAGE: a fleet has 10,000),
    or the one node `?node=<id>` names (what a row's "Keep it" link reloads)."""
    gpu_types = [(g, selectors.gpu_type_current_price(g)) for g in selectors.gpu_type_list()]
    errors: list[str] = []
    nodes = selectors.node_list()
    node = request.GET.get("node", "")
    if node.isascii() and node.isdigit():
        nodes = nodes.filter(pk=int(node))
    elif node:
        errors.append(f"node: {node!r} is not a node id.")
    page = page_of(nodes, NODES_PER_PAGE, request.GET, errors)
    context = {
        "gpu_types": gpu_types,
        "clusters": selectors.cluster_list(),
        "nodes": page.object_list,
        "page": page,
        "errors": errors,
        "node_states": NodeState.choices,
        "can_edit": is_admin(request.user),
        "builtin_runners": BUILTIN_RUNNERS,
        "runner_packages": selectors.runner_package_list(),
    }
    return render(request, "inventory/index.html", context, status=400 if errors else 200)


def _saved_message(title: str, obj: Any) -> str:
    """Return the confirmation after a form saved: "Saved node h800-5." for "Edit node
    h800-5", "Saved GPU type B200." for "New GPU type" (the new row named by its name)."""
    if title.startswith("Edit "):
        return f"Saved {title.removeprefix('Edit ')}."
    noun = title.removeprefix("New ")
    name = getattr(obj, "name", None) or getattr(obj, "path", None)
    return f"Saved {noun} {name}." if name else f"Saved {noun}."


def form_page(
    request: HttpRequest,
    form: Any,
    title: str,
    save: Any,
    back: str = "inventory:index",
    fields: Mapping[str, str] | None = None,
) -> HttpResponse:
    """Validate, run the service, map its field errors onto the form (a service field the
    form shows as another: `fields`), re-render on error; after a save, go back with a
    "Saved ..." confirmation."""
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():
                obj = save(form.cleaned_data)
        except ValidationError as exc:
            if fields and hasattr(exc, "error_dict"):
                exc = ValidationError({fields.get(k, k): v for k, v in exc.error_dict.items()})
            form.add_error(None, exc)
        else:
            messages.success(request, _saved_message(title, obj))
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
        # the node keeps its GPU type: a pool of another type is refused, as by the API,
        # on the form's Pool field (re-typing a node would re-price its past allocations)
        lambda d: services.node_update(actor=request.user, node_id=pk, data=d),
        fields={"gpu_type": "cluster"},
    )


@role_required(admin=True)
@require_POST
def node_state(request: HttpRequest, pk: int) -> HttpResponse:
    """Set a node's state; htmx gets the updated row back, a plain form a redirect.

    Marking a node down resubmits the jobs placed on it, so it asks first: a POST of
    state=down without confirm=yes answers with the question (the row, or a page without
    JavaScript) and changes nothing.
    """
    node = get_object_or_404(Node.objects.select_related("cluster", "gpu_type"), pk=pk)
    state = request.POST.get("state", "")
    context: dict[str, Any] = {"n": node, "node_states": NodeState.choices, "can_edit": True}
    if state == NodeState.DOWN and node.state != NodeState.DOWN and not _confirmed(request):
        if request.htmx:  # type: ignore[attr-defined]
            return render(request, "inventory/index.html#node-row", {**context, "confirm": True})
        return render(request, "inventory/confirm_down.html", context)
    try:
        node = services.node_set_state(actor=request.user, node_id=pk, state=state)
    except ValidationError as exc:
        context["error"] = "; ".join(exc.messages)
        node.refresh_from_db()
    else:
        context["saved"] = f"Saved: {node.name} is {node.get_state_display().lower()}."
    context["n"] = node
    if request.htmx:  # type: ignore[attr-defined]
        return render(request, "inventory/index.html#node-row", context)
    if "saved" in context:
        messages.success(request, context["saved"])
    else:
        messages.error(request, context["error"])
    return redirect("inventory:index")


def _confirmed(request: HttpRequest) -> bool:
    return request.POST.get("confirm") == "yes"


@role_required(admin=True)
@require_http_methods(["GET", "POST"])
def runner_package_new(request: HttpRequest) -> HttpResponse:
    form = RunnerPackageForm(request.POST or None)
    return form_page(
        request,
        form,
        "New runner package",
        lambda d: services.runner_package_create(actor=request.user, **d),
    )


@role_required(admin=True)
@require_POST
def runner_package_delete(request: HttpRequest, pk: int) -> HttpResponse:
    entry = get_object_or_404(RunnerPackage, pk=pk)
    services.runner_package_delete(actor=request.user, entry_id=pk)
    messages.success(request, f"Removed {entry.path} from the runner allowlist.")
    return redirect("inventory:index")
