"""Report pages in headless Chromium: timeline, overview, cost report and what-if."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import expect

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.reports.selectors import cost_report
from rollmux_web.workflow.models import PhaseRecord
from tests.browser.support import ARTIFACTS, browser_login
from tests.reports.builders import allocate, alternate, make_group, make_job, place

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

T0 = datetime(2026, 3, 10, tzinfo=UTC)
M = timedelta(minutes=1)


def snapshot(page: Any, name: str) -> None:
    """Save a screenshot of an intermediate state (the fixture saves only the last one)."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"reports-{name}.png"), full_page=True)


def three_job_group(world: Any) -> Any:
    """Three jobs in one released group: two share a rollout node, all share training."""
    g = make_group(created=T0, released=T0 + 4 * 60 * M)
    for n in ("h20-0", "h20-1", "h800-0"):
        allocate(g, n, T0, T0 + 4 * 60 * M)
    jobs = []
    for i, (name, roll, train, node) in enumerate(
        [("math-7b", 12, 6, "h20-0"), ("code-14b", 10, 7, "h20-1"), ("game-3b", 8, 4, "h20-0")]
    ):
        job = make_job(world, name=name)
        pl = place(g, job, rollout=[node], train=["h800-0"], joined=T0)
        alternate(
            pl,
            start=T0 + i * 3 * M,
            iterations=6,
            roll_min=roll,
            train_min=train,
            roll_nodes=[node],
            train_nodes=["h800-0"],
            gap_min=9,
        )
        jobs.append(job)
    return g, jobs


def test_group_timeline_draws_one_bar_per_phase_record_with_tooltips_and_zoom(
    world: Any, page: Any, live_server: Any
) -> None:
    g, _ = three_job_group(world)
    browser_login(page, live_server, "alice")
    page.goto(f"{live_server.url}/groups/{g.pk}/")
    # the first chart of the session is drawn 1200 wide, then again at its card's width
    page.wait_for_selector("svg.timeline.fitted")
    bars = page.locator("svg.timeline .bar")
    assert bars.count() == PhaseRecord.objects.filter(group=g).count() == 36
    assert page.locator("svg.timeline .bubble").count() > 0
    assert page.get_attribute("svg.timeline", "aria-label").startswith(f"Group {g.pk} timeline")
    # near its start: game-3b's first rollout, drawn over it, starts at its middle
    bars.first.hover(position={"x": 5, "y": 11})
    tip = page.locator("#tooltip")
    assert "iteration 1 ·" in tip.inner_text() and "math-7b" in tip.inner_text()
    assert "share of bubbles reclaimed" in page.inner_text("#timeline-chart")
    snapshot(page, "group-timeline")
    # a window picked on the server: only the phases overlapping it are drawn
    page.goto(f"{live_server.url}/groups/{g.pk}/?start=2026-03-10T00:00:00&end=2026-03-10T00:30:00")
    expected = PhaseRecord.objects.filter(
        group=g, started_at__lt=T0 + 30 * M, finished_at__gt=T0
    ).count()
    assert 0 < expected < 36
    assert page.locator("svg.timeline.fitted .bar").count() == expected
    # drag across the chart to zoom: the server redraws a narrower window
    box = page.locator("svg.timeline").bounding_box()
    y = box["y"] + 40
    page.mouse.move(box["x"] + 300, y)
    page.mouse.down()
    page.mouse.move(box["x"] + 500, y, steps=5)
    page.mouse.up()
    page.wait_for_url("**start=2026-03-10T00:0*")
    page.wait_for_load_state("networkidle")
    assert page.locator("svg.timeline .bar").count() < expected


