"""Retention (issue 25): archive old phase records and iteration metrics, purge old rollups.

A job is archived whole, in one batch, once it is in a final state and its last phase ended
more than ROLLMUX_PHASE_RETENTION_DAYS ago. A batch (`archive_jobs`, given job ids, safe to
run twice):

1. reads the jobs' phase records and iteration metrics (no lock: nothing writes a finished
   job's phases);
2. writes them to Parquet under ROLLMUX_ARCHIVE_URI, one file per table and month (the
   phase's start, the metrics' record time), named by the batch's ids. A write that fails
   raises here: nothing is deleted;
3. in one short transaction holding the rollup watermark's row lock: the daily rollups
   (workflow.rollups) of the days from the watermark on (the days before it are rolled up
   already: services.rollup_days) and the jobs' archive rows are inserted and exactly the rows read in 1. are deleted (a count that differs rolls
   it all back). A job already archived is skipped, so a batch run again does nothing.

`sweep` (the beat task's body) picks batches of at most ROLLMUX_ARCHIVE_BATCH_PHASES
phases, runs a few, and deletes rollups older than ROLLMUX_ROLLUP_RETENTION_MONTHS and audit
entries older than ROLLMUX_AUDIT_RETENTION_DAYS, in bounded batches as well.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q

from rollmux_web.inventory.models import GpuPrice, Node
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job
from rollmux_web.workflow import archive_store
from rollmux_web.workflow.models import (
    ArchivedJob,
    IterationMetrics,
    NodeAllocation,
    PhaseKind,
    PhaseRecord,
    PhaseRollup,
    PhaseState,
    Placement,
    RollupWatermark,
    Strategy,
)
from rollmux_web.workflow.rollups import (
    PhaseRow,
    from_us,
    rollup,
    slo_summary,
    sorted_cuts,
    to_us,
)

log = logging.getLogger(__name__)
DELETE_BATCH = 5000


class ArchiveCountMismatch(RuntimeError):
    """Rows changed between the read and the delete: the batch is rolled back."""


def cutoff(now: datetime) -> datetime | None:
    days = settings.ROLLMUX_PHASE_RETENTION_DAYS
    return now - timedelta(days=days) if days else None


def rollup_cutoff(now: datetime) -> date:
    """The first day whose rollups are kept: the 1st of the month N months back."""
    months = settings.ROLLMUX_ROLLUP_RETENTION_MONTHS
    y, m = divmod(now.year * 12 + now.month - 1 - months, 12)
    return date(y, m + 1, 1)


def eligible_batches(now: datetime, *, max_batches: int = 1) -> list[list[int]]:
    """Batches of job ids to archive, oldest first, each at most the phase budget.

    Bounded work whatever the table's size: candidate jobs are read in chunks of 500
    (ended before the cutoff, not archived), and only their own phases are counted and
    checked (the (job, iteration) index), until the batches are full.
    """
    limit = cutoff(now)
    if limit is None:
        return []
    candidates = (
        Job.objects.filter(
            status__in=TERMINAL_STATUSES, finished_at__lt=limit, archive__isnull=True
        )
        .order_by("finished_at", "id")
        .values_list("id", flat=True)
    )
    budget = settings.ROLLMUX_ARCHIVE_BATCH_PHASES
    batches: list[list[int]] = []
    current: list[int] = []
    used = 0
    chunk: list[int] = []

    def take(ids: list[int]) -> bool:
        """Add the due jobs of `ids` to the batches; False once they are full."""
        nonlocal current, used
        late = set(
            PhaseRecord.objects.filter(job_id__in=ids, started_at__isnull=False)
            .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=limit))
            .values_list("job_id", flat=True)
        )
        counts = dict(
            PhaseRecord.objects.filter(job_id__in=ids)
            .values("job_id")
            .annotate(n=Count("id"))
            .values_list("job_id", "n")
        )
        for jid in ids:
            if jid in late:
                continue
            n = counts.get(jid, 0)
            if current and used + n > budget:
                batches.append(current)
                current, used = [], 0
                if len(batches) >= max_batches:
                    return False
            current.append(jid)
            used += n
        return True

    for jid in candidates.iterator(chunk_size=500):
        chunk.append(jid)
        if len(chunk) == 500:
            if not take(chunk):
                return batches
            chunk = []
    if chunk and not take(chunk):
        return batches
    if current:
        batches.append(current)
    return batches[:max_batches]


PHASE_COLUMNS = (
    "id", "job_id", "group_id", "placement_id", "iteration", "kind", "node_names", "state",
    "warm_start", "queued_at", "started_at", "finished_at", "outcome", "reported_at",
    "recovered", "due_at", "metrics", "ray_node_ids", "gpu_ids", "bytes_moved", "setup_s",
    "load_s", "work_s",
)  # fmt: skip
JSON_COLUMNS = ("node_names", "metrics", "ray_node_ids", "gpu_ids")


@dataclass
class BatchResult:
    jobs: list[int] = field(default_factory=list)
    phases: int = 0
    metrics: int = 0
    rollups: int = 0
    uris: list[str] = field(default_factory=list)


def _parquet_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import json

    out = []
    for r in rows:
        r = dict(r)
        for c in JSON_COLUMNS:
            if c in r:
                r[c] = json.dumps(r[c], sort_keys=True)
        out.append(r)
    return out


def _write(
    uri: str,
    table: str,
    rows: list[dict[str, Any]],
    when: str,
    name: str,
    tenant_of: dict[int, int],
) -> dict[int, list[str]]:
    """Write the rows one file per tenant and month; return each tenant's file URIs (a
    tenant's jobs link only their own tenant's files)."""
    parts: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        at: datetime = r[when] or r["queued_at"]
        parts[(tenant_of[r["job_id"]], at.strftime("%Y-%m"))].append(r)
    out: dict[int, list[str]] = defaultdict(list)
    for (tenant, month), part in sorted(parts.items()):
        folder = f"{table}/tenant={tenant}"
        out[tenant].append(archive_store.write_table(uri, folder, month, name, _parquet_rows(part)))
    return out


def _cuts(group_ids: set[int]) -> dict[int, Sequence[int]]:
    """Every moment the cost engine may cut a group's spans at, per group (not the days)."""
    prices = [to_us(t) for t in GpuPrice.objects.values_list("effective_from", flat=True)]
    times: dict[int, list[int | None]] = defaultdict(lambda: list(prices))
    for gid, a, b in Placement.objects.filter(group_id__in=group_ids).values_list(
        "group_id", "created_at", "ended_at"
    ):
        times[gid] += [to_us(a), None if b is None else to_us(b)]
    for gid, a, b in NodeAllocation.objects.filter(group_id__in=group_ids).values_list(
        "group_id", "start", "end"
    ):
        times[gid] += [to_us(a), None if b is None else to_us(b)]
    return {gid: sorted_cuts(times[gid]) for gid in group_ids}


