"""A cluster missing what the inventory names, on a real multi-node Ray with PostgreSQL,
Redis and a Celery worker: the inventory says h800-2 has 2 GPUs, the Ray node that carries
its label declares 1. The job placed there must not show "running" and must not wait for a
minute's timeout: its phase fails at once naming what is missing, the node goes down with
that reason (the inventory page and /api/v1/nodes/ show it), and the job waits saying so.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow.models import PhaseRecord, PhaseState, Placement
from tests.workers.builders import make_job, wait_for
from tests.workers.multinode import GPUS_PER_NODE, MultiNode
from workers import triggers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.ray, pytest.mark.celery]


def test_a_node_whose_ray_node_lacks_gpus_fails_the_phase_at_once_and_the_job_waits_saying_so(
    multinode_world: Any, multinode_workflow: Any, multinode_cluster: MultiNode, api_client: Any
) -> None:
    h800 = Node.objects.get(name="h800-0")
    # the only H800 node that takes new work is h800-2, whose Ray node has 1 GPU of 2
    Node.objects.filter(name__in=["h800-0", "h800-1"]).update(state=NodeState.DRAINED)
    Node.objects.create(
        name="h800-2", cluster=h800.cluster, gpu_type=h800.gpu_type, gpus=GPUS_PER_NODE,
        host_mem_gb=h800.host_mem_gb,
    )  # fmt: skip
    ray_node = multinode_cluster.add("h800-2", gpus=1)
    time.sleep(1.0)  # the node watcher has seen it join (it tells "alive" once, first)
    try:
        job = make_job(
            multinode_world, name="short", iterations=2, rollout_gpus=GPUS_PER_NODE,
            train_gpus=GPUS_PER_NODE, host_mem_gb=100.0, slo_class=multinode_world.bronze,
        )  # fmt: skip
        asked = time.monotonic()
        triggers.request_planning()
        wait_for(
            lambda: PhaseRecord.objects.filter(job=job, state=PhaseState.LOST).exists(),
            timeout=30,
            interval=0.05,
        )
        took = time.monotonic() - asked
        print(f"\nh800-2 short of GPUs: planned, dispatched and lost in {took:.2f} s")
        reason = (
            "h800-2: no live Ray node has the label rollmux.io/node=h800-2 with 2 GPU"
            f" (its Ray node {multinode_cluster.ray_node_id('h800-2')[:12]} has 1)"
        )
        lost = PhaseRecord.objects.get(job=job, state=PhaseState.LOST)
        assert lost.outcome == f"lost: node {reason}", lost.outcome
        assert took < 10.0, "the phase must fail at once, not after the creation timeout"
        assert not PhaseRecord.objects.filter(job=job, state=PhaseState.RUNNING).exists()
        node = Node.objects.get(name="h800-2")
        assert node.state == NodeState.DOWN and node.state_reason == f"Ray: {reason}"
        # the overview's nodes API says so
        api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {multinode_world.tokens['alice']}")
        rows = api_client.get("/api/v1/nodes/", {"page_size": 100}).json()["results"]
        shown = next(r for r in rows if r["name"] == "h800-2")
        assert shown["state"] == "down" and reason in shown["state_reason"], shown

        # the job waits (no other H800 node takes work), and its reason names what is missing
        def waits_saying_so() -> bool:
            row = Job.objects.get(pk=job.pk)
            return row.status == JobStatus.QUEUED and f"down: h800-2 (Ray: {reason})" in row.reason

        wait_for(waits_saying_so, timeout=20)
        time.sleep(1.0)  # and it is not placed on h800-2 again
        assert Placement.objects.filter(job=job).count() == 1
        assert Job.objects.get(pk=job.pk).status == JobStatus.QUEUED
    finally:
        multinode_cluster.cluster.remove_node(ray_node)
        multinode_cluster.nodes.pop("h800-2")
