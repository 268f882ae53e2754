"""The groups list and a group's member rows, other tenants' members shown without identity."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from rollmux_web.accounts.access import JobRef, member_hidden, member_label, visible_tenant_ids
from rollmux_web.id_sql import in_ids
from rollmux_web.jobs.models import Job
from rollmux_web.workflow.access import groups_for_user
from rollmux_web.workflow.models import ExecutionGroup, Placement, Strategy
from rollmux_web.workflow.selectors import live_group_states
from scheduler.slo import check_group
from scheduler.stochastic import slo_probabilities

GROUP_STATES = ("all", "active", "released")


def visible_group_ids(*, user: Any, state: str = "all") -> QuerySet[ExecutionGroup]:
    """Return the groups the user may see, newest first (`state`: all, active or released)."""
    groups = groups_for_user(user=user)
    if state == "active":
        groups = groups.filter(released_at__isnull=True)
    elif state == "released":
        groups = groups.filter(released_at__isnull=False)
    return groups.order_by("-created_at", "-id")


def member_entry(ref: JobRef, tenant: str, viewer: set[int] | None) -> dict[str, Any]:
    """Return a member as the pages show it: job id, label and tenant, or none of them."""
    hidden = member_hidden(ref, viewer)
    return {
        "job_id": None if hidden else ref.id,
        "name": member_label(ref, viewer),
        "tenant": "" if hidden else tenant,
        "hidden": hidden,
    }


def members_by_group(
    group_ids: list[int], viewer: set[int] | None
) -> dict[int, list[dict[str, Any]]]:
    """Return each group's members (two queries), other tenants' ones without identity."""
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    rows = list(
        Placement.objects.filter(group_id__in=group_ids).values_list(
            "group_id", "job_id", "ended_at"
        )
    )
    # the members' jobs by key (joined to the placements, PostgreSQL hashed every job's
    # row: ~50 ms of the overview at a fleet's size)
    jobs: dict[int, tuple[str, int, str]] = {
        jid: (name, tid, tname)
        for jid, name, tid, tname in Job.objects.filter(in_ids("id", {jid for _, jid, _ in rows}))
        .order_by()
        .values_list("id", "name", "tenant_id", "tenant__name")
    }
    for gid, jid, ended in rows:
        name, tid, tname = jobs[jid]
        entry = member_entry(JobRef(jid, name, tid), tname, viewer)
        out[gid].append(entry | {"active": ended is None})
    return out


def group_rows(*, user: Any, groups: Iterable[ExecutionGroup]) -> list[dict[str, Any]]:
    """Return one row per group (a page of them) with its members, other tenants' anonymous."""
    groups = list(groups)
    members = members_by_group([g.pk for g in groups], visible_tenant_ids(user))
    return [
        {
            "id": g.pk,
            "created_at": g.created_at,
            "released_at": g.released_at,
            "active": g.released_at is None,
            "members": members.get(g.pk, []),
        }
        for g in groups
    ]


def group_live_estimates(group: ExecutionGroup) -> tuple[dict[int, float], dict[int, float]]:
    """Return, per job id of a live group's active members, the chance it meets its SLO in
    the group (`scheduler.stochastic.slo_probabilities`, the function admission uses) and
    its predicted slowdown now (worst-case iteration time over worst-case solo time, as
    admission predicts it: `scheduler.slo.check_group`, for the group as it is), on the
    planner's snapshot; both empty for a released group or when the snapshot cannot be
    built.

    A member's placement keeps the slowdown predicted when it was admitted; members that
    joined after it slow it down, so the page shows both."""
    if group.released_at is not None:
        return {}, {}
    try:
        core = live_group_states([group.pk]).get(group.pk)
    except Exception:  # a broken snapshot must not take the group page down
        return {}, {}
    # a member pinned to no node has no load to model (the core's function needs some)
    if (
        core is None
        or not core.members
        or any(not (m.rollout_nodes or m.train_nodes) for m in core.members)
    ):
        return {}, {}
    overhead = settings.ROLLMUX_SWITCH_OVERHEAD_S
    try:
        chances = slo_probabilities(core.members, switch_overhead_s=overhead)
        worst = check_group(core.members, switch_overhead_s=overhead, margin=None).worst_s
        slowdowns = {
            m.job.id: t / m.job.t_solo_max_s for m, t in zip(core.members, worst, strict=True)
        }
    except (ValueError, ArithmeticError):  # an estimate must not take the page down
        return {}, {}
    return (
        {int(jid): p for jid, p in chances.items() if str(jid).isdigit()},
        {int(jid): x for jid, x in slowdowns.items() if str(jid).isdigit()},
    )


def group_list_members(*, user: Any, group: ExecutionGroup) -> list[dict[str, Any]]:
    """Return a group's members (other tenants' jobs anonymous) with their placements and,
    for active members of a live group, the chance they meet their SLO."""
    viewer = visible_tenant_ids(user)
    chances, slowdowns_now = group_live_estimates(group)
    out = []
    for pl in (
        Placement.objects.filter(group=group)
        .select_related("job", "job__tenant")
        .order_by("created_at")
    ):
        ref = JobRef(pl.job.pk, pl.job.name, pl.job.tenant.pk)
        out.append(
            member_entry(ref, pl.job.tenant.name, viewer)
            | {
                "strategy": pl.strategy_label,
                "profile": pl.strategy == Strategy.PROFILE,
                "predicted_slowdown": pl.predicted_slowdown,  # at its admission
                "slowdown_now": slowdowns_now.get(pl.job.pk) if pl.ended_at is None else None,
                "joined": pl.created_at,
                "left": pl.ended_at,
                "slo_probability": chances.get(pl.job.pk) if pl.ended_at is None else None,
            }
        )
    return out
