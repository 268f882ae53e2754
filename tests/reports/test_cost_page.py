"""The cost page's wording and charts (QA F17): groups, range inputs, burn-down, savings."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from rollmux_web.quotas.models import Quota
from rollmux_web.reports.svg import bar_chart_svg, burn_down_svg
from rollmux_web.reports.templatetags.report_tags import money, saving
from rollmux_web.workflow.models import Placement
from tests.reports.builders import allocate, make_group, make_job, phase, place

M = timedelta(minutes=1)


def one_job(world: Any, t0: datetime, *, groups: int = 1, name: str = "a") -> list[int]:
    """One vision job; `groups` groups one after another, each 1 h on h20-0 and h800-0."""
    job = make_job(world, name=name)
    ids = []
    for k in range(groups):
        start = t0 + k * 90 * M
        g = make_group(created=start, released=start + 60 * M)
        allocate(g, "h20-0", start, start + 60 * M)
        allocate(g, "h800-0", start, start + 60 * M)
        pl = place(g, job, rollout=["h20-0"], train=["h800-0"], joined=start, left=start + 60 * M)
        # a job's placements need distinct attempt numbers (a re-placement is attempt 2)
        Placement.objects.filter(pk=pl.pk).update(attempt=groups + k + 1)
        phase(pl, iteration=0, kind="rollout", nodes=["h20-0"], start=start, minutes=20)
        phase(pl, iteration=0, kind="train", nodes=["h800-0"], start=start + 20 * M, minutes=10)
        ids.append(g.pk)
    return ids


def _row(html: str, job: str) -> str:
    m = re.search(
        rf'<tr data-job="\d+" data-stage="run">\s*<td>vision</td><td><a [^>]*>{job}</a>'
        r' <span class="muted job-id">#\d+</span></td>'
        rf"<td class=\"stage\">production run</td><td>H20</td>(.*?)</tr>",
        html,
        re.S,
    )
    assert m, f"no H20 line for {job}"
    return m.group(1)


@pytest.mark.django_db
def test_the_groups_column_names_its_groups(world: Any, client_as: Any) -> None:
    t0 = datetime(2026, 3, 10, tzinfo=UTC)
    (single,) = one_job(world, t0, name="single")
    first, second = one_job(world, t0 + 4 * 60 * M, groups=2, name="double")
    html = (
        client_as("finance").get("/reports/cost/?start=2026-03-10&end=2026-03-10").content.decode()
    )
    assert f'<a href="/groups/{single}/">group {single}</a>' in _row(html, "single")
    row = _row(html, "double")
    assert f'>groups <a href="/groups/{first}/" aria-label="group {first}">{first}</a>, ' in row
    assert f'aria-label="group {second}">{second}</a>' in row


@pytest.mark.django_db
def test_the_range_inputs_hold_the_range_shown(world: Any, client_as: Any) -> None:
    today = timezone.now().date()
    default = client_as("finance").get("/reports/cost/").content.decode()
    start = today.replace(day=1)  # this month to date, on its first day too
    assert f'name="start" value="{start:%Y-%m-%d}"' in default
    assert f'name="end" value="{today:%Y-%m-%d}"' in default
    slo = client_as("finance").get("/reports/slo/").content.decode()
    assert f'name="start" value="{start:%Y-%m-%d}"' in slo
    # a bad range keeps what was typed
    bad = client_as("finance").get("/reports/cost/?start=2026-03-10&end=2026-03-01")
    assert 'name="start" value="2026-03-10"' in bad.content.decode()


@pytest.mark.django_db
def test_a_past_months_burn_down_is_titled_with_that_month(world: Any, client_as: Any) -> None:
    one_job(world, datetime(2026, 3, 10, tzinfo=UTC))
    html = (
        client_as("finance").get("/reports/cost/?start=2026-03-01&end=2026-03-31").content.decode()
    )
    assert "Budget burn-down, March 2026</h2>" in html
    assert "month to date" not in html
    now = client_as("finance").get("/reports/cost/").content.decode()
    assert f"Budget burn-down, {timezone.now():%B %Y} (month to date)</h2>" in now


@pytest.mark.django_db
def test_the_burn_down_chart_has_a_date_axis_and_the_full_width(world: Any, client_as: Any) -> None:
    one_job(world, datetime(2026, 3, 10, tzinfo=UTC))
    Quota.objects.create(tenant=world.vision, gpu_type=world.h20, monthly_budget_usd=Decimal("90"))
    html = (
        client_as("finance").get("/reports/cost/?start=2026-03-01&end=2026-03-31").content.decode()
    )
    (svg,) = re.findall(r'<svg class="chart burn-down".*?</svg>', html, re.S)
    assert 'width="100%"' in svg
    dates = re.findall(r'<text class="date"[^>]*>([^<]+)</text>', svg)
    assert dates[0] == "Mar 1" and dates[-1] == "Mar 31"
    assert "<desc>March 2026: $57.04 spent by 2026-03-31 of a $90.00 budget</desc>" in svg
    assert 'class="budget"' in svg and "budget $90.00" in svg


def test_a_budget_far_above_the_spend_does_not_flatten_the_line() -> None:
    series = [(date(2026, 3, d), Decimal(d)) for d in range(1, 11)]
    svg = str(burn_down_svg("vision", series, Decimal("37000"), days_in_month=31))
    assert "budget $37,000.00 (far above this scale)" in svg
    ys = [float(y) for y in re.findall(r'<circle cx="[0-9.]+" cy="([0-9.]+)"', svg)]
    # the last point (the most spent) is near the top, not on the $0 line
    assert ys[-1] < ys[0] and ys[0] - ys[-1] > 100


def test_savings_and_money_read_as_words_and_separated_dollars() -> None:
    assert saving(Decimal("-6.46")) == "costs $6.46 more"
    assert saving(Decimal("21.12")) == "saves $21.12"
    assert saving(Decimal("0")) == "costs the same"
    assert money(Decimal("12000")) == "$12,000.00"
    assert money(Decimal("0.005")) == "$0.01"  # half up, once
    assert money(Decimal("-1234.5")) == "-$1,234.50"


@pytest.mark.django_db
def test_a_negative_saving_on_the_page_says_it_costs_more(world: Any, client_as: Any) -> None:
    # one job alone on its nodes for 1 h but busy 30 min: co-located (its training GPUs
    # for the 30 min of phases) is cheaper than the hour RollMux held both nodes
    one_job(world, datetime(2026, 3, 10, tzinfo=UTC))
    html = (
        client_as("finance").get("/reports/cost/?start=2026-03-10&end=2026-03-10").content.decode()
    )
    assert "RollMux costs $35.92 more" in html  # $57.04 - $21.12
    assert "saving -$" not in html


@pytest.mark.django_db
def test_on_a_months_first_day_the_default_is_that_month_with_month_shortcuts(
    world: Any, client_as: Any, monkeypatch: Any
) -> None:
    first = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    monkeypatch.setattr("rollmux_web.reports.forms.timezone.now", lambda: first)
    html = client_as("finance").get("/reports/cost/").content.decode()
    # December to date (the burn-down's month), not a rolling 30 days back into November
    assert 'name="start" value="2026-12-01"' in html and 'name="end" value="2026-12-01"' in html
    assert "2026-12-01 to 2026-12-01" in html
    # shortcuts: this month to date, then whole months before it
    assert (
        'href="?start=2026-12-01&amp;end=2026-12-01" aria-current="page">December 2026 (to date)'
        in html
    )
    assert 'href="?start=2026-11-01&amp;end=2026-11-30">November 2026</a>' in html
    assert 'href="?start=2026-02-01&amp;end=2026-02-28"' not in html  # six months shown
    assert 'href="?start=2026-07-01&amp;end=2026-07-31">July 2026</a>' in html
    slo = client_as("finance").get("/reports/slo/").content.decode()
    assert 'name="start" value="2026-12-01"' in slo and "November 2026" in slo


@pytest.mark.parametrize("peak", [112_892.13, 5_644_606.50, 12.5])
def test_a_bar_charts_values_end_inside_it_however_large_the_sums(peak: float) -> None:
    # "Same work, three ways" over a fleet's month: the longest bar's value ran past the
    # chart's right edge ("112,892.13 U" shown). Each value's text, at 0.64 em a character
    # (12 px; DejaVu Sans's digit, its widest character here but "D"), ends inside.
    items = [("RollMux (actual)", peak * 0.75, "#2f5bea"), ("Dedicated pools", peak, "#98a2b3")]
    svg = str(bar_chart_svg("Same work, three ways", items, unit="USD"))
    width = float(re.search(r'<svg [^>]*width="(\d+)"', svg).group(1))  # type: ignore[union-attr]
    values = re.findall(r'<text x="([\d.]+)" y="\d+" font-size="12" fill="#344054">([^<]+)<', svg)
    assert len(values) == 2
    for x, text in values:
        assert float(x) + len(text) * 12 * 0.64 <= width, text
    # the bars keep their proportions
    bars = [float(w) for w in re.findall(r'<rect x="\d+" y="\d+" width="([\d.]+)"', svg)]
    assert bars[0] == pytest.approx(0.75 * bars[1], abs=0.1)