def rollup_rows(
    phases: list[dict[str, Any]],
    jobs: dict[int, dict[str, Any]],
    window: tuple[int, int | None] | None = None,
) -> list[PhaseRollup]:
    """The rollups of these phases (only their parts in `window`, see `rollups.rollup`); a
    phase still running counts up to the window's end (the cost engine's: up to now)."""
    w_hi = None if window is None else window[1]
    rows = [
        PhaseRow(
            p["group_id"],
            p["job_id"],
            p["kind"],
            tuple(p["node_names"] or ()),
            to_us(p["started_at"]),
            to_us(p["finished_at"]) if p["finished_at"] is not None else w_hi,  # type: ignore[arg-type]
            (p["metrics"] or {}).get("tail_released"),
            (p["metrics"] or {}).get("rollout_speed_factor"),
        )
        for p in phases
        if p["started_at"] is not None and (p["finished_at"] is not None or w_hi is not None)
    ]
    group_ids = {r.group_id for r in rows}
    profile = set(
        Placement.objects.filter(group_id__in=group_ids, strategy=Strategy.PROFILE).values_list(
            "group_id", flat=True
        )
    )
    names = {n for r in rows for n in r.nodes}
    node_type = dict(Node.objects.filter(name__in=names).values_list("name", "gpu_type_id"))
    out = []
    for key, (busy, count) in rollup(rows, _cuts(group_ids), window).items():
        job = jobs[key.job_id]
        gpus = job["rollout_gpus"] if key.kind == PhaseKind.ROLLOUT else job["train_gpus"]
        types = {node_type.get(n) for n in key.nodes}
        out.append(
            PhaseRollup(
                day=from_us(key.seg_start_us).date(),
                job_id=key.job_id,
                group_id=key.group_id,
                tenant_id=job["tenant_id"],
                gpu_type_id=types.pop() if len(types) == 1 else None,
                kind=key.kind,
                stage="profile" if key.group_id in profile else "run",
                node_names=list(key.nodes),
                seg_start=from_us(key.seg_start_us),
                seg_end=from_us(key.seg_end_us),
                counterfactual=key.counterfactual,
                solo_scale=key.solo_scale,
                gpus=gpus,
                busy_us=busy,
                phases=count,
            )
        )
    return out


