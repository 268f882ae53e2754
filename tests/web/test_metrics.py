"""Prometheus /metrics: names by convention, gauges from the database, the workflow's
admission / wait / switch / resubmission series, API latency, access."""

from __future__ import annotations

from decimal import Decimal

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.metrics import route_label
from rollmux_web.metrics_db import reason_class
from rollmux_web.quotas.models import Quota
from tests.factories import job_spec
from tests.workers.builders import Recorder, end_of, make_job

pytestmark = pytest.mark.django_db


def _samples(client, **headers):
    resp = client.get("/metrics", **headers)
    assert resp.status_code == 200
    out = {}
    for family in text_string_to_metric_families(resp.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _job(world, tenant, user, status):
    return Job.objects.create(
        name="j",
        tenant=tenant,
        submitter=user,
        slo_class=world.silver,
        status=status,
        iterations=1,
        rollout_gpus=8,
        train_gpus=8,
        t_roll_max_s=1,
        t_roll_min_s=1,
        t_train_max_s=1,
        t_train_min_s=1,
        host_mem_gb=1,
    )


def test_live_jobs_are_a_gauge_and_finished_jobs_a_counter(client, world):
    for _ in range(3):
        _job(world, world.vision, world.alice, JobStatus.RUNNING)
    _job(world, world.speech, world.charlie, JobStatus.QUEUED)
    s = _samples(client)
    assert s[("rollmux_jobs", (("status", "running"), ("tenant", "vision")))] == 3
    assert s[("rollmux_jobs", (("status", "queued"), ("tenant", "speech")))] == 1
    assert s[("rollmux_jobs", (("status", "placed"), ("tenant", "vision")))] == 0
    # final states are all-time totals, never mixed into the live gauge
    assert not any(k[0] == "rollmux_jobs" and ("status", "completed") in k[1] for k in s)
    assert s[("rollmux_jobs_finished_total", (("status", "failed"), ("tenant", "vision")))] == 0
    Job.objects.filter(tenant=world.vision).update(status=JobStatus.COMPLETED)
    s = _samples(client)
    assert s[("rollmux_jobs", (("status", "running"), ("tenant", "vision")))] == 0
    assert s[("rollmux_jobs_finished_total", (("status", "completed"), ("tenant", "vision")))] == 3


def test_node_and_price_per_gpu_hour_gauges(client, world):
    Node.objects.filter(name="h800-0").update(state="down")
    s = _samples(client)
    assert s[("rollmux_nodes", (("gpu_type", "H800"), ("state", "down")))] == 1
    assert s[("rollmux_nodes", (("gpu_type", "H800"), ("state", "up")))] == 3
    assert s[("rollmux_nodes", (("gpu_type", "H20"), ("state", "up")))] == 4
    assert s[("rollmux_gpu_price_dollars_per_gpu_hour", (("gpu_type", "H800"),))] == 5.28
    pool = (("gpu_type", "H800"), ("kind", "train"), ("pool", "train-pool"))
    assert s[("rollmux_pool_gpus", pool)] == 24  # the down node is no capacity


@pytest.mark.parametrize(
    ("reason", "klass"),
    [
        ("", "not_planned"),
        (
            "needs 4 free H20 nodes, 3 free, and no existing co-execution group can take it now",
            "capacity",
        ),
        (
            "needs 2 free H800 nodes, 1 free; 2 drained nodes take no new work, and no existing "
            "co-execution group can take it now",
            "drained",
        ),
        (
            "needs 1 free H20 node, 0 free (3 free in all, 0 with 900 GB host memory room), and "
            "no existing co-execution group can take it now",
            "host_memory",
        ),
        ("resubmitted: node h800-1 went down; resumes at iteration 4", "resubmitted"),
        ("waiting: no training pool is configured", "no_pool"),
        ("something new", "other"),
    ],
)
def test_reason_classes(reason, klass):
    assert reason_class(reason) == klass


def _run_plan(capture):
    from rollmux_web.workflow.services import queue_plan

    with capture(execute=True):
        return queue_plan()


def test_a_planning_pass_exports_admissions_waits_pools_cost_and_quota(
    client, world, settings, django_capture_on_commit_callbacks
):
    from rollmux_web import ports

    settings.CELERY_TASK_ALWAYS_EAGER = True
    rec = Recorder()
    previous_ports = ports.configure(dispatcher=rec)
    try:
        Quota.objects.create(
            tenant=world.vision, gpu_type=world.h800, max_gpus=40, monthly_budget_usd=Decimal("100")
        )
        before = {r: _value("rollmux_admission_attempts_total", result=r) for r in ("fit", "retry")}
        waits = _value("rollmux_admission_wait_time_seconds_count", slo_class="silver")
        decisions = _value("rollmux_admission_attempt_duration_seconds_count", result="fit")
        small = make_job(world, name="small")
        big = make_job(world, name="big", rollout_gpus=32, train_gpus=32)
        summary = _run_plan(django_capture_on_commit_callbacks)
        assert summary.placed == [small.pk] and big.pk in summary.waiting
        assert _value("rollmux_admission_attempts_total", result="fit") == before["fit"] + 1
        assert _value("rollmux_admission_attempts_total", result="retry") == before["retry"] + 1
        assert (
            _value("rollmux_admission_attempt_duration_seconds_count", result="fit")
            == decisions + 1
        )
        assert _value("rollmux_admission_wait_time_seconds_count", slo_class="silver") == waits + 1

        s = _samples(client)
        roll = (("gpu_type", "H20"), ("kind", "rollout"), ("pool", "rollout-pool"))
        train = (("gpu_type", "H800"), ("kind", "train"), ("pool", "train-pool"))
        # the small job holds one node per pool; its first rollout runs, training waits
        assert s[("rollmux_pool_gpus_allocated", roll)] == 8
        assert s[("rollmux_pool_gpus_allocated", train)] == 8
        assert s[("rollmux_pool_gpus_busy", roll)] == 8
        assert s[("rollmux_pool_gpus_busy", train)] == 0
        assert s[("rollmux_pool_bubble_ratio", roll)] == 0.0
        assert s[("rollmux_pool_bubble_ratio", train)] == 1.0
        assert (
            s[("rollmux_pending_jobs", (("reason_class", "capacity"), ("tenant", "vision")))] == 1
        )
        assert (
            s[("rollmux_pending_jobs", (("reason_class", "capacity"), ("tenant", "speech")))] == 0
        )
        # 8 x $1.85 + 8 x $5.28 per hour, all the small job's
        assert s[
            ("rollmux_tenant_cost_dollars_per_hour", (("tenant", "vision"),))
        ] == pytest.approx(57.04)
        assert s[("rollmux_tenant_cost_dollars_per_hour", (("tenant", "speech"),))] == 0
        quota = (("gpu_type", "H800"), ("tenant", "vision"))
        assert s[("rollmux_quota_gpus_limit", quota)] == 40
        assert s[("rollmux_quota_gpus_requested", quota)] == 8 + 32  # queued jobs count
        assert s[("rollmux_quota_budget_dollars_limit", quota)] == 100
        assert ("rollmux_quota_gpu_hours_limit", quota) not in s  # no limit set: no series

        # the rollout ends: the controller dispatches the training phase (a switch)
        from rollmux_web.workflow.services import phase_finish

        switches = _value("rollmux_phase_switch_latency_seconds_count")
        with django_capture_on_commit_callbacks(execute=True):
            assert phase_finish(end_of(rec.orders[0]))
        assert rec.orders[-1].kind == "train"
        assert _value("rollmux_phase_switch_latency_seconds_count") == switches + 1
    finally:
        ports.restore(previous_ports)


def test_a_node_down_counts_a_resubmission_and_the_move_a_migration(
    client, world, settings, django_capture_on_commit_callbacks
):
    from rollmux_web import ports
    from rollmux_web.workflow.models import Placement
    from rollmux_web.workflow.services import node_down_resubmit

    settings.CELERY_TASK_ALWAYS_EAGER = True
    previous_ports = ports.configure(dispatcher=Recorder())
    try:
        job = make_job(world, name="mover")
        _run_plan(django_capture_on_commit_callbacks)
        first = Placement.objects.get(job=job)
        node = first.train_nodes.get()
        resubmitted = _value("rollmux_job_resubmissions_total", reason="node_down")
        Node.objects.filter(pk=node.pk).update(state=NodeState.DOWN)
        with django_capture_on_commit_callbacks(execute=True):
            assert node_down_resubmit(node_id=node.pk) == [job.pk]
        assert _value("rollmux_job_resubmissions_total", reason="node_down") == resubmitted + 1
        _run_plan(django_capture_on_commit_callbacks)
        second = Placement.objects.get(job=job, attempt=2)
        assert second.group_id != first.group_id
        s = _samples(client)
        assert s[("rollmux_job_migrations_total", (("tenant", "vision"),))] == 1
        assert s[("rollmux_job_migrations_total", (("tenant", "speech"),))] == 0
    finally:
        ports.restore(previous_ports)


def test_submission_counter_increments_after_commit(
    api_as, client, world, django_capture_on_commit_callbacks
):
    labels = {"tenant": "vision", "channel": "api"}
    before = REGISTRY.get_sample_value("rollmux_job_submissions_total", labels) or 0.0
    with django_capture_on_commit_callbacks(execute=True):
        resp = api_as("alice").post("/api/v1/jobs/", job_spec(), format="json")
    assert resp.status_code == 201, resp.content
    after = REGISTRY.get_sample_value("rollmux_job_submissions_total", labels)
    assert after == before + 1
    assert (
        _samples(client)[
            ("rollmux_job_submissions_total", (("channel", "api"), ("tenant", "vision")))
        ]
        == after
    )


def test_api_duration_histogram_labels_the_route_not_the_path(api_as, world):
    labels = {"method": "GET", "route": "api/v1/me/", "status": "200"}
    name = "rollmux_api_request_duration_seconds"
    before = REGISTRY.get_sample_value(f"{name}_count", labels) or 0.0
    api = api_as("bob")
    api.get("/api/v1/me/")
    api.get("/api/v1/me/")
    assert REGISTRY.get_sample_value(f"{name}_count", labels) == before + 2
    node = Node.objects.first()
    api.get(f"/api/v1/nodes/{node.pk}/")
    routes = {s.labels["route"] for m in REGISTRY.collect() if m.name == name for s in m.samples}
    assert not any(str(node.pk) + "/" in r.split("nodes/")[-1] for r in routes if "nodes/" in r)
    # router (regex) and path() routes read alike: no ^, $ or regex groups
    assert "api/v1/nodes/<pk>/" in routes
    assert not any(set(r) & {"^", "$", "(", "?"} for r in routes)


@pytest.mark.parametrize(
    ("route", "label"),
    [
        ("api/v1/jobs/", "api/v1/jobs/"),
        ("api/v1/quotas/$", "api/v1/quotas/"),
        ("api/v1/^nodes/(?P<pk>[^/.]+)/$", "api/v1/nodes/<pk>/"),
        ("api/v1/jobs/<int:pk>/cancel/", "api/v1/jobs/<int:pk>/cancel/"),
    ],
)
def test_route_labels_have_one_spelling(route, label):
    assert route_label(route) == label


def test_metrics_token_when_configured(client, world, settings):
    settings.ROLLMUX_METRICS_TOKEN = "scrape-token-0123456789"
    resp = client.get("/metrics")
    assert resp.status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert (
        client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token-0123456789").status_code
        == 200
    )


def test_metrics_open_without_a_token(client, world):
    assert client.get("/metrics").status_code == 200
