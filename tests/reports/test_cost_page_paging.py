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


@pytest.mark.django_db
def test_the_slo_reports_violations_show_a_page_and_count_them_all(
    world: Any, client_as: Any, monkeypatch: Any
) -> None:
    from rollmux_web.quotas.models import SloClass
    from tests.reports.builders import make_group, make_job, phase, place

    t0 = datetime(2026, 3, 10, tzinfo=UTC)
    group_of: dict[str, int] = {}
    for i, name in enumerate(("a", "b", "c")):
        # an iteration of 30 min of phases over 70 min: slowdown 2.33, over any SLO of 1
        start = t0 + i * 120 * M
        g = make_group(created=start, released=start + 90 * M)
        group_of[name] = g.pk
        pl = place(g, make_job(world, name=name), rollout=[], train=[], joined=start)
        phase(pl, iteration=0, kind="rollout", nodes=[], start=start, minutes=20)
        phase(pl, iteration=0, kind="train", nodes=[], start=start + 60 * M, minutes=10)
    SloClass.objects.update(slowdown=1.0)
    client = client_as("finance")
    url = "/reports/slo/?start=2026-03-10&end=2026-03-10"

    def violations(html: str) -> list[str]:
        body = re.search(r'<table class="violations">.*?</table>', html, re.S)
        assert body
        return re.findall(r"<tr><td><a [^>]*>([abc])</a>", body.group(0))

    def count(html: str) -> str:
        m = re.search(r'Violations</div><div class="big">(\d+)<', html)
        assert m
        return m.group(1)

    whole = client.get(url).content.decode()
    assert sorted(violations(whole)) == ["a", "b", "c"] and "slo-violations-pages" not in whole
    monkeypatch.setattr(views, "SLO_JOBS_PER_PAGE", 2)
    first = client.get(url).content.decode()
    second = client.get(f"{url}&vpage=2").content.decode()
    assert len(violations(first)) == 2 and len(violations(second)) == 1
    assert sorted(violations(first) + violations(second)) == ["a", "b", "c"]
    assert count(first) == count(second) == "3"  # the count is all of them
    # each row shown links its job's co-execution group (read for the rows of the page)
    for html in (first, second):
        body = re.search(r'<table class="violations">.*?</table>', html, re.S)
        assert body
        for name in violations(html):
            assert f'href="/groups/{group_of[name]}/"' in body.group(0)
    api = client.get("/api/v1/reports/slo/?start=2026-03-10&end=2026-03-10").json()
    assert {j["job"]: j["groups"] for j in api["jobs"]} == {n: [g] for n, g in group_of.items()}
    assert "slo-violations-pages" in first and "vpage=2" in first
    # the per-job table's links keep the violations' page, and back
    assert "page=2&amp;vpage=2" in second or "page=1&amp;vpage=1" in second
    bad = client.get(f"{url}&vpage=9").content.decode()
    assert "vpage: &#x27;9&#x27; is not a page" in bad and len(violations(bad)) == 2
