"""Group and job timelines: one bar per phase record, bubbles, headline, export, scoping."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rollmux_web.reports.selectors import BAR_LIMIT, group_timeline, job_timeline
from rollmux_web.reports.svg import timeline_svg
from rollmux_web.workflow.models import PhaseRecord, PhaseState
from tests.reports.builders import allocate, alternate, make_group, make_job, phase, place

T0 = datetime(2026, 3, 10, tzinfo=UTC)
M = timedelta(minutes=1)


def interleaved(world: Any, *, tenant: str = "vision") -> Any:
    """Two jobs sharing one rollout and one training node, perfectly interleaved.

    A: roll 0-10, train 10-20, roll 20-30, train 30-40.
    B: roll 10-20, train 20-30, roll 30-40, train 40-50.  Nodes allocated 0-50.
    """
    a = make_job(world, name="alpha", tenant=tenant)
    b = make_job(world, name="beta", tenant=tenant)
    g = make_group(created=T0, released=T0 + 50 * M)
    allocate(g, "h20-0", T0, T0 + 50 * M)
    allocate(g, "h800-0", T0, T0 + 50 * M)
    pa = place(g, a, rollout=["h20-0"], train=["h800-0"], joined=T0)
    pb = place(g, b, rollout=["h20-0"], train=["h800-0"], joined=T0 + 10 * M)
    alternate(
        pa,
        start=T0,
        iterations=2,
        roll_min=10,
        train_min=10,
        roll_nodes=["h20-0"],
        train_nodes=["h800-0"],
    )
    alternate(
        pb,
        start=T0 + 10 * M,
        iterations=2,
        roll_min=10,
        train_min=10,
        roll_nodes=["h20-0"],
        train_nodes=["h800-0"],
    )
    return g, a, b


def archived_shared_group(world: Any) -> dict[str, Any]:
    """`interleaved`'s group (vision's alpha and beta) with speech's gamma joined at 40
    minutes, the three finished at 50 and archived 200 days on (ROLLMUX_ARCHIVE_URI set by
    the caller): the group, and its jobs by name."""
    from rollmux_web.jobs.models import Job, JobStatus
    from rollmux_web.workflow.services import retention

    g, a, b = interleaved(world)
    c = make_job(world, name="gamma", tenant="speech")
    pc = place(g, c, rollout=["h20-0"], train=["h800-0"], joined=T0 + 40 * M)
    phase(pc, iteration=0, kind="rollout", nodes=["h20-0"], start=T0 + 40 * M, minutes=5)
    Job.objects.filter(pk__in=[a.pk, b.pk, c.pk]).update(
        status=JobStatus.COMPLETED, finished_at=T0 + 50 * M
    )
    now = T0 + timedelta(days=200)
    for ids in retention.eligible_batches(now, max_batches=10):
        retention.archive_jobs(ids, now=now)
    return {"group": g, "alpha": a, "beta": b, "gamma": c}


@pytest.mark.django_db
def test_the_timeline_has_one_bar_per_phase_record_in_the_window(world: Any) -> None:
    g, _, _ = interleaved(world)
    tl = group_timeline(user=world.alice, group_id=g.pk)
    assert len(tl.bars) == 8 == PhaseRecord.objects.filter(group=g).count()
    assert [ln.node for ln in tl.lanes] == ["h20-0", "h800-0"]  # rollout pool first
    # a window 12..28 min overlaps: A train 10-20, A roll 20-30, B roll 10-20, B train 20-30
    tl = group_timeline(
        user=world.alice, group_id=g.pk, start="2026-03-10T00:12:00", end="2026-03-10T00:28:00"
    )
    assert sorted((b.job_id, b.kind) for b in tl.bars) == sorted(
        [
            (g.placements.get(job__name=n).job_id, k)
            for n, k in [
                ("alpha", "train"),
                ("alpha", "rollout"),
                ("beta", "rollout"),
                ("beta", "train"),
            ]
        ]
    )
    svg = str(timeline_svg(tl))
    assert svg.count('class="bar ') == 4
    assert (
        "iteration 1 · train · 10.0 min" in svg
    )  # hover: job, iteration (from 1, as the job page), phase, duration


@pytest.mark.django_db
def test_rollout_is_a_light_and_training_a_dark_shade_of_the_jobs_colour(world: Any) -> None:
    g, a, b = interleaved(world)
    tl = group_timeline(user=world.alice, group_id=g.pk)
    fills = {(bar.job_id, bar.kind): bar.fill for bar in tl.bars}
    assert fills[(a.pk, "rollout")] != fills[(a.pk, "train")]
    assert fills[(a.pk, "rollout")].split(",")[0] == fills[(a.pk, "train")].split(",")[0]
    assert fills[(a.pk, "rollout")] != fills[(b.pk, "rollout")]
    assert "74%" in fills[(a.pk, "rollout")] and "36%" in fills[(a.pk, "train")]


@pytest.mark.django_db
def test_the_headline_shows_bubbles_now_alone_and_reclaimed(world: Any) -> None:
    g, _, _ = interleaved(world)
    tl = group_timeline(user=world.alice, group_id=g.pk)
    roll, train = tl.headline
    # each pool: 40 of 50 node-minutes busy -> 20 % bubble
    assert roll.bubble_fraction == pytest.approx(0.2)
    assert train.bubble_fraction == pytest.approx(0.2)
    # alone, each job holds its node for 40 min and uses it 20 -> 50 % bubble
    assert roll.solo_bubble_fraction == pytest.approx(0.5)
    # idle 10 node-min now against 40 alone: 75 % of the bubbles reclaimed
    assert roll.reclaimed_share == pytest.approx(0.75)


@pytest.mark.django_db
def test_idle_gaps_are_bubbles_and_cold_starts_are_marked(world: Any) -> None:
    job = make_job(world, name="gappy")
    g = make_group(created=T0)
    allocate(g, "h20-0", T0, T0 + 60 * M)
    pl = place(g, job, rollout=["h20-0"], train=[], joined=T0)
    phase(
        pl, iteration=0, kind="rollout", nodes=["h20-0"], start=T0 + 10 * M, minutes=10, warm=False
    )
    phase(pl, iteration=1, kind="rollout", nodes=["h20-0"], start=T0 + 30 * M, minutes=10)
    tl = group_timeline(
        user=world.alice, group_id=g.pk, start="2026-03-10T00:00:00", end="2026-03-10T01:00:00"
    )
    assert sorted(round(b.w / (tl.plot_right - tl.plot_left) * 60) for b in tl.bubbles) == [
        10,
        10,
        20,
    ]
    svg = str(timeline_svg(tl))
    assert svg.count('class="cold"') == 1 and svg.count('class="warm"') == 1


@pytest.mark.django_db
def test_a_long_window_with_many_short_phases_aggregates_but_stays_complete(world: Any) -> None:
    job = make_job(world, name="busy")
    g = make_group(created=T0)
    allocate(g, "h20-0", T0, T0 + timedelta(days=1))
    pl = place(g, job, rollout=["h20-0"], train=[], joined=T0)
    n = BAR_LIMIT + 500
    PhaseRecord.objects.bulk_create(
        PhaseRecord(
            job=job,
            group=g,
            placement=pl,
            iteration=i,
            kind="rollout",
            node_names=["h20-0"],
            state=PhaseState.SUCCEEDED,
            warm_start=True,
            queued_at=T0 + i * 10 * timedelta(seconds=1),
            started_at=T0 + i * 10 * timedelta(seconds=1),
            finished_at=T0 + i * 10 * timedelta(seconds=1) + timedelta(seconds=5),
        )
        for i in range(n)
    )
    tl = group_timeline(
        user=world.alice, group_id=g.pk, start="2026-03-10T00:00:00", end="2026-03-11T00:00:00"
    )
    assert tl.phase_count == n
    assert tl.aggregated_count == n  # every 5 s phase is narrower than a pixel over a day
    assert 0 < len(tl.aggregates) < 1000
    # the headline still counts every phase: n x 5 s busy of one day allocated
    assert tl.headline[0].bubble_fraction == pytest.approx(1 - n * 5 / 86400)
    assert tl.headline[0].solo_bubble_fraction == pytest.approx(0.0)
    # zoomed into 10 minutes the same phases are bars again, one per record
    tl = group_timeline(
        user=world.alice, group_id=g.pk, start="2026-03-10T00:00:00", end="2026-03-10T00:10:00"
    )
    assert len(tl.bars) == 60 and not tl.aggregates


@pytest.mark.django_db
def test_trace_export_is_chrome_trace_json_in_microseconds(world: Any, client_as: Any) -> None:
    g, a, _ = interleaved(world)
    resp = client_as("alice").get(f"/groups/{g.pk}/trace.json")
    assert resp.status_code == 200
    data = json.loads(resp.content)
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 8
    assert {e["dur"] for e in spans} == {600_000_000}
    assert min(e["ts"] for e in spans) == 0
    assert {e["pid"] for e in spans if e["cat"] == "rollout"} == {1}
    assert {e["pid"] for e in spans if e["cat"] == "train"} == {2}
    names = {e["args"]["name"] for e in data["traceEvents"] if e.get("name") == "thread_name"}
    assert names == {"h20-0", "h800-0"}
    job = json.loads(client_as("alice").get(f"/timeline/jobs/{a.pk}/trace.json").content)
    assert len([e for e in job["traceEvents"] if e["ph"] == "X"]) == 4


@pytest.mark.django_db
def test_another_tenants_group_and_job_timeline_are_404(world: Any, client_as: Any) -> None:
    g, a, _ = interleaved(world)
    c = client_as("charlie")
    for url in (
        f"/groups/{g.pk}/",
        f"/groups/{g.pk}/trace.json",
        f"/timeline/jobs/{a.pk}/",
        f"/timeline/jobs/{a.pk}/trace.json",
    ):
        assert c.get(url).status_code == 404, url
    assert f"/groups/{g.pk}/" not in c.get("/groups/").content.decode()
    assert client_as("finance").get(f"/groups/{g.pk}/").status_code == 200


@pytest.mark.django_db
def test_pages_render_and_htmx_polling_stops_once_the_group_is_released(
    world: Any, client_as: Any
) -> None:
    g, a, _ = interleaved(world)  # released
    c = client_as("alice")
    page = c.get(f"/groups/{g.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<svg" in html and "share of bubbles reclaimed" in html and "75.0%" in html
    partial = c.get(f"/groups/{g.pk}/", HTTP_HX_REQUEST="true")
    assert partial.status_code == 286 and "<html" not in partial.content.decode()
    assert c.get(f"/timeline/jobs/{a.pk}/").status_code == 200


@pytest.mark.django_db
def test_a_live_group_polls_and_shows_the_running_phase(world: Any, client_as: Any) -> None:
    job = make_job(world, name="live")
    now = datetime.now(tz=UTC)
    g = make_group(created=now - 20 * M)
    allocate(g, "h20-0", now - 20 * M, None)
    pl = place(g, job, rollout=["h20-0"], train=[], joined=now - 20 * M)
    phase(pl, iteration=0, kind="rollout", nodes=["h20-0"], start=now - 5 * M, minutes=None)
    c = client_as("alice")
    partial = c.get(f"/groups/{g.pk}/", HTTP_HX_REQUEST="true")
    assert partial.status_code == 200
    html = partial.content.decode()
    assert 'hx-trigger="every 5s"' in html and "(running)" in html


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("start=2026-03-10T01:00:00&end=2026-03-10T00:00:00", "ends before it starts"),
        ("start=soon", "is not a date and time"),
        ("start=2020-01-01T00:00:00&end=2026-03-10T00:00:00", "longer than 366 days"),
    ],
)
def test_a_bad_window_shows_a_message_and_the_default_window(
    world: Any, client_as: Any, query: str, message: str
) -> None:
    g, _, _ = interleaved(world)
    resp = client_as("alice").get(f"/groups/{g.pk}/?{query}")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert message in html and html.count('class="bar ') == 8


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("0001-01-01T00:00:00", "0001-01-02T00:00:00"),
        ("9999-12-30T00:00:00", "9999-12-31T23:00:00"),
    ],
    ids=["first-day", "last-day"],
)
def test_a_window_at_the_calendars_edge_shows_and_its_links_stay_in_it(
    world: Any, client_as: Any, start: str, end: str
) -> None:
    # zooming out or panning from the first or last day a date can hold would go past it:
    # the links stop at the calendar's edge instead of the page failing
    g, a, _ = interleaved(world)
    for url in (f"/groups/{g.pk}/", f"/timeline/jobs/{a.pk}/"):
        resp = client_as("alice").get(f"{url}?start={start}&end={end}")
        assert resp.status_code == 200
        html = resp.content.decode()
        assert "No phase ran in this window." in html
        # the window as asked, in the picker; panning towards the edge stops at it
        assert f'name="start" value="{start.replace("T", " ")}"' in html
        edge = "?start=0001-01-01T00:00:00&amp;" if start < "1" else "&amp;end=9999-12-31T23:59:59"
        assert edge in html


@pytest.mark.django_db
def test_an_archived_groups_chart_claims_no_bubble_it_cannot_see(
    world: Any, client_as: Any, settings: Any, tmp_path: Any
) -> None:
    # its members' phases went to the archive: the allocations alone read as 100% bubble
    # ("one job here" too, with four members); the chart draws no bubble and no headline
    from rollmux_web.jobs.models import Job, JobStatus
    from rollmux_web.workflow.services import retention

    settings.ROLLMUX_ARCHIVE_URI = str(tmp_path / "archive")
    g, a, b = interleaved(world)
    before = client_as("alice").get(f"/groups/{g.pk}/").content.decode()
    assert "bubble in this window" in before and 'class="bubble"' in before  # 40-50 idle
    Job.objects.filter(pk__in=[a.pk, b.pk]).update(
        status=JobStatus.COMPLETED, finished_at=T0 + 50 * M
    )
    for ids in retention.eligible_batches(T0 + timedelta(days=200), max_batches=10):
        retention.archive_jobs(ids, now=T0 + timedelta(days=200))
    assert not PhaseRecord.objects.filter(group=g).exists()
    for url in (f"/groups/{g.pk}/", f"/timeline/jobs/{a.pk}/"):
        html = client_as("alice").get(url).content.decode()
        assert 'id="archived-note"' in html
        assert "bubble in this window" not in html and 'class="bubble"' not in html
        assert "one job here" not in html and "No phase ran" not in html
        assert "Its phases in this window went to the archive." in html
    # a window before the group's life had nothing archived in it: as before
    html = (
        client_as("alice")
        .get(f"/groups/{g.pk}/?start=2026-03-09T00:00:00&end=2026-03-09T01:00:00")
        .content.decode()
    )
    assert "No phase ran in this window." in html


@pytest.mark.django_db
def test_a_window_with_no_member_drawn_does_not_say_one_job_is_here(
    world: Any, client_as: Any
) -> None:
    # a window after the group's last phase: no member is drawn (it said "one job here")
    g, _, _ = interleaved(world)
    html = (
        client_as("alice")
        .get(f"/groups/{g.pk}/?start=2026-03-10T00:50:00&end=2026-03-10T01:00:00")
        .content.decode()
    )
    assert "No phase ran in this window." in html
    assert "one job here" not in html


@pytest.mark.django_db
def test_a_window_with_no_phase_says_so(world: Any, client_as: Any) -> None:
    g, a, _ = interleaved(world)
    html = (
        client_as("alice")
        .get(f"/groups/{g.pk}/?start=2026-03-11T00:00:00&end=2026-03-11T01:00:00")
        .content.decode()
    )
    assert "No phase ran in this window." in html
    tl = job_timeline(user=world.alice, job_id=a.pk)
    assert len(tl.bars) == 4


@pytest.mark.django_db
def test_the_group_list_pages_filters_by_state_and_names_bad_input(
    world: Any, client_as: Any
) -> None:
    t = datetime(2026, 3, 1, tzinfo=UTC)
    ids = []
    for i in range(55):
        g = make_group(created=t + timedelta(minutes=i), released=None if i % 2 else t)
        job = make_job(world, name=f"job-{i}")
        place(g, job, rollout=["h20-0"], train=["h800-0"], joined=t)
        ids.append(g.pk)
    c = client_as("alice")
    first = c.get("/groups/").content.decode()
    assert "page 1 of 2 (55 groups)" in first
    assert f'href="/groups/{ids[-1]}/"' in first  # newest first
    assert f'href="/groups/{ids[0]}/"' not in first
    second = c.get("/groups/?page=2").content.decode()
    assert f'href="/groups/{ids[0]}/"' in second
    active = c.get("/groups/?state=active").content.decode()
    assert f'href="/groups/{ids[1]}/"' in active
    assert f'href="/groups/{ids[0]}/"' not in active  # released
    for query, field in (("page=abc", "page:"), ("page=99", "page:"), ("state=bogus", "state:")):
        resp = c.get(f"/groups/?{query}")
        assert resp.status_code == 400 and field in resp.content.decode(), query


@pytest.mark.django_db
def test_an_archived_note_counts_another_tenants_jobs_in_plain_words(
    world: Any, client_as: Any, settings: Any, tmp_path: Any
) -> None:
    # QA pass 11: charlie's page of a shared archived group read "1 other tenant' job"
    settings.ROLLMUX_ARCHIVE_URI = str(tmp_path / "archive")
    g = archived_shared_group(world)["group"]
    for viewer, named, others in (
        ("alice", "beta", "1 other tenant's job"),
        ("charlie", "gamma", "2 other tenants' jobs"),
    ):
        html = client_as(viewer).get(f"/groups/{g.pk}/").content.decode()
        note = html[html.index('id="archived-note"') :]
        assert named in note and f"<li>{others}</li>" in note


@pytest.mark.django_db
def test_an_archived_jobs_page_says_its_phases_went_to_the_archive(
    world: Any, client_as: Any, settings: Any, tmp_path: Any
) -> None:
    # QA pass 11: a finished job whose phases were archived read "No phase has run yet."
    # on its page; it says where they went and links the timeline that lists the files
    from rollmux_web.jobs.models import Job, JobStatus
    from rollmux_web.workflow.services import retention

    settings.ROLLMUX_ARCHIVE_URI = str(tmp_path / "archive")
    _, a, b = interleaved(world)
    Job.objects.filter(pk__in=[a.pk, b.pk]).update(
        status=JobStatus.COMPLETED, finished_at=T0 + 50 * M
    )
    html = client_as("alice").get(f"/jobs/{a.pk}/").content.decode()
    assert 'id="phase-summary"' in html and "went to the archive" not in html
    for ids in retention.eligible_batches(T0 + timedelta(days=200), max_batches=10):
        retention.archive_jobs(ids, now=T0 + timedelta(days=200))
    html = client_as("alice").get(f"/jobs/{a.pk}/").content.decode()
    assert "No phase has run yet." not in html
    assert (
        "Its 4 phases ended more than 90 days ago and went to the archive (Parquet) on "
        "2026-09-26" in html
    )
    assert f'<a href="/timeline/jobs/{a.pk}/">its timeline</a> lists the files' in html
