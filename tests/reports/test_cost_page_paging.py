"""The cost and SLO pages at a fleet's size (issue 25): their per-job tables show a page of
jobs, the totals stay the whole range's."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from rollmux_web.reports import views
from tests.reports.test_cost_page import M, one_job

URL = "/reports/cost/?start=2026-03-10&end=2026-03-10"


def _jobs(html: str, table: str) -> set[str]:
    body = re.search(rf'<table class="{table}".*?</table>', html, re.S)
    assert body, table
    return set(re.findall(r'<tr data-job="(\d+)"', body.group(0)))


def _total(html: str) -> str:
    m = re.search(r'id="lines-total">([^<]*)<', html)
    assert m
    return m.group(1)


@pytest.mark.django_db
def test_the_per_job_tables_show_a_page_of_jobs_and_the_totals_all(
    world: Any, client_as: Any, monkeypatch: Any
) -> None:
    t0 = datetime(2026, 3, 10, tzinfo=UTC)
    for i, name in enumerate(("a", "b", "c")):
        one_job(world, t0 + i * 120 * M, name=name)
    client = client_as("finance")
    whole = client.get(URL).content.decode()
    everyone = _jobs(whole, "cost-jobs")
    assert len(everyone) == 3 and "cost-jobs-pages" not in whole
    monkeypatch.setattr(views, "COST_JOBS_PER_PAGE", 2)
    seen: set[str] = set()
    for page in (1, 2):
        html = client.get(f"{URL}&page={page}").content.decode()
        jobs = _jobs(html, "cost-jobs")
        assert jobs == _jobs(html, "cost-lines")  # the lines of the jobs on the page
        assert len(jobs) == (2 if page == 1 else 1)
        assert "Jobs " in html and "of 3" in html
        assert _total(html) == _total(whole)
        seen |= jobs
    assert seen == everyone
    bad = client.get(f"{URL}&page=9").content.decode()
    assert "page: &#x27;9&#x27; is not a page" in bad and len(_jobs(bad, "cost-jobs")) == 2


@pytest.mark.django_db
def test_the_slo_reports_job_table_shows_a_page_of_jobs(
    world: Any, client_as: Any, monkeypatch: Any
) -> None:
    t0 = datetime(2026, 3, 10, tzinfo=UTC)
    for i, name in enumerate(("a", "b", "c")):
        one_job(world, t0 + i * 120 * M, name=name)
    client = client_as("finance")
    url = "/reports/slo/?start=2026-03-10&end=2026-03-10"

    def names(html: str) -> list[str]:
        body = re.search(r'<h2 id="every-job">.*?</table>', html, re.S)
        assert body
        return re.findall(r"<tr><td><a [^>]*>([abc])</a>", body.group(0))

    whole = client.get(url).content.decode()
    assert sorted(names(whole)) == ["a", "b", "c"] and "slo-jobs-pages" not in whole
    monkeypatch.setattr(views, "SLO_JOBS_PER_PAGE", 2)
    first = client.get(url).content.decode()
    second = client.get(f"{url}&page=2").content.decode()
    assert len(names(first)) == 2 and len(names(second)) == 1
    assert sorted(names(first) + names(second)) == ["a", "b", "c"]
    assert "slo-jobs-pages" in first and "of 3" in first
