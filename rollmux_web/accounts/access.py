"""Tenant scoping of jobs and co-execution groups, and the one rule for showing a member.

Visibility: a user sees the jobs of the tenants `accounts.selectors.visible_tenants`
returns (admins and finance: every tenant). A co-execution group is visible when it has
(or had) a member of a visible tenant. Another tenant's job, or a group of other tenants
only, is a 404.

Masking (`member_label`, `member_hidden`): inside a visible group, a member of a tenant
the viewer may not see is shown without identity everywhere (pages, partials, SVG
tooltips and attributes, the Perfetto trace, exports, API and previews): no job id, no
phase id, no iteration number, no name and no tenant; only that it is "another tenant's
job", its phases' kinds, times and nodes, so the group's shape and load stay readable.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any, NamedTuple

from django.db.models import QuerySet
from django.http import Http404

from rollmux_web.accounts.selectors import sees_all_tenants, visible_tenants
from rollmux_web.jobs.models import Job
from rollmux_web.workflow.models import ExecutionGroup, Placement

OTHER_TENANT_JOB = "another tenant's job"
_UNSET = object()


class JobRef(NamedTuple):
    """The three facts `member_label` needs, for callers holding rows instead of Jobs."""

    id: int
    name: str
    tenant_id: int


def visible_tenant_ids(user: Any) -> set[int] | None:
    """Return the ids of the tenants the user may see, or None when they see every tenant.

    Remembered on the user object: one request asks several times, and a request's
    user object lives no longer than the request.
    """
    cached = getattr(user, "_rollmux_visible_tenant_ids", _UNSET)
    if cached is None or isinstance(cached, set):
        return cached
    ids = (
        None if sees_all_tenants(user) else set(visible_tenants(user).values_list("id", flat=True))
    )
    with suppress(AttributeError):  # a user object that takes no new attribute: no cache
        user._rollmux_visible_tenant_ids = ids
    return ids


def tenant_visible(tenant_id: int | None, viewer_tenant_ids: set[int] | None) -> bool:
    """Return whether a viewer with these visible tenants (None: all) sees this tenant."""
    return viewer_tenant_ids is None or tenant_id in viewer_tenant_ids


def member_hidden(job: Any, viewer_tenant_ids: set[int] | None) -> bool:
    """Return whether the job is another tenant's for this viewer (shown without identity)."""
    return not tenant_visible(job.tenant_id, viewer_tenant_ids)


def member_label(job: Any, viewer_tenant_ids: set[int] | None) -> str:
    """Return how a member of a shared group is named to a viewer: its name, or
    "another tenant's job" (never its id) when it belongs to a tenant the viewer may not see.

    `job` is a Job or a JobRef (anything with `name` and `tenant_id`).
    """
    return OTHER_TENANT_JOB if member_hidden(job, viewer_tenant_ids) else str(job.name)


def job_get_for_user(*, user: Any, job_id: int) -> Job:
    """Return a job of a tenant the user may see (tenant and SLO class loaded), else 404."""
    job = Job.objects.select_related("tenant", "slo_class").filter(pk=job_id).first()
    if job is None or not tenant_visible(job.tenant_id, visible_tenant_ids(user)):
        raise Http404("no such job")
    return job


def groups_for_user(*, user: Any) -> QuerySet[ExecutionGroup]:
    """Return the groups with (or that had) a member of a tenant the user may see."""
    tenant_ids = visible_tenant_ids(user)
    groups = ExecutionGroup.objects.all()
    if tenant_ids is None:
        return groups
    return groups.filter(placements__job__tenant_id__in=tenant_ids).distinct()


def group_get_for_user(*, user: Any, group_id: int) -> ExecutionGroup:
    """Return a group the user may see (one of its members is in a visible tenant), else 404."""
    group = ExecutionGroup.objects.filter(pk=group_id).first()
    if group is None:
        raise Http404("no such group")
    tenant_ids = visible_tenant_ids(user)
    if (
        tenant_ids is not None
        and not Placement.objects.filter(group=group, job__tenant_id__in=tenant_ids).exists()
    ):
        raise Http404("no such group")
    return group


def group_member_refs(group_ids: list[int]) -> dict[int, dict[int, JobRef]]:
    """Return per group its members' JobRefs by job id (one query)."""
    out: dict[int, dict[int, JobRef]] = {}
    for gid, jid, name, tid in Placement.objects.filter(group_id__in=group_ids).values_list(
        "group_id", "job_id", "job__name", "job__tenant_id"
    ):
        out.setdefault(gid, {})[jid] = JobRef(jid, name, tid)
    return out
