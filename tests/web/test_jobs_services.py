"""Job submission and cancellation services on PostgreSQL: validation, quotas, budgets, rules."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.utils import timezone

from rollmux_web.audit.models import AuditEntry
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.jobs.services import JobRejected, job_cancel, job_submit
from rollmux_web.quotas.models import Quota
from tests.factories import job_spec

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    # the personas' PBKDF2 hashing dominated setup time; these tests do not log in
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def rejected(world: Any, user: str = "alice", **overrides: Any) -> JobRejected:
    before = Job.objects.count()
    with pytest.raises(JobRejected) as info:
        job_submit(user=world.user(user), spec=job_spec(**overrides), channel="test")
    assert Job.objects.count() == before, "a rejected submission must save nothing"
    return info.value


def test_submit_creates_a_queued_job_with_audit_and_defaults(world: Any, monkeypatch: Any) -> None:
    calls: list[str] = []
    monkeypatch.setattr("workers.triggers.request_planning", lambda: calls.append("plan"))
    spec = job_spec()
    del spec["t_roll_min_s"], spec["t_train_min_s"]
    job = job_submit(user=world.alice, spec=spec, channel="test")
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert job.tenant == world.vision  # alice's only tenant
    assert job.submitter == world.alice
    assert job.slo_class == world.silver
    assert (job.t_roll_min_s, job.t_train_min_s) == (120.0, 100.0)  # default to the max
    entry = AuditEntry.objects.get(action="job.submit", object_id=str(job.pk))
    assert entry.actor == world.alice and entry.tenant == "vision"
    assert entry.after["rollout_gpus"] == 8 and entry.after["channel"] == "test"
    # on_commit hooks do not fire inside the test transaction
    assert calls == []


def test_submit_requests_planning_after_commit(
    world: Any, monkeypatch: Any, django_capture_on_commit_callbacks: Any
) -> None:
    calls: list[str] = []
    monkeypatch.setattr("workers.triggers.request_planning", lambda: calls.append("plan"))
    with django_capture_on_commit_callbacks(execute=True):
        job_submit(user=world.alice, spec=job_spec(), channel="test")
    assert calls == ["plan"]


@pytest.mark.parametrize(
    ("overrides", "field", "needle"),
    [
        ({"rollout_gpus": 0}, "rollout_gpus", "positive"),
        ({"train_gpus": -8}, "train_gpus", "positive"),
        ({"rollout_gpus": 12}, "rollout_gpus", "multiple of 8"),
        ({"train_gpus": 4}, "train_gpus", "multiple of 8"),
        ({"t_roll_min_s": 200.0}, "t_roll_min_s", "at most t_roll_max_s"),
        ({"t_train_min_s": 101.0}, "t_train_min_s", "at most t_train_max_s"),
        ({"slo_class": "platinum"}, "slo_class", "Unknown SLO class"),
        ({"host_mem_gb": 4096}, "host_mem_gb", "more than any"),
        ({"host_mem_gb": 0}, "host_mem_gb", "Must be at least 0.001 (GB)"),
        ({"iterations": "many"}, "iterations", "Enter a whole number"),
        ({"iterations": 0}, "iterations", "Must be at least 1"),
        ({"iterations": True}, "iterations", "Enter a whole number"),
        ({"rollout_gpus": 8.5}, "rollout_gpus", "Enter a whole number"),
        ({"t_roll_max_s": "slow"}, "t_roll_max_s", "Enter a number"),
        ({"t_train_max_s": -1}, "t_train_max_s", "Must be at least 0.001 (seconds)"),
        ({"time_scale": 0}, "time_scale", "at least 0.01"),
        ({"time_scale": 1e-300}, "time_scale", "at least 0.01 (speed-up factor)"),
        ({"time_scale": 2e6}, "time_scale", "Must be at most 1,000,000 (speed-up factor)"),
        ({"tenant": "nosuch"}, "tenant", "Unknown tenant"),
        ({"tenant": "speech"}, "tenant", "Unknown tenant"),  # exists, but not alice's
        ({"runner": "rm -rf /"}, "runner", "Unknown runner"),
        ({"runner": "pkg.mod"}, "runner", "Unknown runner"),
        ({"name": ""}, "name", "This field is required."),
        ({"name": "x" * 200}, "name", "128"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_bad_field_is_refused_naming_the_field(
    world: Any, overrides: dict[str, Any], field: str, needle: str
) -> None:
    err = rejected(world, **overrides)
    assert err.code == "invalid"
    assert field in err.fields, err.fields
    assert needle in " ".join(err.fields[field]), err.fields[field]
    assert err.message.startswith(f"{field}: ")


def test_missing_required_fields_are_each_named(world: Any) -> None:
    with pytest.raises(JobRejected) as info:
        job_submit(user=world.alice, spec={"name": "x"}, channel="test")
    for field in ("slo_class", "iterations", "rollout_gpus", "train_gpus", "host_mem_gb"):
        assert field in info.value.fields
    # the phase times are not required: a spec without them is profiled (issue 13)
    assert "t_roll_max_s" not in info.value.fields
    assert Job.objects.count() == 0


def test_a_runner_import_path_is_accepted_only_when_the_allowlist_covers_it(
    world: Any,
) -> None:
    from rollmux_web.inventory.services import runner_package_create

    # issue 11 item 8: any importable path was accepted, and imported in the job's worker
    for path in ("my_lab.rl.runners:GrpoRunner", "subprocess:Popen", "rollmux_web.settings:X"):
        err = rejected(world, runner=path)
        assert err.code == "invalid" and list(err.fields) == ["runner"], err.fields
        assert "is not on the allowlist" in err.fields["runner"][0]
        assert "registered: none yet" in err.fields["runner"][0]
    runner_package_create(actor=world.admin, path="my_lab.rl")  # a package: any class under it
    job = job_submit(
        user=world.alice, spec=job_spec(runner="my_lab.rl.runners:GrpoRunner"), channel="t"
    )
    assert job.runner == "my_lab.rl.runners:GrpoRunner"
    assert "registered: my_lab.rl" in rejected(world, runner="my_lab.rlx:Grpo").fields["runner"][0]
    runner_package_create(actor=world.admin, path="other.mod:OnlyThis")  # one class
    job_submit(user=world.alice, spec=job_spec(runner="other.mod:OnlyThis"), channel="t")
    assert "runner" in rejected(world, runner="other.mod:Another").fields
    assert "runner" in rejected(world, runner="subprocess:Popen").fields


def test_nothing_is_imported_when_a_runner_is_checked(world: Any) -> None:
    import sys

    from rollmux_web.inventory.services import runner_package_create

    runner_package_create(actor=world.admin, path="never_imported_pkg")
    job_submit(user=world.alice, spec=job_spec(runner="never_imported_pkg.m:R"), channel="t")
    rejected(world, runner="also_never_imported:R")
    assert "never_imported_pkg" not in sys.modules and "also_never_imported" not in sys.modules


@pytest.mark.parametrize("runner", ["emulated", "toy-rl", "external"])
def test_every_builtin_runner_is_accepted(world: Any, runner: str) -> None:
    job = job_submit(user=world.alice, spec=job_spec(runner=runner), channel="t")
    assert job.runner == runner


def test_tenant_is_required_when_the_user_has_several(world: Any) -> None:
    world.alice.profile.tenants.add(world.speech)
    err = rejected(world)
    assert "required" in err.fields["tenant"][0]
    job = job_submit(user=world.alice, spec=job_spec(tenant="speech"), channel="t")
    assert job.tenant == world.speech


def test_admin_must_name_a_tenant_and_may_use_any(world: Any) -> None:
    err = rejected(world, user="admin")
    assert "tenant" in err.fields
    job = job_submit(user=world.admin, spec=job_spec(tenant="speech"), channel="t")
    assert job.tenant == world.speech


def test_finance_cannot_submit(world: Any) -> None:
    with pytest.raises(PermissionDenied):
        job_submit(user=world.finance, spec=job_spec(tenant="vision"), channel="t")
    assert Job.objects.count() == 0


def test_gpu_cap_refusal_says_which_limit_its_value_and_the_ask(world: Any) -> None:
    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, max_gpus=32)
    for _ in range(3):
        job_submit(user=world.alice, spec=job_spec(train_gpus=8), channel="t")
    # 24 H800 GPUs in use by vision; a running job of bob counts too
    err = rejected(world, user="bob", train_gpus=16)
    assert err.code == "quota_exceeded"
    assert err.message.startswith(
        "quota: vision may use at most 32 H800 GPUs at once; its live jobs (profiling, queued, placed or "
        "running) request 24; this job asks for 16. "
    )
    # what would free it: 8 GPUs (one of alice's 8-GPU jobs ending), or a quota of 40
    first = Job.objects.filter(tenant=world.vision).order_by("pk").first()
    assert err.message.endswith(
        "It fits once vision's live jobs release 8 H800 GPUs (one finishes or is cancelled, "
        f"e.g. #{first.pk} grpo-7b with 8) or an admin raises the quota to 40 (see /quotas/)."
    )
    assert err.fields["train_gpus"] == [err.message]
    # 8 more still fit; finished jobs stop counting
    job_submit(user=world.bob, spec=job_spec(train_gpus=8), channel="t")
    Job.objects.filter(tenant=world.vision).update(status=JobStatus.COMPLETED)
    job_submit(user=world.bob, spec=job_spec(train_gpus=16), channel="t")


def test_other_tenants_jobs_do_not_count_against_a_quota(world: Any) -> None:
    Quota.objects.create(tenant=world.vision, gpu_type=world.h20, max_gpus=8)
    job_submit(user=world.charlie, spec=job_spec(rollout_gpus=16), channel="t")
    job_submit(user=world.alice, spec=job_spec(rollout_gpus=8), channel="t")
    err = rejected(world, rollout_gpus=8)
    assert (
        "at most 8 H20 GPUs at once; its live jobs (profiling, queued, placed or running) request 8; "
        "this job asks for 8"
    ) in err.message


def _phase_history(world: Any, *, hours: float, kind: str = "train", gpus: int = 8) -> Job:
    """Create a finished job with one phase record of `hours` this month."""
    from rollmux_web.workflow.models import ExecutionGroup, PhaseRecord, Placement

    job = job_submit(user=world.alice, spec=job_spec(train_gpus=gpus), channel="t")
    Job.objects.filter(pk=job.pk).update(status=JobStatus.COMPLETED)
    group = ExecutionGroup.objects.create()
    placement = Placement.objects.create(job=job, group=group, strategy="new_group")
    now = timezone.now()
    # wholly inside this month even in its first hours (a phase may end "later" in a test)
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = max(now, month_start + timedelta(hours=hours + 1))
    PhaseRecord.objects.create(
        job=job,
        group=group,
        placement=placement,
        iteration=0,
        kind=kind,
        state="succeeded",
        queued_at=end - timedelta(hours=hours),
        started_at=end - timedelta(hours=hours),
        finished_at=end,
    )
    return job


def test_monthly_gpu_hour_budget_counts_usage_and_the_worst_case_estimate(world: Any) -> None:
    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, monthly_gpu_hours=100)
    _phase_history(world, hours=10, gpus=8)  # 80 H800 GPU-hours used
    # job_spec: 3 iterations x 100 s x 8 GPUs = 0.67 GPU-hours: fits
    job_submit(user=world.alice, spec=job_spec(), channel="t")
    # 100 iterations x 100 s x 8 GPUs = 22.2 GPU-hours: 80 + 22.2 > 100
    err = rejected(world, iterations=100)
    assert err.code == "budget_exceeded"
    assert "at most 100 H800 GPU-hours this month; its jobs used 80.0 so far" in err.message
    assert "up to 22.2" in err.message
    # 20 GPU-hours left / (100 s x 8 GPUs) per iteration = 90 iterations
    assert err.message.endswith(
        "It fits with at most 90 iterations, next month, or once an admin raises the budget to "
        "102.2 GPU-hours (see /quotas/)."
    )


def test_monthly_dollar_budget_uses_the_current_price(world: Any) -> None:
    Quota.objects.create(tenant=world.vision, gpu_type=world.h20, monthly_budget_usd=Decimal(50))
    # 40 iterations x 120 s x 8 H20 GPUs = 10.67 GPU-hours x $1.85 = $19.73: fits
    job_submit(user=world.alice, spec=job_spec(iterations=40), channel="t")
    # 100 iterations: 26.67 GPU-hours x $1.85 = $49.33 ... still fits alone
    job_submit(user=world.alice, spec=job_spec(iterations=100), channel="t")
    # 120 iterations: $59.20 > $50
    err = rejected(world, iterations=120)
    assert "may spend at most $50.00 on H20 this month; its jobs used $0.00 so far" in err.message
    assert "up to $59.20" in err.message
    # $50 / (120 s x 8 GPUs x $1.85/h = $0.49) per iteration = 101 iterations
    assert err.message.endswith(
        "It fits with at most 101 iterations, next month, or once an admin raises the budget "
        "to $59.20 (see /quotas/)."
    )


def test_usage_before_this_month_does_not_count(world: Any) -> None:
    from rollmux_web.workflow.models import PhaseRecord

    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, monthly_gpu_hours=10)
    job = _phase_history(world, hours=100)
    month_start = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    PhaseRecord.objects.filter(job=job).update(
        started_at=month_start - timedelta(days=10), finished_at=month_start - timedelta(days=1)
    )
    # 100 H800 GPU-hours last month against a 10 GPU-hour quota: admitted all the same.
    submitted = job_submit(user=world.alice, spec=job_spec(), channel="t")
    assert submitted.status == JobStatus.QUEUED


# --- cancel -----------------------------------------------------------------


def test_cancel_of_a_queued_job_is_immediate_and_audited(world: Any) -> None:
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    out = job_cancel(user=world.bob, job_id=job.pk)  # same tenant
    assert out.status == JobStatus.CANCELLED and out.finished_at is not None
    entry = AuditEntry.objects.get(action="job.cancel", object_id=str(job.pk))
    assert entry.before["status"] == "queued" and entry.after["status"] == "cancelled"


@pytest.mark.parametrize("status", [JobStatus.PLACED, JobStatus.RUNNING])
def test_cancel_of_a_running_job_requests_a_stop_after_commit(
    world: Any, status: str, monkeypatch: Any, django_capture_on_commit_callbacks: Any
) -> None:
    asked: list[int] = []
    monkeypatch.setattr("workers.triggers.request_cancel", asked.append)
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    Job.objects.filter(pk=job.pk).update(status=status)
    with django_capture_on_commit_callbacks(execute=True):
        out = job_cancel(user=world.admin, job_id=job.pk)
    assert out.status == status and out.cancel_requested
    assert asked == [job.pk]
    # asking again is harmless and does not ask the workflow twice
    job_cancel(user=world.alice, job_id=job.pk)
    assert AuditEntry.objects.filter(action="job.cancel").count() == 1


@pytest.mark.parametrize("status", [JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED])
def test_cancel_of_a_finished_job_is_a_clear_conflict(world: Any, status: str) -> None:
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    Job.objects.filter(pk=job.pk).update(status=status)
    with pytest.raises(JobRejected) as info:
        job_cancel(user=world.alice, job_id=job.pk)
    assert info.value.http_status == 409
    assert f"already {status}" in info.value.message


def test_cancel_rules_by_persona(world: Any) -> None:
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    with pytest.raises(Http404):
        job_cancel(user=world.charlie, job_id=job.pk)
    with pytest.raises(PermissionDenied):
        job_cancel(user=world.finance, job_id=job.pk)
    assert Job.objects.get(pk=job.pk).status == JobStatus.QUEUED


def test_submission_counter_counts_committed_submissions_only(
    world: Any, django_capture_on_commit_callbacks: Any, monkeypatch: Any
) -> None:
    from rollmux_web.metrics import SUBMISSIONS

    monkeypatch.setattr("workers.triggers.request_planning", lambda: None)
    counter = SUBMISSIONS.labels("vision", "counted")
    before = counter._value.get()
    with django_capture_on_commit_callbacks(execute=True):
        job_submit(user=world.alice, spec=job_spec(), channel="counted")
    with pytest.raises(JobRejected):
        job_submit(user=world.alice, spec=job_spec(iterations=0), channel="counted")
    assert counter._value.get() == before + 1


def test_an_external_job_is_refused_naming_the_runner_when_the_server_has_no_redis(
    world: Any, settings: Any
) -> None:
    # QA pass 12: under `make run` (embedded: no Redis) an `external` job was placed and held
    # its nodes while its trainer (examples/trl_grpo.py, as docs/training-metrics.md runs it)
    # waited on Redis for a grant the controller pushed to an in-process queue: it could
    # never run a phase. The phase API's channel is the server's Redis.
    settings.REDIS_URL = ""
    err = rejected(world, runner="external")
    assert err.code == "invalid" and list(err.fields) == ["runner"], err.fields
    assert "REDIS_URL" in err.fields["runner"][0]
    for runner in ("emulated", "toy-rl"):  # the others need no channel
        job_submit(user=world.alice, spec=job_spec(runner=runner), channel="t")
