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
