"""The live planning pass on PostgreSQL: drained nodes take no new member, oversize jobs fail.

The world has 4 H20 (rollout) and 4 H800 (training) nodes of 8 GPUs. No dispatcher runs:
the test transaction never commits, so the pass's phase dispatch (on commit) never fires;
what is checked is the decision the pass persists.
"""

from __future__ import annotations

from typing import Any

import pytest

from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.inventory.services import node_set_state
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow import converters, services, snapshot
from rollmux_web.workflow.models import NodeAllocation, Placement
from scheduler.model import PlacementStatus, Strategy
from scheduler.planner import place
from tests.workers.builders import make_job, twin_job

pytestmark = pytest.mark.django_db


def nodes_of(placement: Placement) -> tuple[set[str], set[str]]:
    return (
        {n.name for n in placement.rollout_nodes.all()},
        {n.name for n in placement.train_nodes.all()},
    )


def drain(world: Any, name: str) -> None:
    node_set_state(actor=world.admin, node_id=Node.objects.get(name=name).pk, state="drained")


def place_a(world: Any) -> tuple[Placement, str, str]:
    a = twin_job(world, "a")
    summary = services.queue_plan()
    assert summary.placed == [a.pk]
    pa = Placement.objects.get(job=a)
    (roll,), (train,) = nodes_of(pa)
    return pa, roll, train


def would_place(job: Job) -> Any:
    return place(converters.job_profile(job), snapshot.cluster_state())


def test_no_direct_packing_onto_a_drained_rollout_node_its_group_holds(world: Any) -> None:
    pa, roll, train = place_a(world)
    b = twin_job(world, "b")
    # Undrained, B would pack onto A's nodes for free: the drain is what changes it.
    before = would_place(b)
    assert before.strategy is Strategy.DIRECT_PACKING
    assert before.placement is not None and before.placement.rollout_nodes == (roll,)

    drain(world, roll)
    summary = services.queue_plan()
    assert summary.placed == [b.pk]
    pb = Placement.objects.get(job=b)
    b_roll, b_train = nodes_of(pb)
    assert roll not in b_roll
    # It still joins A's group by rollout scaling: the training node is not drained.
    assert pb.group_id == pa.group_id and pb.strategy == Strategy.ROLLOUT_SCALING.value
    assert b_train == {train}
    # A keeps running on the drained node.
    pa.refresh_from_db()
    assert pa.ended_at is None
    assert NodeAllocation.objects.filter(node__name=roll, end__isnull=True).exists()


def test_a_group_whose_training_node_is_drained_admits_no_one(world: Any) -> None:
    pa, roll, train = place_a(world)
    b = twin_job(world, "b")
    assert would_place(b).strategy is Strategy.DIRECT_PACKING

    drain(world, train)
    services.queue_plan()
    pb = Placement.objects.get(job=b)
    b_roll, b_train = nodes_of(pb)
    assert pb.group_id != pa.group_id and pb.strategy == Strategy.NEW_GROUP.value
    assert train not in b_train and roll not in b_roll


def test_a_job_that_fits_only_with_a_drained_node_waits_and_says_so(world: Any) -> None:
    drain(world, "h20-3")
    job = twin_job(world, "wide", rollout_gpus=32)
    summary = services.queue_plan()
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and job.pk in summary.waiting
    assert "needs 4 free H20 nodes, 3 free; 1 drained node takes no new work" in job.reason

    node_set_state(actor=world.admin, node_id=Node.objects.get(name="h20-3").pk, state="up")
    assert services.queue_plan().placed == [job.pk]


def test_a_queued_job_larger_than_its_pool_fails_as_infeasible(world: Any) -> None:
    # Queued rows straight in the database: e.g. submitted before the pool shrank.
    wide = make_job(world, name="wide", rollout_gpus=40)
    deep = make_job(world, name="deep", train_gpus=72)
    summary = services.queue_plan()
    assert set(summary.infeasible) == {wide.pk, deep.pk}
    wide.refresh_from_db()
    deep.refresh_from_db()
    assert wide.status == JobStatus.FAILED and deep.status == JobStatus.FAILED
    assert "rollout_gpus=40 needs 5 H20 nodes; the rollout pool has 4 nodes" in wide.reason
    assert "train_gpus=72 needs 9 H800 nodes; the train pool has 4 nodes" in deep.reason


def test_a_job_that_fits_only_with_down_nodes_fails_instead_of_waiting(world: Any) -> None:
    node_set_state(actor=world.admin, node_id=Node.objects.get(name="h800-0").pk, state="down")
    job = make_job(world, name="needs-all-four", train_gpus=32)
    summary = services.queue_plan()
    job.refresh_from_db()
    assert job.pk in summary.infeasible and job.status == JobStatus.FAILED
    assert "the train pool has 3 nodes (24 GPUs), not counting 1 down node" in job.reason


def test_the_snapshot_holds_drained_nodes_cordoned_and_leaves_down_ones_out(world: Any) -> None:
    Node.objects.filter(name="h20-1").update(state=NodeState.DRAINED)
    Node.objects.filter(name="h20-2").update(state=NodeState.DOWN)
    state = snapshot.cluster_state()
    by_name = {n.name: n for n in state.nodes}
    assert "h20-2" not in by_name
    assert by_name["h20-1"].cordoned and not by_name["h20-0"].cordoned
    assert state.spec.rollout.nodes == 3 and state.spec.rollout.nodes_down == 1
    assert state.spec.train.nodes == 4 and state.spec.train.nodes_down == 0
    assert would_place(make_job(world, name="x")).status is PlacementStatus.FIT
