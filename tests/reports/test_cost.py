"""Cost report: numbers follow from node allocations x price history and phase records."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from rollmux_web.inventory.models import GpuPrice
from rollmux_web.quotas.models import Quota
from rollmux_web.reports.selectors import apportion, cost_report
from tests.reports.builders import allocate, make_group, make_job, phase, place

T0 = datetime(2026, 3, 10, tzinfo=UTC)
DAY = date(2026, 3, 10)
NOW = datetime(2026, 3, 12, tzinfo=UTC)
M = timedelta(minutes=1)


def solo_group(world: Any, *, tenant: str = "vision", name: str = "a", nodes=("h20-0", "h800-0")):
    """One job alone in a group: nodes allocated 1 h; rollout 20 min then training 10 min."""
    job = make_job(world, name=name, tenant=tenant)
    g = make_group(created=T0)
    allocate(g, nodes[0], T0, T0 + 60 * M)
    allocate(g, nodes[1], T0, T0 + 60 * M)
    pl = place(g, job, rollout=[nodes[0]], train=[nodes[1]], joined=T0)
    phase(pl, iteration=0, kind="rollout", nodes=[nodes[0]], start=T0, minutes=20, warm=False)
    phase(pl, iteration=0, kind="train", nodes=[nodes[1]], start=T0 + 20 * M, minutes=10)
    return job, g


def by_type(report: Any) -> dict[str, Any]:
    return {ln.gpu_type: ln for ln in report.lines}


@pytest.mark.django_db
def test_cost_is_allocated_time_times_price_and_bubbles_are_the_idle_part(world: Any) -> None:
    solo_group(world)
    report = cost_report(user=world.finance, start=DAY, end=DAY, now=NOW)
    lines = by_type(report)
    # H20 node: 8 GPUs x $1.85 x 1 h = $14.80; busy 20 min = $4.9333, idle 40 min = $9.8667
    assert lines["H20"].cost == Decimal("14.80")
    assert lines["H20"].busy_cost == Decimal("4.93")
    assert lines["H20"].idle_cost == Decimal("9.87")
    assert lines["H20"].busy_gpu_hours == Decimal("2.6667")
    assert lines["H20"].idle_gpu_hours == Decimal("5.3333")
    # H800 node: 8 x $5.28 x 1 h = $42.24; busy 10 min = $7.04
    assert lines["H800"].cost == Decimal("42.24")
    assert lines["H800"].busy_cost == Decimal("7.04")
    assert lines["H800"].idle_cost == Decimal("35.20")
    assert report.total.cost == Decimal("57.04")
    assert report.total.idle_cost == Decimal("45.07")


@pytest.mark.django_db
def test_dedicated_pool_and_colocated_counterfactuals_follow_the_spec(world: Any) -> None:
    solo_group(world)
    lines = by_type(cost_report(user=world.finance, start=DAY, end=DAY, now=NOW))
    # solo-disagg: 8 H20 + 8 H800 held for the 30 min the job's phases took
    assert lines["H20"].solo_disagg_cost == Decimal("7.40")
    assert lines["H800"].solo_disagg_cost == Decimal("21.12")
    # colocated: both phases on its 8 training GPUs for 30 min
    assert lines["H800"].colocated_cost == Decimal("21.12")
    assert lines["H20"].colocated_cost == Decimal("0.00")
    assert lines["H800"].saving_vs_solo == Decimal("21.12") - Decimal("42.24")


@pytest.mark.django_db
def test_a_price_change_mid_range_charges_each_part_at_its_own_price(world: Any) -> None:
    solo_group(world)
    GpuPrice.objects.create(
        gpu_type=world.h20, price_per_gpu_hour=Decimal("2.00"), effective_from=T0 + 30 * M
    )
    lines = by_type(cost_report(user=world.finance, start=DAY, end=DAY, now=NOW))
    # 8 x (1.85 x 0.5 h + 2.00 x 0.5 h) = 7.40 + 8.00
    assert lines["H20"].cost == Decimal("15.40")
    # the rollout ran in the first 20 min, all at the old price
    assert lines["H20"].busy_cost == Decimal("4.93")
    assert lines["H20"].idle_cost == Decimal("10.47")
    # the dedicated-pool counterfactual also follows the history (30 min at $1.85)
    assert lines["H20"].solo_disagg_cost == Decimal("7.40")


@pytest.mark.django_db
def test_a_range_clips_allocations_at_its_edges(world: Any) -> None:
    job = make_job(world, name="overnight")
    g = make_group(created=T0 - 30 * M)
    allocate(g, "h20-0", T0 - 30 * M, T0 + 30 * M)  # half of it on the 9th
    place(g, job, rollout=["h20-0"], train=[], joined=T0 - 30 * M)
    report = cost_report(user=world.finance, start=DAY, end=DAY, now=NOW)
    assert report.total.cost == Decimal("7.40")
    assert report.total.idle_cost == Decimal("7.40")


@pytest.mark.django_db
def test_a_shared_node_is_split_by_busy_time_and_idle_by_membership(world: Any) -> None:
    a = make_job(world, name="a")
    b = make_job(world, name="b")
    g = make_group(created=T0)
    for n in ("h20-0", "h20-1", "h800-0"):
        allocate(g, n, T0, T0 + 60 * M)
    pa = place(g, a, rollout=["h20-0"], train=["h800-0"], joined=T0)
    pb = place(g, b, rollout=["h20-1"], train=["h800-0"], joined=T0 + 30 * M)
    phase(pa, iteration=0, kind="rollout", nodes=["h20-0"], start=T0, minutes=20)
    phase(pa, iteration=0, kind="train", nodes=["h800-0"], start=T0 + 20 * M, minutes=10)
    phase(pb, iteration=0, kind="rollout", nodes=["h20-1"], start=T0 + 30 * M, minutes=10)
    phase(pb, iteration=0, kind="train", nodes=["h800-0"], start=T0 + 40 * M, minutes=10)
    report = cost_report(user=world.finance, start=DAY, end=DAY, now=NOW)
    cost = {(ln.job_name, ln.gpu_type): ln for ln in report.lines}
    # h800-0: $42.24 ($0.704 a minute); busy 10 min each ($7.04); idle $28.16, each
    # moment's to the members present then: a alone for 0-30 min (20 min idle), a and b
    # for 30-60 (20 min idle, 10 each): a 30 min, b 10 min
    assert cost[("a", "H800")].idle_cost == Decimal("21.12")
    assert cost[("b", "H800")].idle_cost == Decimal("7.04")
    assert cost[("a", "H800")].busy_cost == cost[("b", "H800")].busy_cost == Decimal("7.04")
    # each rollout node is pinned to one job: its whole idle time goes to that job
    assert cost[("a", "H20")].cost == Decimal("14.80")
    assert cost[("b", "H20")].cost == Decimal("14.80")
    # members add up exactly to the group's cost (3 nodes x 1 h)
    assert sum((ln.cost for ln in report.lines), Decimal(0)) == report.group_costs[g.pk]
    assert report.group_costs[g.pk] == Decimal("71.84")


def test_apportion_keeps_the_sum_to_the_cent() -> None:
    parts = [Decimal(1) / 3] * 3
    assert apportion(sum(parts, Decimal(0)), parts) == [
        Decimal("0.34"),
        Decimal("0.33"),
        Decimal("0.33"),
    ]
    assert (
        sum(apportion(Decimal("10"), [Decimal("3.333"), Decimal("3.333"), Decimal("3.334")])) == 10
    )


def _page_total(html: str, element_id: str) -> Decimal:
    m = re.search(rf'id="{element_id}">\$([0-9,.-]+)<', html)
    assert m, f"{element_id} not in page"
    return Decimal(m.group(1).replace(",", ""))


@pytest.mark.django_db
def test_page_csv_and_api_agree_to_the_cent(world: Any, client_as: Any, api_as: Any) -> None:
    # thirds of a cent everywhere: 7-minute phases at $1.85 and $5.28 per GPU-hour
    for i, name in enumerate(("p", "q", "r")):
        job = make_job(world, name=name)
        g = make_group(created=T0)
        allocate(g, f"h20-{i}", T0 + i * M, T0 + (61 + 7 * i) * M)
        allocate(g, f"h800-{i}", T0 + i * M, T0 + (47 + 5 * i) * M)
        pl = place(g, job, rollout=[f"h20-{i}"], train=[f"h800-{i}"], joined=T0)
        phase(pl, iteration=0, kind="rollout", nodes=[f"h20-{i}"], start=T0 + 2 * M, minutes=7)
        phase(pl, iteration=0, kind="train", nodes=[f"h800-{i}"], start=T0 + 9 * M, minutes=7)
    q = "start=2026-03-10&end=2026-03-10"
    report = cost_report(user=world.finance, start=DAY, end=DAY)
    html = client_as("finance").get(f"/reports/cost/?{q}").content.decode()
    rows = list(
        csv.DictReader(
            io.StringIO(client_as("finance").get(f"/reports/cost.csv?{q}").content.decode())
        )
    )
    api = api_as("finance").get(f"/api/v1/reports/cost/?{q}").json()
    csv_total = sum((Decimal(r["BilledCost"]) for r in rows), Decimal(0))
    csv_idle = sum(
        (Decimal(r["BilledCost"]) for r in rows if '"charge": "idle"' in r["Tags"]), Decimal(0)
    )
    assert report.total.cost > 0
    assert (
        _page_total(html, "total-cost")
        == csv_total
        == Decimal(api["total"]["cost"])
        == report.total.cost
    )
    assert _page_total(html, "total-idle") == csv_idle == Decimal(api["total"]["idle_cost"])
    assert sum((Decimal(ln["cost"]) for ln in api["lines"]), Decimal(0)) == csv_total
    assert set(rows[0]) >= {
        "BillingPeriodStart",
        "ChargePeriodStart",
        "ChargePeriodEnd",
        "BilledCost",
        "EffectiveCost",
        "ConsumedQuantity",
        "ConsumedUnit",
        "ResourceId",
        "ResourceType",
        "SubAccountName",
        "Tags",
        "BillingCurrency",
    }
    assert {r["ConsumedUnit"] for r in rows} == {"GPU-Hours"}


@pytest.mark.django_db
def test_every_cost_view_shows_a_researcher_only_their_tenant(
    world: Any, client_as: Any, api_as: Any
) -> None:
    solo_group(world, tenant="vision", name="vision-job", nodes=("h20-0", "h800-0"))
    solo_group(world, tenant="speech", name="speech-job", nodes=("h20-1", "h800-1"))
    q = "start=2026-03-10&end=2026-03-10"
    charlie = cost_report(user=world.charlie, start=DAY, end=DAY, now=NOW)
    assert {ln.tenant for ln in charlie.lines} == {"speech"}
    assert charlie.total.cost == Decimal("57.04")
    assert cost_report(user=world.finance, start=DAY, end=DAY, now=NOW).total.cost == Decimal(
        "114.08"
    )
    assert cost_report(user=world.admin, start=DAY, end=DAY, now=NOW).total.cost == Decimal(
        "114.08"
    )
    page = client_as("charlie").get(f"/reports/cost/?{q}").content.decode()
    assert "speech-job" in page and "vision-job" not in page
    api = api_as("charlie").get(f"/api/v1/reports/cost/?{q}").json()
    assert {ln["tenant"] for ln in api["lines"]} == {"speech"}
    body = client_as("alice").get(f"/reports/cost.csv?{q}").content.decode()
    assert "vision-job" in body and "speech" not in body


@pytest.mark.django_db
def test_budget_burn_down_counts_month_to_date_against_the_budget(world: Any) -> None:
    solo_group(world)
    Quota.objects.create(tenant=world.vision, gpu_type=world.h20, monthly_budget_usd=Decimal("100"))
    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, monthly_budget_usd=Decimal("50"))
    report = cost_report(user=world.alice, start=DAY, end=DAY, now=NOW)
    (bd,) = report.burn_down
    assert bd.tenant == "vision" and bd.budget == Decimal("150")
    assert bd.spent == Decimal("57.04")
    assert bd.remaining == Decimal("92.96")
    day10 = dict(bd.daily_cumulative)[DAY]
    assert day10 == Decimal("57.04")
    assert dict(bd.daily_cumulative)[date(2026, 3, 9)] == Decimal("0.00")


@pytest.mark.django_db
def test_a_budget_passed_says_by_how_much_it_is_over(world: Any, client_as: Any) -> None:
    # QA pass 11: a tenant past its budget read "of $40.00 (142.6%), -$17.04 left"
    solo_group(world)
    Quota.objects.create(tenant=world.vision, gpu_type=world.h20, monthly_budget_usd=Decimal("20"))
    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, monthly_budget_usd=Decimal("20"))
    (bd,) = cost_report(user=world.alice, start=DAY, end=DAY, now=NOW).burn_down
    assert (bd.spent, bd.budget, bd.overspent) == (Decimal("57.04"), 40, Decimal("17.04"))
    html = client_as("alice").get("/reports/cost/?start=2026-03-10&end=2026-03-10").content
    text = re.sub(r"\s+", " ", html.decode())
    assert (
        "of $40.00 (142.6%), $17.04 over budget" in text
        and "left" not in text.split("$40.00")[1][:40]
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("start=2026-03-10&end=2026-03-01", "before the start date"),
        ("start=2024-01-01&end=2026-03-01", "at most 366 days"),
        ("start=yesterday&end=2026-03-01", "Enter a valid date"),
        # the range runs to the end of its last day: after 9999-12-31 there is no date
        ("start=9999-12-30&end=9999-12-31", "the last day a date can hold"),
    ],
    ids=["reversed", "too-long", "not-a-date", "calendar-end"],
)
def test_a_bad_range_gets_a_clear_message_everywhere(
    world: Any, client_as: Any, api_as: Any, query: str, message: str
) -> None:
    page = client_as("finance").get(f"/reports/cost/?{query}")
    assert page.status_code == 400 and message in page.content.decode()
    slo = client_as("finance").get(f"/reports/slo/?{query}")
    assert slo.status_code == 400 and message in slo.content.decode()
    exported = client_as("finance").get(f"/reports/cost.csv?{query}")
    assert exported.status_code == 400 and message in exported.content.decode()
    api = api_as("finance").get(f"/api/v1/reports/cost/?{query}")
    assert api.status_code == 400
    err = api.json()["error"]
    assert err["code"] == "invalid" and message in " ".join(sum(err["fields"].values(), []))
    slo_api = api_as("finance").get(f"/api/v1/reports/slo/?{query}")
    assert slo_api.status_code == 400 and message in slo_api.content.decode()


@pytest.mark.django_db
def test_a_range_with_no_data_says_so(world: Any, client_as: Any) -> None:
    page = client_as("finance").get("/reports/cost/?start=2025-01-01&end=2025-01-31")
    assert page.status_code == 200
    assert "nothing to report" in page.content.decode()


@pytest.mark.django_db
def test_month_to_date_report_and_burn_down_from_one_pass_agree_with_separate_ones(
    world: Any,
) -> None:
    from rollmux_web.reports.selectors import burn_down

    solo_group(world)
    now = datetime(2026, 3, 12, 12, tzinfo=UTC)
    shared = cost_report(user=world.alice, start=date(2026, 3, 1), end=date(2026, 3, 12), now=now)
    alone = burn_down(user=world.alice, month_of=date(2026, 3, 12), now=now)
    assert shared.total.cost == Decimal("57.04")
    assert shared.total.solo_disagg_cost == Decimal("28.52")  # counterfactuals still computed
    assert [(b.tenant, b.spent, b.daily_cumulative) for b in shared.burn_down] == [
        (b.tenant, b.spent, b.daily_cumulative) for b in alone
    ]
    assert shared.burn_down[0].spent == Decimal("57.04")


@pytest.mark.django_db
def test_a_past_months_report_and_burn_down_share_one_pass_that_agrees_with_separate_ones(
    world: Any,
) -> None:
    """The whole month once it is over: one pass serves the report and the daily burn-down.

    A phase crossing midnight with a price change inside it, so the cuts at day and price
    boundaries are both exercised.
    """
    from rollmux_web.reports.selectors import burn_down

    solo_group(world)
    late = datetime(2026, 3, 20, 23, tzinfo=UTC)
    job = make_job(world, name="overnight")
    g = make_group(created=late)
    allocate(g, "h20-1", late, late + 120 * M)
    allocate(g, "h800-1", late, late + 120 * M)
    pl = place(g, job, rollout=["h20-1"], train=["h800-1"], joined=late)
    phase(pl, iteration=0, kind="rollout", nodes=["h20-1"], start=late + 10 * M, minutes=80)
    GpuPrice.objects.create(
        gpu_type=world.h20, price_per_gpu_hour=Decimal("2.50"), effective_from=late + 30 * M
    )
    month = (date(2026, 3, 1), date(2026, 3, 31))
    after = datetime(2026, 4, 2, tzinfo=UTC)
    shared = cost_report(user=world.alice, start=month[0], end=month[1], now=after)
    alone = burn_down(user=world.alice, month_of=month[1], now=after)
    plain = cost_report(
        user=world.alice, start=month[0], end=month[1], now=after, with_burn_down=False
    )
    assert [(b.tenant, b.spent, b.daily_cumulative) for b in shared.burn_down] == [
        (b.tenant, b.spent, b.daily_cumulative) for b in alone
    ]
    assert shared.lines == plain.lines and shared.total == plain.total
    # 2 h on each node: H20 8 x (1.85 x 0.5 h + 2.50 x 1.5 h) = 37.40, H800 8 x 5.28 x 2 h
    assert shared.total.cost == Decimal("57.04") + Decimal("37.40") + Decimal("84.48")
    assert shared.burn_down[0].spent == shared.total.cost
    daily = dict(shared.burn_down[0].daily_cumulative)
    # the day boundary cuts the overnight group: 1 h on each node before midnight
    assert daily[date(2026, 3, 20)] - daily[date(2026, 3, 19)] == Decimal("7.40") + Decimal(
        "10.00"
    ) + Decimal("42.24")


@pytest.mark.django_db
def test_a_cost_report_leaves_the_garbage_collector_as_it_found_it(world: Any) -> None:
    import gc

    solo_group(world)
    assert gc.isenabled()
    cost_report(user=world.finance, start=DAY, end=DAY, now=NOW)
    assert gc.isenabled()
    gc.disable()
    try:
        cost_report(user=world.finance, start=DAY, end=DAY, now=NOW)
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.django_db
def test_csv_cells_with_user_text_never_run_as_formulas(world: Any, client_as: Any) -> None:
    import pyarrow.parquet as pq

    name = '=HYPERLINK("http://evil.example","click")'
    job = make_job(world, name=name)
    g = make_group(created=T0)
    allocate(g, "h20-0", T0, T0 + 60 * M)
    allocate(g, "h800-0", T0, T0 + 60 * M)
    pl = place(g, job, rollout=["h20-0"], train=["h800-0"], joined=T0)
    phase(pl, iteration=0, kind="rollout", nodes=["h20-0"], start=T0, minutes=10)
    q = "start=2026-03-10&end=2026-03-10"
    c = client_as("finance")
    rows = list(csv.DictReader(io.StringIO(c.get(f"/reports/cost.csv?{q}").content.decode())))
    assert rows and {r["ResourceName"] for r in rows} == {"'" + name}
    assert all(Decimal(r["BilledCost"]) >= 0 for r in rows)  # numbers are left as numbers
    # the typed Parquet file keeps the name as it is (no spreadsheet reads it as text)
    table = pq.read_table(io.BytesIO(c.get(f"/reports/cost.parquet?{q}").content))
    assert set(table.column("ResourceName").to_pylist()) == {name}
