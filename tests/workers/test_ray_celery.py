"""End to end with real PostgreSQL, Redis, a Celery worker and a local Ray.

Each job's phases run as method calls on its detached Ray actor, pinned to the job's
nodes' custom resources; the actor publishes phase_started/phase_finished to Redis and the
Celery worker's group controller starts the next phases.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow.models import PhaseRecord, PhaseState, Placement
from tests.workers.builders import all_done, make_job, wait_for
from tests.workers.test_inline_flow import assert_round_robin
from workers import triggers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.ray, pytest.mark.celery]


def overlaps(a: PhaseRecord, b: PhaseRecord) -> bool:
    return a.started_at < b.finished_at and b.started_at < a.finished_at


def test_three_emulated_jobs_multiplex_one_group(world: Any, celery_worker_thread: Any) -> None:
    jobs = [make_job(world, name=f"e{i}", iterations=4) for i in range(3)]
    ids = [j.pk for j in jobs]
    triggers.request_planning()
    wait_for(all_done(ids), timeout=90)
    assert (
        list(Job.objects.filter(pk__in=ids).values_list("status", flat=True))
        == [JobStatus.COMPLETED] * 3
    )
    groups = set(Placement.objects.filter(job_id__in=ids).values_list("group_id", flat=True))
    assert len(groups) == 1, "the planner packs the three rollout-heavy jobs into one group"
    assert_round_robin(ids)
    phases = list(PhaseRecord.objects.filter(job_id__in=ids))
    assert all(p.state == PhaseState.SUCCEEDED for p in phases)
    # each job's training overlaps another member's rollout (the reclaimed bubble)
    for job_id in ids:
        trains = [p for p in phases if p.job_id == job_id and p.kind == "train"]
        others = [p for p in phases if p.job_id != job_id and p.kind == "rollout"]
        assert any(overlaps(t, r) for t in trains for r in others), job_id
    # one meta-iteration = one rollout and one training per member: on the shared training
    # node, a job never trains twice before every other active member trained once
    train_node = defaultdict(list)
    for p in sorted(phases, key=lambda p: p.started_at):
        if p.kind == "train":
            train_node[p.node_names[0]].append(p.job_id)
    assert len(train_node) == 1
    (sequence,) = train_node.values()
    for i, job_id in enumerate(sequence):
        nxt = sequence.index(job_id, i + 1) if job_id in sequence[i + 1 :] else None
        if nxt is not None:
            between = sequence[i + 1 : nxt]
            assert len(between) == len(set(between)), f"a member ran twice in {sequence}"
    # warm starts after the first phase of each job
    for job_id in ids:
        own = sorted((p for p in phases if p.job_id == job_id), key=lambda p: p.started_at)
        assert own[0].warm_start is False and all(p.warm_start for p in own[1:])


def test_toy_rl_learns_while_sharing_a_group(world: Any, celery_worker_thread: Any) -> None:
    rl = make_job(world, name="rl", runner="toy-rl", iterations=12)
    em = make_job(world, name="em", iterations=6)
    ids = [rl.pk, em.pk]
    triggers.request_planning()
    wait_for(all_done(ids), timeout=90)
    assert set(Job.objects.filter(pk__in=ids).values_list("status", flat=True)) == {
        JobStatus.COMPLETED
    }
    assert Placement.objects.get(job=rl).group_id == Placement.objects.get(job=em).group_id
    rollouts = PhaseRecord.objects.filter(job=rl, kind="rollout").order_by("iteration")
    rewards = [p.metrics["reward"] for p in rollouts]
    assert len(rewards) == 12
    # no sync phase (no model size): each rollout loaded the weights of every training
    # before it in its own call
    assert [p.metrics["weights_version"] for p in rollouts] == [float(i) for i in range(12)]
    # the GRPO learner improves: mean reward of the last 3 rollouts well above the first 3
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.15, rewards
    # its state survived every switch: each training applied exactly one more update
    trains = PhaseRecord.objects.filter(job=rl, kind="train").order_by("iteration")
    assert [int(p.metrics["updates"]) for p in trains] == list(range(1, 13))
    assert all(p.warm_start for p in PhaseRecord.objects.filter(job=rl) if p.iteration > 0)
