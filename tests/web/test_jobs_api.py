"""Jobs REST API on PostgreSQL: submit, list, detail, cancel, error shape, tenant scoping."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from rest_framework.test import APIClient

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.jobs.services import job_submit
from rollmux_web.quotas.models import Quota
from rollmux_web.workflow.models import ExecutionGroup, Placement
from tests.factories import job_spec

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    # PBKDF2 for five personas dominated setup; these tests authenticate with tokens
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def submit(api: APIClient, **overrides: Any) -> Any:
    return api.post("/api/v1/jobs/", job_spec(**overrides), format="json")


def test_submit_returns_the_job_record_with_trace_field_names(api_as: Any, world: Any) -> None:
    resp = submit(api_as("alice"), slo_class="gold")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["status"] == "queued"
    assert body["tenant"] == "vision" and body["submitter"] == "alice"
    assert body["slo_class"] == "gold" and body["slo"] == 1.1
    assert body["runner"] == "emulated"
    for key in ("iterations", "rollout_gpus", "train_gpus", "t_roll_max_s", "host_mem_gb"):
        assert body[key] == job_spec()[key]
    assert body["group"] is None and body["placement"] is None
    assert Job.objects.filter(pk=body["id"]).exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"rollout_gpus": -8}, "rollout_gpus"),
        ({"train_gpus": 12}, "train_gpus"),
        ({"t_roll_min_s": 500}, "t_roll_min_s"),
        ({"slo_class": "diamond"}, "slo_class"),
        ({"host_mem_gb": 10_000}, "host_mem_gb"),
        ({"iterations": "ten"}, "iterations"),
        ({"iterations": [3]}, "iterations"),
        ({"t_train_max_s": None}, "t_train_max_s"),
        ({"tenant": "speech"}, "tenant"),
        ({"runner": "not a runner"}, "runner"),
        ({"time_scale": -2}, "time_scale"),
    ],
)
def test_bad_input_gets_the_error_shape_naming_the_field(
    api_as: Any, world: Any, overrides: dict[str, Any], field: str
) -> None:
    resp = submit(api_as("alice"), **overrides)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["code"] == "invalid"
    assert field in err["fields"], err
    assert err["message"].startswith(f"{field}: ")
    assert Job.objects.count() == 0


def test_body_that_is_not_an_object_is_a_clear_400(api_as: Any, world: Any) -> None:
    resp = api_as("alice").post("/api/v1/jobs/", [1, 2], format="json")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid"


def test_quota_refusal_is_a_403_with_the_limit_in_the_message(api_as: Any, world: Any) -> None:
    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, max_gpus=8)
    assert submit(api_as("alice")).status_code == 201
    resp = submit(api_as("bob"), train_gpus=16)
    assert resp.status_code == 403
    err = resp.json()["error"]
    assert err["code"] == "quota_exceeded"
    assert err["message"] == (
        "quota: vision may use at most 8 H800 GPUs at once; its live jobs (profiling, queued, placed or "
        "running) request 8; this job asks for 16. This job alone asks for more than the "
        "quota: it can run only once an admin raises it to at least 16 (see /quotas/)."
    )
    assert Job.objects.count() == 1


def test_dollar_budget_refusal(api_as: Any, world: Any) -> None:
    Quota.objects.create(tenant=world.speech, gpu_type=world.h800, monthly_budget_usd=Decimal(1))
    resp = submit(api_as("charlie"), iterations=10)  # 10 x 100 s x 8 x 5.28/3600 = $11.73
    assert resp.status_code == 403
    assert "at most $1.00 on H800" in resp.json()["error"]["message"]


def test_finance_cannot_submit(api_as: Any, world: Any) -> None:
    resp = submit(api_as("finance"), tenant="vision")
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "permission_denied"
    assert Job.objects.count() == 0


def test_list_is_scoped_filtered_and_paginated(api_as: Any, world: Any) -> None:
    for i in range(3):
        job_submit(user=world.alice, spec=job_spec(name=f"a{i}"), channel="t")
    job_submit(user=world.charlie, spec=job_spec(name="c0"), channel="t")
    done = job_submit(user=world.bob, spec=job_spec(name="b0"), channel="t")
    Job.objects.filter(pk=done.pk).update(status=JobStatus.COMPLETED)

    body = api_as("bob").get("/api/v1/jobs/").json()
    assert body["count"] == 4  # bob sees alice's jobs (same tenant), not charlie's
    assert {r["name"] for r in body["results"]} == {"a0", "a1", "a2", "b0"}
    body = api_as("alice").get("/api/v1/jobs/?status=completed").json()
    assert [r["name"] for r in body["results"]] == ["b0"]
    body = api_as("alice").get("/api/v1/jobs/?ordering=name&page_size=2").json()
    assert [r["name"] for r in body["results"]] == ["a0", "a1"] and body["next"]
    body = api_as("admin").get("/api/v1/jobs/?tenant=speech").json()
    assert [r["name"] for r in body["results"]] == ["c0"]
    assert api_as("finance").get("/api/v1/jobs/").json()["count"] == 5
    # another tenant's name is refused, naming the field (an empty list read as "no jobs")
    refused = api_as("charlie").get("/api/v1/jobs/?tenant=vision")
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"]["tenant"] == [
        "Unknown tenant 'vision': the tenants you may see are speech."
    ]


def test_bad_filter_names_the_parameter(api_as: Any, world: Any) -> None:
    resp = api_as("alice").get("/api/v1/jobs/?status=sleeping")
    assert resp.status_code == 400
    assert "status" in resp.json()["error"]["fields"]
    resp = api_as("alice").get("/api/v1/jobs/?ordering=cost")
    assert "ordering" in resp.json()["error"]["fields"]


def test_detail_shows_the_latest_placement(api_as: Any, world: Any) -> None:
    from rollmux_web.inventory.models import Node

    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    old = ExecutionGroup.objects.create()
    Placement.objects.create(job=job, group=old, attempt=1, strategy="new_group")
    group = ExecutionGroup.objects.create()
    p = Placement.objects.create(
        job=job,
        group=group,
        attempt=2,
        strategy="direct_packing",
        predicted_slowdown=1.27,
        marginal_cost_per_hour=Decimal("3.5"),
    )
    p.rollout_nodes.set(Node.objects.filter(name="h20-1"))
    p.train_nodes.set(Node.objects.filter(name__in=["h800-0", "h800-2"]))
    body = api_as("bob").get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["group"] == group.pk
    assert body["placement"] == {
        "strategy": "direct_packing",
        "rollout_nodes": ["h20-1"],
        "train_nodes": ["h800-0", "h800-2"],
        "predicted_slowdown": 1.27,
        "marginal_cost_per_hour": 3.5,
    }


def test_cancel_endpoint(api_as: Any, world: Any) -> None:
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    resp = api_as("bob").post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
    resp = api_as("bob").post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert resp.status_code == 409
    assert "already cancelled" in resp.json()["error"]["message"]
    other = job_submit(user=world.alice, spec=job_spec(), channel="t")
    assert api_as("finance").post(f"/api/v1/jobs/{other.pk}/cancel/").status_code == 403
    Job.objects.filter(pk=other.pk).update(status=JobStatus.RUNNING)
    body = api_as("admin").post(f"/api/v1/jobs/{other.pk}/cancel/").json()
    assert body["status"] == "running" and body["cancel_requested"] is True


def test_another_tenant_gets_404_on_every_job_endpoint(api_as: Any, world: Any) -> None:
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    charlie = api_as("charlie")
    for method, url in (
        ("get", f"/api/v1/jobs/{job.pk}/"),
        ("post", f"/api/v1/jobs/{job.pk}/cancel/"),
    ):
        resp = getattr(charlie, method)(url)
        assert resp.status_code == 404, url
        assert resp.json()["error"]["code"] == "not_found"
    assert Job.objects.get(pk=job.pk).status == JobStatus.QUEUED


def test_anonymous_callers_are_refused_everywhere(world: Any) -> None:
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    anon = APIClient()
    for method, url in (
        ("get", "/api/v1/jobs/"),
        ("post", "/api/v1/jobs/"),
        ("get", f"/api/v1/jobs/{job.pk}/"),
        ("post", f"/api/v1/jobs/{job.pk}/cancel/"),
    ):
        resp = getattr(anon, method)(url, {}, format="json")
        assert resp.status_code in (401, 403), url
        assert "error" in resp.json()
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Bearer rmx_not-a-token")
    assert bad.get("/api/v1/jobs/").status_code == 401
    assert Job.objects.count() == 1


def test_schema_documents_the_job_endpoints(api_as: Any, world: Any) -> None:
    resp = api_as("admin").get("/api/schema/?format=json")
    assert resp.status_code == 200
    schema = resp.json()
    paths = schema["paths"]
    post = paths["/api/v1/jobs/"]["post"]
    assert {"201", "400", "403"} <= set(post["responses"])
    assert "409" in paths["/api/v1/jobs/{job_id}/cancel/"]["post"]["responses"]
    job = schema["components"]["schemas"]["Job"]["properties"]
    assert {"slo_class", "slo", "group", "placement", "t_roll_max_s"} <= set(job)
