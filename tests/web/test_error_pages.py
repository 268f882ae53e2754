"""Error pages: a refusal or a missing object says why, inside the site, with a way back."""

from __future__ import annotations

from typing import Any

import pytest

from rollmux_web.jobs.services import job_submit
from tests.factories import job_spec

pytestmark = pytest.mark.django_db


def test_finance_is_told_it_is_read_only(client_as: Any) -> None:
    resp = client_as("finance").get("/jobs/new/")
    assert resp.status_code == 403
    html = resp.content.decode()
    assert "may not submit" in html and "Finance accounts are read-only" in html
    assert 'aria-label="Main"' in html and "Back to the overview" in html


def test_a_researcher_is_told_what_the_role_allows(client_as: Any) -> None:
    resp = client_as("alice").get("/audit/")
    assert resp.status_code == 403
    assert "quotas, prices, nodes and the audit log are for admins" in resp.content.decode()


def test_another_tenants_job_is_a_404_page_in_the_site(
    client_as: Any, world: Any, settings: Any
) -> None:
    settings.DEBUG = False
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    resp = client_as("charlie").get(f"/jobs/{job.pk}/")
    assert resp.status_code == 404
    html = resp.content.decode()
    assert "belongs to a tenant you are not in" in html and job.name not in html
    assert 'aria-label="Main"' in html


def test_the_favicon_is_served(client: Any) -> None:
    resp = client.get("/favicon.ico")
    assert resp.status_code == 302 and resp["Location"].endswith("favicon.svg")


def test_make_run_debug_mode_shows_the_branded_404_page(
    client: Any, world: Any, settings: Any
) -> None:
    settings.DEBUG = True  # what `make run` sets
    for path in ("/no-such-page/", "/jobs/999999/"):
        resp = client_as_alice(client, world).get(path)
        assert resp.status_code == 404, path
        html = resp.content.decode()
        assert "There is no such page" in html, path
        assert "Using the URLconf" not in html and "technical_404" not in html, path
    # the API keeps its JSON 404 in DEBUG too
    resp = client.get("/api/v1/jobs/999999/")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"


def client_as_alice(client: Any, world: Any) -> Any:
    client.force_login(world.alice)
    return client


def test_json_nested_a_thousand_levels_deep_is_a_400(client: Any, world: Any) -> None:
    for body in ("[" * 1000 + "]" * 1000, '{"a":' * 1000 + "1" + "}" * 1000):
        resp = client.post("/api/v1/auth/token/", body, content_type="application/json")
        assert resp.status_code == 400
        assert "nested too deeply" in resp.json()["error"]["message"]


def test_a_body_over_the_upload_limit_is_a_413_in_the_api_error_shape(
    api_as: Any, world: Any, settings: Any
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    big = '{"name": "' + "x" * 20_000 + '"}'
    for path in ("/api/v1/auth/token/", "/api/v1/jobs/"):
        resp = api_as("alice").post(path, big, content_type="application/json")
        assert resp.status_code == 413, path
        err = resp.json()["error"]
        assert err["code"] == "request_too_large" and "10,000 bytes" in err["message"]