def _archive_rows(
    phases: list[dict[str, Any]],
    job_ids: list[int],
    uris: dict[int, list[str]],
    tenant_of: dict[int, int],
    now: datetime,
    metrics_n: dict[int, int],
) -> list[ArchivedJob]:
    profile_pl = set(
        Placement.objects.filter(job_id__in=job_ids, strategy=Strategy.PROFILE).values_list(
            "id", flat=True
        )
    )
    by_job: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for p in phases:
        by_job[p["job_id"]].append(p)
    out = []
    for jid in job_ids:
        mine = [p for p in by_job.get(jid, []) if p["started_at"] is not None]
        s = slo_summary(
            (
                (
                    p["placement_id"],
                    p["iteration"],
                    p["kind"],
                    to_us(p["started_at"]),
                    to_us(p["finished_at"]),
                )
                for p in mine
                if p["state"] == PhaseState.SUCCEEDED
                and p["finished_at"] is not None
                and p["placement_id"] not in profile_pl
            ),
            ((to_us(p["started_at"]), to_us(p["finished_at"])) for p in mine),
        )
        out.append(
            ArchivedJob(
                job_id=jid,
                archived_at=now,
                uris=uris.get(tenant_of[jid], []),
                phase_count=len(by_job.get(jid, [])),
                metrics_count=metrics_n.get(jid, 0),
                iterations_measured=s.iterations,
                solo_us=s.solo_us,
                had_sync=s.had_sync,
                span_start=None if s.span_start_us is None else from_us(s.span_start_us),
                span_end=None if s.span_end_us is None else from_us(s.span_end_us),
                ran_days=[[a.isoformat(), b.isoformat()] for a, b in s.ran_days],
                first_day=s.ran_days[0][0] if s.ran_days else None,
                last_day=s.ran_days[-1][1] if s.ran_days else None,
            )
        )
    return out


