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
from datetime import datetime

from django.db.models import DateTimeField, F, Q, Sum, Value
from django.db.models.functions import Coalesce, Greatest, Least

from rollmux_web.workflow.models import PhaseRecord, PhaseRollup, rolled_up_to


def busy_gpu_seconds(
    *, tenant_ids: Iterable[int], start: datetime, end: datetime
) -> dict[int, dict[str, float]]:
    """Return per tenant id the busy GPU-seconds per phase kind over [start, end)."""
    ids = list(tenant_ids)
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    mark = rolled_up_to()  # raw rows from the watermark on, rollups before it
    raw_start = start if mark is None else max(start, mark)
    end_v = Value(end, output_field=DateTimeField())
    rows = (
        (
            PhaseRecord.objects.filter(job__tenant_id__in=ids, started_at__isnull=False)
            .filter(started_at__lt=end)
            .exclude(finished_at__lte=raw_start)
            .values("job__tenant_id", "kind", "job__rollout_gpus", "job__train_gpus")
            .annotate(
                busy=Sum(
                    Least(Coalesce(F("finished_at"), end_v), end_v)
                    - Greatest(F("started_at"), Value(raw_start, output_field=DateTimeField()))
                )
            )
        )
        if raw_start < end
        else ()
    )
    for row in rows:
        if row["busy"] is None:
            continue
        gpus = row["job__rollout_gpus"] if row["kind"] == "rollout" else row["job__train_gpus"]
        out[row["job__tenant_id"]][row["kind"]] += max(row["busy"].total_seconds(), 0.0) * gpus
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
        .filter(after if mark is None else Q(seg_start__lt=mark) | after)
        .values("tenant_id", "kind")
        .annotate(us=Sum(F("busy_us") * F("gpus")))
    )
    return [(r["tenant_id"], r["kind"], int(r["us"] or 0)) for r in rows]


__all__ = ["archived_busy_gpu_us", "busy_gpu_seconds"]
