"""Prometheus /metrics: job gauges from the database, submissions, API latency, access."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from rollmux_web.inventory.models import Node
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.metrics import route_label
from tests.factories import job_spec

pytestmark = pytest.mark.django_db


def _samples(client, **headers):
    resp = client.get("/metrics", **headers)
    assert resp.status_code == 200
    out = {}
    for family in text_string_to_metric_families(resp.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


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


def test_job_gauge_counts_jobs_by_status_and_tenant_with_zeros(client, world):
    for _ in range(3):
        _job(world, world.vision, world.alice, JobStatus.RUNNING)
    _job(world, world.speech, world.charlie, JobStatus.QUEUED)
    s = _samples(client)
    assert s[("rollmux_jobs", (("status", "running"), ("tenant", "vision")))] == 3
    assert s[("rollmux_jobs", (("status", "queued"), ("tenant", "speech")))] == 1
    assert s[("rollmux_jobs", (("status", "failed"), ("tenant", "vision")))] == 0
    Job.objects.filter(tenant=world.vision).update(status=JobStatus.COMPLETED)
    s = _samples(client)
    assert s[("rollmux_jobs", (("status", "running"), ("tenant", "vision")))] == 0
    assert s[("rollmux_jobs", (("status", "completed"), ("tenant", "vision")))] == 3


def test_node_and_price_gauges(client, world):
    Node.objects.filter(name="h800-0").update(state="down")
    s = _samples(client)
    assert s[("rollmux_nodes", (("gpu_type", "H800"), ("state", "down")))] == 1
    assert s[("rollmux_nodes", (("gpu_type", "H800"), ("state", "up")))] == 3
    assert s[("rollmux_nodes", (("gpu_type", "H20"), ("state", "up")))] == 4
    assert s[("rollmux_gpu_price_dollars", (("gpu_type", "H800"),))] == 5.28


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


def test_api_latency_histogram_labels_the_route_not_the_path(api_as, world):
    labels = {"method": "GET", "route": "api/v1/me/", "status": "200"}
    before = REGISTRY.get_sample_value("rollmux_api_request_seconds_count", labels) or 0.0
    api = api_as("bob")
    api.get("/api/v1/me/")
    api.get("/api/v1/me/")
    assert REGISTRY.get_sample_value("rollmux_api_request_seconds_count", labels) == before + 2
    node = Node.objects.first()
    api.get(f"/api/v1/nodes/{node.pk}/")
    routes = {
        s.labels["route"]
        for m in REGISTRY.collect()
        if m.name == "rollmux_api_request_seconds"
        for s in m.samples
    }
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