# What the chart draws and what its legend lists, as "kind fill" per job shade and a name
# per mark; each legend item says what it stands for (data-mark, and data-kind/-fill per swatch)
LEGEND_AND_DRAWN = """() => {
  const svg = document.querySelector("svg.timeline");
  const drawn = new Set();
  for (const el of svg.querySelectorAll(".bar, .agg")) {
    const kind = ["rollout", "sync", "train"].find((k) => el.classList.contains(k));
    drawn.add(kind + " " + el.getAttribute("fill"));
  }
  const marks = {bubble: ".bubble", delay: ".delay", failed: ".failed-hatch",
                 profile: ".bar.profile", cold: "path.cold", warm: "path.warm"};
  for (const [mark, sel] of Object.entries(marks)) if (svg.querySelector(sel)) drawn.add(mark);
  const listed = new Set();
  for (const li of document.querySelectorAll("#timeline-chart .legend li")) {
    if (li.dataset.mark !== "job") { listed.add(li.dataset.mark || li.innerText); continue; }
    for (const sw of li.querySelectorAll("[data-kind]")) {
      listed.add(sw.dataset.kind + " " + sw.dataset.fill);
    }
  }
  return {drawn: [...drawn].sort(), listed: [...listed].sort()};
}"""

# The chart's drawn box, its card's content box, its viewBox width, and every tick label's
# centre with the time it names (epoch s), read against the chart's time scale (data-*).
CHART_GEOMETRY = """() => {
  const svg = document.querySelector("svg.timeline");
  const card = svg.closest("#timeline-chart");
  const cs = getComputedStyle(card);
  const box = svg.getBoundingClientRect();
  const unit = box.width / svg.viewBox.baseVal.width;
  const d = svg.dataset;
  const x = (t) => box.left + unit * (+d.left + (t - d.t0) / (d.t1 - d.t0) * (d.right - d.left));
  const day = new Date(d.t0 * 1000).toISOString().slice(0, 10);
  const ticks = [...svg.querySelectorAll("text")]
    .filter((t) => /^\\d\\d:\\d\\d/.test(t.textContent))  // HH:MM or HH:MM:SS
    .map((t) => {
      const r = t.getBoundingClientRect();
      const hms = t.textContent.length == 5 ? t.textContent + ":00" : t.textContent;
      const at = Date.parse(day + "T" + hms + "Z") / 1000;
      return {label: t.textContent, left: r.left, right: r.right,
              centre: r.left + r.width / 2, x: x(at)};
    });
  const lane = svg.querySelector("g.lane text").getBoundingClientRect();
  const inner = card.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  return {drawn: box.width, card: inner, units: svg.viewBox.baseVal.width,
          fitted: svg.classList.contains("fitted"), lane_label_h: lane.height, ticks};
}"""


def fitted_chart(page: Any) -> dict[str, Any]:
    """Wait (10 s at most) for the chart to be redrawn at its card's width; return its geometry."""
    geo: dict[str, Any] = {}
    for _ in range(40):
        page.wait_for_load_state("networkidle")
        geo = page.evaluate(CHART_GEOMETRY)
        if geo["fitted"] and abs(geo["units"] - geo["card"]) <= 2:
            break
        page.wait_for_timeout(250)
    return geo


def assert_fills_its_card_legibly(geo: dict[str, Any]) -> None:
    # drawn as wide as the card's content box, one unit to a CSS px (text at its 11-12 px)
    assert geo["drawn"] == pytest.approx(geo["card"], abs=3), geo
    assert geo["units"] == pytest.approx(geo["drawn"], abs=2), geo
    assert geo["lane_label_h"] >= 11
    # the time axis: each tick label sits over the time it names; neighbours do not touch
    assert len(geo["ticks"]) >= 3, geo["ticks"]
    for tick in geo["ticks"]:
        assert tick["centre"] == pytest.approx(tick["x"], abs=2), tick
    for a, b in zip(geo["ticks"], geo["ticks"][1:], strict=False):
        assert b["left"] > a["right"] + 4, (a, b)


