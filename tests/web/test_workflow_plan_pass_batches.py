"""The planning pass writes what it decided, batch by batch (issue 14 item 6).

A pass decides each job on its snapshot and writes a batch's decisions at the batch's end,
one statement per table (placements, pinned nodes, allocations, phase records, job rows,
group runtimes). These tests check that what is written is what the core decided, over
several batches, and that a snapshot gone stale in the middle of a batch (a group
released meanwhile) writes the batch's earlier decisions before the snapshot is read
again. No dispatcher runs (the test transaction never commits).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow import converters, levers, services, snapshot, sync
from rollmux_web.workflow.models import (
    EndReason,
    ExecutionGroup,
    NodeAllocation,
    PhaseRecord,
    Placement,
)
from rollmux_web.workflow.services import planning
from rollmux_web.workflow.services.departures import placement_end
from rollmux_web.workflow.services.effects import Effects
from scheduler.group_runtime import GroupRuntime
from scheduler.model import PlacementStatus
from scheduler.planner import apply_placement
from tests.factories import make_world
from tests.workers.builders import make_job

pytestmark = pytest.mark.django_db


def burst(world: Any, n: int) -> list[Job]:
    """Queue `n` jobs of varied shapes (some pack, some scale rollouts, some open groups)."""
    jobs = []
    for i in range(n):
        roll, train = 60.0 + (i * 37) % 240, 30.0 + (i * 53) % 120
        jobs.append(
            make_job(
                world,
                name=f"b{i}",
                slo_class=(world.bronze, world.silver, world.gold)[i % 3],
                rollout_gpus=8 * (1 + i % 2),
                t_roll_max_s=roll,
                t_roll_min_s=roll * 0.8,
                t_train_max_s=train,
                t_train_min_s=train * 0.8,
                iterations=20,
            )
        )
    return jobs


def decided_by_the_core(jobs: list[Job]) -> dict[int, tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """Place the jobs one by one on the pure core from the live snapshot: per job placed,
    the key of its group (the first job placed in it) and its nodes."""
    state, progress = snapshot.planner_input()
    owner: dict[str, str] = {}
    out = {}
    for job in jobs:
        profile = converters.job_profile(job, t_sync_s=sync.t_sync_s(job, {}))
        res = levers.place_job(profile, state, progress)
        if res.status is not PlacementStatus.FIT or res.placement is None:
            continue
        gid = res.placement.group_id or f"new-{job.pk}"
        owner.setdefault(gid, str(job.pk))
        state = apply_placement(state, profile, res.placement, group_id=gid)
        out[job.pk] = (
            owner[gid],
            tuple(sorted(res.placement.rollout_nodes)),
            tuple(sorted(res.placement.train_nodes)),
        )
    return out


def written(job_ids: list[int]) -> dict[int, tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """Per placed job as written: the key of its group (its first member) and its nodes."""
    rows = list(
        Placement.objects.filter(job_id__in=job_ids, ended_at__isnull=True)
        .prefetch_related("rollout_nodes", "train_nodes")
        .order_by("pk")
    )
    first: dict[int, str] = {}
    out = {}
    for p in rows:
        first.setdefault(p.group_id, str(p.job_id))
        out[p.job_id] = (
            first[p.group_id],
            tuple(sorted(n.name for n in p.rollout_nodes.all())),
            tuple(sorted(n.name for n in p.train_nodes.all())),
        )
    return out


def test_a_burst_over_several_batches_is_written_as_the_core_decided(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = make_world(rollout_nodes=10, train_nodes=6)
    jobs = burst(world, 24)
    want = decided_by_the_core(jobs)
    assert 6 <= len(want) < len(jobs)  # some share a group, some wait
    monkeypatch.setattr(planning, "BATCH_JOBS", 4)
    monkeypatch.setattr(planning, "BATCH_MIN_JOBS", 4)
    batches = []
    real = planning._batch_place
    monkeypatch.setattr(
        planning, "_batch_place", lambda ids, *a: batches.append(ids) or real(ids, *a)
    )
    summary = services.queue_plan()
    assert len(batches) >= 6
    assert sorted(summary.placed) == sorted(want)
    assert written([j.pk for j in jobs]) == want
    # every new node is allocated once, from the pass; every member is in its group's
    # runtime; the phases the runtimes started are recorded and their jobs running
    for p in Placement.objects.filter(job_id__in=summary.placed).select_related("group", "job"):
        nodes = {n.name for n in p.rollout_nodes.all()} | {n.name for n in p.train_nodes.all()}
        held = NodeAllocation.objects.filter(group=p.group, end__isnull=True, node__name__in=nodes)
        assert held.count() == len(nodes)
        member = GroupRuntime.from_dict(p.group.runtime_state).member(str(p.job_id))
        assert set(member.rollout_nodes) | set(member.train_nodes) == nodes
        started = PhaseRecord.objects.filter(placement=p).count()
        assert p.job.status == (JobStatus.RUNNING if started else JobStatus.PLACED)
        assert p.job.attempts == 1 and p.job.placed_at is not None
    for pk, reason in summary.waiting.items():
        assert Job.objects.get(pk=pk).reason.startswith(reason)


def test_a_group_released_under_the_batch_is_planned_again_after_writing_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = make_world(rollout_nodes=4, train_nodes=4)
    twin = {"t_roll_max_s": 100.0, "t_roll_min_s": 100.0, "t_train_max_s": 100.0}
    twin |= {"t_train_min_s": 100.0, "slo_class": world.bronze, "iterations": 50}
    a = make_job(world, name="a", **twin)
    assert services.queue_plan().placed == [a.pk]
    pa = Placement.objects.get(job=a)
    stale = snapshot.planner_input()  # a's group with a free slot for its twin
    # placed first, in a group of its own (its clock differs from a's: it joins no one)
    c = make_job(world, name="c", priority=5, rollout_gpus=16, time_scale=500.0)
    b = make_job(world, name="b", **twin)  # would pack with a
    # a leaves after the pass read its snapshot (its group is released)
    placement_end(pa, EndReason.COMPLETED, timezone.now(), Effects())
    Job.objects.filter(pk=a.pk).update(status=JobStatus.COMPLETED)
    assert ExecutionGroup.objects.get(pk=pa.group_id).released_at is not None
    reads: list[bool] = []  # per read: whether c's placement was written by then
    real = snapshot.planner_input

    def first_stale() -> Any:
        reads.append(Placement.objects.filter(job=c).exists())
        return stale if len(reads) == 1 else real()

    monkeypatch.setattr(snapshot, "planner_input", first_stale)
    monkeypatch.setattr(planning.consolidation, "consolidation_plan", list)  # (it reads one too)
    summary = services.queue_plan()
    assert summary.placed == [c.pk, b.pk]
    # read again once, for b, after c's decision was written (the new snapshot sees it)
    assert reads == [False, True]
    pb, pc = Placement.objects.get(job=b), Placement.objects.get(job=c)
    assert pb.group_id != pa.group_id
    assert NodeAllocation.objects.filter(group=pc.group, end__isnull=True).count() == 3
    assert pc.rollout_nodes.count() == 2 and pc.train_nodes.count() == 1
    for node in pb.rollout_nodes.all() | pb.train_nodes.all():
        assert NodeAllocation.objects.filter(node=node, end__isnull=True).count() == 1


def alike_burst(world: Any, n: int) -> list[Job]:
    """Queue `n` jobs of five shapes in turn (each shape queued n / 5 times: alike jobs,
    equal but for their ids and submission times), big and small so that some wait while
    smaller ones after them still fit."""
    big = {"rollout_gpus": 16, "t_roll_max_s": 200.0, "slo_class": world.gold}
    shapes = [
        big,
        big | {"rollout_gpus": 8},  # as the one before but for its rollout GPUs
        {"rollout_gpus": 24, "t_roll_max_s": 150.0, "slo_class": world.silver},
        {"rollout_gpus": 8, "t_roll_max_s": 60.0, "slo_class": world.silver, "iterations": 7},
        big | {"slo_class": world.bronze},  # as the first but for its SLO
    ]
    jobs = []
    for i in range(n):
        shape = {"iterations": 20, "t_train_max_s": 50.0, **shapes[i % len(shapes)]}
        jobs.append(make_job(world, name=f"a{i}", **shape))
    return jobs


def one_by_one(jobs: list[Job]) -> tuple[dict[int, tuple[str, ...]], dict[int, str]]:
    """Decide the jobs in turn on the plain core (every job asked), as the pass asks it
    (`snapshot.held_young`): the placed jobs (their group's first job and their nodes)
    and the waiting jobs' reasons."""
    state, progress = snapshot.planner_input()
    owner: dict[str, str] = {}
    placed, waiting = {}, {}
    for job in jobs:
        profile = converters.job_profile(job, t_sync_s=sync.t_sync_s(job, {}))
        asked = snapshot.held_young(profile, iterations=job.iterations)
        res = levers.place_job(asked, state, progress)
        if res.status is PlacementStatus.RETRY:
            waiting[job.pk] = res.reason
            continue
        assert res.status is PlacementStatus.FIT and res.placement is not None
        gid = res.placement.group_id or f"new-{job.pk}"
        owner.setdefault(gid, str(job.pk))
        state = apply_placement(state, profile, res.placement, group_id=gid)
        placed[job.pk] = (
            owner[gid],
            tuple(sorted(res.placement.rollout_nodes)),
            tuple(sorted(res.placement.train_nodes)),
        )
    return placed, waiting


def test_the_pass_decides_alike_jobs_as_the_plain_core_asked_for_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pass answers a job alike to one that waited on the very same snapshot without
    # asking the core again (issue 25 item 3: `planning._Waits`); fair share and
    # preemption are on (the defaults). Its decisions must be the plain core's, job by
    # job, reasons included.
    world = make_world(rollout_nodes=9, train_nodes=5)
    jobs = alike_burst(world, 30)
    want_placed, want_waiting = one_by_one(jobs)
    assert len(want_placed) >= 5 and len(want_waiting) >= 10  # some fit, many wait
    # a smaller job fits after a bigger one waited (the memo must tell them apart)
    first_wait = min(want_waiting)
    assert any(pk > first_wait for pk in want_placed)
    monkeypatch.setattr(planning, "BATCH_JOBS", 7)
    monkeypatch.setattr(planning, "BATCH_MIN_JOBS", 7)
    asked = []
    real = levers.place_job
    monkeypatch.setattr(levers, "place_job", lambda p, *a, **k: asked.append(p) or real(p, *a, **k))
    summary = services.queue_plan()
    assert written([j.pk for j in jobs]) == want_placed
    assert summary.waiting == want_waiting
    assert len(asked) < len(jobs) - 5  # alike waiting jobs were answered by the memo


def test_every_job_left_waiting_names_the_nodes_down_read_once_per_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a waiting job's reason says which nodes are down and why; the pass reads them once,
    # at its first wait, and every batch after says the same
    world = make_world(rollout_nodes=2, train_nodes=2)
    Node.objects.filter(name="h800-1").update(state=NodeState.DOWN, state_reason="Ray: died")
    jobs = [make_job(world, name=f"w{i}", rollout_gpus=16, iterations=20) for i in range(6)]
    monkeypatch.setattr(planning, "BATCH_JOBS", 2)
    monkeypatch.setattr(planning, "BATCH_MIN_JOBS", 2)
    reads: list[str] = []
    real = planning._down_note
    monkeypatch.setattr(planning, "_down_note", lambda: reads.append(real()) or reads[-1])
    summary = services.queue_plan()
    assert len(summary.placed) == 1 and len(summary.waiting) == 5  # one fits, in batch 1
    assert reads == ["; down: h800-1 (Ray: died)"]
    for job in jobs:
        if job.pk in summary.waiting:
            assert Job.objects.get(pk=job.pk).reason.endswith("; down: h800-1 (Ray: died)")
