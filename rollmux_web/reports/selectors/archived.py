"""What a Gantt page says of phases that went to the archive (issue 25 retention)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings

from rollmux_web.accounts.access import visible_tenant_ids
from rollmux_web.workflow.access import job_get_for_user
from rollmux_web.workflow.models import ArchivedJob, Placement


@dataclass(frozen=True)
class ArchivedNote:
    job_id: int
    job_name: str
    phases: int
    metrics: int
    archived_at: datetime
    uris: list[str]


def archived_notes(
    *, user: Any, group_id: int | None = None, job_id: int | None = None
) -> dict[str, Any]:
    """The archived jobs of a group (or one job) the user may see, and their archive files.

    Another tenant's archived member is counted, never named or linked.
    """
    qs = ArchivedJob.objects.select_related("job")
    if group_id is not None:
        job_ids = Placement.objects.filter(group_id=group_id).values("job_id")
        qs = qs.filter(job_id__in=job_ids)
    if job_id is not None:
        qs = qs.filter(job_id=job_id)
    viewer = visible_tenant_ids(user)
    notes: list[ArchivedNote] = []
    hidden = 0
    for a in qs.order_by("job_id"):
        if viewer is not None and a.job.tenant_id not in viewer:
            hidden += 1
            continue
        notes.append(
            ArchivedNote(
                a.job_id, a.job.name, a.phase_count, a.metrics_count, a.archived_at, list(a.uris)
            )
        )
    return {
        "notes": notes,
        "hidden": hidden,
        "any": bool(notes or hidden),
        "retention_days": settings.ROLLMUX_PHASE_RETENTION_DAYS,
    }


def archive_file_uri(*, user: Any, job_id: int, index: int) -> str | None:
    """The URI of the `index`-th archive file of a job the user may see (404 for another
    tenant's job), or None when it has no such file. A job's files hold its own tenant's
    rows only (workflow.services.retention writes one file per tenant)."""
    job_get_for_user(user=user, job_id=job_id)
    uris = ArchivedJob.objects.filter(job_id=job_id).values_list("uris", flat=True).first()
    if not uris or not 0 <= index < len(uris):
        return None
    return str(uris[index])
