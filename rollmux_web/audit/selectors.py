"""Read side of the audit log (admins only; callers check the role)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from rollmux_web.audit.models import AuditEntry


@dataclass(frozen=True)
class AuditFilters:
    action: str = ""
    actor: str = ""
    object_type: str = ""
    tenant: str = ""
    since: datetime | None = None
    until: datetime | None = None


def _parse_moment(field: str, raw: str, *, end_of_day: bool) -> datetime | None:
    raw = (raw or "").strip()
    if not raw:
        return None
    try:
        # parse_datetime also accepts a bare date (as midnight), so try the date first.
        day: date | None = parse_date(raw)
        moment = None if day is not None else parse_datetime(raw)
    except ValueError:  # well-formed but impossible, e.g. 2026-02-31
        day, moment = None, None
    if day is not None:
        # A bare `until` date includes that whole day (the last day a date can hold has
        # no next midnight: to its last moment).
        if not end_of_day:
            moment = datetime.combine(day, time.min)
        elif day == date.max:
            moment = datetime.combine(day, time.max)
        else:
            moment = datetime.combine(day + timedelta(days=1), time.min)
    if moment is None:
        raise ValidationError({field: [f"Use a date (YYYY-MM-DD) or ISO datetime; got {raw!r}."]})
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.get_current_timezone())
    return moment


def parse_filters(params: Any) -> AuditFilters:
    """Turn query parameters into filters; a malformed value raises ValidationError naming it."""
    for name in ("action", "actor", "object_type", "tenant", "since", "until"):
        # PostgreSQL text cannot hold NUL: a lookup with one would be a server error.
        if "\x00" in (params.get(name) or ""):
            raise ValidationError({name: ["Null characters are not allowed."]})
    since = _parse_moment("since", params.get("since") or "", end_of_day=False)
    until = _parse_moment("until", params.get("until") or "", end_of_day=True)
    if since is not None and until is not None and until <= since:
        raise ValidationError(
            {"until": [f"{params.get('until')} is before the start ({params.get('since')})."]}
        )
    return AuditFilters(
        action=(params.get("action") or "").strip(),
        actor=(params.get("actor") or "").strip(),
        object_type=(params.get("object_type") or "").strip(),
        tenant=(params.get("tenant") or "").strip(),
        since=since,
        until=until,
    )


def audit_list(filters: AuditFilters) -> QuerySet[AuditEntry]:
    """Return audit entries newest first. `action` matches a prefix ("quota" or "quota.update")."""
    qs = AuditEntry.objects.all()
    if filters.action:
        qs = qs.filter(action__startswith=filters.action)
    if filters.actor:
        qs = qs.filter(actor_name=filters.actor)
    if filters.object_type:
        qs = qs.filter(object_type=filters.object_type)
    if filters.tenant:
        qs = qs.filter(tenant=filters.tenant)
    if filters.since:
        qs = qs.filter(at__gte=filters.since)
    if filters.until:
        qs = qs.filter(at__lt=filters.until)
    return qs.order_by("-at", "-id")


def audit_actions() -> list[str]:
    """Return the distinct actions recorded so far (for the filter menu)."""
    return list(AuditEntry.objects.order_by("action").values_list("action", flat=True).distinct())


def changed_fields(entry: AuditEntry) -> list[tuple[str, Any, Any]]:
    """Return (field, before, after) for every field that differs between the snapshots."""
    before, after = entry.before or {}, entry.after or {}
    keys = list(dict.fromkeys([*before.keys(), *after.keys()]))
    return [(k, before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)]
