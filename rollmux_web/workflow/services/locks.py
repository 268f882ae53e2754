"""The locks of the live workflow and the one-round-trip claim of a phase record.

Which rows each transaction locks, and in which order, is described in workers/README.md
("Locking"); the helpers here are the only places that take them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import Field
from django.db.models.expressions import RawSQL

from rollmux_web.workflow.models import ExecutionGroup, PhaseRecord, PhaseState
from rollmux_web.workflow.services.training_metrics import upsert_sql

log = logging.getLogger(__name__)

PLAN_LOCK_KEY = 0x524F4C4C  # "ROLL": the advisory lock id of the planner
ACTIVE_PHASE_STATES = (PhaseState.RUNNING,)

_sqlite_plan_lock = threading.Lock()
_sqlite_controller_lock = threading.RLock()


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


@contextlib.contextmanager
def controller_serial() -> Iterator[None]:
    """Serialise controller transactions on SQLite (row locks do it on PostgreSQL)."""
    if is_postgres():
        yield
        return
    with _sqlite_controller_lock:
        yield


@contextlib.contextmanager
def plan_session_lock() -> Iterator[bool]:
    """Yield whether this pass may plan: True once it holds the planner lock for its whole
    length (its batches commit one by one inside it), False when another pass holds it.

    PostgreSQL: a session advisory lock, released at the end (or when the connection
    closes: a killed worker's lock dies with it). SQLite (the embedded default, one
    process): a process lock, and the controller's lock too (SQLite has one writer).
    """
    if is_postgres():
        with connection.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [PLAN_LOCK_KEY])
            got = bool(cur.fetchone()[0])
        try:
            yield got
        finally:
            if got:
                try:
                    with connection.cursor() as cur:
                        cur.execute("SELECT pg_advisory_unlock(%s)", [PLAN_LOCK_KEY])
                except DatabaseError:  # (an outer transaction broke): closing releases it
                    log.warning("could not release the planner lock; closing the connection")
                    connection.close()
        return
    got = _sqlite_plan_lock.acquire(blocking=False)
    try:
        if not got:
            yield False
            return
        with controller_serial():
            yield True
    finally:
        if got:
            _sqlite_plan_lock.release()


def planner_try_lock() -> bool:
    """Try to take the planner's lock until this transaction ends; False when a planning
    pass holds it (the caller then does not place anything now).

    A move (services.moves) places a job from inside the controller's transaction: with
    this lock no planning pass decides on a snapshot the move makes stale. It never waits,
    so it cannot deadlock with a pass that waits for the group row the caller holds.
    PostgreSQL: a transaction-level advisory lock on the planner's key (it conflicts with
    the pass's session lock). SQLite: the pass also holds the controller's lock, which the
    caller holds, so no pass runs now.
    """
    if not is_postgres():
        return True
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [PLAN_LOCK_KEY])
        return bool(cur.fetchone()[0])


def lock_group(group_id: int, *, phase_event: bool = False) -> ExecutionGroup:
    """Lock the group row for this transaction and return it.

    For a phase event (`phase_event=True`) the same statement also lets the transaction's
    commit return before its WAL is flushed on PostgreSQL (`set_config(...)`, i.e. SET LOCAL
    synchronous_commit = off, folded into the SELECT to save a round trip on the switch
    path). A database crash can lose the last few milliseconds of such commits; what they
    recorded is still on the job's host (its stored reports) and `reconcile` re-applies it.
    """
    qs = ExecutionGroup.objects.select_for_update()
    if phase_event and is_postgres() and settings.ROLLMUX_ASYNC_COMMIT_PHASE_EVENTS:
        qs = qs.annotate(_async_commit=RawSQL("set_config('synchronous_commit', 'off', true)", ()))
    return qs.get(pk=group_id)


@dataclass(frozen=True)
class ClaimedPhase:
    """The fields of a claimed phase record the controller needs."""

    pk: int
    job_id: int
    placement_id: int
    kind: str
    iteration: int


def claim_phase(
    phase_id: int,
    group_id: int,
    fields: dict[str, Any],
    *,
    training_metrics: Mapping[str, float] | None = None,
) -> ClaimedPhase | None:
    """Apply a phase's end to its record if it is still active; None if it is not.

    One round trip: `UPDATE ... WHERE state IN (active) RETURNING ...` (PostgreSQL and
    SQLite >= 3.35). The conditional UPDATE is what makes a report apply at most once; a
    record without a start stamp gets the end stamp as its start. `training_metrics`
    (`training_metrics.training_metrics_of`, the phase's iteration's points) are upserted
    for the claimed record only: on PostgreSQL in the same statement (the UPDATE a
    data-modifying WITH, the upsert reading its row), elsewhere in a second one.
    """
    meta = PhaseRecord._meta
    qn = connection.ops.quote_name

    def column(name: str) -> Field[Any, Any]:
        return cast("Field[Any, Any]", meta.get_field(name))

    sets = [f"{qn(str(column(name).column))} = %s" for name in fields]
    params = [column(name).get_db_prep_save(value, connection) for name, value in fields.items()]
    if "started_at" not in fields:  # (the right-hand side of SET sees the old row)
        sets.append(f"{qn('started_at')} = COALESCE({qn('started_at')}, %s)")
        params.append(column("finished_at").get_db_prep_save(fields["finished_at"], connection))
    states = ", ".join(["%s"] * len(ACTIVE_PHASE_STATES))
    returned = [qn(c) for c in ("job_id", "placement_id", "kind", "iteration")]
    sql = (
        f"UPDATE {qn(meta.db_table)} SET {', '.join(sets)}"
        f" WHERE {qn('id')} = %s AND {qn('group_id')} = %s AND {qn('state')} IN ({states})"
        f" RETURNING {', '.join(returned)}"
    )
    params += [phase_id, group_id, *ACTIVE_PHASE_STATES]
    recorded = fields["reported_at"]  # the metrics' stamp: the controller's now
    after = training_metrics and not is_postgres()  # (SQLite: no UPDATE inside WITH)
    if training_metrics and not after:  # one statement: the upsert reads the claimed row
        upsert, more = upsert_sql(training_metrics, recorded, source="claimed")
        sql = f"WITH claimed AS ({sql}), metrics AS ({upsert}) SELECT * FROM claimed"
        params += more
    with connection.cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
        if row is not None and training_metrics and after:
            upsert, more = upsert_sql(training_metrics, recorded)
            cur.execute(upsert, [int(row[0]), int(row[1]), int(row[3]), *more])
    if row is None:
        return None
    return ClaimedPhase(phase_id, int(row[0]), int(row[1]), str(row[2]), int(row[3]))
