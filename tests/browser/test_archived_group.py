"""An archived group's page in headless Chromium (issue 25): the Gantt says its phases went
to the archive and links the files, which download through the app; another tenant's
archived member is counted, not named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import expect

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow.models import ArchivedJob, PhaseRecord
from rollmux_web.workflow.services import retention
from tests.browser.support import browser_login
from tests.reports.builders import allocate, alternate, make_group, make_job, place

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

T0 = datetime(2026, 1, 10, tzinfo=UTC)
NOW = datetime(2026, 6, 1, tzinfo=UTC)
M = timedelta(minutes=1)


def test_an_archived_groups_page_says_so_and_links_the_archive(
    world: Any, page: Any, live_server: Any, settings: Any, tmp_path: Any
) -> None:
    settings.ROLLMUX_ARCHIVE_URI = str(tmp_path / "archive")
    g = make_group(created=T0, released=T0 + 300 * M)
    for n in ("h20-0", "h20-1", "h800-0"):
        allocate(g, n, T0, T0 + 300 * M)
    jobs = {}
    for i, (name, tenant, node) in enumerate(
        [("math-7b", "vision", "h20-0"), ("asr-3b", "speech", "h20-1")]
    ):
        job = make_job(world, name=name, tenant=tenant)
        pl = place(g, job, rollout=[node], train=["h800-0"], joined=T0, left=T0 + 300 * M)
        alternate(pl, start=T0 + i * 3 * M, iterations=4, roll_min=12, train_min=6,
                  roll_nodes=[node], train_nodes=["h800-0"], gap_min=9)  # fmt: skip
        Job.objects.filter(pk=job.pk).update(status=JobStatus.COMPLETED, finished_at=T0 + 300 * M)
        jobs[name] = job
    for ids in retention.eligible_batches(NOW, max_batches=10):
        retention.archive_jobs(ids, now=NOW)
    assert ArchivedJob.objects.count() == 2 and not PhaseRecord.objects.filter(group=g).exists()

    browser_login(page, live_server, "alice")
    page.goto(f"{live_server.url}/groups/{g.pk}/")
    note = page.locator("#archived-note")
    expect(note).to_be_visible()
    text = note.inner_text()
    assert "Archived phases" in text and "math-7b" in text and "8 phases" in text
    assert "asr-3b" not in text and "1 other tenant" in text  # counted, never named
    links = note.locator("a.archive-link")
    assert links.count() >= 1
    uri = links.first.inner_text()  # where the file lives, shown
    assert (
        uri.startswith("file://") and "/phase_records/tenant=" in uri and "/month=2026-01/" in uri
    )
    assert f"tenant={world.vision.pk}/" in uri  # her tenant's file only
    assert uri.removeprefix("file://").startswith(str(tmp_path))
    # the link downloads it through the app (a file:// link Chromium will not open from an
    # http page, and an s3:// one no browser reaches)
    href = links.first.get_attribute("href") or ""
    assert href == f"/timeline/jobs/{jobs['math-7b'].pk}/archive/0/"
    with page.expect_download() as got:
        links.first.click()
    saved = got.value.path()
    with open(saved, "rb") as f, open(uri.removeprefix("file://"), "rb") as g2:
        assert f.read() == g2.read()
    assert got.value.suggested_filename.endswith(".parquet")
    # the chart has no phase of theirs to draw; the page still renders its members
    assert page.locator("svg.timeline .bar").count() == 0
    assert "math-7b" in page.inner_text("table")
    # the job's own Gantt says it too
    note.get_by_role("link", name="math-7b").click()
    page.wait_for_load_state("networkidle")
    assert page.url.endswith(f"/timeline/jobs/{jobs['math-7b'].pk}/")
    expect(page.locator("#archived-note")).to_contain_text("of this job")
