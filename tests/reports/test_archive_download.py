"""An archived job's files download through the app (QA pass 11): the Gantt linked them by
their URI (file://, s3://), which a browser refuses to open from an http page or cannot
reach at all. The link is now the app's; a tenant downloads its own jobs' files only."""

from __future__ import annotations

import io
import os
from typing import Any

import pyarrow.parquet as pq
import pytest

from rollmux_web.workflow.models import ArchivedJob
from tests.reports.builders import make_job
from tests.reports.test_timeline import archived_shared_group

pytestmark = pytest.mark.django_db


@pytest.fixture
def archived(world: Any, settings: Any, tmp_path: Any) -> dict[str, Any]:
    settings.ROLLMUX_ARCHIVE_URI = str(tmp_path / "archive")
    return archived_shared_group(world)


def _url(job: Any, index: int = 0) -> str:
    return f"/timeline/jobs/{job.pk}/archive/{index}/"


def test_a_tenant_downloads_its_jobs_archive_file(client_as: Any, archived: Any) -> None:
    alpha = archived["alpha"]
    uris = ArchivedJob.objects.get(job=alpha).uris
    assert uris and all(u.startswith("file://") for u in uris)
    page = client_as("alice").get(f"/groups/{archived['group'].pk}/").content.decode()
    assert f'href="{_url(alpha)}"' in page and uris[0] in page  # linked, its URI shown
    resp = client_as("alice").get(_url(alpha))
    assert resp.status_code == 200
    assert resp["Content-Type"] == "application/vnd.apache.parquet"
    name = os.path.basename(uris[0])
    assert resp["Content-Disposition"] == f'attachment; filename="{name}"'
    body = b"".join(resp.streaming_content)
    with open(uris[0].removeprefix("file://"), "rb") as f:
        assert body == f.read()
    assert int(resp["Content-Length"]) == len(body)
    table = pq.read_table(io.BytesIO(body))
    jobs = set(table.column("job_id").to_pylist())
    assert archived["alpha"].pk in jobs and archived["gamma"].pk not in jobs  # vision's only


def test_another_tenants_archive_file_is_not_found(client_as: Any, archived: Any) -> None:
    assert client_as("charlie").get(_url(archived["alpha"])).status_code == 404
    assert client_as("charlie").get(_url(archived["gamma"])).status_code == 200
    assert client_as("alice").get(_url(archived["gamma"])).status_code == 404


def test_a_file_it_does_not_have_is_not_found(world: Any, client_as: Any, archived: Any) -> None:
    alpha = archived["alpha"]
    count = len(ArchivedJob.objects.get(job=alpha).uris)
    assert client_as("alice").get(_url(alpha, count - 1)).status_code == 200
    assert client_as("alice").get(_url(alpha, count)).status_code == 404
    # a job of hers that was never archived has none
    fresh = make_job(world, name="new", tenant="vision")
    assert client_as("alice").get(_url(fresh)).status_code == 404


def test_a_file_gone_from_the_archive_is_not_found(client_as: Any, archived: Any) -> None:
    alpha = archived["alpha"]
    uri = ArchivedJob.objects.get(job=alpha).uris[0]
    os.remove(uri.removeprefix("file://"))
    resp = client_as("alice").get(_url(alpha))
    assert resp.status_code == 404
