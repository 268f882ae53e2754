"""Tenant scoping: the tenants a user sees, and the one rule for showing a member.

Visibility: a user sees the jobs of the tenants `accounts.selectors.visible_tenants`
returns (admins and finance: every tenant). The lookups of a job or a co-execution group
by that rule (another tenant's job, or a group of other tenants only, is a 404) are in
`rollmux_web.workflow.access`, beside the models they read: this module, at the bottom of
the apps' layers, reads only accounts.

Masking (`member_label`, `member_hidden`): inside a visible group, a member of a tenant
the viewer may not see is shown without identity everywhere (pages, partials, SVG
tooltips and attributes, the Perfetto trace, exports, API and previews): no job id, no
phase id, no iteration number, no name and no tenant; only that it is "another tenant's
job", its phases' kinds, times and nodes, so the group's shape and load stay readable.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any, NamedTuple

from rollmux_web.accounts.selectors import sees_all_tenants, visible_tenants

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
