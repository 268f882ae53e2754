"""Cost rounding (QA F11): every figure comes from exact amounts and is rounded once.

Many small groups, each costing a fraction of a cent off a whole cent: rounding each
group (or each job) before adding up would lose or invent cents. The expected figures
are computed here from the allocations themselves (seconds x GPUs x price), not from
the report.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest

from rollmux_web.reports.selectors import burn_down, cost_report
from tests.reports.builders import allocate, make_group, make_job, phase, place

T0 = datetime(2026, 3, 10, tzinfo=UTC)
NOW = datetime(2026, 3, 12, tzinfo=UTC)
S = timedelta(seconds=1)
PRICE = {"H20": Decimal("1.85"), "H800": Decimal("5.28")}
GPUS = 8  # per node in the test world
CENT = Decimal("0.01")
GROUPS = 24


def cents(v: Decimal) -> Decimal:
    return v.quantize(CENT, rounding=ROUND_HALF_UP)


def many_small_groups(world: Any) -> dict[str, dict[str, Decimal]]:
    """GROUPS one-job groups, one after another on the same nodes, each a few seconds long.

    Return the exact expected figures: {GPU type or tenant: {"hours", "cost"}}.
    """
    expected: dict[str, dict[str, Decimal]] = {}

    def add(key: str, seconds: int, gpu_type: str) -> None:
        row = expected.setdefault(key, {"hours": Decimal(0), "cost": Decimal(0)})
        hours = Decimal(seconds * GPUS) / 3600
        row["hours"] += hours
        row["cost"] += hours * PRICE[gpu_type]

    for i in range(GROUPS):
        tenant = "vision" if i % 2 else "speech"
        job = make_job(world, name=f"tiny-{i:02d}", tenant=tenant)
        start = T0 + i * 600 * S
        # 47 s of an H20 node is $0.19322, 31 s of an H800 node $0.36373: each group is
        # a third of a cent over a whole cent, so rounding per group loses ~8 cents a type
        roll_s, train_s = 47, 31
        g = make_group(created=start, released=start + 400 * S)
        allocate(g, "h20-0", start, start + roll_s * S)
        allocate(g, "h800-0", start, start + train_s * S)
        pl = place(g, job, rollout=["h20-0"], train=["h800-0"], joined=start, left=start + 400 * S)
        phase(pl, iteration=0, kind="rollout", nodes=["h20-0"], start=start, minutes=(13 + i) / 60)
        phase(
            pl, iteration=0, kind="train", nodes=["h800-0"], start=start + S, minutes=(7 + i) / 60
        )
        for key in ("H20", tenant, "total"):
            add(key, roll_s, "H20")
        for key in ("H800", tenant, "total"):
            add(key, train_s, "H800")
    return expected


@pytest.mark.django_db
def test_many_small_groups_add_up_to_gpu_hours_times_price_rounded_once(world: Any) -> None:
    expected = many_small_groups(world)
    report = cost_report(
        user=world.finance, start=date(2026, 3, 10), end=date(2026, 3, 10), now=NOW
    )
    rows = {t.key: t for t in report.by_gpu_type + report.by_tenant}
    rows["total"] = report.total
    drift = Decimal(0)
    for key, exp in expected.items():
        row = rows[key]
        # busy and idle are each the exact amount rounded to the cent once, and the cost
        # their sum: within a cent of GPU-hours x price (issue 24 item 16: a tenant's
        # billed lines add up to its row, and the tenant rows to the total)
        if key != "total":
            assert row.busy_cost == cents(row.exact.busy_cost), key
            assert row.idle_cost == cents(row.exact.idle_cost), key
        assert abs(row.cost - cents(exp["cost"])) <= CENT, key
        # (Decimal keeps 28 significant digits: "exact" is exact to far below a cent)
        assert abs(row.exact.gpu_hours - exp["hours"]) < Decimal("1e-20"), key
        assert abs(row.exact.cost - exp["cost"]) < Decimal("1e-20"), key
        assert row.gpu_hours == exp["hours"].quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)
        # busy + idle is the cost in every row, each within a cent of its exact amount
        assert row.busy_cost + row.idle_cost == row.cost, key
        assert abs(row.busy_cost - row.exact.busy_cost) < CENT, key
        assert abs(row.idle_cost - row.exact.idle_cost) < CENT, key
        drift += abs(
            sum(
                cents(ln.exact.cost)
                for ln in report.lines
                if key in (ln.gpu_type, ln.tenant, "total")
            )
            - row.cost
        )
    # the data is chosen so that rounding each job first would have drifted by cents
    assert drift >= 10 * CENT
    for key in ("H20", "H800"):
        assert abs(rows[key].cost - cents(rows[key].exact.gpu_hours * PRICE[key])) <= CENT
    # the total is the tenant rows added up
    assert rows["total"].cost == rows["vision"].cost + rows["speech"].cost


@pytest.mark.django_db
def test_billing_lines_add_up_to_the_total_in_every_column(world: Any) -> None:
    many_small_groups(world)
    report = cost_report(
        user=world.finance, start=date(2026, 3, 10), end=date(2026, 3, 10), now=NOW
    )
    assert len(report.lines) == 2 * GROUPS
    for column in ("busy_cost", "idle_cost", "cost"):
        assert sum(getattr(ln, column) for ln in report.lines) == getattr(report.total, column)
    for ln in report.lines:
        assert abs(ln.busy_cost - ln.exact.busy_cost) < CENT
        assert abs(ln.idle_cost - ln.exact.idle_cost) < CENT
        assert ln.busy_cost >= 0 and ln.idle_cost >= 0


@pytest.mark.django_db
def test_burn_down_spent_is_the_tenant_row(world: Any) -> None:
    many_small_groups(world)
    # month to date (one pass for both) and the whole month once it is over
    for start, end, now in (
        (date(2026, 3, 1), date(2026, 3, 12), NOW),
        (date(2026, 3, 1), date(2026, 3, 31), datetime(2026, 4, 3, tzinfo=UTC)),
    ):
        report = cost_report(user=world.finance, start=start, end=end, now=now)
        tenant_rows = {t.key: t.cost for t in report.by_tenant}
        assert {b.tenant: b.spent for b in report.burn_down} == tenant_rows
        for b in report.burn_down:
            assert b.daily_cumulative[-1][1] == b.spent
        # computed on its own (no shared pass) it is the same exact amount rounded once
        alone = burn_down(user=world.finance, month_of=end, now=now)
        assert {b.tenant: b.spent for b in alone} == tenant_rows


def _page_money(html: str, element_id: str) -> Decimal:
    m = re.search(rf'id="{element_id}">\$([0-9,.-]+)<', html)
    assert m, f"{element_id} not in page"
    return Decimal(m.group(1).replace(",", ""))


@pytest.mark.django_db
def test_page_csv_parquet_and_api_agree_with_many_small_groups(
    world: Any, client_as: Any, api_as: Any
) -> None:
    import pyarrow.parquet as pq

    expected = many_small_groups(world)
    q = "start=2026-03-01&end=2026-03-31"  # the whole (past) month: the burn-down's too
    html = client_as("finance").get(f"/reports/cost/?{q}").content.decode()
    body = client_as("finance").get(f"/reports/cost.csv?{q}").content.decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    table = pq.read_table(
        io.BytesIO(client_as("finance").get(f"/reports/cost.parquet?{q}").content)
    )
    api = api_as("finance").get(f"/api/v1/reports/cost/?{q}").json()
    total = sum(Decimal(t["cost"]) for t in api["by_tenant"])  # the tenant rows added up
    assert abs(total - cents(expected["total"]["cost"])) <= 2 * CENT  # a cent per tenant
    csv_total = sum(Decimal(r["BilledCost"]) for r in rows)
    parquet_total = sum(table.column("BilledCost").to_pylist())
    assert _page_money(html, "total-cost") == csv_total == parquet_total == total
    assert Decimal(api["total"]["cost"]) == total
    assert sum(Decimal(ln["cost"]) for ln in api["lines"]) == total
    csv_idle = sum(Decimal(r["BilledCost"]) for r in rows if '"charge": "idle"' in r["Tags"])
    assert _page_money(html, "total-idle") == csv_idle == Decimal(api["total"]["idle_cost"])
    for t in api["by_gpu_type"] + api["by_tenant"]:
        assert abs(Decimal(t["cost"]) - cents(expected[t["key"]]["cost"])) <= CENT, t["key"]
    for t in api["by_tenant"]:  # a tenant's billed lines add up to its row
        lines = [Decimal(ln["cost"]) for ln in api["lines"] if ln["tenant"] == t["key"]]
        assert sum(lines) == Decimal(t["cost"]), t["key"]
    spent = {b["tenant"]: b["spent"] for b in api["burn_down"]}
    assert spent == {t["key"]: t["cost"] for t in api["by_tenant"]}
    # the page shows the same tenant rows and the same spent figures
    for t in api["by_tenant"]:
        assert f"${Decimal(t['cost']):,.2f}" in html
        assert f"billed ${Decimal(t['cost']):,.2f}" in html


@pytest.mark.django_db
def test_a_finished_jobs_billed_lines_never_change_between_two_runs(world: Any) -> None:
    """Issue 24 item 16: month to date, run twice while a job still runs, the lines of
    finished jobs kept moving by a cent (the largest remainder over the range handed the
    total's cents out afresh) and a finished member's idle share kept changing while its
    group ran on. Finished lines must stay; lines still add up to the rows and total."""
    from rollmux_web.jobs.models import Job, JobStatus

    finished = []
    for i in range(12):
        # 47 s on an H20 node and 31 s on an H800 node: a third of a cent off whole cents
        job = make_job(world, name=f"done-{i:02d}", status=JobStatus.COMPLETED)
        start = T0 + i * 300 * S
        g = make_group(created=start, released=start + 47 * S)
        allocate(g, "h20-0", start, start + 47 * S)
        allocate(g, "h800-0", start, start + 31 * S)
        pl = place(g, job, rollout=["h20-0"], train=["h800-0"], joined=start, left=start + 47 * S)
        phase(pl, iteration=0, kind="rollout", nodes=["h20-0"], start=start, minutes=(13 + i) / 60)
        Job.objects.filter(pk=job.pk).update(finished_at=start + 47 * S)
        finished.append(job.pk)
    # a shared group: "left" finished at 2 h, "stays" runs on; the node stays allocated
    t = T0 + 4 * 3600 * S
    g = make_group(created=t)
    allocate(g, "h800-1", t, None)
    left = make_job(world, name="left", status=JobStatus.COMPLETED)
    stays = make_job(world, name="stays", status=JobStatus.RUNNING)
    pl_left = place(g, left, rollout=[], train=["h800-1"], joined=t, left=t + 7200 * S)
    pl_stays = place(g, stays, rollout=[], train=["h800-1"], joined=t)
    Job.objects.filter(pk=left.pk).update(finished_at=t + 7200 * S)
    finished.append(left.pk)
    for k in range(6):  # 7 min each, one every 20 min
        phase(
            pl_left, iteration=k, kind="train", nodes=["h800-1"], start=t + k * 1200 * S, minutes=7
        )
    for k in range(40):  # 11 min 13 s every 20 min, on and on
        phase(
            pl_stays,
            iteration=k,
            kind="train",
            nodes=["h800-1"],
            start=t + (k * 1200 + 600) * S,
            minutes=673 / 60,
        )

    def billed(now: datetime) -> tuple[dict[tuple[int, str, str], tuple[Decimal, ...]], Any]:
        report = cost_report(
            user=world.alice, start=date(2026, 3, 10), end=date(2026, 3, 31), now=now
        )
        lines = {
            (ln.job_id, ln.gpu_type, ln.stage): (ln.busy_cost, ln.idle_cost, ln.exact.cost)
            for ln in report.lines
        }
        return lines, report

    runs = [billed(T0 + h * 3600 * S) for h in (7, 9, 13, 23)]
    for _lines, report in runs:
        # the lines add up to the tenant's row and to the total, column by column
        (row,) = report.by_tenant
        for column in ("busy_cost", "idle_cost", "cost"):
            total = sum(getattr(ln, column) for ln in report.lines)
            assert total == getattr(row, column) == getattr(report.total, column), column
        for ln in report.lines:
            assert abs(ln.busy_cost - ln.exact.busy_cost) < CENT
            assert abs(ln.idle_cost - ln.exact.idle_cost) < CENT
            assert ln.busy_cost >= 0 and ln.idle_cost >= 0
    first = runs[0][0]
    closed = {k: v for k, v in first.items() if k[0] in finished}
    assert len(closed) == 2 * 12 + 2  # (left's H20 line: its dedicated-pool counterfactual)
    for lines, _report in runs[1:]:
        assert {k: lines[k] for k in closed} == closed  # cents and exact amounts alike
    # the running job's line did grow meanwhile (the runs differ)
    live = (stays.pk, "H800", "run")
    assert runs[-1][0][live][2] > first[live][2]
    # and a finance user (every tenant) is billed the same cents for these lines
    report = cost_report(
        user=world.finance, start=date(2026, 3, 10), end=date(2026, 3, 31), now=T0 + 23 * 3600 * S
    )
    assert {
        (ln.job_id, ln.gpu_type, ln.stage): (ln.busy_cost, ln.idle_cost, ln.exact.cost)
        for ln in report.lines
        if ln.job_id in finished
    } == closed
