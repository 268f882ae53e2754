"""The GPU type form takes no host memory the API refuses (QA pass 10): /inventory/gpu-types/
new/ stored a GPU type of 1e308 GB per node (shown as "1e+308 GB"), which POST /api/v1/
gpu-types/ refuses above 1,000,000 GB; its nodes could then be given as much. The page
names the field, as the API does, and stores nothing; the service refuses it too."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from rollmux_web.audit.models import AuditEntry
from rollmux_web.inventory import services
from rollmux_web.inventory.models import GpuType

pytestmark = pytest.mark.django_db

GPU_TYPE = {"name": "B200", "gpus_per_node": "8", "host_mem_gb": "2048", "price_per_gpu_hour": "9"}


@pytest.mark.parametrize("mem", ["1e308", "1000000.5"])
def test_the_gpu_type_form_refuses_the_host_memory_the_api_refuses(
    client_as: Any, api_as: Any, world: Any, mem: str
) -> None:
    api = api_as("admin").post(
        "/api/v1/gpu-types/", {**GPU_TYPE, "host_mem_gb": float(mem)}, format="json"
    )
    assert api.status_code == 400 and "host_mem_gb" in api.json()["error"]["fields"]
    client = client_as("admin")
    resp = client.post("/inventory/gpu-types/new/", {**GPU_TYPE, "host_mem_gb": mem})
    assert resp.status_code == 400, resp.status_code
    assert 'id="error-host_mem_gb"' in resp.content.decode()
    resp = client.post(
        f"/inventory/gpu-types/{world.h20.pk}/edit/",
        {**GPU_TYPE, "name": "H20", "host_mem_gb": mem, "price_per_gpu_hour": "1.85"},
    )
    assert resp.status_code == 400 and 'id="error-host_mem_gb"' in resp.content.decode()
    assert not GpuType.objects.filter(name="B200").exists()
    world.h20.refresh_from_db()
    assert world.h20.host_mem_gb == 2048
    assert not AuditEntry.objects.exists()


def test_the_service_refuses_it_too(world: Any) -> None:
    with pytest.raises(ValidationError) as exc:
        services.gpu_type_update(actor=None, gpu_type_id=world.h20.pk, data={"host_mem_gb": 1e308})
    assert "host_mem_gb" in exc.value.message_dict
    with pytest.raises(ValidationError) as exc:
        services.gpu_type_update(actor=None, gpu_type_id=world.h20.pk, data={"gpus_per_node": 2048})
    assert "gpus_per_node" in exc.value.message_dict


def test_the_largest_host_memory_the_api_takes_is_stored_through_the_form(client_as: Any) -> None:
    resp = client_as("admin").post(
        "/inventory/gpu-types/new/", {**GPU_TYPE, "host_mem_gb": "1000000"}
    )
    assert resp.status_code == 302
    assert GpuType.objects.get(name="B200").host_mem_gb == 1_000_000


@pytest.mark.parametrize("price", ["999999.5", "1000000"])
def test_the_page_and_the_api_refuse_the_same_prices_with_the_same_message(
    client_as: Any, api_as: Any, world: Any, price: str
) -> None:
    # (the API capped prices at 999,999 with DRF's own message while the page and the
    # service took up to 999,999.9999: a price stored through the page could not be sent
    # back through the API)
    api = api_as("admin").post(
        "/api/v1/gpu-types/", {**GPU_TYPE, "price_per_gpu_hour": price}, format="json"
    )
    assert api.status_code == 400
    assert api.json()["error"]["fields"]["price_per_gpu_hour"] == [services.PRICE_TOO_HIGH]
    resp = client_as("admin").post(
        "/inventory/gpu-types/new/", {**GPU_TYPE, "price_per_gpu_hour": price}
    )
    assert resp.status_code == 400
    assert 'id="error-price_per_gpu_hour"' in resp.content.decode()
    assert "999,999 dollars per GPU-hour" in resp.content.decode()
    assert not GpuType.objects.filter(name="B200").exists()
    with pytest.raises(ValidationError) as exc:
        services.gpu_type_update(
            actor=None, gpu_type_id=world.h20.pk, data={"price_per_gpu_hour": price}
        )
    assert exc.value.message_dict["price_per_gpu_hour"] == [services.PRICE_TOO_HIGH]
    assert not AuditEntry.objects.exists()


def test_the_highest_price_is_taken_by_the_page_and_the_api(client_as: Any, api_as: Any) -> None:
    resp = client_as("admin").post(
        "/inventory/gpu-types/new/", {**GPU_TYPE, "price_per_gpu_hour": "999999"}
    )
    assert resp.status_code == 302
    api = api_as("admin").post(
        "/api/v1/gpu-types/",
        {**GPU_TYPE, "name": "B300", "price_per_gpu_hour": "999999.0000"},
        format="json",
    )
    assert api.status_code == 201, api.content
    assert api.json()["price_per_gpu_hour"] == "999999.0000"
