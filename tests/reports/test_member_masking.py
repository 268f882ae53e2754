"""One masking rule: another tenant's member of a shared group never shows its identity.

Alice's job (tenant vision) and charlie's (tenant speech) share a live co-execution
group. Every page, htmx partial, export and API that can show the group is fetched as
each of them, and as an admin (who sees both); neither researcher ever gets the other's
job id, phase ids, placement id, iteration numbers or job name.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rollmux_web.workflow.models import PhaseRecord, PhaseState
from tests.reports.builders import allocate, make_group, make_job, place

M = timedelta(minutes=1)
# distinctive numbers, so that finding one in a response can only mean a leak
IDS = {
    "vision": {"job": 9_900_002, "phases": 8_800_101, "iteration": 6006, "name": "vision-nebula"},
    "speech": {"job": 9_900_001, "phases": 8_800_001, "iteration": 7007, "name": "speech-quasar"},
}
PREVIEW = {
    "name": "probe",
    "slo_class": "bronze",  # 2x: three 2-minute iterations fit in one 3-minute cycle
    "rollout_gpus": "8",
    "train_gpus": "8",
    "t_roll_max_s": "60",
    "t_train_max_s": "60",
    "host_mem_gb": "100",
    "iterations": "10",
    "time_scale": "1",
}


def _phases(pl: Any, tenant: str, start: datetime, nodes: tuple[str, str]) -> None:
    """Two iterations (rollout, train), numbered from the tenant's iteration number."""
    ids = IDS[tenant]
    t = start
    for k in range(2):
        for j, (kind, node) in enumerate(zip(("rollout", "train"), nodes, strict=True)):
            PhaseRecord.objects.create(
                id=ids["phases"] + 2 * k + j,
                job=pl.job,
                group=pl.group,
                placement=pl,
                iteration=ids["iteration"] + k,
                kind=kind,
                node_names=[node],
                state=PhaseState.SUCCEEDED,
                warm_start=k > 0,
                queued_at=t,
                started_at=t,
                finished_at=t + 2 * M,
            )
            t += 2 * M


@pytest.fixture
def shared(world: Any) -> Any:
    now = datetime.now(tz=UTC).replace(microsecond=0)
    start = now - 30 * M
    g = make_group(created=start)
    # each member on its own rollout and training node: the group has bubbles (not
    # saturated), so the planner can pack a third job into it
    for node in ("h20-0", "h800-0", "h20-1", "h800-1"):
        allocate(g, node, start, None)
    for offset, tenant in enumerate(("speech", "vision")):
        nodes = (f"h20-{offset}", f"h800-{offset}")
        ids = IDS[tenant]
        job = make_job(
            world,
            pk=ids["job"],
            name=ids["name"],
            tenant=tenant,
            t_roll_max_s=60.0,
            t_roll_min_s=60.0,
            t_train_max_s=60.0,
            t_train_min_s=60.0,
            host_mem_gb=100.0,
            slo_class=world.bronze,
        )
        pl = place(g, job, rollout=[nodes[0]], train=[nodes[1]], joined=start)
        _phases(pl, tenant, start + offset * M, nodes)
    return g


def _leaks(text: str, tenant: str) -> list[str]:
    """Return what of `tenant`'s identity the text shows (empty: nothing)."""
    ids = IDS[tenant]
    numbers = [ids["job"], *(ids["phases"] + i for i in range(4))]
    # iteration numbers as the product shows them: raw and counted from 1
    numbers += [ids["iteration"] + k for k in range(3)]
    found = [str(n) for n in numbers if re.search(rf"(?<![\d.]){n}(?![\d])", text)]
    if ids["name"] in text:
        found.append(ids["name"])
    return found


def _pages(group_id: int, own_job: int) -> list[tuple[str, dict[str, str]]]:
    htmx = {"HTTP_HX_REQUEST": "true"}
    return [
        ("/", {}),
        ("/", htmx),  # the overview's live partial
        ("/groups/", {}),
        ("/groups/?state=active", {}),
        (f"/groups/{group_id}/", {}),
        (f"/groups/{group_id}/", htmx),  # the chart partial the page polls
        (f"/groups/{group_id}/?width=4000", {}),
        (f"/groups/{group_id}/trace.json", {}),
        (f"/timeline/jobs/{own_job}/", {}),
        (f"/timeline/jobs/{own_job}/trace.json", {}),
        (f"/jobs/{own_job}/", {}),
        ("/jobs/", {}),
        ("/reports/cost/", {}),
        ("/reports/cost.csv", {}),
        ("/reports/slo/", {}),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("viewer", "own", "other"), [("alice", "vision", "speech"), ("charlie", "speech", "vision")]
)
def test_no_page_partial_or_export_shows_the_other_tenants_member(
    shared: Any, client_as: Any, viewer: str, own: str, other: str
) -> None:
    c = client_as(viewer)
    for url, headers in _pages(shared.pk, IDS[own]["job"]):
        resp = c.get(url, **headers)
        assert resp.status_code in (200, 286), (url, resp.status_code)
        text = resp.content.decode()
        assert _leaks(text, other) == [], (url, headers, _leaks(text, other))
    # the group page does show the member, anonymously, and the viewer's own by name
    page = c.get(f"/groups/{shared.pk}/").content.decode()
    assert "another tenant&#x27;s job" in page or "another tenant's job" in page
    assert IDS[own]["name"] in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("viewer", "own", "other"), [("alice", "vision", "speech"), ("charlie", "speech", "vision")]
)
def test_the_api_and_the_preview_hide_the_other_tenants_member(
    shared: Any, api_as: Any, client_as: Any, viewer: str, own: str, other: str
) -> None:
    api = api_as(viewer)
    for url in (
        "/api/v1/groups/",
        f"/api/v1/groups/{shared.pk}/",
        f"/api/v1/jobs/{IDS[own]['job']}/phases/",
        "/api/v1/jobs/",
        "/api/v1/reports/cost/",
        "/api/v1/reports/slo/",
    ):
        resp = api.get(url)
        assert resp.status_code == 200, (url, resp.status_code)
        assert _leaks(resp.content.decode(), other) == [], url
    # the other tenant's job itself is a 404, as are its phases and its timeline
    other_job = IDS[other]["job"]
    assert api.get(f"/api/v1/jobs/{other_job}/phases/").status_code == 404
    assert client_as(viewer).get(f"/timeline/jobs/{other_job}/").status_code == 404
    assert client_as(viewer).get(f"/timeline/jobs/{other_job}/trace.json").status_code == 404
    # the submit form's preview: the planner packs the probe into the shared group and
    # lists its members' predicted slowdowns
    html = client_as(viewer).get("/whatif/preview/", {**PREVIEW, "tenant": own}).content.decode()
    assert "direct packing" in html, html
    assert IDS[own]["name"] in html and "another tenant" in html
    assert _leaks(html, other) == []


@pytest.mark.django_db
def test_an_admin_sees_both_members_by_name(shared: Any, client_as: Any) -> None:
    page = client_as("admin").get(f"/groups/{shared.pk}/").content.decode()
    assert IDS["vision"]["name"] in page and IDS["speech"]["name"] in page
    trace = client_as("admin").get(f"/groups/{shared.pk}/trace.json").json()
    job_ids = {e["args"].get("job_id") for e in trace["traceEvents"] if e["ph"] == "X"}
    assert job_ids == {IDS["vision"]["job"], IDS["speech"]["job"]}
