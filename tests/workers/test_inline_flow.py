"""The workflow end to end in one process (inline dispatcher, eager Celery) on PostgreSQL."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow.models import (
    ExecutionGroup,
    NodeAllocation,
    PhaseRecord,
    PhaseState,
    Placement,
)
from tests.workers.builders import all_done, make_job, wait_for
from workers import triggers

pytestmark = pytest.mark.django_db(transaction=True)


def assert_round_robin(job_ids: list[int]) -> None:
    """Check the phase records: no node runs two phases at once, every job alternates
    rollout/train per iteration, trainings overlap other members' rollouts."""
    phases = list(
        PhaseRecord.objects.filter(job_id__in=job_ids, state=PhaseState.SUCCEEDED).order_by(
            "started_at"
        )
    )
    by_node: dict[str, list[PhaseRecord]] = defaultdict(list)
    for p in phases:
        for n in p.node_names:
            by_node[n].append(p)
    for node, ps in by_node.items():
        for a, b in zip(ps, ps[1:], strict=False):
            assert a.finished_at <= b.started_at, f"{node} ran two phases at once: {a.pk} {b.pk}"
    for job_id in job_ids:
        job = Job.objects.get(pk=job_id)
        own = [p for p in phases if p.job_id == job_id]
        kinds = [(p.iteration, p.kind) for p in own]
        expected = [(i, k) for i in range(job.iterations) for k in ("rollout", "train")]
        assert kinds == expected, f"job {job_id} phases out of order: {kinds}"


def test_three_rollout_heavy_jobs_share_one_group_and_complete(
    world: Any, inline_workflow: Any
) -> None:
    # silver SLO, 4 iterations: the planner packs them by rollout scaling (one group)
    jobs = [make_job(world, name=f"j{i}", iterations=4) for i in range(3)]
    triggers.request_planning()
    ids = [j.pk for j in jobs]
    wait_for(all_done(ids), timeout=60)
    assert set(Job.objects.filter(pk__in=ids).values_list("status", flat=True)) == {
        JobStatus.COMPLETED
    }
    groups = set(Placement.objects.filter(job_id__in=ids).values_list("group_id", flat=True))
    assert len(groups) == 1
    assert_round_robin(ids)
    # departures released every node and the group
    assert not NodeAllocation.objects.filter(end__isnull=True).exists()
    assert ExecutionGroup.objects.get(pk=groups.pop()).released_at is not None
