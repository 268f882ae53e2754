"""Fair-share preemption end to end (issue 22): a tenant over its nominal quota borrows
idle capacity; a job of another tenant within its nominal quota arrives; the borrower is
checkpointed at an iteration boundary, yields, the newcomer runs, the borrower resumes
later from its checkpoint and completes. The inline test runs the services in one process
(emulated runner on threads); the Ray one on PostgreSQL, Redis, a Celery worker and Ray.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.utils.html import escape

from rollmux_web import events
from rollmux_web.audit.models import AuditEntry
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.quotas.models import Quota
from rollmux_web.workflow.models import EndReason, Placement
from tests.workers.builders import all_done, make_job, wait_for
from tests.workers.test_moves import (
    assert_iterations_once,
    assert_no_node_double_booked,
    assert_resumed,
)
from workers import triggers

pytestmark = pytest.mark.django_db(transaction=True)

# 1,500 GB resident per job on 2,048 GB nodes: two jobs never share a node, so the
# newcomer can only run on nodes the borrower gives back
RESIDENT_GB = 1500.0


@pytest.fixture
def shares(world: Any, settings: Any) -> None:
    """4 H20 + 4 H800 nodes of 8 GPUs; vision and speech each a nominal 16 of both types,
    vision may borrow 16 more; preemption at once (no minimum run, no grace)."""
    settings.ROLLMUX_PREEMPT_MIN_RUN_S = 0.0
    settings.ROLLMUX_PREEMPT_GRACE_S = 0.0
    for tenant in (world.vision, world.speech):
        for gt in (world.h20, world.h800):
            Quota.objects.create(
                tenant=tenant,
                gpu_type=gt,
                max_gpus=16,
                borrowing_limit=16 if tenant == world.vision else 0,
            )


def preemption_scenario(world: Any, *, scale: float, iterations: int) -> tuple[Job, Job]:
    """vision's borrower takes the whole cluster (32 + 32 GPUs: 16 of each borrowed); then
    speech's job within its nominal quota (16 + 16) arrives. Return (borrower, newcomer)."""
    borrower = make_job(
        world,
        name="borrower",
        rollout_gpus=32,
        train_gpus=32,
        iterations=iterations,
        host_mem_gb=RESIDENT_GB,
        time_scale=scale,
    )
    triggers.request_planning()
    wait_for(
        lambda: Job.objects.filter(pk=borrower.pk, iterations_done__gte=1).exists(), timeout=120
    )
    newcomer = make_job(
        world,
        name="newcomer",
        tenant=world.speech,
        submitter=world.charlie,
        rollout_gpus=16,
        train_gpus=16,
        iterations=2,
        host_mem_gb=RESIDENT_GB,
        time_scale=scale,
    )
    triggers.request_planning()
    return borrower, newcomer


def assert_preempted_and_resumed(
    world: Any, borrower: Job, newcomer: Job, client_as: Any, timeout: float
) -> None:
    """The whole story, checked on the rows, the pages, the audit and the notification."""
    wait_for(
        lambda: Placement.objects.filter(job=borrower, end_reason=EndReason.PREEMPTED).exists(),
        timeout=timeout,
    )
    left = Placement.objects.get(job=borrower, end_reason=EndReason.PREEMPTED)
    assert left.preempted_for_id == newcomer.pk
    at = int(left.move_reason.split("preempted at iteration ")[1].split(" ")[0])
    assert left.move_reason == (
        f"preempted at iteration {at} for another tenant's job, which is within its "
        "tenant's nominal H20/H800 quota; queued to resume from its checkpoint"
    )
    wait_for(all_done([borrower.pk, newcomer.pk]), timeout=timeout)
    borrower.refresh_from_db()
    newcomer.refresh_from_db()
    assert borrower.status == newcomer.status == JobStatus.COMPLETED, (
        borrower.reason,
        newcomer.reason,
    )
    # the newcomer ran on the nodes the borrower gave back, before the borrower resumed
    theirs = Placement.objects.get(job=newcomer)
    assert theirs.created_at >= left.ended_at
    after = Placement.objects.get(job=borrower, attempt=left.attempt + 1)
    assert after.created_at >= theirs.ended_at
    # resumed at its next iteration from its checkpoint; no iteration lost or run twice;
    # no failure counted (only `failed` ends burn attempts)
    first = assert_resumed(left, after)
    assert first.iteration == at
    assert_iterations_once(borrower)
    assert_iterations_once(newcomer)
    assert not Placement.objects.filter(job=borrower, end_reason=EndReason.FAILED).exists()
    assert_no_node_double_booked()
    # the job page: its owner reads the masked reason; an admin reads the job it yielded to
    html = client_as("alice").get(f"/jobs/{borrower.pk}/").content.decode()
    assert escape(left.move_reason) in html
    assert f"#{newcomer.pk}" not in html and "newcomer" not in html
    html = client_as("admin").get(f"/jobs/{borrower.pk}/").content.decode()
    assert escape(f"for job #{newcomer.pk} of speech, which is within") in html
    assert "resumed at" in html
    # the audit (admins only) names both jobs; the notification is `job.preempted`
    entry = AuditEntry.objects.get(action="job.preempt", object_id=str(borrower.pk))
    assert entry.after["for_job"] == newcomer.pk and entry.after["kind"] == "reclaim"
    assert entry.after["iterations_done"] == at and entry.tenant == "vision"
    assert AuditEntry.objects.filter(
        action="job.preempt_request", object_id=str(borrower.pk)
    ).exists()


def test_inline_a_borrower_yields_to_a_job_within_its_nominal_quota_and_resumes(
    world: Any, shares: None, inline_workflow: Any, client_as: Any
) -> None:
    seen: list[events.Event] = []
    events.subscribe(seen.append)
    try:
        borrower, newcomer = preemption_scenario(world, scale=1000.0, iterations=40)
        assert_preempted_and_resumed(world, borrower, newcomer, client_as, timeout=120)
    finally:
        events.unsubscribe(seen.append)
    preempted = [e for e in seen if e.kind == events.JOB_PREEMPTED]
    assert [e.job_id for e in preempted] == [borrower.pk]
    assert "preempted at iteration" in preempted[0].detail["reason"]


@pytest.mark.ray
@pytest.mark.celery
def test_a_borrower_yields_on_ray_and_resumes_from_its_checkpoint(
    world: Any, shares: None, celery_worker_thread: Any, client_as: Any
) -> None:
    # at 200x a 120 s rollout sleeps 0.6 s: the borrower is still running when the
    # newcomer arrives, whatever the Ray start-up costs on a loaded machine
    borrower, newcomer = preemption_scenario(world, scale=200.0, iterations=12)
    assert_preempted_and_resumed(world, borrower, newcomer, client_as, timeout=300)
