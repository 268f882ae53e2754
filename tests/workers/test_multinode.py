"""End to end on a real multi-node Ray (a head + 2 H20 + 2 H800 Ray nodes, each its own
raylet, 2 GPUs declared each) with PostgreSQL, Redis and a Celery worker.

Every job runs as one worker per GPU of each of its nodes, pinned there; phases run on the
workers of their pool, batches and weights move between them through Ray's object store,
and every phase record says on which Ray node(s) it ran and which GPU ids it saw.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

import pytest

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow.models import PhaseRecord, PhaseState, Placement
from rollmux_web.workflow.sync import weights_gb
from tests.workers.builders import make_job
from tests.workers.multinode import GPUS_PER_NODE, MultiNode, wait_all_done
from workers import triggers
from workers.runners import RunnerContext
from workers.runners.emulated import weights_nbytes
from workers.runners.toy_rl import CONTEXTS, LENGTH, VOCAB

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.ray, pytest.mark.celery]
CTX = RunnerContext(0, 1, 0.0, 0.0, 0.0, 0.0, 0.0)


def job(world: Any, name: str, **overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "rollout_gpus": GPUS_PER_NODE, "train_gpus": GPUS_PER_NODE, "model": "Qwen2.5-7B",
        "host_mem_gb": 100.0,
    }  # fmt: skip
    return make_job(world, name=name, **(fields | overrides))


def assert_ran_where_pinned(phases: list[PhaseRecord], cluster: MultiNode) -> None:
    """Every phase ran on the Ray node of each of its nodes and saw exactly its GPUs."""
    for p in phases:
        assert p.ray_node_ids == {n: cluster.ray_node_id(n) for n in p.node_names}, p.pk
        assert p.gpu_ids == {n: list(range(GPUS_PER_NODE)) for n in p.node_names}, p.pk


def assert_no_node_ran_two_phases_at_once(phases: list[PhaseRecord]) -> None:
    by_node: dict[str, list[PhaseRecord]] = defaultdict(list)
    for p in sorted(phases, key=lambda p: p.started_at):
        for n in p.node_names:
            by_node[n].append(p)
    for node, ps in by_node.items():
        for a, b in zip(ps, ps[1:], strict=False):
            assert a.finished_at <= b.started_at, f"{node} ran {a.pk} and {b.pk} at once"


def test_three_emulated_jobs_in_one_group_run_on_their_pinned_nodes_and_sync_weights(
    multinode_world: Any, multinode_workflow: Any, multinode_cluster: MultiNode, api_client: Any
) -> None:
    # durations the planner packs three of into one group whatever its levers (a new
    # group, rollout scaling onto the second H20 node, direct packing; the planner's own
    # choice: a rollout-heavy job alone is cheaper co-located, twins saturate a group)
    fixed = {"t_roll_min_s": 100.0, "t_roll_max_s": 100.0, "t_train_min_s": 60.0}
    jobs = [
        job(multinode_world, f"m{i}", iterations=3, slo_class=multinode_world.bronze,
            t_train_max_s=60.0, **fixed)
        for i in range(3)
    ]  # fmt: skip
    ids = [j.pk for j in jobs]
    triggers.request_planning()
    wait_all_done(ids, timeout=120)
    statuses = dict(Job.objects.filter(pk__in=ids).values_list("pk", "status"))
    assert set(statuses.values()) == {JobStatus.COMPLETED}, Job.objects.values("reason")
    # (admitted together; a survivor may move later, when a member's departure makes that
    # cheaper: consolidation, its placement ended 'moved')
    first = Placement.objects.filter(job_id__in=ids, attempt=1)
    groups = set(first.values_list("group_id", flat=True))
    assert len(groups) == 1, list(
        Placement.objects.filter(job_id__in=ids).values_list(
            "job_id", "attempt", "group_id", "strategy", "end_reason", "created_at"
        )
    )  # the three jobs share one co-execution group
    phases = list(PhaseRecord.objects.filter(job_id__in=ids))
    assert all(p.state == PhaseState.SUCCEEDED for p in phases)
    assert_ran_where_pinned(phases, multinode_cluster)
    assert_no_node_ran_two_phases_at_once(phases)
    for p in phases:  # the Ray call's own stamp: sent after the controller recorded the phase
        sent = p.started_at.timestamp() - p.metrics["dispatch_s"]
        assert p.queued_at.timestamp() <= sent <= p.started_at.timestamp(), p.pk
    for p in phases:  # rollouts on the job's rollout (H20) nodes, trainings on H800
        prefix = "h800-" if p.kind == "train" else "h20-"
        assert all(n.startswith(prefix) for n in p.node_names), (p.kind, p.node_names)
    # a sync after every training but the last moved one copy of the weights across
    weights = weights_nbytes(replace(CTX, weights_gb=weights_gb("Qwen2.5-7B")))
    for job_id in ids:
        own = sorted((p for p in phases if p.job_id == job_id), key=lambda p: p.started_at)
        assert [(p.iteration, p.kind) for p in own] == [
            (0, "rollout"), (0, "train"), (0, "sync"), (1, "rollout"), (1, "train"),
            (1, "sync"), (2, "rollout"), (2, "train"),
        ]  # fmt: skip
        syncs = [p for p in own if p.kind == "sync"]
        assert all(p.bytes_moved == weights for p in syncs), [p.bytes_moved for p in syncs]
        # each rollout generated with the weights of every training before it
        rollouts = [p for p in own if p.kind == "rollout"]
        assert [p.metrics["weights_version"] for p in rollouts] == [0.0, 1.0, 2.0]
    # the phases API says where each phase ran (as alice, the jobs' tenant)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {multinode_world.tokens['alice']}")
    response = api_client.get(f"/api/v1/jobs/{ids[0]}/phases/")
    assert response.status_code == 200
    rows = {(r["iteration"], r["kind"]): r for r in response.json()["results"]}
    sync = rows[(0, "sync")]
    assert sync["nodes"] == sync["node_names"] and sync["bytes_moved"] == weights
    assert sync["ray_node_ids"] == {n: multinode_cluster.ray_node_id(n) for n in sync["nodes"]}
    train = rows[(0, "train")]
    assert train["gpu_ids"] == {n: [0, 1] for n in train["nodes"]}
    assert train["bytes_moved"] is None
    # ... and so do the job page, the timeline's tooltips and trace.json (issue 24 item 17:
    # only the phases API did)
    from django.test import Client

    from rollmux_web.formatting import human_bytes

    browser = Client()
    browser.force_login(multinode_world.alice)
    page = browser.get(f"/jobs/{ids[0]}/").content.decode()
    for n in sync["nodes"] + train["nodes"]:
        assert multinode_cluster.ray_node_id(n) in page, n
    assert f"Weight syncs: 2, {human_bytes(2 * weights)} in all" in page
    timeline = browser.get(f"/timeline/jobs/{ids[0]}/").content.decode()
    rid = multinode_cluster.ray_node_id(train["nodes"][0])
    assert f"on Ray node {rid[:8]}… (GPUs 0, 1)" in timeline
    assert f"moved {human_bytes(weights)}" in timeline
    trace = browser.get(f"/timeline/jobs/{ids[0]}/trace.json").json()
    synced = [e for e in trace["traceEvents"] if e.get("cat") == "sync"]
    assert synced and all(e["args"]["bytes_moved"] == weights for e in synced)
    assert all(
        e["args"]["ray_node_ids"] == {n: multinode_cluster.ray_node_id(n) for n in sync["nodes"]}
        for e in synced
    )


def test_toy_rl_reward_rises_across_syncs_between_separate_nodes(
    multinode_world: Any, multinode_workflow: Any, multinode_cluster: MultiNode
) -> None:
    rl = job(multinode_world, "rl", runner="toy-rl", iterations=12, model="toy-0.5B")
    triggers.request_planning()
    wait_all_done([rl.pk], timeout=90)
    rl.refresh_from_db()
    assert rl.status == JobStatus.COMPLETED, rl.reason
    phases = list(PhaseRecord.objects.filter(job=rl).order_by("started_at"))
    rollouts = [p for p in phases if p.kind == "rollout"]
    trains = [p for p in phases if p.kind == "train"]
    syncs = [p for p in phases if p.kind == "sync"]
    assert len(rollouts) == 12 and len(trains) == 12 and len(syncs) == 11
    # sampling and learning ran on different Ray nodes; the weights crossed between them
    roll_nodes = {i for p in rollouts for i in p.ray_node_ids.values()}
    train_nodes = {i for p in trains for i in p.ray_node_ids.values()}
    assert roll_nodes and train_nodes and not roll_nodes & train_nodes
    logits_bytes = CONTEXTS * LENGTH * VOCAB * 8
    assert all(p.bytes_moved == logits_bytes for p in syncs)
    assert [p.metrics["weights_version"] for p in rollouts] == [float(i) for i in range(12)]
    rewards = [p.metrics["reward"] for p in rollouts]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.15, rewards
    assert [int(p.metrics["updates"]) for p in trains] == list(range(1, 13))
