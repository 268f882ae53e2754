"""Record a job's training metrics per iteration (the points of its reward curve).

Called by the controller when it applies a phase's end, in that transaction, after the
claim: a report applies at most once, and the write is an idempotent upsert anyway (a
replay writes the same values). One statement, and none at all for a phase that reported
no training metric (`emulated`), so the switch path of those keeps its round trips.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import connection

from rollmux_web.ports import TRAINING_METRICS
from rollmux_web.workflow.models import IterationMetrics


def training_metrics_of(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Return the training metrics among a phase's metrics (finite numbers only: a NaN
    loss says nothing a curve can draw, and JSON has no NaN)."""
    out: dict[str, float] = {}
    for name in TRAINING_METRICS:
        value = metrics.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[name] = float(value)
    return out


def iteration_metrics_record(
    *,
    job_id: int,
    placement_id: int,
    iteration: int,
    metrics: Mapping[str, Any],
    now: datetime,
) -> bool:
    """Store one phase's training metrics with its job's iteration; False if it had none.

    INSERT ... ON CONFLICT (job, iteration) DO UPDATE (PostgreSQL, and SQLite >= 3.24):
    - the same placement (the rollout's reward, then the training's loss of an iteration):
      each name the phase reported replaces the stored one, the others stay;
    - a later placement (a resubmitted or moved job running the iteration again): its values
      replace the row, names it has not reported yet become empty (the latest attempt wins,
      never a mix of two attempts);
    - an earlier placement (a report that arrives after its job moved on): ignored.
    Placement ids grow with each attempt, so "later" is a larger id.
    """
    values = training_metrics_of(metrics)
    if not values:
        return False
    meta = IterationMetrics._meta
    qn = connection.ops.quote_name
    table = qn(meta.db_table)
    names = list(TRAINING_METRICS)
    cols = ["job_id", "placement_id", "iteration", *names, "recorded_at"]
    recorded_at = meta.get_field("recorded_at").get_db_prep_save(now, connection)
    params = [job_id, placement_id, iteration, *(values.get(n) for n in names), recorded_at]
    newer = f"EXCLUDED.{qn('placement_id')} > {table}.{qn('placement_id')}"
    sets = [
        f"{qn(n)} = CASE WHEN {newer} THEN EXCLUDED.{qn(n)} "
        f"ELSE COALESCE(EXCLUDED.{qn(n)}, {table}.{qn(n)}) END"
        for n in names
    ]
    sets += [f"{qn(c)} = EXCLUDED.{qn(c)}" for c in ("placement_id", "recorded_at")]
    sql = (
        f"INSERT INTO {table} ({', '.join(qn(c) for c in cols)})"
        f" VALUES ({', '.join(['%s'] * len(cols))})"
        f" ON CONFLICT ({qn('job_id')}, {qn('iteration')}) DO UPDATE SET {', '.join(sets)}"
        f" WHERE EXCLUDED.{qn('placement_id')} >= {table}.{qn('placement_id')}"
    )
    with connection.cursor() as cur:
        cur.execute(sql, params)
    return True
