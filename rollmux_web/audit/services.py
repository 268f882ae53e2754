"""Write audit entries. Call inside the transaction of the change being audited."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from rollmux_web.audit.models import AuditEntry


def audit_record(
    *,
    actor: Any,
    action: str,
    obj: Any = None,
    object_type: str = "",
    object_id: str = "",
    tenant: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEntry:
    """Record who did what to which object, with its state before and after."""
    object_name = ""
    if obj is not None:
        object_type = object_type or obj._meta.label_lower
        object_id = object_id or str(obj.pk)
        object_name = f"{obj._meta.verbose_name} {obj}"[:200]
    user = actor if actor is not None and getattr(actor, "is_authenticated", False) else None
    return AuditEntry.objects.create(
        actor=user,
        actor_name=getattr(user, "username", "") or "system",
        action=action,
        object_type=object_type,
        object_id=object_id,
        object_name=object_name,
        tenant=tenant,
        before=before,
        after=after,
    )


def snapshot(obj: Any, fields: list[str]) -> dict[str, Any]:
    """Return a JSON-safe dict of the named fields (FKs by their str, Decimals as strings)."""
    out: dict[str, Any] = {}
    for name in fields:
        value = getattr(obj, name)
        if isinstance(value, Decimal):
            value = str(value)
        elif isinstance(value, datetime):
            value = value.isoformat()
        elif hasattr(value, "_meta"):
            value = str(value)
        out[name] = value
    return out


def save_changes(
    obj: Any,
    fields: list[str],
    data: Mapping[str, Any],
    *,
    validate: Callable[[Any], None],
    snap: Callable[[Any], dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Set the named fields present in `data`, validate, save; return (before, after) snapshots.

    Call inside the caller's transaction, with `obj` locked; the caller audits the change
    (its action name and tenant differ) when before != after.
    """
    take = snap or (lambda o: snapshot(o, fields))
    before = take(obj)
    for field in fields:
        if field in data:
            setattr(obj, field, data[field])
    validate(obj)
    obj.save()
    return before, take(obj)
