"""SLO classes and quotas: scoping, roles, validation, audit, pages."""

from __future__ import annotations

from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from rollmux_web.audit.models import AuditEntry
from rollmux_web.quotas import services
from rollmux_web.quotas.models import Quota, SloClass
from rollmux_web.quotas.selectors import quotas_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def quotas(world):
    return {
        "vision_h20": Quota.objects.create(
            tenant=world.vision, gpu_type=world.h20, max_gpus=32, monthly_budget_usd=Decimal("1000")
        ),
        "vision_h800": Quota.objects.create(tenant=world.vision, gpu_type=world.h800, max_gpus=16),
        "speech_h20": Quota.objects.create(
            tenant=world.speech, gpu_type=world.h20, monthly_gpu_hours=500.0
        ),
    }


def test_quotas_for_returns_the_tenants_quotas_by_gpu_type(world, quotas):
    vision = quotas_for(world.vision)
    assert set(vision) == {"H20", "H800"}
    assert vision["H20"].max_gpus == 32
    assert quotas_for("speech")["H20"].monthly_gpu_hours == 500.0
    assert "H800" not in quotas_for(world.speech.pk)  # no row: unlimited


# --- SLO classes -----------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["alice", "charlie", "finance", "admin"])
def test_every_role_reads_slo_classes(api_as, who):
    names = [s["name"] for s in api_as(who).get("/api/v1/slo-classes/").json()["results"]]
    assert names == ["gold", "silver", "bronze"]


def test_anonymous_cannot_read_slo_classes_or_quotas(world):
    assert APIClient().get("/api/v1/slo-classes/").status_code == 401
    assert APIClient().get("/api/v1/quotas/").status_code == 401


def test_admin_creates_updates_and_deletes_an_slo_class_with_audit(api_as):
    api = api_as("admin")
    resp = api.post("/api/v1/slo-classes/", {"name": "platinum", "slowdown": 1.05}, format="json")
    assert resp.status_code == 201, resp.content
    pk = resp.json()["id"]
    assert (
        api.patch(f"/api/v1/slo-classes/{pk}/", {"slowdown": 1.2}, format="json").json()["slowdown"]
        == 1.2
    )
    assert api.delete(f"/api/v1/slo-classes/{pk}/").status_code == 204
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "before", "after"))
    assert actions[0] == (
        "slo_class.create",
        None,
        {"name": "platinum", "slowdown": 1.05, "description": "", "preemptible": True},
    )
    assert actions[1][0] == "slo_class.update"
    assert actions[1][1]["slowdown"] == 1.05 and actions[1][2]["slowdown"] == 1.2
    assert actions[2][0] == "slo_class.delete" and actions[2][1]["name"] == "platinum"


@pytest.mark.parametrize("who", ["alice", "finance"])
def test_non_admins_cannot_change_slo_classes(api_as, world, who):
    api = api_as(who)
    assert (
        api.post("/api/v1/slo-classes/", {"name": "x", "slowdown": 1.2}, format="json").status_code
        == 403
    )
    assert (
        api.patch(
            f"/api/v1/slo-classes/{world.gold.pk}/", {"slowdown": 3}, format="json"
        ).status_code
        == 403
    )
    assert api.delete(f"/api/v1/slo-classes/{world.gold.pk}/").status_code == 403
    world.gold.refresh_from_db()
    assert world.gold.slowdown == 1.1
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "tin", "slowdown": 0.9}, "slowdown"),
        ({"name": "tin", "slowdown": "fast"}, "slowdown"),
        ({"name": "tin"}, "slowdown"),
        ({"name": "gold", "slowdown": 1.3}, "name"),
        ({"name": "not a slug", "slowdown": 1.3}, "name"),
    ],
)
def test_slo_class_validation_names_the_field(api_as, payload, field):
    before = SloClass.objects.count()
    resp = api_as("admin").post("/api/v1/slo-classes/", payload, format="json")
    assert resp.status_code == 400
    assert field in resp.json()["error"]["fields"]
    assert SloClass.objects.count() == before
    assert not AuditEntry.objects.exists()


def test_slowdown_below_one_rejected_by_the_service_too(world):
    with pytest.raises(Exception) as exc:
        services.slo_class_update(
            actor=world.admin, slo_class_id=world.gold.pk, data={"slowdown": 0.5}
        )
    assert "slowdown" in exc.value.message_dict  # type: ignore[attr-defined]
    world.gold.refresh_from_db()
    assert world.gold.slowdown == 1.1


def test_deleting_an_slo_class_in_use_is_a_conflict(api_as, world):
    from rollmux_web.jobs.models import Job

    Job.objects.create(
        name="j",
        tenant=world.vision,
        submitter=world.alice,
        slo_class=world.silver,
        iterations=1,
        rollout_gpus=8,
        train_gpus=8,
        t_roll_max_s=1,
        t_roll_min_s=1,
        t_train_max_s=1,
        t_train_min_s=1,
        host_mem_gb=1,
    )
    resp = api_as("admin").delete(f"/api/v1/slo-classes/{world.silver.pk}/")
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "protected"
    assert SloClass.objects.filter(pk=world.silver.pk).exists()
    assert not AuditEntry.objects.filter(action="slo_class.delete").exists()


