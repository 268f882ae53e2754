"""The quota form takes no number the API refuses (QA pass 10): a fair-share weight of
1e308, a nominal quota or borrowing limit of billions of GPUs or 1e300 monthly GPU-hours
were stored through /quotas/<pk>/edit/ while PATCH /api/v1/quotas/<pk>/ refused the same
values, so a client could not write back what it read. The page names the field, as the
API does, and stores nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from rollmux_web.audit.models import AuditEntry
from rollmux_web.quotas import services
from rollmux_web.quotas.models import Quota

pytestmark = pytest.mark.django_db

# (field, value): each one past the API's bound; a lending limit past it under no
# nominal quota (under one, the service's lending <= nominal refuses it already)
TOO_BIG = [
    ("weight", "1e308"),
    ("weight", "1000001"),
    ("max_gpus", "3000000000"),
    ("borrowing_limit", "5000000000"),
    ("lending_limit", "2000000000"),
    ("monthly_gpu_hours", "1e300"),
]


def _nominal(field: str) -> int | None:
    return None if field == "lending_limit" else 32


@pytest.fixture
def quota(world: Any) -> Quota:
    return Quota.objects.create(tenant=world.speech, gpu_type=world.h20, max_gpus=32)


def _form(**over: str) -> dict[str, str]:
    data = {
        "tenant": "speech",
        "gpu_type": "H20",
        "max_gpus": "32",
        "borrowing_limit": "0",
        "lending_limit": "",
        "weight": "1",
        "monthly_gpu_hours": "",
        "monthly_budget_usd": "",
    }
    data.update(over)
    return data


@pytest.mark.parametrize(("field", "value"), TOO_BIG)
def test_the_quota_form_refuses_what_the_api_refuses_naming_the_field(
    client_as: Any, api_as: Any, quota: Quota, field: str, value: str
) -> None:
    quota.max_gpus = _nominal(field)
    quota.save()
    number = float(value) if field in ("weight", "monthly_gpu_hours") else int(value)
    api = api_as("admin").patch(f"/api/v1/quotas/{quota.pk}/", {field: number}, format="json")
    assert api.status_code == 400 and field in api.json()["error"]["fields"], api.content
    nominal = "" if quota.max_gpus is None else str(quota.max_gpus)
    resp = client_as("admin").post(
        f"/quotas/{quota.pk}/edit/", _form(**{"max_gpus": nominal, field: value})
    )
    assert resp.status_code == 400, resp.status_code
    assert f'id="error-{field}"' in resp.content.decode()
    quota.refresh_from_db()
    assert (quota.max_gpus, quota.borrowing_limit) == (_nominal(field), 0)
    assert quota.lending_limit is None
    assert (quota.weight, quota.monthly_gpu_hours) == (1.0, None)
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(("field", "value"), TOO_BIG)
def test_the_service_refuses_them_too(world: Any, quota: Quota, field: str, value: str) -> None:
    quota.max_gpus = _nominal(field)
    quota.save()
    number = float(value) if field in ("weight", "monthly_gpu_hours") else int(value)
    with pytest.raises(ValidationError) as exc:
        services.quota_update(actor=None, quota_id=quota.pk, data={field: number})
    assert field in exc.value.message_dict


def test_the_largest_values_the_api_takes_are_stored_through_the_form(
    client_as: Any, quota: Quota
) -> None:
    resp = client_as("admin").post(
        f"/quotas/{quota.pk}/edit/",
        _form(max_gpus="1000000", weight="1000000", monthly_gpu_hours="1000000000000"),
    )
    assert resp.status_code == 302, resp.content.decode()[:2000]
    quota.refresh_from_db()
    assert (quota.max_gpus, quota.weight, quota.monthly_gpu_hours) == (1_000_000, 1e6, 1e12)


def test_one_submit_names_every_mistake(client_as: Any, quota: Quota) -> None:
    # a field the form refuses (a nominal quota past the bound) beside ones only the
    # service refuses (a negative borrowing limit, a zero weight, a lending limit above the
    # nominal quota): the page named the first only, and the others after it was fixed
    resp = client_as("admin").post(
        f"/quotas/{quota.pk}/edit/",
        _form(max_gpus="3000000000", borrowing_limit="-1", weight="0"),
    )
    page = resp.content.decode()
    assert resp.status_code == 400
    for field in ("max_gpus", "borrowing_limit", "weight"):
        assert f'id="error-{field}"' in page, field
    assert "Must be zero or more GPUs (beyond the nominal quota); got -1." in page
    assert "Must be a number above 0; got 0.0." in page
    resp = client_as("admin").post(
        f"/quotas/{quota.pk}/edit/", _form(weight="abc", max_gpus="16", lending_limit="24")
    )
    page = resp.content.decode()
    assert resp.status_code == 400
    assert 'id="error-weight"' in page and 'id="error-lending_limit"' in page
    assert "Must be at most the nominal quota (max_gpus 16)" in page
    quota.refresh_from_db()
    assert (quota.max_gpus, quota.borrowing_limit, quota.weight) == (32, 0, 1.0)
    assert not AuditEntry.objects.exists()


def test_a_valid_form_still_gets_the_service_checks_once(client_as: Any, quota: Quota) -> None:
    resp = client_as("admin").post(f"/quotas/{quota.pk}/edit/", _form(borrowing_limit="-3"))
    page = resp.content.decode()
    assert resp.status_code == 400
    assert page.count("Must be zero or more GPUs (beyond the nominal quota); got -3.") == 1
