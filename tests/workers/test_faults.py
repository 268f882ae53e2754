"""Fault tests: a job's actor killed mid-phase, the Celery worker killed mid-phase, and two
planners racing on PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from rollmux_web import ports
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow import services
from rollmux_web.workflow.models import (
    IterationMetrics,
    NodeAllocation,
    PhaseRecord,
    PhaseState,
    Placement,
)
from tests.factories import database_url
from tests.workers.builders import all_done, make_job, wait_for
from workers import triggers
from workers.dispatch import Probe

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.ray
@pytest.mark.celery
def test_killing_a_jobs_actor_mid_phase_resumes_from_its_last_completed_iteration(
    world: Any, celery_worker_thread: Any, ray_workflow: Any
) -> None:
    job = make_job(world, runner="toy-rl", iterations=10, time_scale=300.0)
    triggers.request_planning()
    wait_for(lambda: Job.objects.get(pk=job.pk).iterations_done >= 3, timeout=60)
    first = Placement.objects.get(job=job)

    def mid_phase() -> bool:
        # the actor itself says a phase is under way (not between two phases)
        phase = PhaseRecord.objects.filter(job=job, state=PhaseState.RUNNING).first()
        return phase is not None and ray_workflow.probe(services.order_for(phase.pk)).state == (
            "running"
        )

    wait_for(mid_phase, timeout=20, interval=0.01)
    done_at_kill = Job.objects.get(pk=job.pk).iterations_done
    ray_workflow.kill(job.pk, first.pk)
    wait_for(all_done([job.pk]), timeout=90)
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED, job.reason
    first.refresh_from_db()
    assert first.end_reason == "lost"  # the platform lost its host: not counted as a failure
    lost = PhaseRecord.objects.get(job=job, placement=first, state=PhaseState.LOST)
    assert "actor died" in lost.outcome
    second = Placement.objects.get(job=job, attempt=2)
    resumed = PhaseRecord.objects.filter(placement=second).order_by("started_at").first()
    assert resumed is not None and resumed.iteration in (done_at_kill, done_at_kill + 1)
    assert resumed.kind == "rollout" and resumed.warm_start is False  # a new actor: cold start
    # the new actor restored the checkpoint: the policy's update count carries on
    trains = PhaseRecord.objects.filter(job=job, kind="train", state=PhaseState.SUCCEEDED)
    assert sorted(int(p.metrics["updates"]) for p in trains) == list(range(1, 11))
    # its reward curve is one curve across both placements: one point per iteration, the
    # resumed iterations the second attempt's
    curve = list(
        IterationMetrics.objects.filter(job=job)
        .order_by("iteration")
        .values_list("iteration", "placement__attempt", "reward_mean")
    )
    assert [it for it, _, _ in curve] == list(range(10))
    assert all(reward is not None for _, _, reward in curve)
    assert {attempt for it, attempt, _ in curve if it >= resumed.iteration} == {2}


def _worker_env(ray_address: str, settings: Any) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(),
        REDIS_URL=settings.REDIS_URL,
        ROLLMUX_RAY_ADDRESS=ray_address,
        ROLLMUX_CHECKPOINT_DIR=settings.ROLLMUX_CHECKPOINT_DIR,
        ROLLMUX_DISPATCHER="ray",
        # the worker process reads its settings from here: no live moves, as in-process
        # (a move is a new placement: attempts would count it)
        ROLLMUX_CONSOLIDATION=str(settings.ROLLMUX_CONSOLIDATION).lower(),
        ROLLMUX_DRIFT_REPLAN=str(settings.ROLLMUX_DRIFT_REPLAN).lower(),
    )
    return env


def _start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    from django.conf import settings  # the controller's queues: phase events, then the rest

    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "rollmux_web", "worker", "-P", "threads",
         "-c", "2", "-Q", ",".join(settings.ROLLMUX_CONTROLLER_QUEUES), "-l", "INFO", "--without-mingle", "--without-gossip"],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip


@pytest.mark.ray
@pytest.mark.celery
@pytest.mark.slow
def test_killing_the_celery_worker_mid_phase_loses_and_doubles_nothing(
    world: Any, ray_workflow: Any, ray_cluster: str, settings: Any, tmp_path: Path
) -> None:
    env = _worker_env(ray_cluster, settings)
    log = tmp_path / "worker.log"
    worker = _start_worker(env, log)
    try:
        jobs = [make_job(world, name=f"k{i}", iterations=8, time_scale=600.0) for i in range(3)]
        ids = [j.pk for j in jobs]
        triggers.request_planning()
        try:
            wait_for(
                lambda: (
                    sum(Job.objects.filter(pk__in=ids).values_list("iterations_done", flat=True))
                    >= 3
                ),
                timeout=90,
            )
        except AssertionError:
            raise AssertionError(log.read_text()[-4000:]) from None
        worker.send_signal(signal.SIGKILL)  # no warm shutdown: in-flight tasks are not acked
        worker.wait(timeout=10)
        running = PhaseRecord.objects.filter(job_id__in=ids, state=PhaseState.RUNNING).count()
        assert running >= 1, "the worker must die while phases run"
        time.sleep(1.0)  # phases end meanwhile; their actors' reports wait in Redis
        worker = _start_worker(env, log)
        # beat's reconcile (every 15 s in production) recovers what the dead worker held
        deadline = time.monotonic() + 120
        while not all_done(ids)() and time.monotonic() < deadline:
            services.phases_reconcile(grace_s=3.0)
            time.sleep(1.0)
        assert all_done(ids)(), log.read_text()[-3000:]
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
    for job in Job.objects.filter(pk__in=ids):
        assert job.status == JobStatus.COMPLETED
        assert job.attempts == 1, "no phase was lost, so no job was resubmitted"
        records = PhaseRecord.objects.filter(job=job)
        assert set(records.values_list("state", flat=True)) == {PhaseState.SUCCEEDED}
        assert sorted(records.values_list("iteration", "kind")) == sorted(
            (i, k) for i in range(8) for k in ("rollout", "train")
        ), "every phase ran exactly once"


class RecordingDispatcher:
    """Dispatches nothing (the race test is about planning only)."""

    def __init__(self) -> None:
        self.orders: list[Any] = []

    def dispatch(self, order: Any) -> None:
        self.orders.append(order)

    def probe(self, order: Any) -> Probe:
        return Probe("running")

    def release(self, job_id: int, placement_id: int) -> None: ...

    def kill(self, job_id: int, placement_id: int) -> None: ...


def test_two_planners_racing_never_put_two_jobs_on_the_same_capacity(world: Any) -> None:
    with ports.override(dispatcher=RecordingDispatcher()):
        for round_ in range(3):
            for i in range(6):
                make_job(
                    world,
                    name=f"r{round_}-{i}",
                    slo_class=world.bronze if i % 2 else world.gold,
                    t_roll_max_s=60.0 + 30 * i,
                    t_roll_min_s=50.0,
                    host_mem_gb=700.0,
                )
            barrier = threading.Barrier(2)
            results: list[Any] = []

            def planner(barrier: threading.Barrier = barrier, results: list[Any] = results) -> None:
                barrier.wait()
                try:
                    results.append(services.queue_plan())
                finally:
                    connection.close()

            threads = [threading.Thread(target=planner) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert len(results) == 2 and any(r.ran for r in results)
            placed = [j for r in results for j in r.placed]
            assert len(placed) == len(set(placed)), "a job placed twice"
            _assert_capacity_consistent()


def _assert_capacity_consistent() -> None:
    open_allocs = list(NodeAllocation.objects.filter(end__isnull=True).select_related("node"))
    holder = {}
    for a in open_allocs:
        assert a.node.name not in holder, f"{a.node.name} allocated to two groups"
        holder[a.node.name] = a.group_id
    mem: dict[str, float] = defaultdict(float)
    per_job: dict[int, int] = defaultdict(int)
    for p in Placement.objects.filter(ended_at__isnull=True).select_related("job"):
        per_job[p.job_id] += 1
        for n in list(p.rollout_nodes.all()) + list(p.train_nodes.all()):
            assert holder.get(n.name) == p.group_id, f"{n.name} not held by group {p.group_id}"
            mem[n.name] += p.job.host_mem_gb
    assert all(v == 1 for v in per_job.values())
    for name, used in mem.items():
        assert used <= 2048, f"residency broken on {name}: {used} GB"


@pytest.mark.ray
@pytest.mark.celery
def test_reports_lost_with_redis_are_recovered_by_reconcile(
    world: Any, ray_workflow: Any, settings: Any
) -> None:
    """A Redis restart without persistence loses the queued phase reports; beat's reconcile
    asks each job's actor for the phases it finished and applies them: no manual step."""
    import redis
    from celery.contrib.testing.worker import start_worker

    from rollmux_web.celery import app

    jobs = [make_job(world, name=f"x{i}", iterations=3) for i in range(2)]
    ids = [j.pk for j in jobs]
    services.queue_plan()  # no worker yet: the first phases run and report into Redis
    phase_queue = settings.ROLLMUX_PHASE_QUEUE  # where the actors' phase ends go
    wait_for(lambda: redis.Redis.from_url(settings.REDIS_URL).llen(phase_queue) >= 2, timeout=30)
    redis.Redis.from_url(settings.REDIS_URL).flushdb()  # the restart: every message gone
    running = PhaseRecord.objects.filter(job_id__in=ids, state=PhaseState.RUNNING).count()
    assert running == 2, "both first phases ended on their actors but nobody knows yet"
    with start_worker(
        app, pool="threads", concurrency=2, perform_ping_check=False,
        queues=list(settings.ROLLMUX_CONTROLLER_QUEUES),
    ):  # fmt: skip
        summary = services.phases_reconcile(grace_s=0.0)
        assert len(summary.recovered) == 2
        wait_for(all_done(ids), timeout=60)
    for job in Job.objects.filter(pk__in=ids):
        assert job.status == JobStatus.COMPLETED and job.attempts == 1
        assert PhaseRecord.objects.filter(job=job, state=PhaseState.SUCCEEDED).count() == 6