# --- quotas ----------------------------------------------------------------------------------------


def _pairs(resp):
    return sorted((q["tenant"], q["gpu_type"]) for q in resp.json()["results"])


def test_researchers_see_only_their_tenants_quotas(api_as, quotas):
    assert _pairs(api_as("alice").get("/api/v1/quotas/")) == [("vision", "H20"), ("vision", "H800")]
    assert _pairs(api_as("charlie").get("/api/v1/quotas/")) == [("speech", "H20")]
    for who in ("admin", "finance"):
        assert len(_pairs(api_as(who).get("/api/v1/quotas/"))) == 3


def test_another_tenants_quota_is_404(api_as, quotas):
    pk = quotas["vision_h20"].pk
    resp = api_as("charlie").get(f"/api/v1/quotas/{pk}/")
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "not_found"
    assert api_as("bob").get(f"/api/v1/quotas/{pk}/").status_code == 200
    assert api_as("finance").get(f"/api/v1/quotas/{pk}/").status_code == 200


def test_quota_filters(api_as, quotas):
    assert _pairs(api_as("admin").get("/api/v1/quotas/?tenant=speech")) == [("speech", "H20")]
    assert _pairs(api_as("admin").get("/api/v1/quotas/?gpu_type=H800")) == [("vision", "H800")]
    # a researcher cannot widen their view with the filter
    assert _pairs(api_as("alice").get("/api/v1/quotas/?tenant=speech")) == []


@pytest.mark.parametrize("who", ["alice", "charlie", "finance"])
def test_non_admins_cannot_change_quotas(api_as, world, quotas, who):
    api = api_as(who)
    q = quotas["vision_h20"]
    for resp in (
        api.patch(f"/api/v1/quotas/{q.pk}/", {"max_gpus": 1000}, format="json"),
        api.post(
            "/api/v1/quotas/",
            {"tenant": "speech", "gpu_type": "H800", "max_gpus": 8},
            format="json",
        ),
        api.delete(f"/api/v1/quotas/{q.pk}/"),
    ):
        assert resp.status_code == 403
    q.refresh_from_db()
    assert q.max_gpus == 32
    assert Quota.objects.count() == 3
    assert not AuditEntry.objects.exists()


def test_admin_changes_a_quota_with_before_and_after(api_as, world, quotas):
    q = quotas["vision_h20"]
    resp = api_as("admin").patch(
        f"/api/v1/quotas/{q.pk}/", {"max_gpus": 40, "monthly_budget_usd": None}, format="json"
    )
    assert resp.status_code == 200, resp.content
    assert resp.json()["max_gpus"] == 40 and resp.json()["monthly_budget_usd"] is None
    entry = AuditEntry.objects.get(action="quota.update")
    assert entry.tenant == "vision" and entry.actor == world.admin
    assert entry.before["max_gpus"] == 32 and entry.after["max_gpus"] == 40
    assert (
        entry.before["monthly_budget_usd"] == "1000.00"
        and entry.after["monthly_budget_usd"] is None
    )


def test_admin_creates_and_deletes_a_quota(api_as, world):
    api = api_as("admin")
    resp = api.post(
        "/api/v1/quotas/",
        {"tenant": "speech", "gpu_type": "H800", "max_gpus": 8, "monthly_budget_usd": "2500.5"},
        format="json",
    )
    assert resp.status_code == 201, resp.content
    assert resp.json()["monthly_budget_usd"] == "2500.50"
    pk = resp.json()["id"]
    assert api.delete(f"/api/v1/quotas/{pk}/").status_code == 204
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == [
        "quota.create",
        "quota.delete",
    ]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"tenant": "speech", "gpu_type": "H800", "max_gpus": -1}, "max_gpus"),
        ({"tenant": "speech", "gpu_type": "H800", "monthly_gpu_hours": -5}, "monthly_gpu_hours"),
        (
            {"tenant": "speech", "gpu_type": "H800", "monthly_budget_usd": "-1"},
            "monthly_budget_usd",
        ),
        ({"tenant": "nosuch", "gpu_type": "H800"}, "tenant"),
        ({"tenant": "speech", "gpu_type": "B200"}, "gpu_type"),
        ({"tenant": "vision", "gpu_type": "H20", "max_gpus": 8}, "gpu_type"),  # duplicate
        ({"tenant": "speech", "gpu_type": "H800", "max_gpus": 7}, "max_gpus"),  # part of a node
        ({"tenant": "speech", "gpu_type": "H800", "max_gpus": "many"}, "max_gpus"),
    ],
)
def test_quota_validation_names_the_field_and_saves_nothing(api_as, quotas, payload, field):
    resp = api_as("admin").post("/api/v1/quotas/", payload, format="json")
    assert resp.status_code == 400, resp.content
    assert field in resp.json()["error"]["fields"], resp.json()
    assert Quota.objects.count() == 3
    assert not AuditEntry.objects.exists()


