"""The SLO report's page computed in SQL (issue 25: `slo_report_page`) is the whole report's
page: the same rows in the same order, the same violations, counts and attainment.

The world mixes every kind of row: jobs with kept inputs (a summary, an archive, both: the
archive's win), jobs summed from their phases (running and finished), cancelled and failed
jobs with and without a completed iteration, emulated and real runners with and without a
time scale, ties in slowdown, a class whose value changed after some of its jobs were
admitted, and random microseconds in every span (the float8 divisions must be Python's)."""

from __future__ import annotations

import random
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from rollmux_web.audit.models import AuditEntry
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.reports import views
from rollmux_web.reports.selectors import slo_report, slo_report_page
from rollmux_web.workflow.models import ArchivedJob, JobSloSummary
from tests.reports.builders import make_group, make_job, phase, place

DAY = date(2026, 3, 10)
T0 = datetime(2026, 3, 10, tzinfo=UTC)
M = timedelta(minutes=1)
US = timedelta(microseconds=1)


def _kept(
    rng: random.Random,
    job: Job,
    model: Any,
    *,
    n: int,
    ratio: float | None = None,
    days: list[tuple[date, date]] | None = None,
) -> None:
    """Keep `job`'s SLO inputs (`model`: a summary or an archive): n iterations over a span
    of `ratio` (random when None) times their own time, with random microseconds, run on
    `days` (the day, when None)."""
    days = days or [(DAY, DAY)]
    solo_us = n * rng.randrange(10 * 60_000_000, 40 * 60_000_000)
    span_us = round(solo_us * (ratio if ratio is not None else rng.uniform(0.9, 2.4)))
    start = T0 + timedelta(minutes=rng.randrange(600), microseconds=rng.randrange(1_000_000))
    extra = {"archived_at": T0 + 100 * M} if model is ArchivedJob else {}
    model.objects.create(
        job=job,
        iterations_measured=n,
        solo_us=solo_us,
        had_sync=rng.random() < 0.5,
        span_start=start,
        span_end=start + span_us * US,
        ran_days=[[a.isoformat(), b.isoformat()] for a, b in days],
        first_day=days[0][0],
        last_day=days[-1][1],
        **extra,
    )


def _raw(rng: random.Random, world: Any, job: Job, *, iterations: int) -> None:
    """Give `job` phases on the day: `iterations` completed ones and a running rollout."""
    t = T0 + timedelta(minutes=rng.randrange(600), microseconds=rng.randrange(1_000_000))
    pl = place(make_group(created=t), job, rollout=[], train=[], joined=t)
    for i in range(iterations):
        roll = rng.uniform(5, 30)
        phase(pl, iteration=i, kind="rollout", nodes=[], start=t, minutes=roll)
        t += timedelta(minutes=roll + rng.uniform(0, 20), microseconds=rng.randrange(1_000_000))
        train = rng.uniform(3, 15)
        phase(pl, iteration=i, kind="train", nodes=[], start=t, minutes=train)
        t += timedelta(minutes=train + rng.uniform(0, 5))
    phase(pl, iteration=iterations, kind="rollout", nodes=[], start=t, minutes=None)


