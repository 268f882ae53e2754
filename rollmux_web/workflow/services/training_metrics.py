"""Record a job's training metrics per iteration (the points of its reward curve).

The controller writes them in the statement that claims the phase record (on PostgreSQL
the claim's UPDATE and this upsert are one statement: `locks.claim_phase`, `upsert_sql`
with the claimed row as its source), so a report applies at most once and a phase end
with training metrics costs no extra round trip; the write is an idempotent upsert anyway
(a replay writes the same values). A phase that reported no training metric (`emulated`)
writes nothing.
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


def upsert_sql(
    values: Mapping[str, float], now: datetime, *, source: str | None = None
) -> tuple[str, list[Any]]:
    """Return the upsert of one phase's training metrics (`values`, non-empty) and its
    parameters, the job, placement and iteration read from `source` (a table expression
    with those columns: the claimed phase record), or, without one, taken as the first
    three parameters, to fill in.

    INSERT ... ON CONFLICT (job, iteration) DO UPDATE (PostgreSQL, and SQLite >= 3.24):
    - the same placement (the rollout's reward, then the training's loss of an iteration):
      each name the phase reported replaces the stored one, the others stay;
    - a later placement (a resubmitted or moved job running the iteration again): its values
      replace the row, names it has not reported yet become empty (the latest attempt wins,
      never a mix of two attempts);
    - an earlier placement (a report that arrives after its job moved on): ignored.
    Placement ids grow with each attempt, so "later" is a larger id.
    """
    meta = IterationMetrics._meta
    qn = connection.ops.quote_name
    table = qn(meta.db_table)
    names = list(TRAINING_METRICS)
    cols = ["job_id", "placement_id", "iteration", *names, "recorded_at"]
    recorded_at = meta.get_field("recorded_at").get_db_prep_save(now, connection)
    params: list[Any] = [*(values.get(n) for n in names), recorded_at]
    newer = f"EXCLUDED.{qn('placement_id')} > {table}.{qn('placement_id')}"
    sets = [
        f"{qn(n)} = CASE WHEN {newer} THEN EXCLUDED.{qn(n)} "
        f"ELSE COALESCE(EXCLUDED.{qn(n)}, {table}.{qn(n)}) END"
        for n in names
    ]
    sets += [f"{qn(c)} = EXCLUDED.{qn(c)}" for c in ("placement_id", "recorded_at")]
    if source is None:
        rows = f" VALUES ({', '.join(['%s'] * len(cols))})"
    else:  # typed: a parameter in a SELECT list has no column to take its type from
        typed = [f"%s::{meta.get_field(c).db_type(connection)}" for c in (*names, "recorded_at")]
        keys = ", ".join(qn(c) for c in ("job_id", "placement_id", "iteration"))
        rows = f" SELECT {keys}, {', '.join(typed)} FROM {source}"
    sql = (
        f"INSERT INTO {table} ({', '.join(qn(c) for c in cols)}){rows}"
        f" ON CONFLICT ({qn('job_id')}, {qn('iteration')}) DO UPDATE SET {', '.join(sets)}"
        f" WHERE EXCLUDED.{qn('placement_id')} >= {table}.{qn('placement_id')}"
    )
    return sql, params


def iteration_metrics_record(
    *,
    job_id: int,
    placement_id: int,
    iteration: int,
    metrics: Mapping[str, Any],
    now: datetime,
) -> bool:
    """Store one phase's training metrics with its job's iteration in one statement
    (`upsert_sql`); False if it had none."""
    values = training_metrics_of(metrics)
    if not values:
        return False
    sql, params = upsert_sql(values, now)
    with connection.cursor() as cur:
        cur.execute(sql, [job_id, placement_id, iteration, *params])
    return True