def archive_jobs(job_ids: list[int], *, now: datetime, uri: str | None = None) -> BatchResult:
    """Archive these jobs' phase records and iteration metrics (see the module's steps)."""
    uri = uri or settings.ROLLMUX_ARCHIVE_URI
    limit = cutoff(now)
    if limit is None or not job_ids:
        return BatchResult()
    ids = sorted(
        Job.objects.filter(
            pk__in=job_ids,
            status__in=TERMINAL_STATUSES,
            finished_at__lt=limit,
            archive__isnull=True,
        ).values_list("id", flat=True)
    )
    if not ids:
        return BatchResult()
    phases = list(PhaseRecord.objects.filter(job_id__in=ids).order_by("id").values(*PHASE_COLUMNS))
    if any(
        p["started_at"] is not None and (p["finished_at"] is None or p["finished_at"] >= limit)
        for p in phases
    ):
        return BatchResult()  # a phase is too recent (or never ended): not this job's time
    metric_cols = (
        "id",
        "job_id",
        "placement_id",
        "iteration",
        *IterationMetrics.METRICS,
        "recorded_at",
    )
    metrics = list(
        IterationMetrics.objects.filter(job_id__in=ids).order_by("id").values(*metric_cols)
    )
    jobs: dict[int, dict[str, Any]] = {
        j["id"]: dict(j)
        for j in Job.objects.filter(pk__in=ids).values(
            "id", "tenant_id", "rollout_gpus", "train_gpus"
        )
    }
    # 2. the files first: a failed write raises before anything is deleted
    name = archive_store.batch_name(ids)
    tenant_of = {jid: j["tenant_id"] for jid, j in jobs.items()}
    uris: dict[int, list[str]] = defaultdict(list)
    for table, rows, when in (
        ("phase_records", phases, "started_at"),
        ("iteration_metrics", metrics, "recorded_at"),
    ):
        for tenant, files in _write(uri, table, rows, when, name, tenant_of).items():
            uris[tenant] += files
    metrics_n: dict[int, int] = defaultdict(int)
    for m in metrics:
        metrics_n[m["job_id"]] += 1
    archived = _archive_rows(phases, ids, uris, tenant_of, now, metrics_n)
    # 3. one short transaction: rollups and archive rows in, exactly the rows read out
    # (under the watermark's row lock: the days before it are rolled up already, by
    # services.rollup_days, which takes the same lock; only the days from it are added)
    with transaction.atomic():
        mark = RollupWatermark.objects.select_for_update().filter(pk=1).first()
        lo = None if mark is None else to_us(datetime(*mark.day.timetuple()[:3], tzinfo=UTC))
        rollups = rollup_rows(phases, jobs, None if lo is None else (lo, None))
        ArchivedJob.objects.bulk_create(archived)  # a job archived meanwhile: IntegrityError
        PhaseRollup.objects.bulk_create(rollups, batch_size=2000)
        phase_ids = [p["id"] for p in phases]
        metric_ids = [m["id"] for m in metrics]
        deleted_p = PhaseRecord.objects.filter(job_id__in=ids).exclude(id__in=phase_ids).exists()
        n_p, _ = PhaseRecord.objects.filter(id__in=phase_ids).delete()
        n_m, _ = IterationMetrics.objects.filter(id__in=metric_ids).delete()
        if deleted_p or n_p != len(phase_ids) or n_m != len(metric_ids):
            raise ArchiveCountMismatch(f"jobs {ids}: rows changed while archiving; retry")
    files = sorted({f for fs in uris.values() for f in fs})
    log.info(
        "archived %d phases, %d metrics of %d jobs to %s",
        len(phases),
        len(metrics),
        len(ids),
        files,
    )
    return BatchResult(
        jobs=ids, phases=len(phases), metrics=len(metrics), rollups=len(rollups), uris=files
    )


def purge_rollups(now: datetime, *, limit: int = DELETE_BATCH) -> int:
    """Delete rollups older than the rollup retention, at most `limit` rows."""
    if not settings.ROLLMUX_ROLLUP_RETENTION_MONTHS:
        return 0
    ids = list(
        PhaseRollup.objects.filter(day__lt=rollup_cutoff(now)).values_list("id", flat=True)[:limit]
    )
    return PhaseRollup.objects.filter(id__in=ids).delete()[0] if ids else 0


def purge_audit(now: datetime, *, limit: int = DELETE_BATCH) -> int:
    """Delete audit entries older than ROLLMUX_AUDIT_RETENTION_DAYS, at most `limit` rows."""
    from rollmux_web.audit.models import AuditEntry

    days = settings.ROLLMUX_AUDIT_RETENTION_DAYS
    if not days:
        return 0
    ids = list(
        AuditEntry.objects.filter(at__lt=now - timedelta(days=days)).values_list("id", flat=True)[
            :limit
        ]
    )
    return AuditEntry.objects.filter(id__in=ids).delete()[0] if ids else 0