@pytest.mark.parametrize("which", ["group", "job"])
def test_the_gantt_fills_its_card_and_its_legend_lists_exactly_what_it_draws(
    world: Any, page: Any, live_server: Any, which: str
) -> None:
    g, jobs = three_job_group(world)
    url = f"{live_server.url}/groups/{g.pk}/"
    if which == "job":
        # finished: its timeline is its life, not up to today
        Job.objects.filter(pk=jobs[0].pk).update(
            status=JobStatus.COMPLETED, finished_at=T0 + 3 * 60 * M
        )
        url = f"{live_server.url}/timeline/jobs/{jobs[0].pk}/"
    browser_login(page, live_server, "alice")
    for width in (1400, 800):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(url)
        geo = fitted_chart(page)
        snapshot(page, f"gantt-{which}-{width}")
        assert_fills_its_card_legibly(geo)
        seen = page.evaluate(LEGEND_AND_DRAWN)
        assert seen["listed"] == seen["drawn"]
        assert ("bubble" in seen["drawn"]) == (which == "group")
    # a window made narrower with the page open: the chart is redrawn to its card again
    page.set_viewport_size({"width": 1400, "height": 900})
    assert_fills_its_card_legibly(fitted_chart(page))


def test_on_a_phone_the_gantt_scrolls_at_a_readable_text_size(
    world: Any, chromium_browser: Any, live_server: Any
) -> None:
    g, _ = three_job_group(world)
    context = chromium_browser.new_context(
        viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True
    )
    phone = context.new_page()
    try:
        browser_login(phone, live_server, "alice")
        phone.goto(f"{live_server.url}/groups/{g.pk}/")
        phone.wait_for_selector("svg.timeline.fitted")
        svg = phone.locator("svg.timeline")
        drawn = svg.bounding_box()
        # narrower than its smallest drawing (640 units: timeline.MIN_WIDTH), the chart keeps
        # one unit to a CSS px (not squeezed to 390 px) and its box scrolls
        assert int(svg.get_attribute("width")) == 640
        assert drawn["width"] == pytest.approx(640, abs=1)
        scroll = phone.evaluate(
            "() => { const b = document.querySelector('.timeline-scroll');"
            " return [b.scrollWidth, b.clientWidth]; }"
        )
        assert scroll[0] > scroll[1] + 250
        # a lane label renders at its 12 px, not the ~4 px a squeezed chart gave
        label = phone.locator("svg.timeline g.lane text").first.bounding_box()
        assert label["height"] >= 11
        phone.screenshot(path=str(ARTIFACTS / "reports-gantt-phone.png"), full_page=True)
    finally:
        context.close()


def test_overview_shows_pools_groups_and_waiting_jobs(
    world: Any, page: Any, live_server: Any
) -> None:
    now = datetime.now(tz=UTC)
    g = make_group(created=now - 30 * M)
    allocate(g, "h20-0", now - 30 * M, None)
    allocate(g, "h800-0", now - 30 * M, None)
    place(
        g,
        make_job(world, name="resident"),
        rollout=["h20-0"],
        train=["h800-0"],
        joined=now - 30 * M,
    )
    make_job(world, name="waiter", status=JobStatus.QUEUED, reason="no free H800 node")
    browser_login(page, live_server, "alice")
    page.goto(f"{live_server.url}/")
    assert "Cluster overview" in page.inner_text("h1")
    assert page.locator("table.pools tbody tr").count() == 2
    assert "resident" in page.inner_text("table.groups")
    assert "no free H800 node" in page.inner_text("table.waiting")
    assert "$57.04/h" in page.inner_text("#overview-live")


def test_cost_report_totals_match_the_selector(world: Any, page: Any, live_server: Any) -> None:
    three_job_group(world)
    report = cost_report(user=world.finance, start=T0.date(), end=T0.date())
    assert report.total.cost > Decimal(0)
    browser_login(page, live_server, "finance")
    page.goto(f"{live_server.url}/reports/cost/?start=2026-03-10&end=2026-03-10")
    assert page.inner_text("#total-cost") == f"${report.total.cost:,.2f}"
    assert page.inner_text("#lines-total") == f"${report.total.cost:,.2f}"
    assert page.locator("table.cost-lines tbody tr").count() == len(report.lines) == 6
    assert page.locator("svg.chart").count() >= 2
    snapshot(page, "cost-report")
    page.goto(f"{live_server.url}/reports/cost/?start=2026-03-10&end=2026-03-01")
    assert "before the start date" in page.inner_text("form.range")


