"""The planning pass's writer: a batch's FIT decisions, persisted in one statement per table.

Both the planning pass (services.planning, per batch of queued jobs) and a live move
(services.moves, one decision at an iteration boundary) write a placement through here,
so a moved job is placed exactly as a queued one. A group the snapshot placed a job into
is locked and re-checked first; when a member left it meanwhile the writer raises
`StaleSnapshot` and the caller reads the cluster again (or gives the move up).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.db.models import Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from rollmux_web import events, metrics
from rollmux_web.inventory.models import Node
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow import snapshot
from rollmux_web.workflow.models import ExecutionGroup, NodeAllocation, Placement
from rollmux_web.workflow.services.effects import Effects
from rollmux_web.workflow.services.groups import order_context, phase_rows, runtime_load
from rollmux_web.workflow.services.locks import is_postgres
from rollmux_web.workflow.services.orders import Pools, phase_order
from scheduler.group_runtime import GroupRuntime, PhaseStart
from scheduler.model import ClusterState, JobProfile, Member, PlacementResult
from scheduler.model import Placement as PlacementDecision

GROUP_IDS_BLOCK = 32  # new group ids taken from the sequence at once


class StaleSnapshot(Exception):
    """A group the snapshot placed a job into was released meanwhile (its last member left
    after the snapshot was read): read the cluster again."""


def node_ids() -> Callable[[str], int]:
    """Return a node-id-by-name lookup (one query; read again for a node added since)."""
    nodes = dict(Node.objects.values_list("name", "pk"))

    def node_id(name: str) -> int:
        if name not in nodes:  # a node added meanwhile (a snapshot read again)
            nodes.update(Node.objects.values_list("name", "pk"))
        return nodes[name]

    return node_id


def placement_persist(
    job: Job,
    profile: JobProfile,
    result: PlacementResult,
    state: ClusterState,
    now: datetime,
    effects: Effects,
) -> ClusterState:
    """Persist one FIT decision at once (a live move's new placement: services.moves) and
    return the snapshot with it applied; raises StaleSnapshot when its group changed under
    the snapshot."""
    writes = PlanWriter(now, node_ids(), queued_since([job]))
    state = writes.placement(job, profile, result, state)
    writes.flush(effects)
    return state


def queued_since(jobs: list[Job]) -> dict[int, datetime]:
    """Return when each job entered the queue: its submission, or for a resubmitted job the
    end of the placement that put it back (one query for the batch)."""
    since = {j.pk: j.submitted_at for j in jobs}
    again = {j.pk: j.attempts for j in jobs if j.attempts}
    if again:
        for job_id, attempt, ended in Placement.objects.filter(job_id__in=list(again)).values_list(
            "job_id", "attempt", "ended_at"
        ):
            if attempt == again[job_id] and ended is not None:
                since[job_id] = ended
    return since


class PlanWriter:
    """A batch's decisions, written at its end (`flush`) in one statement per table.

    A group is locked (and checked against the snapshot) the first time the batch places a
    job in it; its runtime is loaded then and kept for the batch's other joiners. Placements,
    their pinned nodes, node allocations, the phases the runtimes start, the jobs' rows and
    the runtimes are written by `flush`: at the batch's end, and before a snapshot is read
    again (it must see them). The exclusion constraint on allocations and the partial
    unique index (one open allocation per node) still make a double allocation impossible:
    the flush fails and the whole batch rolls back.
    """

    def __init__(
        self, now: datetime, node_id: Callable[[str], int], queued_since: dict[int, datetime]
    ) -> None:
        self.now = now
        self.node_id = node_id  # a node's id by name (`node_ids`)
        self.queued_since = queued_since
        self.groups: dict[int, tuple[ExecutionGroup, GroupRuntime]] = {}
        self._group_ids: list[int] = []  # taken from the sequence, not used yet
        self._clear()

    def _clear(self) -> None:
        # (placement, its job, rollout node ids, training node ids)
        self.placements: list[tuple[Placement, Job, list[int], list[int]]] = []
        self.allocations: list[NodeAllocation] = []
        self.starts: list[tuple[int, list[PhaseStart]]] = []  # group id, the phases it started
        # per started phase (job, kind, iteration): its order's pools and tail nodes
        self.orders: dict[tuple[int, str, int], tuple[Pools, tuple[str, ...]]] = {}
        self.reasons: list[Job] = []  # waiting jobs whose reason changed
        self.touched: set[int] = set()  # groups whose runtime changed
        self.new_groups: list[ExecutionGroup] = []  # opened by this batch, not written yet

    def _new_group(self) -> ExecutionGroup:
        """Return a new group with its id (inserted by `flush`: its ids are taken from the
        table's sequence in blocks, so a batch opening many groups writes them at once)."""
        if not is_postgres():
            return ExecutionGroup.objects.create()
        if not self._group_ids:
            table = ExecutionGroup._meta.db_table
            with connection.cursor() as cur:
                cur.execute(
                    "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                    [table, GROUP_IDS_BLOCK],
                )
                self._group_ids = [row[0] for row in cur.fetchall()]
        group = ExecutionGroup(pk=self._group_ids.pop(0), created_at=timezone.now())
        self.new_groups.append(group)
        return group

    def reason(self, job: Job, reason: str) -> None:
        reason = reason[:500]
        if job.reason != reason:
            job.reason = reason
            self.reasons.append(job)

    def group(self, placement: PlacementDecision) -> tuple[ExecutionGroup, GroupRuntime]:
        """Return the placement's group (locked, or new) and its runtime."""
        if placement.group_id is None:
            group = self._new_group()
        else:
            gid = int(placement.group_id)
            if gid in self.groups:  # locked by this batch: it changed only by its placements
                return self.groups[gid]
            kept = (set(placement.rollout_nodes) | set(placement.train_nodes)) - set(
                placement.new_nodes
            )
            group = lock_group_held(gid, kept)
            if group.released_at is not None or group.held != len(kept):
                raise StaleSnapshot(group.pk)  # a member left after the snapshot: nodes went
        self.groups[group.pk] = (group, runtime_load(group))
        return self.groups[group.pk]

    def placement(
        self, job: Job, profile: JobProfile, result: PlacementResult, state: ClusterState
    ) -> ClusterState:
        """Record a FIT decision and return the snapshot with it applied."""
        from scheduler.planner import apply_placement

        placement = result.placement
        assert placement is not None  # a FIT carries its placement
        group, runtime = self.group(placement)
        # the rest of the batch sees the member as the next snapshot will (held_young)
        planned = snapshot.held_young(profile, iterations=job.iterations)
        state = apply_placement(state, planned, placement, group_id=str(group.pk))
        slowdown = result.predicted_slowdown.get(profile.id, 1.0)
        row = Placement(
            job=job,
            group=group,
            attempt=job.attempts + 1,
            strategy=placement.strategy.value,
            marginal_cost_per_hour=Decimal(str(round(result.marginal_cost_per_hour, 4))),
            predicted_slowdown=slowdown,
        )
        node_id = self.node_id
        self.placements.append(
            (
                row,
                job,
                [node_id(n) for n in placement.rollout_nodes],
                [node_id(n) for n in placement.train_nodes],
            )
        )
        self.allocations += [
            NodeAllocation(node_id=node_id(n), group=group, start=self.now)
            for n in placement.new_nodes
        ]
        # the wait since submission, or since the resubmission that put it back in the queue
        waited = (self.now - self.queued_since.get(job.pk, job.submitted_at)).total_seconds()
        slo_name = job.slo_class.name
        transaction.on_commit(lambda: metrics.observe_wait(slo_name, waited))
        job.status = JobStatus.PLACED
        job.placed_at = self.now
        job.attempts += 1
        job.reason = (
            f"placed in group {group.pk} by {placement.strategy.value.replace('_', ' ')}"
            f" (predicted slowdown {slowdown:.2f})"
        )
        events.publish(
            events.JOB_PLACED,
            job=job,
            detail={
                "group": group.pk,
                "strategy": placement.strategy.value.replace("_", " "),
                "predicted_slowdown": slowdown,
            },
        )
        # the member as decided (converters.member(row) would read the nodes back); its
        # profile is the one the planner placed (t_sync_s included)
        member = Member(
            job=profile,
            rollout_nodes=tuple(sorted(placement.rollout_nodes)),
            train_nodes=tuple(sorted(placement.train_nodes)),
        )
        runtime.admit(member, iterations=job.iterations, start_iteration=job.iterations_done)
        starts = runtime.start_ready()
        if starts:
            self.starts.append((group.pk, starts))
            for start in starts:  # what each order needs of the runtime as it is now
                job_id, kind = int(start.job_id), start.kind.value
                self.orders[(job_id, kind, start.iteration)] = order_context(runtime, job_id, kind)
        self.touched.add(group.pk)
        return state

    def flush(self, effects: Effects) -> None:
        """Write what was recorded since the last flush."""
        for group in self.new_groups:
            group.runtime_state = self.groups[group.pk][1].to_dict()
        rows_insert(self.new_groups)  # (their runtimes as JSON: not as one array)
        new = {g.pk for g in self.new_groups}
        rows = Placement.objects.bulk_create([p for p, _, _, _ in self.placements])
        # the pinned nodes: one INSERT per pool (`.set()` would read the empty sets first)
        rollout, train = Placement.rollout_nodes.through, Placement.train_nodes.through
        rollout.objects.bulk_create(
            [
                rollout(placement_id=row.pk, node_id=n)
                for row, (_, _, roll, _) in zip(rows, self.placements, strict=True)
                for n in roll
            ]
        )
        train.objects.bulk_create(
            [
                train(placement_id=row.pk, node_id=n)
                for row, (_, _, _, tr) in zip(rows, self.placements, strict=True)
                for n in tr
            ]
        )
        NodeAllocation.objects.bulk_create(self.allocations)
        started = self._phases_record(effects)
        placed = [job for _, job, _, _ in self.placements]
        stamp = timezone.now()
        for job in placed:
            job.updated_at = stamp
            if job.pk in started:  # its first phase runs (a resubmitted job keeps its start)
                job.status, job.reason, job.updated_at = JobStatus.RUNNING, "", self.now
                job.started_at = job.started_at or self.now
        rows_update(
            placed, ["status", "placed_at", "attempts", "reason", "started_at", "updated_at"]
        )
        for job in self.reasons:
            job.updated_at = stamp
        rows_update(self.reasons, ["reason", "updated_at"])
        touched = [self.groups[gid] for gid in sorted(self.touched - new)]
        for group, runtime in touched:
            group.runtime_state = runtime.to_dict()
        rows_update([g for g, _ in touched], ["runtime_state"])
        self._clear()

    def _phases_record(self, effects: Effects) -> set[int]:
        """Record the phases the runtimes started (one INSERT), queue their dispatch; return
        the ids of this batch's jobs that started one."""
        ours = {p.job_id: p for p, _, _, _ in self.placements}
        others = {
            gid for gid, starts in self.starts if any(int(s.job_id) not in ours for s in starts)
        }
        open_rows: dict[int, dict[int, Placement]] = {gid: {} for gid in others}
        if others:  # a start of a member placed before this batch (rare)
            for p in Placement.objects.filter(
                group_id__in=others, ended_at__isnull=True
            ).select_related("job"):
                open_rows[p.group_id][p.job_id] = p
        rows = []
        for gid, starts in self.starts:
            group, _ = self.groups[gid]
            rows += phase_rows(group, starts, open_rows.get(gid, {}) | ours, self.now)
        rows_insert(rows)  # (four JSON columns each: not as UNNEST arrays)
        created = rows
        jobs = {p.job_id: p.job for p in ours.values()}
        for phase in created:
            job = jobs.get(phase.job_id) or open_rows[phase.group_id][phase.job_id].job
            pools, tail = self.orders[(phase.job_id, phase.kind, phase.iteration)]
            effects.orders.append(phase_order(phase, job, pools, tail_nodes=tail))
        earlier = [
            p.job_id for p in created if p.job_id not in ours
        ]  # members placed before: as groups.phases_start does
        if earlier:
            Job.objects.filter(pk__in=earlier, status=JobStatus.PLACED).update(
                status=JobStatus.RUNNING,
                started_at=Coalesce("started_at", Value(self.now)),
                reason="",
                updated_at=self.now,
            )
        return {p.job_id for p in created if p.job_id in ours}


def rows_update(rows: Sequence[models.Model], fields: list[str]) -> None:
    """Write `fields` of `rows` (of one model) in one statement.

    On PostgreSQL an UPDATE ... FROM the rows sent as one JSON array (`_json_rows`): Django's
    `bulk_update` builds a CASE per field and row, whose expressions cost more to compile
    than the statement to run, and one parameter per value (a VALUES list) made psycopg
    quote each value in Python and parse a new statement per row count.
    """
    if not rows:
        return
    model = type(rows[0])
    if not is_postgres():
        model._default_manager.bulk_update(rows, fields)
        return
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    cols = [meta.get_field(f) for f in fields]
    assert all(isinstance(c, models.Field) for c in cols)
    columns = [pk, *(c for c in cols if isinstance(c, models.Field))]
    db = connections[DEFAULT_DB_ALIAS]  # (not the proxy: one look-up, not one per value)
    data = [
        [_json_value(f, f.get_db_prep_value(getattr(obj, f.attname), db)) for f in columns]
        for obj in rows
    ]
    qn = connection.ops.quote_name
    pk_col = qn(str(pk.column))
    names = [qn(str(f.column)) for f in columns[1:]]
    sql = (
        f"UPDATE {qn(str(meta.db_table))} AS t SET "
        + ", ".join(f"{n} = v.{n}" for n in names)
        + f" FROM (SELECT {_json_columns(columns)} FROM jsonb_array_elements(%s::jsonb) AS e)"
        + f" AS v WHERE t.{pk_col} = v.{pk_col}"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [_json_rows(data)])


def rows_insert(rows: Sequence[models.Model]) -> None:
    """Insert `rows` (of one model; pks all set or all unset; foreign keys set by id) in one
    statement, as `bulk_create` does (the same columns and values: `pre_save` stamps,
    defaults, None as SQL NULL), and set the pks the database gave.

    On PostgreSQL an INSERT ... SELECT from the rows sent as one JSON array (`_json_rows`):
    Django's `bulk_create` sends each column as one array (`UNNEST`), and psycopg's
    client-side binding escapes every element of a text or JSON array in Python (one
    `re.sub` template per quote in a JSON document: a group's runtime, a phase's node
    names), which cost more CPU than the statement: at 25 rows 3x for new groups, 1.3x
    for phases (no gain for rows of numbers and times: left to `bulk_create`).
    """
    if not rows:
        return
    model = type(rows[0])
    if not is_postgres():
        model._default_manager.bulk_create(rows)
        return
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    with_pk = rows[0].pk is not None
    columns = [
        f
        for f in meta.concrete_fields
        if not f.generated and (with_pk or not isinstance(f, models.AutoField))
    ]
    db = connections[DEFAULT_DB_ALIAS]  # (not the proxy: one look-up, not one per value)
    data = [
        [_json_value(f, f.get_db_prep_save(f.pre_save(obj, True), db)) for f in columns]
        for obj in rows
    ]
    qn = connection.ops.quote_name
    sql = (
        f"INSERT INTO {qn(str(meta.db_table))} ({', '.join(qn(str(f.column)) for f in columns)})"
        f" SELECT {_json_columns(columns, null_json=True)}"
        " FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS x(e, n) ORDER BY n"
        f" RETURNING {qn(str(pk.column))}"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [_json_rows(data)])
        ids = [row[0] for row in cur.fetchall()]
    for obj, pk_value in zip(rows, ids, strict=True):
        obj.pk = pk_value
        obj._state.adding = False
        obj._state.db = connection.alias


def _json_rows(data: list[list[Any]]) -> str:
    """Return rows of `_json_value`s as one JSON document: encoded in C, quoted once."""
    return json.dumps(data, allow_nan=False)


def _json_value(f: models.Field[Any, Any], value: Any) -> Any:
    """Return column `f`'s database value as a JSON row holds it (`_json_columns` reads it
    back): a JSON field's document as itself, a time as ISO 8601 text (PostgreSQL reads it
    back to the microsecond), a decimal as its text, any other as it is."""
    if isinstance(f, models.JSONField):
        return getattr(value, "obj", value)  # (the driver's JSON wrapper: its document)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def _json_columns(columns: Sequence[models.Field[Any, Any]], *, null_json: bool = False) -> str:
    """Return the select list that turns a JSON row `e` (`_json_value`s in `columns`' order)
    into the columns' values: a JSON field's document stays JSON (->; with `null_json`, a
    JSON null is SQL NULL, as Django inserts None; an UPDATE of the VALUES form wrote JSON
    null), any other value is its text (->>) cast to the column's type."""
    qn = connection.ops.quote_name
    out = []
    for i, f in enumerate(columns):
        if isinstance(f, models.JSONField):
            value = f"NULLIF(e->{i}, 'null'::jsonb)" if null_json else f"(e->{i})::jsonb"
        else:
            value = f"(e->>{i})::{f.db_type(connection)}"
        out.append(f"{value} AS {qn(str(f.column))}")
    return ", ".join(out)


def lock_group_held(group_id: int, names: set[str]) -> Any:
    """Lock a group's row (as `locks.lock_group`) and count, in the same statement, the
    nodes among `names` it still holds (open allocations): the row, with `held` set."""
    group_t = ExecutionGroup._meta.db_table
    alloc_t = NodeAllocation._meta.db_table
    node_t = Node._meta.db_table
    qn = connection.ops.quote_name
    sql = (
        f"SELECT g.*, (SELECT COUNT(*) FROM {qn(alloc_t)} a JOIN {qn(node_t)} n"
        ' ON n.id = a.node_id WHERE a.group_id = g.id AND a."end" IS NULL'
        f" AND n.name IN ({', '.join(['%s'] * len(names)) or 'NULL'})) AS held"
        f" FROM {qn(group_t)} g WHERE g.id = %s FOR UPDATE"
    )
    if not is_postgres():
        sql = sql.removesuffix(" FOR UPDATE")  # (SQLite: the controller's lock serialises)
    return next(iter(ExecutionGroup.objects.raw(sql, [*sorted(names), group_id])))
