"""The planning writer's one-statement writes store what the ORM would (issue 25 item 3).

`plan_writer.rows_update` and `rows_insert` send a batch's rows as one JSON document, cast
back to the columns' types on PostgreSQL. These tests write rows with the values that
could come back different (text with quotes, backslashes and non-ASCII letters, times to
the microsecond, NULLs, JSON documents and None in a JSON column) and read them back
against what Django's own `bulk_update` / `bulk_create` store.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow.models import ExecutionGroup, PhaseRecord, Placement, Strategy
from rollmux_web.workflow.services.plan_writer import rows_insert, rows_update
from tests.factories import make_world
from tests.workers.builders import make_job

pytestmark = pytest.mark.django_db

AWKWARD = 'waiting: "quoted" \\ back\\slash, été, 中文, {braces}, 100% (a) [b]'


class _Undo(Exception):
    """Roll the block back (one write read, then undone for the other)."""


def _written(write: Any, read: Any) -> Any:
    """Return what `read()` sees after `write()`, with the write rolled back."""
    seen: list[Any] = []
    try:
        with transaction.atomic():
            write()
            seen.append(read())
            raise _Undo
    except _Undo:
        pass
    return seen[0]


def test_rows_update_stores_what_bulk_update_stores() -> None:
    world = make_world(rollout_nodes=1, train_nodes=1)
    jobs = [make_job(world, name=f"j{i}") for i in range(4)]
    now = timezone.now().replace(microsecond=123456)
    for i, job in enumerate(jobs):
        job.reason = f"{AWKWARD} {i}"
        job.status = JobStatus.PLACED if i % 2 else JobStatus.QUEUED
        job.attempts = i
        job.placed_at = now + timedelta(microseconds=i)
        job.started_at = None if i % 2 else now
    fields = ["status", "placed_at", "attempts", "reason", "started_at"]

    def read() -> list[dict[str, Any]]:
        return list(Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk").values())

    ours = _written(lambda: rows_update(jobs, fields), read)
    django = _written(lambda: Job.objects.bulk_update(jobs, fields), read)
    assert ours == django
    assert [row["reason"] for row in ours] == [f"{AWKWARD} {i}" for i in range(4)]
    assert ours[1]["placed_at"] == now + timedelta(microseconds=1)


def test_rows_update_writes_json_documents_as_they_are() -> None:
    groups = [ExecutionGroup.objects.create() for _ in range(2)]
    groups[0].runtime_state = {"members": [{"reason": AWKWARD, "t": 1.5, "none": None}]}
    groups[1].runtime_state = []

    def read() -> list[Any]:
        return list(
            ExecutionGroup.objects.filter(pk__in=[g.pk for g in groups])
            .order_by("pk")
            .values_list("runtime_state", flat=True)
        )

    assert _written(lambda: rows_update(groups, ["runtime_state"]), read) == [
        groups[0].runtime_state,
        [],
    ]


def test_rows_insert_stores_what_bulk_create_stores_and_sets_the_ids() -> None:
    world = make_world(rollout_nodes=1, train_nodes=1)
    job = make_job(world)
    group = ExecutionGroup.objects.create()
    placement = Placement.objects.create(job=job, group=group, strategy=Strategy.NEW_GROUP)
    now = timezone.now()

    def phases() -> list[PhaseRecord]:
        return [
            PhaseRecord(
                job_id=job.pk,
                group=group,
                placement_id=placement.pk,
                iteration=i,
                kind="rollout",
                node_names=["h20-0", AWKWARD],
                queued_at=now,
                started_at=now if i else None,
                metrics={"reward": 0.25, "note": AWKWARD} if i else {},
            )
            for i in range(3)
        ]

    def read() -> list[dict[str, Any]]:
        rows = PhaseRecord.objects.filter(placement=placement).order_by("iteration").values()
        return [{k: v for k, v in row.items() if k != "id"} for row in rows]

    ours_rows = phases()

    def insert() -> None:
        rows_insert(ours_rows)
        assert [r.pk for r in ours_rows] == sorted(
            PhaseRecord.objects.filter(placement=placement).values_list("pk", flat=True)
        )
        assert not any(r._state.adding for r in ours_rows)

    ours = _written(insert, read)
    assert ours == _written(lambda: PhaseRecord.objects.bulk_create(phases()), read)
    assert ours[2]["node_names"] == ["h20-0", AWKWARD]


def test_rows_insert_keeps_ids_taken_up_front_and_null_json_as_sql_null() -> None:
    taken = ExecutionGroup.objects.create().pk + 100
    groups = [
        ExecutionGroup(pk=taken + i, runtime_state=None if i else {"a": AWKWARD}) for i in range(2)
    ]
    rows_insert(groups)
    assert [g.pk for g in groups] == [taken, taken + 1]
    assert ExecutionGroup.objects.get(pk=taken).runtime_state == {"a": AWKWARD}
    assert ExecutionGroup.objects.filter(pk=taken + 1, runtime_state__isnull=True).exists()
    assert ExecutionGroup.objects.get(pk=taken + 1).created_at is not None