@pytest.fixture
def eager_tasks(settings: Any) -> Iterator[None]:
    """Run the what-if task in the server thread right after its commit."""
    from rollmux_web.celery import app

    old = app.conf.task_always_eager
    app.conf.task_always_eager = True
    settings.CELERY_TASK_ALWAYS_EAGER = True
    yield
    app.conf.task_always_eager = old


def test_whatif_page_runs_the_simulator_and_compares_policies(
    world: Any, page: Any, live_server: Any, eager_tasks: None, tmp_path: Any
) -> None:
    from tests.reports.test_whatif_task import SMALL_TRACE

    trace = tmp_path / "trace.jsonl"
    trace.write_text(SMALL_TRACE)
    browser_login(page, live_server, "alice")
    page.goto(f"{live_server.url}/whatif/")
    page.set_input_files("input[name=trace]", str(trace))
    page.click("main form button[type=submit]")
    page.wait_for_url("**/whatif/*/")
    page.wait_for_selector("table.compare")
    assert page.locator(".ratio").count() >= 1
    assert page.locator(".charts svg.chart").count() >= 3
    assert "rollmux" in page.inner_text("table.compare thead")
    snapshot(page, "whatif-run")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "arrival_s": 0}\n')
    page.goto(f"{live_server.url}/whatif/")
    page.set_input_files("input[name=trace]", str(bad))
    page.click("main form button[type=submit]")
    assert "line 1" in page.inner_text(".errorlist")


def test_the_submit_form_shows_the_planners_preview(
    world: Any, page: Any, live_server: Any
) -> None:
    browser_login(page, live_server, "alice")
    page.goto(f"{live_server.url}/jobs/new/")
    for name, value in {
        "name": "probe",
        "rollout_gpus": "8",
        "train_gpus": "8",
        "t_roll_max_s": "300",
        "t_train_max_s": "200",
        "host_mem_gb": "300",
        "iterations": "5",
    }.items():
        field = page.locator(f"main form [name={name}]")
        if field.count():
            field.fill(value)
    page.locator("main form [name=host_mem_gb]").dispatch_event("change")
    page.wait_for_selector("#whatif .whatif-preview")
    expect(page.locator("#whatif")).to_contain_text("new co-execution group", timeout=15000)
    text = page.inner_text("#whatif")
    assert "starts a new co-execution group" in text and "$57.04/h" in text
    snapshot(page, "submit-preview")


def test_the_slo_reports_violations_page_through_and_count_them_all(
    world: Any, page: Any, live_server: Any, monkeypatch: Any
) -> None:
    # issue 25: a fleet's month has thousands of violations; the table shows a page, the
    # card counts them all, and the page's links move through them
    from rollmux_web.quotas.models import SloClass
    from rollmux_web.reports import views

    three_job_group(world)
    SloClass.objects.update(slowdown=1.0)  # waits in the group: all three violate
    monkeypatch.setattr(views, "SLO_JOBS_PER_PAGE", 2)
    browser_login(page, live_server, "finance")
    page.goto(f"{live_server.url}/reports/slo/?start=2026-03-10&end=2026-03-10")
    rows = page.locator("table.violations tbody tr")
    expect(rows).to_have_count(2)
    first = set(rows.all_inner_texts())
    assert "3 of 3" not in page.inner_text("#slo-violations-pages")
    assert "Violations 1–2 of 3" in page.inner_text("#slo-violations-pages")
    page.locator("#slo-violations-pages a", has_text="Next").click()
    expect(rows).to_have_count(1)
    assert "Violations 3–3 of 3" in page.inner_text("#slo-violations-pages")
    assert not first & set(rows.all_inner_texts())
    assert page.locator(".card .big").nth(2).inner_text() == "3"  # the count: all of them
    snapshot(page, "slo-violations-page-2")
