"""Training metrics per iteration (issue 21 item 2): what a phase end stores, one curve
across a job's placements, and the API that serves it (scoped by tenant)."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from rollmux_web.jobs.models import JobStatus
from rollmux_web.ports import TRAINING_METRICS
from rollmux_web.workflow.models import (
    ExecutionGroup,
    IterationMetrics,
    PhaseRecord,
    PhaseState,
    Placement,
)
from rollmux_web.workflow.services.training_metrics import (
    iteration_metrics_record,
    training_metrics_of,
)
from tests.workers.builders import all_done, make_job, wait_for
from workers import triggers

pytestmark = pytest.mark.django_db(transaction=True)


def _rows(job: Any) -> list[tuple[int, int, float | None, float | None]]:
    return list(
        IterationMetrics.objects.filter(job=job)
        .order_by("iteration")
        .values_list("iteration", "placement__attempt", "reward_mean", "loss")
    )


def test_the_model_has_a_column_for_every_training_metric_of_the_contract() -> None:
    assert IterationMetrics.METRICS == TRAINING_METRICS
    columns = {f.name for f in IterationMetrics._meta.get_fields()}
    assert set(TRAINING_METRICS) <= columns


def test_only_finite_numbers_of_the_known_names_are_training_metrics() -> None:
    got = training_metrics_of(
        {"reward_mean": 0.5, "loss": float("nan"), "kl": float("inf"), "samples": 16,
         "entropy": True, "reward": 0.5, "load_s": 0.1, "tokens_per_s": "fast"}
    )  # fmt: skip
    assert got == {"reward_mean": 0.5, "samples": 16.0}


def test_toy_rl_reports_a_reward_per_iteration_stored_with_the_iteration(
    world: Any, inline_workflow: Any
) -> None:
    job = make_job(world, runner="toy-rl", iterations=5)
    triggers.request_planning()
    wait_for(all_done([job.pk]))
    assert job.__class__.objects.get(pk=job.pk).status == JobStatus.COMPLETED
    rows = list(IterationMetrics.objects.filter(job=job).order_by("iteration"))
    assert [r.iteration for r in rows] == [0, 1, 2, 3, 4]
    for row in rows:
        rollout = PhaseRecord.objects.get(job=job, iteration=row.iteration, kind="rollout")
        # the row holds what the rollout reported, with its iteration
        assert row.reward_mean == pytest.approx(rollout.metrics["reward"])
        assert row.reward_std is not None and row.samples == rollout.metrics["responses"]
        assert row.loss is None  # toy-rl's training reports no loss


def test_a_resubmitted_jobs_curve_is_one_curve_and_its_rerun_iteration_the_latest_attempts(
    world: Any, inline_workflow: Any
) -> None:
    # iteration 1's training fails in the first attempt (its rollout had reported a
    # reward); the job resumes at iteration 1 in a second placement
    job = make_job(world, runner="tests.workers.user_runners:FlakyToyRL", iterations=4)
    triggers.request_planning()
    wait_for(all_done([job.pk]))
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED and job.attempts == 2
    rows = _rows(job)
    assert [(it, attempt) for it, attempt, _, _ in rows] == [(0, 1), (1, 2), (2, 2), (3, 2)]
    # iteration 1 has the second attempt's reward, not the first's
    second = Placement.objects.get(job=job, attempt=2)
    rerun = PhaseRecord.objects.get(placement=second, iteration=1, kind="rollout")
    assert rows[1][2] == pytest.approx(rerun.metrics["reward"])


def _placement(job: Any, group: ExecutionGroup, attempt: int) -> Placement:
    return Placement.objects.create(
        job=job, group=group, strategy="direct_packing", attempt=attempt
    )


def test_the_latest_attempt_wins_and_a_late_report_of_an_earlier_one_is_ignored(
    world: Any,
) -> None:
    job = make_job(world, runner="toy-rl", iterations=5)
    group = ExecutionGroup.objects.create()
    first, second = _placement(job, group, 1), _placement(job, group, 2)
    now = timezone.now()

    def record(placement: Placement, metrics: dict[str, float]) -> bool:
        return iteration_metrics_record(
            job_id=job.pk, placement_id=placement.pk, iteration=2, metrics=metrics, now=now
        )

    assert record(first, {"reward_mean": 0.1, "reward_std": 0.3})
    assert record(first, {"loss": 1.5})  # its training: merged into the same row
    assert _rows(job) == [(2, 1, 0.1, 1.5)]
    record(first, {"loss": 1.5})  # a replayed report changes nothing
    assert _rows(job) == [(2, 1, 0.1, 1.5)]
    assert record(second, {"reward_mean": 0.4})  # a later attempt ran it again
    # its values replace the row: no loss of the first attempt's training left in it
    assert _rows(job) == [(2, 2, 0.4, None)]
    row = IterationMetrics.objects.get(job=job)
    assert row.reward_std is None
    record(first, {"loss": 9.0, "reward_mean": 0.0})  # a late report of the first attempt
    assert _rows(job) == [(2, 2, 0.4, None)]
    record(second, {"loss": 0.7})
    assert _rows(job) == [(2, 2, 0.4, 0.7)]
    assert not record(second, {"reward": 1.0, "load_s": 0.2})  # no training metric: no row


@pytest.fixture
def two_tenants(world: Any) -> dict[str, Any]:
    group = ExecutionGroup.objects.create()
    mine = make_job(world, name="alice-grpo")
    theirs = make_job(world, name="charlie-secret", tenant=world.speech, submitter=world.charlie)
    now = timezone.now()
    for job in (mine, theirs):
        p = _placement(job, group, 1)
        for it in range(3):
            iteration_metrics_record(
                job_id=job.pk,
                placement_id=p.pk,
                iteration=it,
                metrics={"reward_mean": 0.2 * it, "loss": 1.0 - 0.1 * it, "samples": 32},
                now=now,
            )
    return {"mine": mine, "theirs": theirs}


def test_a_jobs_metrics_are_served_per_iteration_to_its_tenant(
    api_as: Any, two_tenants: Any
) -> None:
    r = api_as("bob").get(f"/api/v1/jobs/{two_tenants['mine'].pk}/metrics/")
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["count"] == 3
    first, *_, last = body["results"]
    assert first["iteration"] == 0 and last["iteration"] == 2
    assert last["reward_mean"] == pytest.approx(0.4) and last["loss"] == pytest.approx(0.8)
    assert last["attempt"] == 1 and last["samples"] == 32 and last["kl"] is None


def test_another_tenants_job_metrics_are_404(api_as: Any, two_tenants: Any) -> None:
    r = api_as("alice").get(f"/api/v1/jobs/{two_tenants['theirs'].pk}/metrics/")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"
    assert api_as("alice").get("/api/v1/jobs/abc/metrics/").status_code == 404
    assert (
        api_as("charlie").get(f"/api/v1/jobs/{two_tenants['theirs'].pk}/metrics/").json()["count"]
        == 3
    )


def test_a_failed_phase_stores_no_training_metrics(world: Any) -> None:
    from rollmux_web.ports import Outcome, PhaseReport
    from rollmux_web.workflow.services.controller import phase_finish

    job = make_job(world, runner="toy-rl")
    group = ExecutionGroup.objects.create()
    p = _placement(job, group, 1)
    now = timezone.now()
    phase = PhaseRecord.objects.create(
        job=job, group=group, placement=p, iteration=0, kind="rollout", queued_at=now,
        started_at=now, state=PhaseState.RUNNING,
    )  # fmt: skip
    report = PhaseReport(
        phase.pk, Outcome.ERROR, reason="boom", metrics={"reward_mean": 0.9},
        group_id=group.pk, job_id=job.pk,
    )  # fmt: skip
    phase_finish(report)
    assert not IterationMetrics.objects.filter(job=job).exists()
