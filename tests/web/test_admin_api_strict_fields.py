"""The admin endpoints (quotas, SLO classes, GPU types, pools, nodes, runner packages) refuse
a field they do not know, naming it and the closest real one, as the job spec does: a
misspelt `weigth` or `preemptable` was answered 200 and changed nothing. A JSON boolean
where a number is expected is refused (DRF's FloatField took `true` as 1.0). Read-only
fields of a record (`id`, `usage`, ...) are ignored, so a record can be edited and sent back.
(QA pass 13)"""

from __future__ import annotations

from typing import Any

import pytest

from rollmux_web.inventory.models import GpuType, Node
from rollmux_web.quotas.models import Quota, SloClass

pytestmark = pytest.mark.django_db


def _quota(world: Any) -> Quota:
    return Quota.objects.create(tenant=world.vision, gpu_type=GpuType.objects.get(name="H800"))


@pytest.mark.parametrize(
    ("url", "body", "field", "hint"),
    [
        ("quotas/{quota}/", {"weigth": 3}, "weigth", "did you mean weight?"),
        ("slo-classes/{silver}/", {"preemptable": False}, "preemptable", "preemptible?"),
        ("nodes/{node}/", {"stat": "down"}, "stat", "did you mean state?"),
        ("gpu-types/{h20}/", {"price": "2"}, "price", "the fields are"),
    ],
)
def test_a_patch_with_an_unknown_field_is_refused_naming_it(
    api_as: Any, world: Any, url: str, body: dict[str, Any], field: str, hint: str
) -> None:
    ids = {
        "quota": _quota(world).pk,
        "silver": SloClass.objects.get(name="silver").pk,
        "node": Node.objects.order_by("pk").first().pk,  # type: ignore[union-attr]
        "h20": GpuType.objects.get(name="H20").pk,
    }
    resp = api_as("admin").patch(f"/api/v1/{url.format(**ids)}", body, format="json")
    assert resp.status_code == 400, resp.content
    (message,) = resp.json()["error"]["fields"][field]
    assert message.startswith("Unknown field;") and hint in message
    assert SloClass.objects.get(name="silver").preemptible  # nothing written
    assert Node.objects.filter(state="down").count() == 0


@pytest.mark.parametrize(
    ("url", "body"),
    [
        ("slo-classes/", {"name": "plat", "slowdown": 1.2, "bogus": 1}),
        ("quotas/", {"tenant": "speech", "gpu_type": "H800", "max_gpu": 8}),
        ("runner-packages/", {"path": "acme_rl", "desc": "x"}),
    ],
)
def test_a_post_with_an_unknown_field_writes_nothing(
    api_as: Any, world: Any, url: str, body: dict[str, Any]
) -> None:
    before = (SloClass.objects.count(), Quota.objects.count())
    resp = api_as("admin").post(f"/api/v1/{url}", body, format="json")
    assert resp.status_code == 400, resp.content
    assert "Unknown field" in str(resp.json()["error"]["fields"])
    assert (SloClass.objects.count(), Quota.objects.count()) == before


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("quotas/{quota}/", {"weight": True}, "weight"),
        ("quotas/{quota}/", {"monthly_gpu_hours": False}, "monthly_gpu_hours"),
        ("slo-classes/{silver}/", {"slowdown": True}, "slowdown"),
        ("gpu-types/{h20}/", {"host_mem_gb": True}, "host_mem_gb"),
        ("nodes/{node}/", {"host_mem_gb": True}, "host_mem_gb"),
    ],
)
def test_a_boolean_for_a_number_is_refused(
    api_as: Any, world: Any, url: str, body: dict[str, Any], field: str
) -> None:
    quota = _quota(world)
    ids = {
        "quota": quota.pk,
        "silver": SloClass.objects.get(name="silver").pk,
        "node": Node.objects.order_by("pk").first().pk,  # type: ignore[union-attr]
        "h20": GpuType.objects.get(name="H20").pk,
    }
    resp = api_as("admin").patch(f"/api/v1/{url.format(**ids)}", body, format="json")
    assert resp.status_code == 400, resp.content
    assert list(resp.json()["error"]["fields"]) == [field]
    quota.refresh_from_db()
    assert quota.weight == 1.0 and quota.monthly_gpu_hours is None
    assert SloClass.objects.get(name="silver").slowdown == 1.5


def test_a_record_read_back_with_its_read_only_fields_is_accepted(api_as: Any, world: Any) -> None:
    admin = api_as("admin")
    quota = _quota(world)
    record = admin.get(f"/api/v1/quotas/{quota.pk}/").json()
    assert "usage" in record and "id" in record
    record["weight"] = 2.0
    resp = admin.put(f"/api/v1/quotas/{quota.pk}/", record, format="json")
    assert resp.status_code == 200, resp.content
    quota.refresh_from_db()
    assert quota.weight == 2.0
    node = admin.get("/api/v1/nodes/").json()["results"][0]
    resp = admin.put(f"/api/v1/nodes/{node['id']}/", node, format="json")
    assert resp.status_code == 200, resp.content
