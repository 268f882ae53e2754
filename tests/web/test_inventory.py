"""Inventory: GPU types with price history, pools, nodes; API, pages, audit, triggers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from rollmux_web.audit.models import AuditEntry
from rollmux_web.inventory import selectors, services
from rollmux_web.inventory.models import Cluster, GpuPrice, GpuType, Node
from rollmux_web.inventory.selectors import step_price_at, step_segments

T0 = datetime(2026, 3, 1, tzinfo=UTC)
H = timedelta(hours=1)


# --- price history (pure) -------------------------------------------------------------


def test_segments_split_an_interval_at_each_price_change():
    steps = [(T0, Decimal("2")), (T0 + 2 * H, Decimal("3")), (T0 + 5 * H, Decimal("1"))]
    segs = step_segments(steps, T0 + H, T0 + 6 * H)
    assert segs == [
        (T0 + H, T0 + 2 * H, Decimal("2")),
        (T0 + 2 * H, T0 + 5 * H, Decimal("3")),
        (T0 + 5 * H, T0 + 6 * H, Decimal("1")),
    ]


def test_segments_inside_one_price_and_empty_intervals():
    steps = [(T0, Decimal("2")), (T0 + 10 * H, Decimal("3"))]
    assert step_segments(steps, T0 + H, T0 + 2 * H) == [(T0 + H, T0 + 2 * H, Decimal("2"))]
    assert step_segments(steps, T0 + H, T0 + H) == []
    # a change exactly at the end does not open a zero-length segment
    assert step_segments(steps, T0, T0 + 10 * H) == [(T0, T0 + 10 * H, Decimal("2"))]


def test_time_before_the_first_price_uses_the_first_price():
    steps = [(T0, Decimal("2")), (T0 + H, Decimal("3"))]
    assert step_price_at(steps, T0 - 100 * H) == Decimal("2")
    assert step_price_at(steps, T0 + H) == Decimal("3")
    with pytest.raises(LookupError):
        step_price_at([], T0)


# --- services and selectors ---------------------------------------------------------------


@pytest.mark.django_db
def test_price_change_appends_history_and_keeps_past_costs(world):
    change_at = datetime(2026, 6, 1, tzinfo=UTC)
    services.gpu_type_update(
        actor=world.admin,
        gpu_type_id=world.h20.pk,
        data={"price_per_gpu_hour": Decimal("2.50")},
        now=change_at,
    )
    rows = list(GpuPrice.objects.filter(gpu_type=world.h20).order_by("effective_from"))
    assert [(r.price_per_gpu_hour, r.effective_from) for r in rows] == [
        (Decimal("1.8500"), datetime(2026, 1, 1, tzinfo=UTC)),
        (Decimal("2.5000"), change_at),
    ]
    assert selectors.price_at(world.h20, change_at - H) == Decimal("1.85")
    assert selectors.price_at("H20", change_at) == Decimal("2.50")
    assert selectors.current_prices() == {"H20": Decimal("2.50"), "H800": Decimal("5.28")}
    # an allocation straddling the change is priced half at each price
    segs = selectors.price_segments(world.h20.pk, change_at - H, change_at + H)
    assert [s[2] for s in segs] == [Decimal("1.85"), Decimal("2.50")]
    book = selectors.price_book()
    assert book.cost("H20", 8, change_at - H, change_at + H) == 8 * (
        Decimal("1.85") + Decimal("2.50")
    )
    # a cost computed before the change is still the same afterwards
    assert book.cost("H20", 8, change_at - 2 * H, change_at - H) == 8 * Decimal("1.85")


@pytest.mark.django_db
def test_price_change_is_audited_with_before_and_after(world):
    services.gpu_type_update(
        actor=world.admin, gpu_type_id=world.h800.pk, data={"price_per_gpu_hour": "6"}
    )
    entry = AuditEntry.objects.get(action="price.change")
    assert entry.actor == world.admin
    assert entry.before["price_per_gpu_hour"] == "5.2800"
    assert entry.after["price_per_gpu_hour"] == "6.0000"
    assert entry.object_id == str(world.h800.pk)


@pytest.mark.django_db
def test_unchanged_price_adds_no_row_and_no_audit(world):
    services.gpu_type_update(
        actor=world.admin, gpu_type_id=world.h20.pk, data={"price_per_gpu_hour": "1.85"}
    )
    assert GpuPrice.objects.filter(gpu_type=world.h20).count() == 1
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_two_changes_in_the_same_instant_both_kept(world):
    now = datetime(2026, 7, 1, tzinfo=UTC)
    for price in ("2", "3"):
        services.gpu_type_update(
            actor=world.admin, gpu_type_id=world.h20.pk, data={"price_per_gpu_hour": price}, now=now
        )
    assert selectors.price_at("H20", now + H) == Decimal("3")
    assert GpuPrice.objects.filter(gpu_type=world.h20).count() == 3


@pytest.mark.django_db
def test_node_state_change_calls_the_trigger_after_commit(
    world, monkeypatch, django_capture_on_commit_callbacks
):
    calls: list[int] = []
    monkeypatch.setattr("workers.triggers.node_state_changed", calls.append)
    node = Node.objects.get(name="h20-1")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        services.node_set_state(actor=world.admin, node_id=node.pk, state="down")
        assert calls == []  # not before the commit
    for cb in callbacks:
        cb()
    assert calls == [node.pk]
    entry = AuditEntry.objects.get(action="node.state")
    assert entry.before["state"] == "up" and entry.after["state"] == "down"


@pytest.mark.django_db
def test_node_update_without_state_change_does_not_trigger(
    world, monkeypatch, django_capture_on_commit_callbacks
):
    calls: list[int] = []
    monkeypatch.setattr("workers.triggers.node_state_changed", calls.append)
    node = Node.objects.get(name="h20-1")
    with django_capture_on_commit_callbacks(execute=True):
        services.node_update(actor=world.admin, node_id=node.pk, data={"host_mem_gb": 1024.0})
    assert calls == []


# --- API ------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/gpu-types/", "/api/v1/nodes/", "/api/v1/clusters/"])
@pytest.mark.parametrize("who", ["alice", "charlie", "finance", "admin"])
def test_every_role_reads_the_inventory(api_as, path, who):
    resp = api_as(who).get(path)
    assert resp.status_code == 200
    assert resp.json()["count"] >= 2


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/gpu-types/", "/api/v1/nodes/", "/api/v1/clusters/"])
def test_anonymous_cannot_read_the_inventory(world, path):
    assert APIClient().get(path).status_code == 401


@pytest.mark.django_db
def test_gpu_type_shows_current_price_and_history(api_as, world):
    services.gpu_type_update(
        actor=world.admin, gpu_type_id=world.h20.pk, data={"price_per_gpu_hour": "2"}
    )
    body = api_as("alice").get(f"/api/v1/gpu-types/{world.h20.pk}/").json()
    assert body["price_per_gpu_hour"] == "2.0000"
    assert [p["price_per_gpu_hour"] for p in body["price_history"]] == ["1.8500", "2.0000"]


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["alice", "finance"])
def test_non_admins_cannot_write_the_inventory(api_as, world, who):
    api = api_as(who)
    node = Node.objects.get(name="h20-0")
    attempts = [
        api.patch(
            f"/api/v1/gpu-types/{world.h20.pk}/", {"price_per_gpu_hour": "0.01"}, format="json"
        ),
        api.post(
            "/api/v1/gpu-types/",
            {"name": "B200", "gpus_per_node": 8, "host_mem_gb": 2048, "price_per_gpu_hour": "9"},
            format="json",
        ),
        api.patch(f"/api/v1/nodes/{node.pk}/", {"state": "down"}, format="json"),
        api.post("/api/v1/nodes/", {"name": "h20-99", "cluster": "rollout-pool"}, format="json"),
        api.patch(
            f"/api/v1/clusters/{world.rollout_pool.pk}/", {"ray_address": "x:1"}, format="json"
        ),
    ]
    for resp in attempts:
        assert resp.status_code == 403
        assert resp.json()["error"]["code"] == "permission_denied"
    assert selectors.current_prices()["H20"] == Decimal("1.85")
    node.refresh_from_db()
    assert node.state == "up"
    assert not GpuType.objects.filter(name="B200").exists()
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_admin_changes_price_through_the_api(api_as, world):
    resp = api_as("admin").patch(
        f"/api/v1/gpu-types/{world.h20.pk}/", {"price_per_gpu_hour": "2.10"}, format="json"
    )
    assert resp.status_code == 200, resp.content
    assert resp.json()["price_per_gpu_hour"] == "2.1000"
    assert GpuPrice.objects.filter(gpu_type=world.h20).count() == 2
    assert AuditEntry.objects.filter(action="price.change", actor=world.admin).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "payload", "field"),
    [
        (
            "gpu-types",
            {"name": "B200", "gpus_per_node": 8, "host_mem_gb": 2048, "price_per_gpu_hour": "-1"},
            "price_per_gpu_hour",
        ),
        (
            "gpu-types",
            {"name": "B200", "gpus_per_node": 0, "host_mem_gb": 2048, "price_per_gpu_hour": "9"},
            "gpus_per_node",
        ),
        (
            "gpu-types",
            {"name": "B200", "gpus_per_node": 8, "host_mem_gb": 0, "price_per_gpu_hour": "9"},
            "host_mem_gb",
        ),
        (
            "gpu-types",
            {"name": "H20", "gpus_per_node": 8, "host_mem_gb": 2048, "price_per_gpu_hour": "9"},
            "name",
        ),
        (
            "gpu-types",
            {
                "name": "B200",
                "gpus_per_node": "eight",
                "host_mem_gb": 2048,
                "price_per_gpu_hour": "9",
            },
            "gpus_per_node",
        ),
        ("nodes", {"name": "h20-99", "cluster": "rollout-pool", "gpus": 0}, "gpus"),
        ("nodes", {"name": "h20-99", "cluster": "rollout-pool", "gpus": 16}, "gpus"),
        ("nodes", {"name": "h20-99", "cluster": "rollout-pool", "gpu_type": "H800"}, "gpu_type"),
        ("nodes", {"name": "h20-99", "cluster": "no-such-pool"}, "cluster"),
        ("nodes", {"name": "h20 99", "cluster": "rollout-pool"}, "name"),
        ("nodes", {"name": "h20-0", "cluster": "rollout-pool"}, "name"),
        ("nodes", {"name": "h20-99", "cluster": "rollout-pool", "state": "melted"}, "state"),
        (
            "clusters",
            {"name": "p2", "kind": "inference", "gpu_type": "H20", "ray_address": "local"},
            "kind",
        ),
        (
            "clusters",
            {"name": "p2", "kind": "rollout", "gpu_type": "A100", "ray_address": "local"},
            "gpu_type",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_input_names_the_field_and_saves_nothing(api_as, world, path, payload, field):
    counts = (
        GpuType.objects.count(),
        GpuPrice.objects.count(),
        Node.objects.count(),
        Cluster.objects.count(),
    )
    resp = api_as("admin").post(f"/api/v1/{path}/", payload, format="json")
    assert resp.status_code == 400, resp.content
    err = resp.json()["error"]
    assert err["code"] == "invalid"
    assert field in err["fields"], err
    assert err["message"].startswith(f"{field}:")
    assert counts == (
        GpuType.objects.count(),
        GpuPrice.objects.count(),
        Node.objects.count(),
        Cluster.objects.count(),
    )
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_negative_price_update_is_refused_and_history_untouched(api_as, world):
    resp = api_as("admin").patch(
        f"/api/v1/gpu-types/{world.h800.pk}/", {"price_per_gpu_hour": "-0.5"}, format="json"
    )
    assert resp.status_code == 400
    assert "price_per_gpu_hour" in resp.json()["error"]["fields"]
    assert GpuPrice.objects.filter(gpu_type=world.h800).count() == 1


@pytest.mark.django_db
def test_shrinking_gpus_per_node_below_a_node_is_refused(api_as, world):
    resp = api_as("admin").patch(
        f"/api/v1/gpu-types/{world.h20.pk}/", {"gpus_per_node": 4}, format="json"
    )
    assert resp.status_code == 400
    assert "gpus_per_node" in resp.json()["error"]["fields"]
    world.h20.refresh_from_db()
    assert world.h20.gpus_per_node == 8


@pytest.mark.django_db
def test_admin_adds_a_node_with_pool_defaults(api_as, world, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        resp = api_as("admin").post(
            "/api/v1/nodes/", {"name": "h20-9", "cluster": "rollout-pool"}, format="json"
        )
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert (body["gpu_type"], body["gpus"], body["host_mem_gb"], body["state"]) == (
        "H20",
        8,
        2048.0,
        "up",
    )
    assert body["ray_resource"] == "node:h20-9"
    assert AuditEntry.objects.get(action="node.create").after["name"] == "h20-9"


@pytest.mark.django_db
def test_node_list_filters(api_as, world):
    Node.objects.filter(name="h800-2").update(state="drained")
    api = api_as("alice")
    assert api.get("/api/v1/nodes/?cluster=train-pool").json()["count"] == 4
    assert [n["name"] for n in api.get("/api/v1/nodes/?state=drained").json()["results"]] == [
        "h800-2"
    ]
    assert api.get("/api/v1/nodes/?gpu_type=H20").json()["count"] == 4


@pytest.mark.django_db
def test_unknown_node_is_404_with_the_error_shape(api_as, world):
    resp = api_as("alice").get("/api/v1/nodes/999999/")
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "not_found"


# --- pages ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_admin_changes_a_price_through_the_form(client_as, world):
    client = client_as("admin")
    url = f"/inventory/gpu-types/{world.h20.pk}/edit/"
    form = client.get(url)
    assert form.status_code == 200 and "1.85" in form.content.decode()
    resp = client.post(
        url, {"name": "H20", "gpus_per_node": 8, "host_mem_gb": 2048, "price_per_gpu_hour": "1.99"}
    )
    assert resp.status_code == 302
    assert selectors.current_prices()["H20"] == Decimal("1.99")
    page = client.get("/inventory/").content.decode()
    assert "$1.99" in page and "$1.85 from" in page


@pytest.mark.django_db
def test_price_form_shows_field_error_and_saves_nothing(client_as, world):
    resp = client_as("admin").post(
        f"/inventory/gpu-types/{world.h20.pk}/edit/",
        {"name": "H20", "gpus_per_node": 8, "host_mem_gb": 2048, "price_per_gpu_hour": "-3"},
    )
    assert resp.status_code == 400
    assert 'id="error-price_per_gpu_hour"' in resp.content.decode()
    assert GpuPrice.objects.filter(gpu_type=world.h20).count() == 1


def _price_state():
    """Return everything a price change writes: GPU types, the price history, the audit."""
    return (
        sorted(GpuType.objects.values_list("name", "gpus_per_node", "host_mem_gb")),
        sorted(GpuPrice.objects.values_list("gpu_type__name", "price_per_gpu_hour")),
        AuditEntry.objects.count(),
    )


@pytest.mark.django_db
@pytest.mark.parametrize("price", ["0", "0.00", "-0"])
def test_a_zero_price_is_refused_by_the_form_with_nothing_written(client_as, world, price):
    # QA F10: $0.00 was saved, entered the history and the audit; a host memory change in
    # the same form must not be saved either
    before = _price_state()
    resp = client_as("admin").post(
        f"/inventory/gpu-types/{world.h800.pk}/edit/",
        {"name": "H800", "gpus_per_node": 8, "host_mem_gb": 1024, "price_per_gpu_hour": price},
    )
    assert resp.status_code == 400
    html = resp.content.decode()
    assert 'id="error-price_per_gpu_hour"' in html
    assert "Must be more than 0 dollars per GPU-hour" in html
    assert _price_state() == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "path", "payload"),
    [
        ("patch", "gpu-types/{h800}/", {"price_per_gpu_hour": "0"}),
        (
            "put",
            "gpu-types/{h800}/",
            {
                "name": "H800",
                "gpus_per_node": 8,
                "host_mem_gb": 1024,
                "price_per_gpu_hour": "0.0000",
            },
        ),
        (
            "post",
            "gpu-types/",
            {"name": "B200", "gpus_per_node": 8, "host_mem_gb": 2048, "price_per_gpu_hour": 0},
        ),
    ],
)
def test_a_zero_price_is_refused_by_the_api_with_nothing_written(
    api_as, world, method, path, payload
):
    before = _price_state()
    resp = getattr(api_as("admin"), method)(
        "/api/v1/" + path.format(h800=world.h800.pk), payload, format="json"
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["fields"] == {"price_per_gpu_hour": [services.PRICE_NOT_POSITIVE]}
    assert _price_state() == before


@pytest.mark.django_db
def test_the_services_refuse_a_zero_price_too(world):
    before = _price_state()
    with pytest.raises(ValidationError) as info:
        services.gpu_type_update(
            actor=world.admin,
            gpu_type_id=world.h800.pk,
            data={"host_mem_gb": 4096, "price_per_gpu_hour": Decimal("0.00001")},
        )
    assert info.value.message_dict == {"price_per_gpu_hour": [services.PRICE_NOT_POSITIVE]}
    with pytest.raises(ValidationError):
        services.gpu_type_create(
            actor=world.admin, name="B200", gpus_per_node=8, host_mem_gb=2048, price_per_gpu_hour=0
        )
    assert _price_state() == before
    # the smallest price the history can hold is accepted
    services.gpu_type_update(
        actor=world.admin, gpu_type_id=world.h800.pk, data={"price_per_gpu_hour": "0.0001"}
    )
    assert selectors.current_prices()["H800"] == Decimal("0.0001")


@pytest.mark.django_db
def test_node_form_reports_service_errors_on_the_field(client_as, world):
    resp = client_as("admin").post(
        "/inventory/nodes/new/",
        {
            "name": "bad name",
            "cluster": "rollout-pool",
            "gpus": 8,
            "host_mem_gb": 100,
            "state": "up",
        },
    )
    assert resp.status_code == 400
    assert 'id="error-name"' in resp.content.decode()
    assert not Node.objects.filter(name="bad name").exists()


@pytest.mark.django_db
def test_researcher_sees_inventory_read_only_and_cannot_edit(client_as, world):
    client = client_as("alice")
    page = client.get("/inventory/").content.decode()
    assert "H800" in page and "Edit</a>" not in page
    assert client.get(f"/inventory/gpu-types/{world.h20.pk}/edit/").status_code == 403
    node = Node.objects.get(name="h20-0")
    assert client.post(f"/inventory/nodes/{node.pk}/state/", {"state": "down"}).status_code == 403
    node.refresh_from_db()
    assert node.state == "up"


@pytest.mark.django_db
def test_anonymous_is_sent_to_login(client, world):
    resp = client.get("/inventory/")
    assert resp.status_code == 302 and resp["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
def test_node_state_via_htmx_returns_the_row(
    client_as, world, monkeypatch, django_capture_on_commit_callbacks
):
    calls: list[int] = []
    monkeypatch.setattr("workers.triggers.node_state_changed", calls.append)
    node = Node.objects.get(name="h800-3")
    with django_capture_on_commit_callbacks(execute=True):
        resp = client_as("admin").post(
            f"/inventory/nodes/{node.pk}/state/", {"state": "drained"}, HTTP_HX_REQUEST="true"
        )
    html = resp.content.decode()
    assert resp.status_code == 200
    assert html.strip().startswith(f'<tr id="node-{node.pk}"')
    assert 'value="drained" selected' in html
    node.refresh_from_db()
    assert node.state == "drained" and calls == [node.pk]


@pytest.mark.django_db
def test_pool_gpu_type_cannot_change_under_its_nodes(api_as, world):
    resp = api_as("admin").patch(
        f"/api/v1/clusters/{world.rollout_pool.pk}/", {"gpu_type": "H800"}, format="json"
    )
    assert resp.status_code == 400
    assert "gpu_type" in resp.json()["error"]["fields"]
    world.rollout_pool.refresh_from_db()
    assert world.rollout_pool.gpu_type == world.h20


@pytest.mark.django_db
def test_a_pool_keeps_its_kind_while_it_has_nodes(api_as, client_as, world):
    # (QA pass 11: flipping the training pool to rollout with its nodes on it was saved,
    # and the cost report's dedicated-pools counterfactual for past months changed)
    resp = api_as("admin").patch(
        f"/api/v1/clusters/{world.train_pool.pk}/", {"kind": "rollout"}, format="json"
    )
    assert resp.status_code == 400
    assert "has 4 nodes: its kind stays train" in resp.json()["error"]["fields"]["kind"][0]
    page = client_as("admin").post(
        f"/inventory/clusters/{world.train_pool.pk}/edit/",
        {"name": "train-pool", "kind": "rollout", "gpu_type": "H800", "ray_address": "local"},
    )
    assert page.status_code == 400 and 'id="error-kind"' in page.content.decode()
    world.train_pool.refresh_from_db()
    assert world.train_pool.kind == "train"
    assert not AuditEntry.objects.filter(action="cluster.update").exists()
    # a pool with no nodes may still change its kind
    empty = Cluster.objects.create(name="spare", kind="train", gpu_type=world.h800)
    resp = api_as("admin").patch(
        f"/api/v1/clusters/{empty.pk}/", {"kind": "rollout"}, format="json"
    )
    assert resp.status_code == 200 and resp.json()["kind"] == "rollout"


@pytest.mark.django_db
def test_admin_moves_a_pool_to_a_new_ray_address_with_audit(api_as, world):
    resp = api_as("admin").patch(
        f"/api/v1/clusters/{world.train_pool.pk}/", {"ray_address": "ray-head:6379"}, format="json"
    )
    assert resp.status_code == 200
    assert resp.json()["node_count"] == 4
    entry = AuditEntry.objects.get(action="cluster.update")
    assert (entry.before["ray_address"], entry.after["ray_address"]) == ("local", "ray-head:6379")


@pytest.mark.django_db
def test_unknown_node_state_via_htmx_shows_the_error_in_the_row(client_as, world):
    node = Node.objects.get(name="h20-0")
    resp = client_as("admin").post(
        f"/inventory/nodes/{node.pk}/state/", {"state": "melted"}, HTTP_HX_REQUEST="true"
    )
    assert resp.status_code == 200
    assert "Unknown state" in resp.content.decode()
    node.refresh_from_db()
    assert node.state == "up"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "path", "payload", "field"),
    [
        ("post", "/api/v1/nodes/", {"name": "n1", "cluster": "rollout\x00pool"}, "cluster"),
        ("post", "/api/v1/nodes/", {"name": "n1", "cluster": 7}, "cluster"),
        ("get", "/api/v1/nodes/?cluster=a%00b", None, "cluster"),
        ("get", "/api/v1/quotas/?tenant=a%00b", None, "tenant"),
        ("get", "/api/v1/audit/?actor=a%00b", None, "actor"),
        ("post", "/api/v1/quotas/", {"tenant": "vi\x00sion", "gpu_type": "H20"}, "tenant"),
    ],
)
def test_nul_bytes_and_wrong_types_are_field_errors_not_500(
    api_as, world, method, path, payload, field
):
    api = api_as("admin")
    resp = api.post(path, payload, format="json") if method == "post" else api.get(path)
    assert resp.status_code == 400, resp.content
    assert field in resp.json()["error"]["fields"]


@pytest.mark.django_db
def test_nul_in_tenant_name_is_404(api_as):
    assert api_as("admin").get("/api/v1/tenants/vi%00sion/").status_code == 404


# --- issue 11: node sizes, confirmations, the runner allowlist ------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("gpus", [4, 16])
def test_a_node_whose_gpu_count_differs_from_its_type_is_refused(api_as, world, gpus):
    # issue 11 item 10: a 4-GPU node of an 8-GPU type was accepted without a word
    resp = api_as("admin").post(
        "/api/v1/nodes/",
        {"name": "h20-odd", "cluster": "rollout-pool", "gpus": gpus},
        format="json",
    )
    assert resp.status_code == 400
    (message,) = resp.json()["error"]["fields"]["gpus"]
    assert message.startswith(f"A H20 node has 8 GPUs, got {gpus}: the planner places jobs")
    assert not Node.objects.filter(name="h20-odd").exists()
    # the services refuse it too, and a GPU type cannot change size under its nodes
    with pytest.raises(ValidationError):
        services.node_create(actor=world.admin, name="h20-odd", cluster=world.rollout_pool, gpus=4)
    with pytest.raises(ValidationError) as exc:
        services.gpu_type_update(
            actor=world.admin, gpu_type_id=world.h20.pk, data={"gpus_per_node": 16}
        )
    assert "has 8 GPUs, not 16" in str(exc.value)


@pytest.mark.django_db
def test_an_admin_edit_says_saved(client_as, world):
    client = client_as("admin")
    node = Node.objects.get(name="h20-1")
    resp = client.post(
        f"/inventory/nodes/{node.pk}/edit/",
        {"name": "h20-1", "cluster": "rollout-pool", "gpus": 8, "host_mem_gb": 1024, "state": "up"},
        follow=True,
    )
    assert resp.redirect_chain[-1][0] == "/inventory/"
    assert "Saved node h20-1." in resp.content.decode()
    resp = client.post(
        "/inventory/gpu-types/new/",
        {"name": "B200", "gpus_per_node": 8, "host_mem_gb": 2048, "price_per_gpu_hour": "9"},
        follow=True,
    )
    assert "Saved GPU type B200." in resp.content.decode()
    # a state change through the row says so in the row
    resp = client.post(
        f"/inventory/nodes/{node.pk}/state/", {"state": "drained"}, HTTP_HX_REQUEST="true"
    )
    assert "Saved: h20-1 is drained." in resp.content.decode()


@pytest.mark.django_db
def test_marking_a_node_down_asks_first(client_as, world, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr("workers.triggers.node_state_changed", calls.append)
    client = client_as("admin")
    node = Node.objects.get(name="h800-2")
    url = f"/inventory/nodes/{node.pk}/state/"
    # htmx: the row asks, nothing changes
    html = client.post(url, {"state": "down"}, HTTP_HX_REQUEST="true").content.decode()
    assert "Mark h800-2 down? The jobs placed on it are resubmitted." in html
    assert 'name="confirm" value="yes"' in html
    # without JavaScript: a page asks
    resp = client.post(url, {"state": "down"})
    assert resp.status_code == 200 and "<h1>Mark h800-2 down?</h1>" in resp.content.decode()
    node.refresh_from_db()
    assert node.state == "up" and not AuditEntry.objects.filter(action="node.state").exists()
    # confirmed: it is down
    resp = client.post(url, {"state": "down", "confirm": "yes"}, follow=True)
    assert "Saved: h800-2 is down." in resp.content.decode()
    node.refresh_from_db()
    assert node.state == "down"


@pytest.mark.django_db
def test_the_audit_log_names_the_node(client_as, world):
    node = Node.objects.get(name="h800-1")
    services.node_set_state(actor=world.admin, node_id=node.pk, state="drained")
    html = client_as("admin").get("/audit/").content.decode()
    assert "node h800-1" in html and f"inventory.node #{node.pk}" not in html


@pytest.mark.django_db
def test_admins_manage_the_runner_allowlist_on_the_page(client_as, world):
    client = client_as("admin")
    resp = client.post(
        "/inventory/runners/new/", {"path": "acme_rl", "description": "lab runners"}, follow=True
    )
    assert "Saved runner package acme_rl." in resp.content.decode()
    assert selectors.runner_allowlist() == ["acme_rl"]
    html = client.get("/inventory/").content.decode()
    assert "<code>acme_rl</code>" in html and "every class under it" in html
    bad = client.post("/inventory/runners/new/", {"path": "subprocess"})
    assert bad.status_code == 400 and "standard library" in bad.content.decode()
    bad = client.post("/inventory/runners/new/", {"path": "emulated"})
    assert bad.status_code == 400 and "built-in runner" in bad.content.decode()
    entry = world_runner = selectors.runner_package_list().get()
    assert world_runner.path == "acme_rl"
    resp = client.post(f"/inventory/runners/{entry.pk}/delete/", follow=True)
    assert "Removed acme_rl from the runner allowlist." in resp.content.decode()
    assert selectors.runner_allowlist() == []
    assert [e.action for e in AuditEntry.objects.filter(action__startswith="runner_package")] == [
        "runner_package.delete",
        "runner_package.create",
    ]
    # a researcher reads the list and cannot change it
    assert client_as("alice").post("/inventory/runners/new/", {"path": "x"}).status_code == 403


@pytest.mark.django_db
def test_the_runner_allowlist_api(api_as, world):
    admin = api_as("admin")
    resp = admin.post("/api/v1/runner-packages/", {"path": "acme_rl.runners:Grpo"}, format="json")
    assert resp.status_code == 201 and resp.json()["path"] == "acme_rl.runners:Grpo"
    assert api_as("alice").get("/api/v1/runner-packages/").json()["results"][0]["path"] == (
        "acme_rl.runners:Grpo"
    )
    refused = admin.post(
        "/api/v1/runner-packages/", {"path": "rollmux_web.settings"}, format="json"
    )
    assert refused.status_code == 400 and "path" in refused.json()["error"]["fields"]
    assert (
        api_as("bob").post("/api/v1/runner-packages/", {"path": "y"}, format="json").status_code
        == 403
    )
    pk = resp.json()["id"]
    assert admin.delete(f"/api/v1/runner-packages/{pk}/").status_code == 204
    assert selectors.runner_allowlist() == []


@pytest.mark.django_db
def test_a_node_with_more_host_memory_than_its_type_is_refused(api_as, client_as, world):
    # issue 24 item 18: a node of 99,999 GB beside its type's 2,048 GB was accepted
    resp = api_as("admin").post(
        "/api/v1/nodes/",
        {"name": "h20-big", "cluster": "rollout-pool", "host_mem_gb": 99999},
        format="json",
    )
    assert resp.status_code == 400
    (message,) = resp.json()["error"]["fields"]["host_mem_gb"]
    assert (
        message == "A H20 node has at most 2048 GB of host memory (its GPU type's), got 99999 GB."
    )
    assert not Node.objects.filter(name="h20-big").exists()
    node = Node.objects.get(name="h20-1")
    resp = api_as("admin").patch(f"/api/v1/nodes/{node.pk}/", {"host_mem_gb": 4096}, format="json")
    assert resp.status_code == 400 and "host_mem_gb" in resp.json()["error"]["fields"]
    # the form names the field too; less than the type's (a degraded machine) is fine
    page = client_as("admin").post(
        f"/inventory/nodes/{node.pk}/edit/",
        {"name": "h20-1", "cluster": "rollout-pool", "gpus": 8, "host_mem_gb": 99999,
         "state": "up"},
    )  # fmt: skip
    assert "at most 2048 GB of host memory" in page.content.decode()
    node.refresh_from_db()
    assert node.host_mem_gb == 2048
    services.node_update(actor=world.admin, node_id=node.pk, data={"host_mem_gb": 1536.0})
    # and a GPU type cannot shrink below one of its nodes
    with pytest.raises(ValidationError) as exc:
        services.gpu_type_update(
            actor=world.admin, gpu_type_id=world.h20.pk, data={"host_mem_gb": 1024}
        )
    assert "host_mem_gb" in exc.value.message_dict
    assert "Node h20-0 has 2048 GB of host memory, more than 1024" in str(exc.value)


@pytest.mark.django_db
def test_the_nodes_come_a_page_at_a_time_and_a_row_reloads_by_its_id(
    client_as, world, django_assert_max_num_queries
):
    # issue 25: a fleet has 10,000 nodes; the page showed them all (25 s, 10 MB)
    from rollmux_web.inventory.views import NODES_PER_PAGE

    Node.objects.bulk_create(
        Node(name=f"h20-x{i:03d}", cluster=world.rollout_pool, gpu_type=world.h20, host_mem_gb=2048)
        for i in range(NODES_PER_PAGE)
    )
    client = client_as("admin")
    with django_assert_max_num_queries(15):
        html = client.get("/inventory/").content.decode()
    assert html.count('<tr id="node-') == NODES_PER_PAGE
    total = Node.objects.count()
    assert f"page 1 of 2 · {total} nodes" in html and "?page=2#nodes" in html
    assert client.get("/inventory/?page=2").content.decode().count('<tr id="node-') == (
        total - NODES_PER_PAGE
    )
    # the "Keep it up" link of a row asks for that row, whichever page it is on
    last = Node.objects.order_by("cluster__kind", "name").last()
    one = client.get(f"/inventory/?node={last.pk}").content.decode()
    assert one.count('<tr id="node-') == 1 and f'id="node-{last.pk}"' in one
    bad = client.get("/inventory/?node=h20-1")
    assert bad.status_code == 400 and "node: &#x27;h20-1&#x27; is not a node id." in (
        bad.content.decode()
    )


@pytest.mark.django_db
def test_the_node_page_refuses_a_pool_of_another_gpu_type_naming_the_pool(client_as, world):
    # QA pass 11: the node page set a node's GPU type to its new pool's, so moving an H20
    # node into the H800 pool re-typed it (and re-priced its past allocations at H800's
    # price) where the API refuses the same move; now the page refuses it too, on the
    # Pool field, and writes nothing
    node = Node.objects.get(name="h20-1")
    resp = client_as("admin").post(
        f"/inventory/nodes/{node.pk}/edit/",
        {"name": "h20-1", "cluster": "train-pool", "gpus": 8, "host_mem_gb": 1024, "state": "up"},
    )
    assert resp.status_code == 400
    assert resp.context["form"].errors["cluster"] == ["Pool train-pool holds H800 nodes, not H20."]
    node.refresh_from_db()
    assert (node.cluster.name, node.gpu_type.name, node.host_mem_gb) == (
        "rollout-pool",
        "H20",
        2048,
    )
    assert not AuditEntry.objects.filter(action="node.update").exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "data", "message"),
    [
        (
            "/inventory/gpu-types/new/",
            {"name": "H20", "gpus_per_node": 8, "host_mem_gb": 100, "price_per_gpu_hour": "1"},
            "A GPU type named 'H20' exists already.",
        ),
        (
            "/inventory/clusters/new/",
            {"name": "train-pool", "kind": "train", "gpu_type": "H800", "ray_address": "local"},
            "A pool named 'train-pool' exists already.",
        ),
        (
            "/inventory/nodes/new/",
            {
                "name": "h20-0",
                "cluster": "rollout-pool",
                "gpus": 8,
                "host_mem_gb": 100,
                "state": "up",
            },  # fmt: skip
            "A node named 'h20-0' exists already.",
        ),
        (
            "/quotas/slo-classes/new/",
            {"name": "gold", "slowdown": "1.2", "description": ""},
            "An SLO class named 'gold' exists already.",
        ),
    ],
)
def test_a_name_taken_reads_as_in_the_api(client_as, world, url, data, message):
    # QA pass 11: the pages said Django's "Gpu type with this Name already exists." (and
    # "Cluster ...", "Slo class ...") where the API names the thing as the pages do
    from rollmux_web.quotas.models import SloClass

    if url.startswith("/quotas/") and not SloClass.objects.filter(name="gold").exists():
        SloClass.objects.create(name="gold", slowdown=1.1)
    resp = client_as("admin").post(url, data)
    assert resp.status_code == 400
    assert resp.context["form"].errors["name"] == [message]