# --- pages -----------------------------------------------------------------------------------------


def test_quota_page_formats_budgets_as_money(client_as, quotas):
    quotas["vision_h20"].monthly_budget_usd = Decimal("12000")
    quotas["vision_h20"].save()
    html = client_as("admin").get("/quotas/").content.decode()
    assert "$12,000.00" in html and "$12000.00" not in html


def test_quota_page_is_scoped_and_read_only_for_researchers(client_as, quotas):
    client = client_as("charlie")
    html = client.get("/quotas/").content.decode()
    assert "speech" in html and "vision" not in html
    assert "Edit</a>" not in html
    assert client.get(f"/quotas/{quotas['speech_h20'].pk}/edit/").status_code == 403


def test_admin_edits_a_quota_through_the_form(client_as, world, quotas):
    client = client_as("admin")
    q = quotas["speech_h20"]
    resp = client.post(
        f"/quotas/{q.pk}/edit/",
        {
            "tenant": "speech",
            "gpu_type": "H20",
            "max_gpus": "24",
            "monthly_gpu_hours": "",
            "monthly_budget_usd": "900",
        },
    )
    assert resp.status_code == 302
    q.refresh_from_db()
    assert (q.max_gpus, q.monthly_gpu_hours, q.monthly_budget_usd) == (24, None, Decimal("900.00"))


def test_slo_form_rejects_slowdown_below_one(client_as, world):
    resp = client_as("admin").post(
        f"/quotas/slo-classes/{world.gold.pk}/edit/", {"name": "gold", "slowdown": "0.8"}
    )
    assert resp.status_code == 400
    assert 'id="error-slowdown"' in resp.content.decode()
    world.gold.refresh_from_db()
    assert world.gold.slowdown == 1.1


def test_finance_reads_every_quota_on_the_page_but_cannot_edit(client_as, world, quotas):
    client = client_as("finance")
    html = client.get("/quotas/").content.decode()
    assert "speech" in html and "vision" in html and "Edit</a>" not in html
    q = quotas["vision_h20"]
    resp = client.post(
        f"/quotas/{q.pk}/edit/", {"tenant": "vision", "gpu_type": "H20", "max_gpus": "999"}
    )
    assert resp.status_code == 403
    assert client.post(f"/quotas/{q.pk}/delete/").status_code == 403
    assert (
        client.post("/quotas/slo-classes/new/", {"name": "x", "slowdown": "1.2"}).status_code == 403
    )
    q.refresh_from_db()
    assert q.max_gpus == 32 and not SloClass.objects.filter(name="x").exists()


def test_quota_form_with_a_nul_byte_is_a_field_error(client_as, world):
    resp = client_as("admin").post("/quotas/new/", {"tenant": "vi\x00sion", "gpu_type": "H20"})
    assert resp.status_code == 400
    assert 'id="error-tenant"' in resp.content.decode()


def test_a_submission_through_the_api_costs_a_bounded_number_of_queries(api_as, world):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.factories import job_spec

    Quota.objects.create(tenant=world.vision, gpu_type=world.h20, max_gpus=800)
    api = api_as("alice")
    api.post("/api/v1/jobs/", job_spec(name="warm"), format="json")  # last_used_at written
    with CaptureQueriesContext(connection) as ctx:
        assert api.post("/api/v1/jobs/", job_spec(name="counted"), format="json").status_code == 201
    sql = [q["sql"] for q in ctx.captured_queries]
    listing = "\n".join(s[:120] for s in sql)
    # 9 statements in 8 round trips (token with user and profile; the pools with their
    # limits and prices, read once for the field checks and the quotas; SLO class; tenant;
    # job; audit; quotas; the cap's lock and the live GPUs, one query string of two
    # statements, last: the lock is held for it and the commit only) and the test
    # transaction's savepoint pair (inside a test's transaction; a submission in a
    # transaction of its own checks the caps in its commit: test_quota_concurrency.py).
    # It was 13 with the pools read four times and the runner
    # allowlist read for a built-in runner, and 18 with a write of last_used_at per call.
    assert len(sql) <= 10, listing
    assert sum("inventory_cluster" in s for s in sql) == 1, listing  # the pools, once
    assert not any("inventory_runnerpackage" in s for s in sql)  # a built-in runner
    assert not any("workflow_phaserecord" in s for s in sql)  # no budget: no month's usage
    assert not any(s.startswith("UPDATE") for s in sql)
    # the inserts come before the quota lock, and the lock and the count are one round trip
    (lock,) = [i for i, s in enumerate(sql) if "FOR UPDATE" in s]
    assert "SUM(rollout_gpus)" in sql[lock] and "jobs_job" in sql[lock], listing
    inserts = [i for i, s in enumerate(sql) if s.startswith("INSERT")]
    assert len(inserts) == 2 and max(inserts) < lock, listing
    assert all("SAVEPOINT" in s for s in sql[lock + 1 :]), listing  # then the commit
