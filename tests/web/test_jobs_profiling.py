"""A job submitted without phase times is profiled first (issue 13 items 1, 2, bad input).

The end-to-end test runs on PostgreSQL with a real Celery worker consuming Redis and the
inline dispatcher (phases on threads): Ray adds nothing to what profiling decides.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from rollmux_web import ports
from rollmux_web.inventory.models import Node
from rollmux_web.inventory.services import runner_package_create
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.jobs.services import JobRejected, job_submit
from rollmux_web.workflow.models import (
    ExecutionGroup,
    NodeAllocation,
    PhaseRecord,
    PhaseState,
    Placement,
    Strategy,
)
from rollmux_web.workflow.services import queue_plan
from tests.factories import job_spec
from tests.web import profile_runners
from tests.workers.builders import Recorder, all_done, end_of, wait_for

HTMX = {"HTTP_HX_REQUEST": "true"}
TIMES = ("t_roll_max_s", "t_roll_min_s", "t_train_max_s", "t_train_min_s")


@pytest.fixture
def recorder(settings: Any) -> Iterator[Recorder]:
    """A dispatcher that records the orders (nothing runs)."""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    rec = Recorder()
    with ports.override(dispatcher=rec):
        yield rec


@pytest.fixture
def committed(django_capture_on_commit_callbacks: Any) -> Any:
    """Return a function that runs a service and then its on-commit effects (dispatch)."""

    def run(fn: Any, *args: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args)

    return run


def unprofiled(**overrides: Any) -> dict[str, Any]:
    """A valid spec without its four phase times."""
    spec = {k: v for k, v in job_spec(**overrides).items() if k not in TIMES}
    return spec


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({"t_roll_max_s": 120.0}, ["t_train_max_s"]),
        ({"t_train_max_s": 100.0, "t_train_min_s": 80.0}, ["t_roll_max_s"]),
        ({"t_roll_min_s": 90.0}, ["t_roll_max_s", "t_train_max_s"]),
        ({"t_roll_min_s": 90.0, "t_train_min_s": 80.0}, ["t_roll_max_s", "t_train_max_s"]),
    ],
)
def test_some_but_not_all_phase_times_are_refused_naming_the_missing_fields(
    api_as: Any, world: Any, given: dict[str, float], missing: list[str]
) -> None:
    resp = api_as("alice").post("/api/v1/jobs/", unprofiled() | given, format="json")
    assert resp.status_code == 400
    fields = resp.json()["error"]["fields"]
    assert sorted(fields) == missing
    for name in missing:
        (message,) = fields[name]
        assert message.startswith(f"Required when other phase times are given ({', '.join(given)})")
        assert "leave all four phase times out to have the job profiled first" in message
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_a_min_above_its_max_is_still_refused(api_as: Any, world: Any) -> None:
    resp = api_as("alice").post("/api/v1/jobs/", job_spec(t_roll_min_s=500.0), format="json")
    assert resp.json()["error"]["fields"] == {
        "t_roll_min_s": ["Must be at most t_roll_max_s (120 s), got 500 s."]
    }


# --- submission ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_job_without_phase_times_is_profiling_on_every_channel(
    api_as: Any, client_as: Any, world: Any
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    resp = api_as("alice").post("/api/v1/jobs/", unprofiled(name="by-api"), format="json")
    assert resp.status_code == 201
    body = resp.json()
    assert body["status"] == "profiling" and body["duration_source"] is None
    assert body["t_roll_max_s"] is None and body["measured"] == {}
    assert body["reason"].startswith("profiling: waiting")
    c = client_as("alice")
    form = {k: str(v) for k, v in unprofiled(name="by-form").items()}
    form |= dict.fromkeys(TIMES, "")  # the four boxes cleared
    assert c.post("/jobs/new/", form).status_code == 302
    upload = json.dumps(unprofiled(name="by-file")).encode()
    resp = c.post("/jobs/upload/", {"file": SimpleUploadedFile("s.json", upload)})
    assert resp.status_code == 302
    for name in ("by-api", "by-form", "by-file"):
        job = Job.objects.get(name=name)
        assert job.status == JobStatus.PROFILING and job.duration_source == ""
    page = c.get(f"/jobs/{Job.objects.get(name='by-form').pk}/").content.decode()
    assert "its profiling run measures them" in page and "profiling" in page
    # a job with its phase times skips the profile: queued, declared
    declared = job_submit(user=world.alice, spec=job_spec(), channel="t")
    assert declared.status == JobStatus.QUEUED and declared.duration_source == "declared"


@pytest.mark.django_db
def test_a_profiling_job_counts_against_the_gpu_cap(world: Any) -> None:
    from rollmux_web.quotas.models import Quota

    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, max_gpus=8)
    job_submit(user=world.alice, spec=unprofiled(), channel="t")
    with pytest.raises(JobRejected) as refused:
        job_submit(user=world.bob, spec=job_spec(), channel="t")
    assert refused.value.code == "quota_exceeded"


# --- the profiling run, decided (a recording dispatcher) --------------------------------------


@pytest.mark.django_db
def test_a_profile_waits_for_free_nodes_of_its_shape_with_its_reason(
    world: Any, recorder: Recorder, committed: Any, client_as: Any
) -> None:
    # every H800 node is taken by a group: the profile (8 + 8 GPUs) waits, and says so
    group = ExecutionGroup.objects.create()
    now = timezone.now()
    for node in Node.objects.filter(name__startswith="h800"):
        NodeAllocation.objects.create(node=node, group=group, start=now)
    job = job_submit(user=world.alice, spec=unprofiled(rollout_gpus=16), channel="t")
    committed(queue_plan)
    job.refresh_from_db()
    assert job.status == JobStatus.PROFILING and recorder.orders == []
    assert job.reason == (
        "profiling: waiting for 1 free H800 node (0 free now); a profiling run has its nodes "
        "to itself"
    )
    overview = client_as("alice").get("/").content.decode()  # the overview's waiting list
    assert "profiling: waiting for 1 free H800 node" in overview
    # one node frees: the profile starts alone on 2 H20 + 1 H800 nodes, its runner told so
    NodeAllocation.objects.filter(node__name="h800-2").update(end=now)
    committed(queue_plan)
    job.refresh_from_db()
    placement = Placement.objects.get(job=job)
    assert placement.strategy == Strategy.PROFILE
    assert sorted(n.name for n in placement.rollout_nodes.all()) == ["h20-0", "h20-1"]
    assert [n.name for n in placement.train_nodes.all()] == ["h800-2"]
    (order,) = recorder.orders
    assert order.kind == "rollout" and order.context["profile"] is True
    assert job.status == JobStatus.PROFILING and job.reason.startswith("profiling: running 1")


@pytest.mark.django_db
def test_the_planner_packs_nothing_into_a_profile_and_its_nodes_are_not_free(
    world: Any, recorder: Recorder, committed: Any
) -> None:
    profiled = job_submit(user=world.alice, spec=unprofiled(), channel="t")
    committed(queue_plan)
    profile = Placement.objects.get(job=profiled)
    # a declared job that would direct-pack with anything: it gets other nodes, its own group
    other = job_submit(user=world.bob, spec=job_spec(slo_class="bronze"), channel="t")
    committed(queue_plan)
    placement = Placement.objects.get(job=other)
    assert placement.group_id != profile.group_id
    held = {n.name for n in profile.rollout_nodes.all()} | {
        n.name for n in profile.train_nodes.all()
    }
    mine = {n.name for n in placement.rollout_nodes.all()} | {
        n.name for n in placement.train_nodes.all()
    }
    assert not held & mine


@pytest.mark.django_db
def test_the_profile_s_measured_times_become_the_estimates(
    world: Any, recorder: Recorder, committed: Any
) -> None:
    from rollmux_web.workflow.services import phase_finish

    job = job_submit(user=world.alice, spec=unprofiled(time_scale=100.0), channel="t")
    committed(queue_plan)
    (rollout,) = recorder.orders
    committed(phase_finish, end_of(rollout))  # end_of: started 1 s before it finished
    train = recorder.orders[1]
    assert train.kind == "train" and train.context["profile"] is True
    report = end_of(train)
    assert report.finished_at is not None
    committed(phase_finish, replace(report, started_at=report.finished_at - 0.5))
    job.refresh_from_db()
    # 1 s and 0.5 s wall-clock at time scale 100: 100 and 50 profile seconds
    assert job.duration_source == "profiled" and job.status == JobStatus.QUEUED
    assert round(job.t_roll_max_s, 1) == round(job.t_roll_min_s, 1) == 100.0
    assert round(job.t_train_max_s, 1) == round(job.t_train_min_s, 1) == 50.0
    assert job.reason.startswith("profiled (1 iteration at the maximum token length")
    assert job.iterations_done == 0  # the profile is no training iteration
    profile = Placement.objects.get(job=job, strategy=Strategy.PROFILE)
    assert profile.end_reason == "profiled" and profile.ended_at is not None
    assert not NodeAllocation.objects.filter(group=profile.group, end__isnull=True).exists()


# --- end to end: PostgreSQL, Redis, a Celery worker, the inline dispatcher -------------------


@pytest.fixture
def celery_inline(settings: Any, tmp_path: Path) -> Iterator[Path]:
    """The workflow with phases on threads, its reports through Redis to a Celery worker."""
    import os

    import redis
    from celery.contrib.testing.worker import start_worker

    from rollmux_web.celery import app
    from workers.composition import deliver_report
    from workers.dispatch.inline import InlineDispatcher

    settings.ROLLMUX_CHECKPOINT_DIR = str(tmp_path / "ckpt")
    settings.ROLLMUX_EMBEDDED_BEAT = False
    log = tmp_path / "runner.jsonl"
    os.environ["ROLLMUX_TEST_RUNNER_LOG"] = str(log)
    dispatcher = InlineDispatcher(on_report=deliver_report)
    redis.Redis.from_url(settings.REDIS_URL).flushdb()  # no stale task of an earlier run
    try:
        with (
            ports.override(dispatcher=dispatcher),
            start_worker(
                app,
                pool="threads",
                concurrency=2,
                perform_ping_check=False,
                shutdown_timeout=20,
                queues=list(settings.ROLLMUX_CONTROLLER_QUEUES),
            ),
        ):
            yield log
    finally:
        dispatcher.shutdown()
        os.environ.pop("ROLLMUX_TEST_RUNNER_LOG", None)


@pytest.mark.slow
@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_job_without_phase_times_is_profiled_then_placed_and_completes(
    world: Any, celery_inline: Path
) -> None:
    runner_package_create(actor=world.admin, path="tests.web.profile_runners")
    spec = unprofiled(
        runner="tests.web.profile_runners:MeasuredRunner", time_scale=100.0, iterations=3
    )
    job = job_submit(user=world.alice, spec=spec, channel="api")
    assert job.status == JobStatus.PROFILING
    ports.request_planning()
    wait_for(all_done([job.pk]), timeout=60)
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED, job.reason
    assert job.iterations_done == 3 and job.duration_source == "profiled"
    # the estimates are the profile's measurement: 0.3 s and 0.2 s wall-clock x 100
    assert 30.0 <= job.t_roll_max_s < 30.0 + 0.5 * 100
    assert 20.0 <= job.t_train_max_s < 20.0 + 0.5 * 100
    profile, run = Placement.objects.filter(job=job).order_by("created_at")
    assert (profile.strategy, profile.end_reason) == (Strategy.PROFILE, "profiled")
    assert run.strategy != Strategy.PROFILE and run.end_reason == "completed"
    assert profile.group_id != run.group_id
    # the profile is recorded like any phase: one rollout and one training, succeeded
    assert sorted(
        PhaseRecord.objects.filter(placement=profile).values_list("iteration", "kind", "state")
    ) == [(0, "rollout", PhaseState.SUCCEEDED), (0, "train", PhaseState.SUCCEEDED)]
    ran = PhaseRecord.objects.filter(placement=run, state=PhaseState.SUCCEEDED)
    assert ran.filter(kind__in=("rollout", "train")).count() == 6  # (and its weight syncs)
    # billed: its nodes were allocated to its group while it ran, and released
    allocs = NodeAllocation.objects.filter(group=profile.group)
    assert allocs.count() == 2 and all(a.end is not None for a in allocs)
    # the runner was told when it was profiled, and only then
    calls = [json.loads(line) for line in celery_inline.read_text().splitlines()]
    assert [c[1:] for c in calls if c[3]] == [["rollout", 0, True], ["train", 0, True]]
    assert len([c for c in calls if not c[3]]) == 6
    # the API and the job page show the estimates with their source and what was measured
    assert job.t_roll_max_s >= profile_runners.ROLLOUT_S * 100


@pytest.mark.django_db
def test_a_runner_that_cannot_be_loaded_fails_its_profile_once_not_forever(
    world: Any, recorder: Recorder, committed: Any
) -> None:
    # a load error is the job's runner (not importable, no longer allowlisted): the same
    # code fails the same way on any node, so the profile is not run again (it was, as if
    # its host had been lost)
    from rollmux_web.workflow.services import phase_finish

    job = job_submit(user=world.alice, spec=unprofiled(time_scale=100.0), channel="t")
    committed(queue_plan)
    (rollout,) = recorder.orders
    committed(phase_finish, end_of(rollout, outcome=ports.Outcome.LOAD_ERROR, reason="no module"))
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.error == "load-error: no module"
    assert job.reason.startswith("failed in its profiling run (not retried")
    (placement,) = Placement.objects.filter(job=job)
    assert placement.end_reason == "failed"
    committed(queue_plan)
    assert len(recorder.orders) == 1  # nothing dispatched again


@pytest.mark.slow
@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_runner_failing_its_profile_fails_the_job_after_one_attempt(
    world: Any, celery_inline: Path
) -> None:
    runner_package_create(actor=world.admin, path="tests.web.profile_runners")
    spec = unprofiled(runner="tests.web.profile_runners:FailsWhenProfiled", time_scale=100.0)
    job = job_submit(user=world.alice, spec=spec, channel="api")
    ports.request_planning()
    wait_for(all_done([job.pk]), timeout=60)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "CUDA out of memory at 32768 tokens" in job.error
    assert job.reason.startswith("failed in its profiling run (not retried")
    (placement,) = Placement.objects.filter(job=job)  # one attempt, not three placements
    assert placement.strategy == Strategy.PROFILE and placement.end_reason == "failed"
    assert not NodeAllocation.objects.filter(end__isnull=True).exists()


# --- the submit form: what a profile means, and the tenant's history -------------------------


def _finished_run(world: Any, *, user: str, rollout_s: list[float], train_s: list[float]) -> Job:
    """A completed job of qwen2.5-7b on 8+8 whose phases took these wall-clock seconds."""
    job = job_submit(user=world.user(user), spec=job_spec(time_scale=10.0), channel="t")
    group = ExecutionGroup.objects.create()
    placement = Placement.objects.create(job=job, group=group, strategy="new_group")
    t0 = timezone.now()
    for kind, durations in (("rollout", rollout_s), ("train", train_s)):
        for i, secs in enumerate(durations):
            PhaseRecord.objects.create(
                job=job,
                group=group,
                placement=placement,
                iteration=i,
                kind=kind,
                state=PhaseState.SUCCEEDED,
                queued_at=t0,
                started_at=t0,
                finished_at=t0 + timedelta(seconds=secs),
            )
    Job.objects.filter(pk=job.pk).update(status=JobStatus.COMPLETED, finished_at=t0)
    return job


@pytest.mark.django_db
def test_the_form_suggests_phase_times_from_the_tenants_completed_runs(
    client_as: Any, world: Any
) -> None:
    # two of vision's runs (x time scale 10: rollout 95-120 s, training 80-100 s) and one of
    # speech's, which alice may not see and which must not count
    _finished_run(world, user="alice", rollout_s=[9.5, 11.0], train_s=[8.0, 9.0])
    _finished_run(world, user="bob", rollout_s=[12.0], train_s=[10.0])
    _finished_run(world, user="charlie", rollout_s=[50.0], train_s=[50.0])
    query = {"tenant": "vision", "model": "qwen2.5-7b", "rollout_gpus": "8", "train_gpus": "8"}
    html = client_as("alice").get("/jobs/new/preview/", query, **HTMX).content.decode()
    assert (
        "last 2 runs of qwen2.5-7b on 8+8: rollout 95-120 s, training 80-100 s (profile seconds)"
    ) in html
    # the four phase times left blank: the preview says the job is profiled first
    assert 'id="profiled-first"' in html and "1 iteration alone" in html
    # another shape or model has no history; charlie's own is his
    other = client_as("alice").get("/jobs/new/preview/", {**query, "train_gpus": "16"}, **HTMX)
    assert "history-suggestion" not in other.content.decode()
    mine = (
        client_as("charlie")
        .get("/jobs/new/preview/", {**query, "tenant": "speech"}, **HTMX)
        .content.decode()
    )
    assert "the last run of qwen2.5-7b on 8+8: rollout 500-500 s" in mine


@pytest.mark.django_db
def test_the_planner_preview_says_a_job_without_phase_times_is_profiled_first(
    client_as: Any, world: Any
) -> None:
    query = {k: str(v) for k, v in unprofiled().items()} | dict.fromkeys(TIMES, "")
    html = client_as("alice").get("/whatif/preview/", query, **HTMX).content.decode()
    assert "No phase times: the job is profiled first" in html
    # some but not all: the planner's preview asks for the rest, as the submission does
    html = (
        client_as("alice")
        .get("/whatif/preview/", {**query, "t_roll_max_s": "100"}, **HTMX)
        .content.decode()
    )
    assert "Fill in Training max (s)" in html  # the form's label, not t_train_max_s


# --- drift (issue 13 item 4: the live marking) -------------------------------------------------


@pytest.mark.django_db
def test_a_job_whose_recent_phases_run_past_its_worst_case_is_drifting(
    api_as: Any, client_as: Any, world: Any
) -> None:
    # declared: rollout at most 120 s; at time scale 10 its last 3 rollouts took 13, 14 and
    # 15 s wall-clock = 140 s mean in profile time; its trainings (max 100 s) 8-9 s: fine
    job = job_submit(user=world.alice, spec=job_spec(time_scale=10.0), channel="t")
    group = ExecutionGroup.objects.create()
    placement = Placement.objects.create(job=job, group=group, strategy="new_group")
    nodes = Node.objects.filter(name__in=("h20-0", "h800-0"))
    placement.rollout_nodes.set([n for n in nodes if n.name == "h20-0"])
    placement.train_nodes.set([n for n in nodes if n.name == "h800-0"])
    t0 = timezone.now() - timedelta(seconds=500)
    for node in nodes:
        NodeAllocation.objects.create(node=node, group=group, start=t0)
    for i, (roll, train) in enumerate([(9.0, 8.0), (13.0, 9.0), (14.0, 8.5), (15.0, 9.0)]):
        for kind, secs in (("rollout", roll), ("train", train)):
            PhaseRecord.objects.create(
                job=job,
                group=group,
                placement=placement,
                iteration=i,
                kind=kind,
                state=PhaseState.SUCCEEDED,
                queued_at=t0,
                started_at=t0 + timedelta(seconds=100 * i),
                finished_at=t0 + timedelta(seconds=100 * i + secs),
            )
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    body = api_as("alice").get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["drift"] == [
        {"kind": "rollout", "recent_mean_s": 140.0, "worst_case_s": 120.0, "window": 3}
    ]
    listed = api_as("alice").get("/api/v1/jobs/").json()["results"]
    assert listed[0]["drift"] == body["drift"]
    html = client_as("alice").get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="job-drift"' in html
    assert "rollout: mean 140.0 s over its last 3 phases, above its worst case 120.0 s" in html
    # ... and on the overview's list of jobs that need a look
    overview = client_as("alice").get("/").content.decode()
    assert 'id="drifting"' in overview and "rollout: mean 140.0 s" in overview
    # a job within its estimates is not
    other = job_submit(user=world.alice, spec=job_spec(), channel="t")
    assert api_as("alice").get(f"/api/v1/jobs/{other.pk}/").json()["drift"] == []


@pytest.mark.django_db
def test_a_real_runs_history_suggests_its_own_sub_second_times_not_its_cold_start(
    client_as: Any, world: Any
) -> None:
    # QA pass 12: after a real hf-grpo run (llama-0.1M: rollouts 0.05-0.07 s but its first,
    # cold, 6.7 s of which 6.63 s were its workers' set-up; trainings 0.08-0.19 s) the form
    # suggested "rollout 0-7 s, training 0-0 s": whole seconds, and the set-up counted as
    # rollout time (the profile and the drift checks leave it out).
    job = _finished_run(
        world, user="alice", rollout_s=[6.7, 0.066, 0.047], train_s=[0.12, 0.19, 0.077]
    )
    Job.objects.filter(pk=job.pk).update(runner="hf-grpo", time_scale=1.0)
    first = PhaseRecord.objects.get(job=job, kind="rollout", iteration=0)
    first.metrics = {"load_s": 6.63}
    first.save(update_fields=["metrics"])
    query = {"tenant": "vision", "model": "qwen2.5-7b", "rollout_gpus": "8", "train_gpus": "8"}
    html = client_as("alice").get("/jobs/new/preview/", query, **HTMX).content.decode()
    assert "rollout 0.047-0.07 s, training 0.077-0.19 s (profile seconds)" in html
