"""Lifecycle and failure handling with the in-process dispatcher (no Ray), on PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import rollmux
from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow import services
from rollmux_web.workflow.models import (
    ExecutionGroup,
    NodeAllocation,
    PhaseRecord,
    PhaseState,
    Placement,
)
from tests.workers.builders import all_done, make_job, wait_for
from workers import triggers
from workers.runners import RunnerLoadError, runner_class, validate_runner_name

pytestmark = pytest.mark.django_db(transaction=True)


def succeeded_iterations(job: Job) -> list[tuple[int, str]]:
    return sorted(
        PhaseRecord.objects.filter(job=job, state=PhaseState.SUCCEEDED).values_list(
            "iteration", "kind"
        )
    )


def full_run(iterations: int) -> list[tuple[int, str]]:
    return sorted((i, k) for i in range(iterations) for k in ("rollout", "train"))


def test_runner_error_resubmits_and_resumes_from_last_completed_iteration(
    world: Any, inline_workflow: Any
) -> None:
    job = make_job(world, runner="tests.workers.user_runners:FlakyRunner", iterations=4)
    triggers.request_planning()
    wait_for(all_done([job.pk]))
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert job.attempts == 2
    placements = list(Placement.objects.filter(job=job).order_by("attempt"))
    assert [p.end_reason for p in placements] == ["failed", "completed"]
    failed = PhaseRecord.objects.get(job=job, state=PhaseState.FAILED)
    assert (failed.iteration, failed.kind) == (1, "train")
    assert "illegal memory access" in failed.outcome
    # the second attempt starts at iteration 1 (iteration 0 was completed) and runs no
    # completed iteration again
    second = PhaseRecord.objects.filter(placement=placements[1]).order_by("started_at")
    assert (second[0].iteration, second[0].kind) == (1, "rollout")
    # iteration 1's rollout ran in both attempts (its iteration never completed); every
    # training, i.e. every completed iteration, ran exactly once
    done = succeeded_iterations(job)
    assert sorted(set(done)) == full_run(4)
    assert [d for d in done if d[1] == "train"] == [(i, "train") for i in range(4)]
    assert not NodeAllocation.objects.filter(end__isnull=True).exists()


def test_a_job_failing_every_attempt_fails_with_its_error(
    world: Any, inline_workflow: Any, settings: Any
) -> None:
    settings.ROLLMUX_MAX_ATTEMPTS = 2
    job = make_job(world, runner="tests.workers.user_runners:BrokenRunner")
    triggers.request_planning()
    wait_for(all_done([job.pk]))
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.attempts == 2
    assert "reward model unreachable" in job.error
    assert "failed 2 times (limit 2)" in job.reason
    assert not NodeAllocation.objects.filter(end__isnull=True).exists()


def test_cancel_stops_at_the_next_phase_boundary_and_frees_nodes(
    world: Any, inline_workflow: Any
) -> None:
    job = make_job(world, iterations=50, time_scale=400.0)
    other = make_job(world, iterations=3)
    triggers.request_planning()
    wait_for(lambda: Job.objects.get(pk=job.pk).iterations_done >= 1)
    Job.objects.filter(pk=job.pk).update(cancel_requested=True)
    triggers.request_cancel(job.pk)
    wait_for(all_done([job.pk, other.pk]))
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert job.iterations_done < 50
    assert Job.objects.get(pk=other.pk).status == JobStatus.COMPLETED
    # no phase of the cancelled job was cut short: every record ended as succeeded
    assert set(PhaseRecord.objects.filter(job=job).values_list("state", flat=True)) == {
        PhaseState.SUCCEEDED
    }
    assert Placement.objects.get(job=job).end_reason == "cancelled"
    assert not NodeAllocation.objects.filter(end__isnull=True).exists()
    assert not ExecutionGroup.objects.filter(released_at__isnull=True).exists()


def test_a_node_going_down_resubmits_the_jobs_pinned_to_it(
    world: Any, inline_workflow: Any
) -> None:
    job = make_job(world, iterations=12)
    triggers.request_planning()
    wait_for(lambda: Job.objects.get(pk=job.pk).iterations_done >= 2)
    first = Placement.objects.get(job=job)
    node = first.train_nodes.get()
    Node.objects.filter(pk=node.pk).update(state=NodeState.DOWN)
    triggers.node_state_changed(node.pk)
    wait_for(all_done([job.pk]))
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    first.refresh_from_db()
    assert first.end_reason == "node_down"
    second = Placement.objects.get(job=job, attempt=2)
    assert node not in second.train_nodes.all() and node not in second.rollout_nodes.all()
    assert sorted(set(succeeded_iterations(job))) == full_run(12)
    assert not NodeAllocation.objects.filter(node=node, end__isnull=True).exists()


def test_infeasible_job_fails_with_the_planner_reason(world: Any, inline_workflow: Any) -> None:
    job = make_job(world, host_mem_gb=5000.0)
    summary = services.queue_plan()
    job.refresh_from_db()
    assert job.pk in summary.infeasible
    assert job.status == JobStatus.FAILED
    assert "host_mem_gb=5000 exceeds" in job.reason


def test_a_job_waits_with_a_reason_when_the_pools_are_full(
    world: Any, inline_workflow: Any
) -> None:
    big = make_job(world, rollout_gpus=32, train_gpus=32, iterations=200, time_scale=100.0)
    waiting = make_job(world, rollout_gpus=8, train_gpus=8, slo_class=world.gold)
    services.queue_plan()
    waiting.refresh_from_db()
    assert Job.objects.get(pk=big.pk).status in (JobStatus.PLACED, JobStatus.RUNNING)
    assert waiting.status == JobStatus.QUEUED
    assert "free" in waiting.reason
    Job.objects.filter(pk=big.pk).update(cancel_requested=True)
    triggers.request_cancel(big.pk)
    wait_for(all_done([big.pk, waiting.pk]))
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.COMPLETED


def test_rollmux_phase_drives_an_external_trainer(
    world: Any, inline_workflow: Any, clean_broker: None, settings: Any
) -> None:
    job = make_job(world, runner="external", iterations=3)
    # the control channel is Redis, as the external runner on the controller's side uses
    session = rollmux.PhaseSession(job.pk, redis_url=settings.REDIS_URL, timeout_s=30)
    seen: list[tuple[str, int]] = []

    @session.phase("train")
    def train_step() -> None:
        seen.append(("train", -1))

    def trainer() -> None:
        for _ in range(3):
            with session.phase("rollout") as grant:
                seen.append(("rollout", grant.iteration))
                grant.metrics["reward"] = 0.5
            train_step()

    thread = threading.Thread(target=trainer)
    thread.start()
    triggers.request_planning()
    wait_for(all_done([job.pk]))
    thread.join(timeout=10)
    assert Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED
    assert [s for s in seen if s[0] == "rollout"] == [
        ("rollout", 0),
        ("rollout", 1),
        ("rollout", 2),
    ]
    rollout = PhaseRecord.objects.get(job=job, kind="rollout", iteration=2)
    assert rollout.metrics["reward"] == 0.5


def test_runner_names_are_validated() -> None:
    assert validate_runner_name("emulated") is None
    assert validate_runner_name("tests.workers.user_runners:FlakyRunner") is None
    assert "import path" in (validate_runner_name("rm -rf") or "")
    assert "cannot import" in (validate_runner_name("nope.nothing:X") or "")
    assert "lacks the runner methods: rollout" in (
        validate_runner_name("tests.workers.user_runners:NotARunner") or ""
    )
    with pytest.raises(RunnerLoadError):
        runner_class("tests.workers.user_runners:Missing")


def test_the_web_app_knows_every_builtin_runner_by_name() -> None:
    # the web app validates submissions against its own copy of the names (it may not
    # import workers): the copy must be the registry's, and each name must load
    from rollmux_web.jobs import runners as web_runners
    from rollmux_web.jobs import spec
    from workers.runners import BUILTIN_RUNNERS

    assert spec.BUILTIN_RUNNERS == BUILTIN_RUNNERS
    for name in spec.BUILTIN_RUNNERS:
        assert validate_runner_name(name) is None, name
    assert set(web_runners.EMULATING_RUNNERS) <= set(BUILTIN_RUNNERS)


def test_reconcile_redispatches_a_phase_whose_dispatch_was_lost(
    world: Any, inline_workflow: Any
) -> None:
    from rollmux_web import ports
    from tests.workers.test_faults import RecordingDispatcher

    job = make_job(world, iterations=2)
    with ports.override(dispatcher=RecordingDispatcher()):  # the process "dies" after commit
        services.queue_plan()
    assert PhaseRecord.objects.get(job=job).state == PhaseState.RUNNING
    summary = services.phases_reconcile(grace_s=0.0)
    assert summary.redispatched == [PhaseRecord.objects.get(job=job).pk]
    wait_for(all_done([job.pk]))
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED and job.attempts == 1
