"""Real RL jobs end to end (issue 21): two `hf-grpo` jobs (GRPO on a config-built Llama)
share one co-execution group on a real multi-node Ray (a head + 2 H20 + 2 H800 Ray nodes,
each its own raylet, 2 GPUs declared each), with PostgreSQL, Redis and a Celery worker.

What it shows: both jobs learn (their reward rises); every sync moves the policy's real
tensors across the pools, its bytes recorded; killing the raylet of their training node
mid-run resubmits them and they resume from their checkpoints (in S3-compatible object
storage) on the other training node, their update count continuous (no reset); every phase
reports its set-up, load and work times.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow.models import EndReason, PhaseRecord, PhaseState, Placement
from scheduler.model_shape import llama_shape
from tests.workers.builders import make_job, wait_for
from tests.workers.multinode import GPUS_PER_NODE, MultiNode, wait_all_done

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.ray,
    pytest.mark.celery,
    pytest.mark.slow,
]

ITERATIONS = 10
WEIGHTS_BYTES = llama_shape("llama-0.1M").parameters * 4  # fp32


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def test_two_hf_grpo_jobs_learn_in_one_group_and_resume_after_their_training_node_dies(
    multinode_world: Any, multinode_workflow: Any, multinode_cluster: MultiNode, settings: Any
) -> None:
    from workers import triggers

    storage = multinode_cluster.storage
    assert storage is not None
    prefix = f"grpo-{uuid.uuid4().hex[:8]}"
    settings.ROLLMUX_CHECKPOINT_URI = storage.uri(prefix)
    common: dict[str, Any] = {
        "runner": "hf-grpo", "model": "llama-0.1M", "iterations": ITERATIONS,
        "rollout_gpus": GPUS_PER_NODE, "train_gpus": GPUS_PER_NODE, "host_mem_gb": 16.0,
        "slo_class": multinode_world.bronze, "time_scale": 1.0,
        # real phases on this loaded 2-core machine: a few seconds each (declared, so the
        # planner packs the twins into one group at once)
        "t_roll_min_s": 4.0, "t_roll_max_s": 4.0, "t_train_min_s": 4.0, "t_train_max_s": 4.0,
    }  # fmt: skip
    jobs = [make_job(multinode_world, name=f"grpo-{i}", **common) for i in range(2)]
    ids = [j.pk for j in jobs]
    triggers.request_planning()
    wait_for(lambda: Placement.objects.filter(job_id__in=ids).count() == 2, timeout=60)
    first = {p.job_id: p for p in Placement.objects.filter(job_id__in=ids)}
    assert len({p.group_id for p in first.values()}) == 1, "the two jobs share one group"
    target = first[ids[0]].train_nodes.get().name

    def training_mid_run() -> bool:
        return PhaseRecord.objects.filter(
            placement=first[ids[0]], kind="train", state=PhaseState.RUNNING, iteration__gte=4
        ).exists()

    wait_for(training_mid_run, timeout=400, interval=0.02)
    multinode_cluster.nodes[target].kill_raylet()
    killed_at = time.time()
    try:
        wait_all_done(ids, timeout=600)
    finally:
        multinode_workflow.stop()
        multinode_cluster.add(target)  # the other multi-node tests need all four nodes
    for job in Job.objects.filter(pk__in=ids):
        assert job.status == JobStatus.COMPLETED, job.reason
    victim = ids[0]
    lost = PhaseRecord.objects.get(placement=first[victim], state=PhaseState.LOST)
    assert lost.kind == "train" and target in lost.node_names
    assert lost.finished_at.timestamp() - killed_at < 15.0
    first[victim].refresh_from_db()
    assert first[victim].end_reason == EndReason.NODE_DOWN
    print()
    for job_id in ids:
        phases = list(
            PhaseRecord.objects.filter(job_id=job_id, state=PhaseState.SUCCEEDED).order_by(
                "started_at"
            )
        )
        rollouts = [p for p in phases if p.kind == "rollout"]
        trains = [p for p in phases if p.kind == "train"]
        syncs = [p for p in phases if p.kind == "sync"]
        # every iteration trained once, the update count continuous across the placements:
        # the resumed trainers restored the count (and AdamW, the RNG) from the checkpoint
        assert [p.iteration for p in trains] == list(range(ITERATIONS))
        assert [int(p.metrics["updates"]) for p in trains] == list(range(1, ITERATIONS + 1))
        # each rollout generated with the weights of every training before it
        assert [p.metrics["weights_version"] for p in rollouts] == [
            float(p.iteration) for p in rollouts
        ]
        # the weights crossed the pools at every sync: the policy's tensors, once
        assert syncs and all(p.bytes_moved == WEIGHTS_BYTES for p in syncs), [
            p.bytes_moved for p in syncs
        ]
        # the job learned: its reward well above where it started
        rewards = [p.metrics["reward_mean"] for p in rollouts]
        first3, last3 = mean(rewards[:3]), mean(rewards[-3:])
        print(
            f"job {job_id}: reward first 3 {first3:.3f} -> last 3 {last3:.3f};"
            f" {len(syncs)} syncs of {WEIGHTS_BYTES:,} B across the pools"
        )
        assert last3 > first3 + 0.15, rewards
        # the training metrics the runner reports are stored with the iteration
        assert {"loss", "kl", "entropy", "tokens_per_s", "samples", "reward_std"} <= set(
            trains[-1].metrics
        )
        # every phase says where its time went; the cold starts include the set-up
        for p in phases:
            assert p.work_s is not None and p.setup_s is not None and p.load_s is not None
            assert p.work_s <= (p.finished_at - p.started_at).total_seconds() + 1e-3
        assert all(p.setup_s > 0 for p in phases if p.warm_start is False)
        assert all(p.setup_s == 0 for p in phases if p.warm_start)
    # the victim's resumed placement runs elsewhere and its first phase restored the
    # checkpoint (a cold start whose load is the restore)
    second = Placement.objects.get(job_id=victim, attempt=2)
    assert target not in {n.name for n in second.train_nodes.all()}
    resumed = PhaseRecord.objects.filter(placement=second).order_by("started_at").first()
    assert resumed is not None and resumed.warm_start is False and resumed.iteration >= 4
    assert resumed.metrics["weights_version"] == float(resumed.iteration)
    assert resumed.load_s is not None and resumed.load_s > 0
    keys = storage.keys(prefix)
    assert f"{prefix}/job-{victim}-it{ITERATIONS}.ckpt" in keys, keys