def build(world: Any) -> None:
    rng = random.Random(2025)
    classes = [world.gold, world.silver, world.bronze]
    runners = [("emulated", None), ("emulated", 4.0), ("toy-rl", None), ("my.runner:Run", None)]
    for i in range(60):
        runner, scale = rng.choice(runners)
        status = rng.choice([JobStatus.COMPLETED] * 4 + [JobStatus.CANCELLED, JobStatus.FAILED])
        job = make_job(
            world,
            name=f"k{i:02d}",
            tenant=rng.choice(["vision", "speech"]),
            slo_class=rng.choice(classes),
            status=status,
            finished_at=T0 + 20 * 60 * M,
            runner=runner,
            time_scale=scale,
            t_roll_max_s=rng.uniform(60, 900),
            t_train_max_s=rng.uniform(60, 600),
        )
        n = 0 if status != JobStatus.COMPLETED and rng.random() < 0.5 else rng.randrange(1, 60)
        model = ArchivedJob if i % 5 == 0 else JobSloSummary
        _kept(rng, job, model, n=n, ratio=1.37 if i % 7 == 0 else None)  # (ties)
        if i % 10 == 0:  # both kept (an archive above): the archive's inputs win
            _kept(rng, job, JobSloSummary, n=rng.randrange(1, 9))
        if i % 3 == 0:  # admitted (placed) before silver's change below
            place(make_group(created=T0 - 5 * M), job, rollout=[], train=[], joined=T0 - 5 * M)
    # a finished job without a profile: listed only when it ended early
    for status in (JobStatus.COMPLETED, JobStatus.CANCELLED):
        job = make_job(world, name=f"np-{status}", status=status, t_roll_max_s=None)
        _kept(rng, job, JobSloSummary, n=4)
    # kept days on both sides of the day: in the report when one of them is the day; a
    # job cancelled on the day whose kept days are before it: in the report too
    one = timedelta(days=1)
    for i, days in enumerate(
        [
            [(DAY - one, DAY + one)],
            [(DAY - 2 * one, DAY - one), (DAY + one, DAY + 2 * one)],  # not on the day
            [(DAY - 3 * one, DAY), (DAY + 2 * one, DAY + 2 * one)],
        ]
    ):
        job = make_job(world, name=f"d{i}", tenant="speech", status=JobStatus.COMPLETED)
        _kept(rng, job, ArchivedJob if i == 2 else JobSloSummary, n=5, days=days)
    job = make_job(world, name="c-before", status=JobStatus.CANCELLED, finished_at=T0 + 3 * 60 * M)
    _kept(rng, job, JobSloSummary, n=2, days=[(DAY - 3 * one, DAY - 2 * one)])
    for i in range(14):
        status = rng.choice([JobStatus.RUNNING, JobStatus.COMPLETED, JobStatus.FAILED])
        job = make_job(
            world,
            name=f"r{i:02d}",
            tenant=rng.choice(["vision", "speech"]),
            slo_class=rng.choice(classes),
            status=status,
            runner=rng.choice(["emulated", "my.runner:Run"]),
            time_scale=rng.choice([None, 1.0, 2.5]),
        )
        _raw(rng, world, job, iterations=0 if i % 6 == 0 else rng.randrange(1, 4))
    # silver was 1.25x until a minute before the day: the jobs admitted before keep it
    AuditEntry.objects.create(
        action="slo_class.update",
        object_type="slo_class",
        object_id=str(world.silver.pk),
        before={"slowdown": 1.25},
        after={"slowdown": 1.5},
    )
    AuditEntry.objects.filter(action="slo_class.update").update(at=T0 - M)


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["admin", "alice"])
def test_every_page_in_sql_is_the_whole_reports_page(world: Any, who: str) -> None:
    build(world)
    user = getattr(world, who)
    whole = slo_report(user=user, start=DAY, end=DAY)
    violations = whole.violations
    # the world has what it is built to have
    assert len(whole.jobs) > 20 and 3 < len(violations) < len(whole.jobs)
    assert any(j.slo_now for j in whole.jobs)  # admitted before silver changed
    assert any(not j.measured for j in whole.jobs) and any(not j.applicable for j in whole.jobs)
    names = {j.job_name for j in whole.jobs}
    assert "d1" not in names and "c-before" in names
    assert who == "alice" or {"d0", "d2"} <= names
    assert len({(j.tenant, j.slo_class, j.slowdown_vs_solo) for j in whole.jobs}) < len(
        whole.jobs
    )  # ties, ordered newest first
    size = 7
    pages = -(-len(whole.jobs) // size)
    for number in range(1, pages + 2):  # the page past the last is empty
        page = slo_report_page(
            user=user, start=DAY, end=DAY, page=number, vpage=number, page_size=size
        )
        lo = (number - 1) * size
        assert page.jobs == whole.jobs[lo : lo + size], number
        assert page.violations == violations[lo : lo + size], number
        assert page.attainment == whole.attainment
        assert page.overall == whole.overall
        assert (page.jobs_count, page.violations_count) == (len(whole.jobs), len(violations))
    # no violations' page (the API's): their count only
    jobs_only = slo_report_page(user=user, start=DAY, end=DAY, page=1, vpage=None, page_size=size)
    assert jobs_only.jobs == whole.jobs[:size] and jobs_only.violations == []
    assert jobs_only.violations_count == len(violations)


@pytest.mark.django_db
def test_the_slo_page_names_a_page_that_is_not_one_and_shows_page_1(
    world: Any, client_as: Any, monkeypatch: Any
) -> None:
    build(world)
    monkeypatch.setattr(views, "SLO_JOBS_PER_PAGE", 5)
    client = client_as("finance")
    url = "/reports/slo/?start=2026-03-10&end=2026-03-10"

    def rows(html: str, anchor: str) -> list[str]:
        body = re.search(anchor + r".*?</table>", html, re.S)
        assert body
        return re.findall(r"<tr><td><a [^>]*>([a-z0-9-]+)</a>", body.group(0))

    first = client.get(url).content.decode()
    for bad in ("page=999", "page=x", "vpage=999&page=1"):
        html = client.get(f"{url}&{bad}").content.decode()
        name = bad.split("=")[0]
        assert f"{name}: &#x27;{bad.split('=')[1].split('&')[0]}&#x27; is not a page" in html
        assert rows(html, '<h2 id="every-job">') == rows(first, '<h2 id="every-job">')
        assert rows(html, '<table class="violations">') == rows(first, '<table class="violations">')
    # page 2 of each: the whole report's rows 6 to 10 (the names in the report's order)
    whole = slo_report(user=world.finance, start=DAY, end=DAY)
    second = client.get(f"{url}&page=2&vpage=2").content.decode()
    assert rows(second, '<h2 id="every-job">') == [j.job_name for j in whole.jobs[5:10]]
    assert rows(second, '<table class="violations">') == [
        j.job_name for j in whole.violations[5:10]
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["finance", "alice"])
def test_the_slo_api_pages_the_whole_reports_jobs_and_names_a_bad_page(
    world: Any, api_as: Any, who: str
) -> None:
    # at a fleet's size a month is ~14,800 jobs: the API pages them (`page`, `page_size`)
    # as the cost report's API does; the pages together are the whole report's jobs in its
    # order, and the attainment and the counts are the whole range's on every page
    build(world)
    whole = slo_report(user=getattr(world, who), start=DAY, end=DAY)
    api = api_as(who)
    url = "/api/v1/reports/slo/?start=2026-03-10&end=2026-03-10"
    size = 6
    pages = -(-len(whole.jobs) // size)
    assert pages >= 3
    seen: list[tuple[int, float | None, bool | None]] = []
    for number in range(1, pages + 1):
        body = api.get(f"{url}&page={number}&page_size={size}").json()
        assert (body["page"], body["pages"], body["page_size"]) == (number, pages, size)
        assert body["jobs_count"] == len(whole.jobs)
        assert body["violations_count"] == len(whole.violations)
        assert body["overall"]["finished"] == whole.overall.finished
        assert [(a["tenant"], a["slo_class"], a["met"]) for a in body["attainment"]] == [
            (a.tenant, a.slo_class, a.met) for a in whole.attainment
        ]
        assert len(body["jobs"]) == min(size, len(whole.jobs) - (number - 1) * size)
        seen += [(j["job_id"], j["slowdown_vs_solo"], j["met"]) for j in body["jobs"]]
    assert seen == [
        (
            j.job_id,
            round(j.slowdown_vs_solo, 4) if j.measured else None,
            j.met if j.applicable else None,
        )
        for j in whole.jobs
    ]
    # the default page holds them all here (500 a page)
    default = api.get(url).json()
    assert (default["page"], default["pages"], default["page_size"]) == (1, 1, 500)
    assert [j["job_id"] for j in default["jobs"]] == [j.job_id for j in whole.jobs]
    # a page past the last, or a bad size, is a 400 naming the field
    for query, field in (
        (f"page={pages + 1}&page_size={size}", "page"),
        ("page=0", "page"),
        ("page_size=0", "page_size"),
        ("page_size=5001", "page_size"),
        ("page_size=x", "page_size"),
    ):
        resp = api.get(f"{url}&{query}")
        assert resp.status_code == 400, query
        assert field in str(resp.json()), (query, resp.json())
