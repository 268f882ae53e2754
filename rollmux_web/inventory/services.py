"""Write side of the inventory. Every change is atomic and audited with before/after.

A price change never edits a GpuPrice row: it adds one effective now, so costs of
past allocations (priced by the history) stay what they were.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from rollmux_contract.runners import allowlist_entry_problem
from rollmux_web import events
from rollmux_web.audit.services import audit_record, save_changes, snapshot
from rollmux_web.inventory.models import (
    Cluster,
    GpuPrice,
    GpuType,
    Node,
    NodeState,
    RunnerPackage,
)

GPU_TYPE_FIELDS = ["name", "gpus_per_node", "host_mem_gb"]
CLUSTER_FIELDS = ["name", "kind", "gpu_type", "ray_address"]
NODE_FIELDS = ["name", "cluster", "gpu_type", "gpus", "host_mem_gb", "state", "state_reason"]
RAY_REASON = "Ray:"  # the head of a state_reason the Ray node watcher wrote
# The largest node a GPU type (and so a node) may describe, in every layer (the API's
# fields, the page's forms and the service)
MAX_GPUS_PER_NODE = 1024
MAX_MEM_GB = 1_000_000.0


# The highest price per GPU-hour, in every layer (the API's field and its schema, the page's
# form and the service: `check_price`)
MAX_PRICE_PER_GPU_HOUR = Decimal("999999")
PRICE_TOO_HIGH = f"Must be at most {MAX_PRICE_PER_GPU_HOUR:,} dollars per GPU-hour."
PRICE_NOT_POSITIVE = (
    "Must be more than 0 dollars per GPU-hour: at $0 the planner treats the pool as free "
    "and every cost on it is zero."
)


def check_price(value: Any) -> Decimal:
    """Return a price per GPU-hour rounded to 4 decimals, or raise a ValidationError.

    A price must be more than 0 after rounding; the form, the API and the services all
    call this one check, so they refuse the same prices with the same message.
    """
    try:
        price = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise ValidationError("Enter a number.") from None
    if not price.is_finite():
        raise ValidationError("Enter a finite number.")
    if price > MAX_PRICE_PER_GPU_HOUR:
        raise ValidationError(PRICE_TOO_HIGH)
    price = price.quantize(Decimal("0.0001"))
    if price <= 0:
        raise ValidationError(PRICE_NOT_POSITIVE)
    return price


def _price(value: Any) -> Decimal:
    try:
        return check_price(value)
    except ValidationError as exc:
        raise ValidationError({"price_per_gpu_hour": exc.messages}) from None


def _gpu_type_snapshot(gpu_type: GpuType, price: Decimal | None) -> dict[str, Any]:
    out = snapshot(gpu_type, GPU_TYPE_FIELDS)
    out["price_per_gpu_hour"] = None if price is None else str(price)
    return out


def _latest_price(gpu_type: GpuType) -> GpuPrice | None:
    return gpu_type.prices.order_by("-effective_from").first()


# The planner counts a pool in whole nodes of its GPU type's size (a job's GPUs / GPUs per
# node): a node with fewer GPUs would be handed work it cannot hold, one with more would
# idle the rest. So a node has exactly its type's GPU count (issue 11 item 10).
NODE_SIZE_RULE = "the planner places jobs on whole nodes of the GPU type's size."

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _check_name(errors: dict[str, list[str]], name: Any) -> None:
    # Names end up in Ray resource names (node:<name>) and URLs: keep them plain.
    if not isinstance(name, str) or not NAME_RE.match(name):
        errors["name"] = ["Use letters, digits, '.', '_' or '-', starting with a letter or digit."]


def name_taken(model: Any, name: Any, *, noun: str, pk: int | None = None) -> str | None:
    """Return the refusal of a name another row of `model` has ("A GPU type named 'H20'
    exists already."), or None: the pages, the API and the services say it in one way."""
    qs = model._default_manager.filter(name=name)
    if pk is not None:
        qs = qs.exclude(pk=pk)
    return f"{noun} named {name!r} exists already." if qs.exists() else None


def _check_unique(errors: dict[str, list[str]], model: Any, obj: Any, *, noun: str) -> None:
    if "name" not in errors and (taken := name_taken(model, obj.name, noun=noun, pk=obj.pk)):
        errors["name"] = [taken]


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _host_mem_error(value: Any) -> str | None:
    """Return what is wrong with the host memory a GPU type or a node states (more than 0
    GB, at most MAX_MEM_GB), or None."""
    if not _finite(value) or not value > 0:
        return "Must be more than 0 GB."
    if value > MAX_MEM_GB:
        return f"Must be at most {MAX_MEM_GB:,.0f} GB; got {value:g} GB."
    return None


def _validate_gpu_type(gpu_type: GpuType) -> None:
    errors: dict[str, list[str]] = {}
    _check_name(errors, gpu_type.name)
    _check_unique(errors, GpuType, gpu_type, noun="A GPU type")
    if gpu_type.gpus_per_node is None or gpu_type.gpus_per_node < 1:
        errors["gpus_per_node"] = ["Must be at least 1."]
    elif gpu_type.gpus_per_node > MAX_GPUS_PER_NODE:
        errors["gpus_per_node"] = [
            f"Must be at most {MAX_GPUS_PER_NODE:,}; got {gpu_type.gpus_per_node}."
        ]
    if (wrong := _host_mem_error(gpu_type.host_mem_gb)) is not None:
        errors["host_mem_gb"] = [wrong]
    if gpu_type.pk and not errors.get("host_mem_gb"):
        bigger = (
            gpu_type.nodes.filter(host_mem_gb__gt=gpu_type.host_mem_gb).order_by("name").first()
        )
        if bigger is not None:
            errors["host_mem_gb"] = [
                f"Node {bigger.name} has {bigger.host_mem_gb:g} GB of host memory, more than "
                f"{gpu_type.host_mem_gb:g}: a node has at most its GPU type's; change the node "
                "first."
            ]
    if gpu_type.pk and not errors.get("gpus_per_node"):
        other = gpu_type.nodes.exclude(gpus=gpu_type.gpus_per_node).order_by("name").first()
        if other is not None:
            errors["gpus_per_node"] = [
                f"Node {other.name} has {other.gpus} GPUs, not {gpu_type.gpus_per_node}: "
                f"{NODE_SIZE_RULE}"
            ]
    if errors:
        raise ValidationError(errors)
    gpu_type.full_clean()


@transaction.atomic
def gpu_type_create(
    *,
    actor: Any,
    name: str,
    gpus_per_node: int,
    host_mem_gb: float,
    price_per_gpu_hour: Any,
    now: datetime | None = None,
) -> GpuType:
    """Create a GPU type with its first price, effective now."""
    now = now or timezone.now()
    price = _price(price_per_gpu_hour)
    gpu_type = GpuType(name=name, gpus_per_node=gpus_per_node, host_mem_gb=host_mem_gb)
    _validate_gpu_type(gpu_type)
    gpu_type.save()
    GpuPrice.objects.create(gpu_type=gpu_type, price_per_gpu_hour=price, effective_from=now)
    audit_record(
        actor=actor,
        action="gpu_type.create",
        obj=gpu_type,
        after=_gpu_type_snapshot(gpu_type, price),
    )
    return gpu_type


@transaction.atomic
def gpu_type_update(
    *, actor: Any, gpu_type_id: int, data: Mapping[str, Any], now: datetime | None = None
) -> GpuType:
    """Change a GPU type; a new price is appended to its history, effective now."""
    now = now or timezone.now()
    gpu_type = GpuType.objects.select_for_update().get(pk=gpu_type_id)
    latest = _latest_price(gpu_type)
    old_price = latest.price_per_gpu_hour if latest else None
    before = _gpu_type_snapshot(gpu_type, old_price)
    for field in GPU_TYPE_FIELDS:
        if field in data:
            setattr(gpu_type, field, data[field])
    _validate_gpu_type(gpu_type)
    new_price = old_price
    if data.get("price_per_gpu_hour") is not None:
        new_price = _price(data["price_per_gpu_hour"])
    gpu_type.save()
    if new_price is not None and new_price != old_price:
        effective = now
        # Two changes in the same instant (or a row recorded ahead of the clock) would collide
        # on (gpu_type, effective_from); the newer one takes the next microsecond.
        if latest is not None and latest.effective_from >= effective:
            effective = latest.effective_from + timedelta(microseconds=1)
        GpuPrice.objects.create(
            gpu_type=gpu_type, price_per_gpu_hour=new_price, effective_from=effective
        )
    after = _gpu_type_snapshot(gpu_type, new_price)
    if after != before:
        action = "price.change" if new_price != old_price else "gpu_type.update"
        audit_record(actor=actor, action=action, obj=gpu_type, before=before, after=after)
    return gpu_type


def _validate_cluster(cluster: Cluster) -> None:
    errors: dict[str, list[str]] = {}
    _check_name(errors, cluster.name)
    _check_unique(errors, Cluster, cluster, noun="A pool")
    if errors:
        raise ValidationError(errors)
    if not (cluster.ray_address or "").strip():
        raise ValidationError({"ray_address": ["Give the pool's Ray address (or 'local')."]})
    cluster.full_clean()
    if cluster.pk:
        other = cluster.nodes.exclude(gpu_type_id=cluster.gpu_type_id).first()
        if other is not None:
            raise ValidationError(
                {"gpu_type": [f"Node {other.name} is {other.gpu_type}; a pool has one GPU type."]}
            )


@transaction.atomic
def cluster_create(
    *, actor: Any, name: str, kind: str, gpu_type: GpuType, ray_address: str
) -> Cluster:
    """Create a pool (rollout or training) of one GPU type behind one Ray address."""
    cluster = Cluster(name=name, kind=kind, gpu_type=gpu_type, ray_address=ray_address)
    _validate_cluster(cluster)
    cluster.save()
    audit_record(
        actor=actor, action="cluster.create", obj=cluster, after=snapshot(cluster, CLUSTER_FIELDS)
    )
    return cluster


@transaction.atomic
def cluster_update(*, actor: Any, cluster_id: int, data: Mapping[str, Any]) -> Cluster:
    cluster = Cluster.objects.select_for_update().select_related("gpu_type").get(pk=cluster_id)
    kind = data.get("kind", cluster.kind)
    if kind != cluster.kind and (count := cluster.nodes.count()):
        # the reports read a pool's kind for every allocation of its nodes (the dedicated
        # pools' counterfactual above all): a flip would rewrite what past months cost
        raise ValidationError(
            {
                "kind": [
                    f"Pool {cluster.name} has {count} node{'s' if count != 1 else ''}: its "
                    f"kind stays {cluster.kind}, as the cost of their past allocations was "
                    "reported. Add a pool of the other kind for new nodes."
                ]
            }
        )
    before, after = save_changes(cluster, CLUSTER_FIELDS, data, validate=_validate_cluster)
    if after != before:
        audit_record(actor=actor, action="cluster.update", obj=cluster, before=before, after=after)
    return cluster


def _validate_node(node: Node) -> None:
    errors: dict[str, list[str]] = {}
    _check_name(errors, node.name)
    _check_unique(errors, Node, node, noun="A node")
    cluster, gpu_type = node.cluster, node.gpu_type
    if cluster is not None and gpu_type is not None and cluster.gpu_type_id != gpu_type.pk:
        errors["gpu_type"] = [
            f"Pool {cluster.name} holds {cluster.gpu_type} nodes, not {gpu_type}."
        ]
    if node.gpus is None or node.gpus < 1:
        errors["gpus"] = ["Must be at least 1."]
    elif gpu_type is not None and node.gpus != gpu_type.gpus_per_node:
        errors["gpus"] = [
            f"A {gpu_type} node has {gpu_type.gpus_per_node} GPUs, got {node.gpus}: "
            f"{NODE_SIZE_RULE} For a node of another size, add a GPU type of that size."
        ]
    if (wrong := _host_mem_error(node.host_mem_gb)) is not None:
        errors["host_mem_gb"] = [wrong]
    elif gpu_type is not None and node.host_mem_gb > gpu_type.host_mem_gb:
        # the GPU type says what a node of it has; a node may have less (a degraded
        # machine), never more: the planner would pack residents it cannot hold
        errors["host_mem_gb"] = [
            f"A {gpu_type} node has at most {gpu_type.host_mem_gb:g} GB of host memory "
            f"(its GPU type's), got {node.host_mem_gb:g} GB."
        ]
    if errors:
        raise ValidationError(errors)
    node.full_clean()


def _after_node_state_change(node_id: int) -> None:
    from rollmux_web import ports  # (a leaf outside the apps: no models)

    ports.node_state_changed(node_id)


@transaction.atomic
def node_create(
    *,
    actor: Any,
    name: str,
    cluster: Cluster,
    gpu_type: GpuType | None = None,
    gpus: int | None = None,
    host_mem_gb: float | None = None,
    state: str = NodeState.UP,
) -> Node:
    """Add a node to a pool; GPU type, GPUs and memory default to the pool's GPU type."""
    gpu_type = gpu_type or cluster.gpu_type
    node = Node(
        name=name,
        cluster=cluster,
        gpu_type=gpu_type,
        gpus=gpus if gpus is not None else gpu_type.gpus_per_node,
        host_mem_gb=host_mem_gb if host_mem_gb is not None else gpu_type.host_mem_gb,
        state=state,
    )
    _validate_node(node)
    node.save()
    audit_record(actor=actor, action="node.create", obj=node, after=snapshot(node, NODE_FIELDS))
    transaction.on_commit(lambda: _after_node_state_change(node.pk))
    return node


@transaction.atomic
def node_update(*, actor: Any, node_id: int, data: Mapping[str, Any]) -> Node:
    """Change a node; a state change (up/drained/down) wakes the workflow after commit."""
    node = Node.objects.select_for_update().select_related("cluster", "gpu_type").get(pk=node_id)
    before, after = save_changes(node, NODE_FIELDS, data, validate=_validate_node)
    if after != before:
        action = "node.state" if set(_changed(before, after)) == {"state"} else "node.update"
        audit_record(actor=actor, action=action, obj=node, before=before, after=after)
    if after["state"] != before["state"]:
        transaction.on_commit(lambda: _after_node_state_change(node.pk))
        if after["state"] == NodeState.DOWN:
            events.publish(events.NODE_DOWN, node=node)
    return node


def node_set_state(*, actor: Any, node_id: int, state: str) -> Node:
    """Mark a node up, drained (no new work) or down (its jobs get resubmitted)."""
    if state not in NodeState.values:
        raise ValidationError({"state": [f"Unknown state {state!r}: use up, drained or down."]})
    return node_update(actor=actor, node_id=node_id, data={"state": state, "state_reason": ""})


def node_ray_changed(*, name: str, alive: bool, reason: str = "") -> bool:
    """Follow the Ray node that serves an inventory node: down (with the reason) when it
    died or is missing, up again when it rejoined, if Ray was what took it down (an
    operator's down stays down). Return whether the node changed; idempotent."""
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(name=name).first()
        if node is None:
            return False
        if not alive and node.state != NodeState.DOWN:
            data = {"state": NodeState.DOWN, "state_reason": f"{RAY_REASON} {reason}"[:300]}
        elif alive and node.state == NodeState.DOWN and node.state_reason.startswith(RAY_REASON):
            data = {"state": NodeState.UP, "state_reason": ""}
        else:
            return False
        node_update(actor=None, node_id=node.pk, data=data)
    return True


def _changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [k for k in after if before.get(k) != after[k]]


def check_runner_path(path: Any) -> str:
    """Return an allowlist path stripped, or raise a ValidationError naming the field."""
    value = path.strip() if isinstance(path, str) else ""
    problem = allowlist_entry_problem(value)
    if problem is not None:
        raise ValidationError({"path": [problem]})
    return value


@transaction.atomic
def runner_package_create(*, actor: Any, path: str, description: str = "") -> RunnerPackage:
    """Register a runner package or class: jobs may then name the classes it covers."""
    value = check_runner_path(path)
    if RunnerPackage.objects.filter(path=value).exists():
        raise ValidationError({"path": [f"{value!r} is registered already."]})
    entry = RunnerPackage.objects.create(path=value, description=(description or "").strip())
    audit_record(
        actor=actor,
        action="runner_package.create",
        obj=entry,
        after={"path": entry.path, "description": entry.description},
    )
    return entry


@transaction.atomic
def runner_package_delete(*, actor: Any, entry_id: int) -> None:
    """Remove an allowlist entry; jobs submitted before keep their runner."""
    entry = RunnerPackage.objects.select_for_update().get(pk=entry_id)
    audit_record(
        actor=actor,
        action="runner_package.delete",
        obj=entry,
        before={"path": entry.path, "description": entry.description},
    )
    entry.delete()
