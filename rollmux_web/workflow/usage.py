"""Busy GPU time per tenant from phase records and rollups (archived jobs' days, and every
job's days before the rollup watermark: workflow.services.rollup_days).

The one reader of "how much did a tenant use" over a range, on either side of the retention
boundary (issue 25): budgets and quotas (`quotas.selectors.busy_gpu_hours_this_month`) and
fair share read it. Busy time belongs to exactly one job (no idle split): a phase's time
x the job's GPUs of that phase kind (rollout GPUs for a rollout, training GPUs otherwise).
A running phase counts up to `end`.

Rollups are read with the cut of [start, end) made at their segment's start: exact for
ranges that start and end at UTC midnights (every report, a month's budgets), and for
any range once its start is after the archived phases.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.db.models import DateTimeField, F, Q, Sum, Value
from django.db.models.functions import Coalesce, Greatest, Least

from rollmux_web.id_sql import in_ids
from rollmux_web.jobs.models import Job
from rollmux_web.workflow.models import PhaseRecord, PhaseRollup, rolled_up_to


def busy_gpu_seconds(
    *, tenant_ids: Iterable[int], start: datetime, end: datetime
) -> dict[int, dict[str, float]]:
    """Return per tenant id the busy GPU-seconds per phase kind over [start, end)."""
    ids = list(tenant_ids)
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    mark = rolled_up_to()  # raw rows from the watermark on, rollups before it
    raw_start = start if mark is None else max(start, mark)
    if raw_start < end:
        # summed per job in the database, then per (tenant, kind, GPUs) here: the phases
        # after the watermark are a few jobs' (the live ones'), and joining them to the
        # jobs before summing made PostgreSQL hash the whole jobs table (~100,000 rows at a
        # fleet's size) on every scrape of /metrics and every /quotas/. Intervals are summed
        # exactly (microseconds) on both sides, so the figures are the same.
        end_v = Value(end, output_field=DateTimeField())
        per_job = (
            PhaseRecord.objects.filter(started_at__isnull=False, started_at__lt=end)
            .exclude(finished_at__lte=raw_start)
            .order_by()
            .values("job_id", "kind")
            .annotate(
                busy=Sum(
                    Least(Coalesce(F("finished_at"), end_v), end_v)
                    - Greatest(F("started_at"), Value(raw_start, output_field=DateTimeField()))
                )
            )
            .values_list("job_id", "kind", "busy")
        )
        busy = [row for row in per_job if row[2] is not None]
        jobs = {
            jid: (tid, roll, train)
            for jid, tid, roll, train in Job.objects.filter(
                in_ids("id", {jid for jid, _, _ in busy}), tenant_id__in=ids
            )
            .order_by()
            .values_list("pk", "tenant_id", "rollout_gpus", "train_gpus")
        }
        summed: dict[tuple[int, str, int, int], timedelta] = defaultdict(timedelta)
        for jid, kind, took in busy:
            if jid in jobs:
                tid, roll, train = jobs[jid]
                summed[(tid, kind, roll, train)] += took
        for (tid, kind, roll, train), took in sorted(summed.items()):
            gpus = roll if kind == "rollout" else train
            out[tid][kind] += max(took.total_seconds(), 0.0) * gpus
    for tid, kind, us in archived_busy_gpu_us(tenant_ids=ids, start=start, end=end, mark=mark):
        out[tid][kind] += us / 1_000_000
    return {tid: dict(kinds) for tid, kinds in out.items()}


def archived_busy_gpu_us(
    *, tenant_ids: Iterable[int], start: datetime, end: datetime, mark: datetime | None = None
) -> list[tuple[int, str, int]]:
    """(tenant, kind, busy GPU-microseconds) of the rolled-up phases in [start, end): the
    archived jobs' and every job's before the watermark `mark` (read by the caller)."""
    after = Q(job__archive__isnull=False)
    rows = (
        PhaseRollup.objects.filter(
            tenant_id__in=list(tenant_ids), counterfactual=True, seg_start__gte=start
        )
        .filter(Q(seg_start__lt=end))
        # (a segment lies in one UTC day, its `day`: the same rows, found by the
        # (tenant, day) index rather than a scan of every rollup row)
        .filter(day__gte=start.astimezone(UTC).date(), day__lte=end.astimezone(UTC).date())
        .filter(after if mark is None else Q(seg_start__lt=mark) | after)
        .order_by()
        .values("tenant_id", "kind")
        .annotate(us=Sum(F("busy_us") * F("gpus")))
    )
    return [(r["tenant_id"], r["kind"], int(r["us"] or 0)) for r in rows]


__all__ = ["archived_busy_gpu_us", "busy_gpu_seconds"]
