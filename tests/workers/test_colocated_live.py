"""Co-located execution, live (issue 14 item 3), on a real multi-node Ray (a head + 2 H20 +
2 H800 raylets, 2 GPUs each) with PostgreSQL, Redis and a Celery worker.

A job placed co-located has training nodes only: its rollouts and trainings both run on
its H800 node's workers (the rollout at the training type's rollout speed factor, which
the emulated runner sleeps), with no sync phase (the weights are handed over on the node
at the start of the next rollout: 0 bytes cross between pools); its phases are recorded,
drawn in the Training pool of its group's Gantt, and billed on H800 only.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from rollmux_web.inventory.selectors import price_book
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.reports.selectors.cost_engine import cost_lines
from rollmux_web.workflow.models import NodeAllocation, PhaseRecord, PhaseState, Placement
from rollmux_web.workflow.services.orders import runner_context
from tests.workers.builders import make_job
from tests.workers.multinode import GPUS_PER_NODE, MultiNode, wait_all_done
from workers import triggers
from workers.runners import RunnerContext
from workers.runners.emulated import phase_duration

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.ray, pytest.mark.celery]
FACTOR = 1.5  # the training type's rollout speed factor of this cluster
# Durations for which co-located is the cheapest placement whatever the objective: alone on
# one H800 node (2 x $5.28/h) an iteration takes 1.5 x 40 + 120 = 180 s, in a new group
# of an H20 and an H800 node (2 x $1.85 + 2 x $5.28/h) 160 s: $0.53 against $0.63. (A
# rollout-heavy job, 120 + 40 s, is cheaper in a new group at this factor: $0.65 vs $0.63.)
TRAINING_HEAVY = {
    "t_roll_min_s": 30.0, "t_roll_max_s": 40.0, "t_train_min_s": 100.0, "t_train_max_s": 120.0,
}  # fmt: skip


def test_a_job_placed_colocated_runs_both_phases_on_its_training_node_and_completes(
    multinode_world: Any,
    multinode_workflow: Any,
    multinode_cluster: MultiNode,
    settings: Any,
    client_as: Any,
) -> None:
    settings.ROLLMUX_COLOCATED_ON_ARRIVAL = True
    settings.ROLLMUX_ROLLOUT_SPEED_FACTOR = FACTOR
    jobs = [
        make_job(
            multinode_world, name=f"c{i}", iterations=4, slo_class=multinode_world.bronze,
            rollout_gpus=GPUS_PER_NODE, train_gpus=GPUS_PER_NODE, model="Qwen2.5-7B",
            host_mem_gb=100.0, **TRAINING_HEAVY,
        )
        for i in range(2)
    ]  # fmt: skip
    ids = [j.pk for j in jobs]
    triggers.request_planning()
    wait_all_done(ids, timeout=120)
    assert set(Job.objects.filter(pk__in=ids).values_list("status", flat=True)) == {
        JobStatus.COMPLETED
    }, list(Job.objects.filter(pk__in=ids).values_list("reason", flat=True))

    placements = {p.job_id: p for p in Placement.objects.filter(job_id__in=ids)}
    train_node = {}
    for job_id, p in placements.items():
        assert p.strategy == "colocated", p.strategy
        assert not p.rollout_nodes.exists()
        (node,) = p.train_nodes.values_list("name", flat=True)
        train_node[job_id] = node
        # the group holds the training node only: no H20 node was allocated to it
        held = set(
            NodeAllocation.objects.filter(group=p.group).values_list("node__name", flat=True)
        )
        assert held == {node}
    assert sorted(train_node.values()) == ["h800-0", "h800-1"]  # one node each, not shared

    for job in Job.objects.filter(pk__in=ids):
        phases = list(PhaseRecord.objects.filter(job=job).order_by("started_at"))
        node = train_node[job.pk]
        expected = [(k, i) for i in range(4) for k in ("rollout", "train")]
        assert [(p.kind, p.iteration) for p in phases] == expected  # no sync phase
        ctx = RunnerContext.from_dict(runner_context(job, colocated=True))
        for p in phases:
            assert p.state == PhaseState.SUCCEEDED
            assert p.node_names == [node]
            # every phase ran on that node's Ray node and saw its GPUs
            assert p.ray_node_ids == {node: multinode_cluster.ray_node_id(node)}, p.pk
            assert p.gpu_ids == {node: list(range(GPUS_PER_NODE))}, p.pk
            drawn = phase_duration(replace(ctx, rollout_speed_factor=1.0), p.iteration, p.kind)
            slow = FACTOR if p.kind == "rollout" else 1.0
            assert p.metrics["emulated_s"] == pytest.approx(drawn * slow)
            assert p.metrics.get("rollout_speed_factor", 1.0) == slow
        for p in phases[2::2]:  # each later rollout first took the new weights, on the node
            assert p.bytes_moved == 0
            assert p.metrics["sync_cross_pool_bytes"] == 0
            assert p.metrics["sync_weights_bytes"] > 0
            assert p.metrics["weights_version"] == p.iteration

    # billed: H800 only, every node-second of the group's allocation, busy = its phases
    now = timezone.now()
    result = cost_lines(
        tenant_ids=None,
        t0=now - timedelta(hours=1),
        t1=now + timedelta(minutes=1),
        now=now,
        prices=price_book(),
        counterfactuals=True,
    )
    lines = [line for line in result.lines if line.job_id in ids]
    # (an H20 line carries only the solo-disaggregated counterfactual: no H20 was paid for)
    h20 = [line for line in lines if line.gpu_type == "H20"]
    assert all(line.exact.cost == 0 and line.exact.solo_disagg_cost > 0 for line in h20)
    # ... for the same work on dedicated pools: its rollouts at the rollout type's speed
    for line in h20:
        solo_s = sum(
            (p.finished_at - p.started_at).total_seconds() / (FACTOR if p.kind == "rollout" else 1)
            for p in PhaseRecord.objects.filter(job_id=line.job_id)
        )
        assert float(line.exact.solo_disagg_cost) == pytest.approx(
            solo_s * GPUS_PER_NODE * 1.85 / 3600, rel=1e-3
        )
    lines = [line for line in lines if line.gpu_type != "H20"]
    assert {(line.job_id, line.gpu_type) for line in lines} == {(i, "H800") for i in ids}
    for line in lines:
        busy_s = sum(
            (p.finished_at - p.started_at).total_seconds()
            for p in PhaseRecord.objects.filter(job_id=line.job_id)
        )
        alloc = NodeAllocation.objects.get(group=placements[line.job_id].group)
        alloc_s = (alloc.end - alloc.start).total_seconds()
        price = 5.28 * GPUS_PER_NODE / 3600
        assert float(line.exact.busy_gpu_hours) == pytest.approx(
            busy_s * GPUS_PER_NODE / 3600, rel=1e-3
        )
        assert float(line.exact.cost) == pytest.approx(alloc_s * price, rel=1e-3)
        # co-located on its own node is what it did: the co-located counterfactual is its busy
        assert float(line.exact.colocated_cost) == pytest.approx(busy_s * price, rel=1e-3)

    # drawn on the Gantt: both phase kinds on the training node's lane, in the Training pool
    group = placements[ids[0]].group
    trace = json.loads(client_as("alice").get(f"/groups/{group.pk}/trace.json").content)
    pools = {
        e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"
    }
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["cat"] for e in spans} == {"rollout", "train"}
    assert {pools[e["pid"]] for e in spans} == {"Training pool"}
    lanes = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert lanes == {train_node[ids[0]]}
