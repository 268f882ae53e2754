"""Query parameters validate as the OpenAPI schema describes them (issue 12 item 7)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "query",
    ["page_size=0", "page_size=501", "page_size=ten", "page=0", "page=1.5", "page_size=-3"],
)
def test_bad_pagination_is_a_400_naming_the_parameter(api_as: Any, query: str) -> None:
    resp = api_as("alice").get(f"/api/v1/jobs/?{query}")
    assert resp.status_code == 400, resp.content
    name = query.split("=")[0]
    assert name in resp.json()["error"]["fields"]


def test_good_pagination_still_pages(api_as: Any) -> None:
    body = api_as("alice").get("/api/v1/tenants/?page_size=1&page=1").json()
    assert len(body["results"]) == 1


def test_a_parameter_given_twice_is_a_400(api_as: Any) -> None:
    resp = api_as("alice").get("/api/v1/jobs/?status=queued&status=running")
    assert resp.status_code == 400
    assert resp.json()["error"]["fields"] == {"status": ["Give this parameter once."]}


def test_an_enum_filter_refuses_a_value_outside_it(api_as: Any) -> None:
    resp = api_as("alice").get("/api/v1/nodes/?state=melted")
    assert resp.status_code == 400 and "state" in resp.json()["error"]["fields"]
    assert api_as("alice").get("/api/v1/nodes/?state=up").status_code == 200


def test_the_schema_documents_bounds_formats_and_the_error_codes(api_as: Any) -> None:
    schema = api_as("alice").get("/api/schema/?format=json").json()
    params = {p["name"]: p["schema"] for p in schema["paths"]["/api/v1/jobs/"]["get"]["parameters"]}
    assert params["page_size"] == {"type": "integer", "minimum": 1, "maximum": 500}
    assert params["page"] == {"type": "integer", "minimum": 1}
    report = schema["paths"]["/api/v1/reports/cost/"]["get"]
    dates = {p["name"]: p["schema"] for p in report["parameters"]}
    assert dates["start"]["format"] == "date" and dates["end"]["format"] == "date"
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            codes = set(op["responses"])
            assert {"400", "414", "429"} <= codes, (method, path, codes)
