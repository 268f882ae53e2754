"""Tenant scoping of jobs and co-execution groups: the lookups every page, API and report
makes through (`accounts.access` holds the rule: which tenants a user sees, how a member
is shown).

A co-execution group is visible when it has (or had) a member of a visible tenant.
Another tenant's job, or a group of other tenants only, is a 404. It lives in the
workflow app, the lowest that knows both jobs and groups, so nothing below reads above
itself (the apps' layers contract).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404

from rollmux_web.accounts.access import JobRef, tenant_visible, visible_tenant_ids
from rollmux_web.jobs.models import Job
from rollmux_web.workflow.models import ExecutionGroup, Placement


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
    # (EXISTS, not a join made distinct: a page of them is then found on its ids first,
    # listing.DeferredJoinPaginator)
    mine = Placement.objects.filter(group_id=OuterRef("pk"), job__tenant_id__in=tenant_ids)
    return groups.filter(Exists(mine))


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
