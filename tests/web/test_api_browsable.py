"""The browsable API: a logged-in browser (Accept: text/html) gets a page on every API route.

Every route under /api/v1/ is walked from the URL resolver (a route added later is covered
without editing this file) and fetched as a logged-in admin with the browser's Accept header.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from rollmux_web.audit.models import AuditEntry
from rollmux_web.inventory.models import Node
from rollmux_web.jobs.services import job_submit
from rollmux_web.quotas.models import Quota
from rollmux_web.workflow.models import ExecutionGroup, Placement
from tests.factories import job_spec

pytestmark = pytest.mark.django_db

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def _api_routes() -> Iterator[str]:
    def walk(patterns: list[Any], prefix: str) -> Iterator[str]:
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                yield prefix + str(p.pattern)

    for route in walk(get_resolver().url_patterns, ""):
        if route.startswith("api/v1/") and "format" not in route:
            yield route


def _path(route: str, ids: dict[str, str]) -> str:
    """Fill a route's parameters with the ids of real rows (which row depends on the route)."""
    route = route.replace("^", "").replace("$", "").replace("\\", "")
    collection = route.removeprefix("api/v1/").split("/")[0]

    def fill(match: re.Match[str]) -> str:
        name = match.group("name")
        return ids.get(f"{collection}:{name}") or ids.get(name) or "1"

    route = re.sub(r"\(\?P<(?P<name>\w+)>[^)]*\)", fill, route)
    route = re.sub(r"<(?:\w+:)?(?P<name>\w+)>", fill, route)
    return "/" + route


@pytest.fixture
def ids(world: Any) -> dict[str, str]:
    job = job_submit(user=world.alice, spec=job_spec(), channel="t")
    group = ExecutionGroup.objects.create()
    placement = Placement.objects.create(job=job, group=group, attempt=1, strategy="new_group")
    placement.rollout_nodes.set(Node.objects.filter(name="h20-0"))
    placement.train_nodes.set(Node.objects.filter(name="h800-0"))
    quota = Quota.objects.create(tenant=world.vision, gpu_type=world.h20, max_gpus=64)
    return {
        "job_id": str(job.pk),
        "group_id": str(group.pk),
        "name": world.vision.name,
        "gpu-types:pk": str(world.h20.pk),
        "clusters:pk": str(world.rollout_pool.pk),
        "nodes:pk": str(Node.objects.first().pk),  # type: ignore[union-attr]
        "slo-classes:pk": str(world.silver.pk),
        "quotas:pk": str(quota.pk),
        "audit:pk": str(AuditEntry.objects.first().pk),  # type: ignore[union-attr]
    }


def test_every_api_route_renders_for_a_logged_in_browser(client_as: Any, ids: Any) -> None:
    browser = client_as("admin")
    routes = list(_api_routes())
    assert {"api/v1/jobs/", "api/v1/groups/", "api/v1/jobs/<str:job_id>/phases/"} <= set(routes)
    failures = []
    for route in routes:
        path = _path(route, ids)
        resp = browser.get(path, HTTP_ACCEPT=BROWSER_ACCEPT)
        if resp.status_code >= 500:
            failures.append(f"{path}: {resp.status_code}")
        elif resp.status_code == 200 and "json" not in resp["Content-Type"]:
            # the browsable page (or a download such as the parquet export)
            assert resp["Content-Type"].startswith(("text/html", "application/vnd", "text/csv"))
    assert not failures, failures
    # the three views the QA pass found broken show their data on the page
    for path in ("/api/v1/jobs/", f"/api/v1/jobs/{ids['job_id']}/phases/", "/api/v1/groups/"):
        resp = browser.get(path, HTTP_ACCEPT=BROWSER_ACCEPT)
        assert resp.status_code == 200 and resp["Content-Type"].startswith("text/html"), path


@pytest.mark.parametrize(
    ("user", "url", "body"),
    [
        ("admin", "/api/v1/slo-classes/", {"name": "platinum", "slowdown": "1.05"}),
        ("alice", "/api/v1/jobs/", {k: str(v) for k, v in job_spec().items()}),
    ],
)
def test_the_browsable_api_form_posts_with_its_csrf_token(
    world: Any, user: str, url: str, body: dict[str, str]
) -> None:
    # The HTML form sends Django's csrfmiddlewaretoken beside the fields: it is the form's
    # transport, not an unknown field (QA pass 13: the job form answered 400
    # "csrfmiddlewaretoken: Unknown field")
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(world.user(user))
    page = client.get(url, HTTP_ACCEPT=BROWSER_ACCEPT)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    assert token is not None
    resp = client.post(
        url, {"csrfmiddlewaretoken": token.group(1), **body}, HTTP_ACCEPT="application/json"
    )
    assert resp.status_code == 201, resp.content
    resp = client.post(
        url,
        {"csrfmiddlewaretoken": token.group(1), **body, "nmae": "x"},
        HTTP_ACCEPT="application/json",
    )
    assert resp.status_code == 400
    assert list(resp.json()["error"]["fields"]) in (["nmae"], ["name", "nmae"])
