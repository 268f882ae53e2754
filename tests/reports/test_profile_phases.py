"""The profiling run drawn and shown (issue 13 item 1: "recorded, drawn on the Gantt"):
its phases are marked on the job's and the group's Gantt, in the trace export, and in
rows of their own on the job page."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from rollmux_web.reports.selectors import group_timeline, job_timeline
from rollmux_web.reports.svg import timeline_svg
from tests.reports.builders import profiled_job

T0 = datetime(2026, 3, 10, tzinfo=UTC)
NOW = datetime(2026, 3, 12, tzinfo=UTC)


@pytest.mark.django_db
def test_the_jobs_gantt_marks_its_profiling_runs_phases_apart(world: Any) -> None:
    job, _prof, _prod = profiled_job(world, t0=T0)
    tl = job_timeline(user=world.alice, job_id=job.pk, now=NOW)
    assert len(tl.bars) == 4
    profile = [b for b in tl.bars if b.profile]
    assert sorted(b.kind for b in profile) == ["rollout", "train"]
    assert all("profiling run" in b.tip for b in profile)
    assert not any("profiling run" in b.tip for b in tl.bars if not b.profile)
    assert tl.has_profile
    svg = str(timeline_svg(tl))
    assert len(re.findall(r'class="bar (rollout|train) profile"', svg)) == 2
    assert svg.count('stroke-dasharray="4 2"') == 2


@pytest.mark.django_db
def test_a_production_groups_gantt_has_no_profiling_mark(world: Any) -> None:
    _job, prof, prod = profiled_job(world, t0=T0)
    tl = group_timeline(user=world.alice, group_id=prod.pk, now=NOW)
    assert len(tl.bars) == 2 and not tl.has_profile
    assert group_timeline(user=world.alice, group_id=prof.pk, now=NOW).has_profile


@pytest.mark.django_db
def test_pages_name_the_profiling_run(world: Any, client_as: Any) -> None:
    job, prof, prod = profiled_job(world, t0=T0)
    alice = client_as("alice")
    html = alice.get(f"/timeline/jobs/{job.pk}/").content.decode()
    assert "profiling run (dashed outline" in html
    # the status badge in the job page's and the list's words ("running", not "Running")
    assert f'<span class="badge {job.status}">{job.status}</span></h1>' in html
    group_page = alice.get(f"/groups/{prof.pk}/").content.decode()
    assert f"Profiling run, group {prof.pk}" in group_page and 'id="profile-note"' in group_page
    assert "nothing to reclaim" in group_page and "share of bubbles reclaimed" not in group_page
    run_page = alice.get(f"/groups/{prod.pk}/").content.decode()
    assert f"Co-execution group {prod.pk}" in run_page and 'id="profile-note"' not in run_page
    assert "profiling run (dashed outline" not in run_page
    # (one member: said plainly rather than "reclaimed 0.0%", issue 24 item 19)
    assert "a profiling run runs alone" not in run_page and "one job here" in run_page
    assert "share of bubbles reclaimed" not in run_page
    # the trace export names the profiling run's events
    trace = alice.get(f"/timeline/jobs/{job.pk}/trace.json").json()
    names = [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sorted(n for n in names if n.endswith("(profiling run)")) == [
        "p rollout #1 (profiling run)",
        "p train #1 (profiling run)",
    ]
    assert len(names) == 4


@pytest.mark.django_db
def test_the_job_page_gives_the_profiling_runs_phases_rows_of_their_own(
    world: Any, client_as: Any
) -> None:
    from rollmux_web.jobs.selectors import job_phase_summary

    job, _prof, _prod = profiled_job(world, t0=T0)
    rows = job_phase_summary(job=job)
    assert [(r["profile"], r["kind"]) for r in rows] == [
        (True, "rollout"),
        (True, "train"),
        (False, "rollout"),
        (False, "train"),
    ]
    by = {(r["profile"], r["kind"]): r["stats"] for r in rows}
    # profile 5 min rollout, production 20 min: each row measures its own phases only
    assert by[(True, "rollout")].mean_s == 300.0 and by[(False, "rollout")].mean_s == 1200.0
    assert by[(True, "train")].max_s == 240.0 and by[(False, "train")].max_s == 600.0
    html = client_as("alice").get(f"/jobs/{job.pk}/").content.decode()
    assert html.count('data-stage="profile"') == 2 and html.count('data-stage="run"') == 2
    assert re.search(r'data-kind="rollout" data-stage="profile">\s*<td>rollout <span', html)


@pytest.mark.django_db
def test_the_overview_marks_a_live_profiling_run(world: Any, client_as: Any) -> None:
    from tests.reports.builders import allocate, make_group, make_job, place

    job = make_job(world, name="being-profiled", status="profiling")
    g = make_group(created=T0)
    allocate(g, "h20-0", T0, None)
    allocate(g, "h800-0", T0, None)
    place(g, job, rollout=["h20-0"], train=["h800-0"], joined=T0, strategy="profile")
    other = make_job(world, name="packed")
    g2 = make_group(created=T0)
    allocate(g2, "h20-1", T0, None)
    place(g2, other, rollout=["h20-1"], train=[], joined=T0)
    html = client_as("alice").get("/").content.decode()
    row = re.search(rf">group {g.pk}</a>(.*?)</td>", html, re.S)
    row2 = re.search(rf">group {g2.pk}</a>(.*?)</td>", html, re.S)
    assert row and row2
    assert "profiling run" in row.group(1) and "profiling run" not in row2.group(1)
