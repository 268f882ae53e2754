"""The profiling run on the cost report (issue 13 item 1): billed to the job as its own line.

A job submitted without phase times first runs alone on free nodes of its shape, in a
group of its own (placement strategy `profile`). The report bills that run on lines of
their own (stage profile), apart from the job's production run (stage run); the job's
total is the two added, and the page, the CSV, the Parquet and the API agree.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from rollmux_web.reports.selectors import cost_report
from rollmux_web.reports.selectors.cost_figures import EXACT
from tests.reports.builders import allocate, make_group, make_job, phase, place, profiled_job

T0 = datetime(2026, 3, 10, tzinfo=UTC)
DAY = date(2026, 3, 10)
NOW = datetime(2026, 3, 12, tzinfo=UTC)
M = timedelta(minutes=1)
Q = "start=2026-03-10&end=2026-03-10"


@pytest.mark.django_db
def test_the_profiling_run_is_its_own_line_and_the_job_total_adds_both(world: Any) -> None:
    job, prof, prod = profiled_job(world, t0=T0)
    report = cost_report(user=world.finance, start=DAY, end=DAY, now=NOW)
    lines = {(ln.stage, ln.gpu_type): ln for ln in report.lines}
    assert set(lines) == {("profile", "H20"), ("profile", "H800"), ("run", "H20"), ("run", "H800")}
    # profiling run: 8 H20 GPUs x $1.85 x 12 min = $2.96 (5 min busy), 8 H800 x $5.28 x 12 min
    # = $8.448 (4 min busy); its groups are the profile group only
    p20, p800 = lines[("profile", "H20")], lines[("profile", "H800")]
    # (in the cost arithmetic's precision: cost_figures.EXACT)
    assert p20.exact.cost == Decimal("2.96")
    assert p20.exact.busy_cost == EXACT.divide(Decimal("1.85") * 8, 12)
    assert p800.exact.cost == Decimal("8.448")
    assert p20.gpu_hours == p800.gpu_hours == Decimal("1.6000")
    assert p20.group_ids == p800.group_ids == [prof.pk]
    assert lines[("run", "H20")].group_ids == [prod.pk]
    # production run: 8 x $1.85 x 1 h + 8 x $5.28 x 1 h = $57.04
    assert lines[("run", "H20")].exact.cost + lines[("run", "H800")].exact.cost == Decimal("57.04")
    # the profiling run comes first among the job's lines
    assert [ln.stage for ln in report.lines] == ["profile", "profile", "run", "run"]
    # the solo counterfactual of the profiling run: its 9 min of phases on 8 + 8 GPUs
    assert p20.solo_disagg_cost == Decimal("2.22") and p800.solo_disagg_cost == Decimal("6.34")
    # per stage: exact sums rounded once
    stages = {t.key: t for t in report.by_stage}
    assert stages["profile"].cost == Decimal("11.41") and stages["run"].cost == Decimal("57.04")
    assert stages["profile"].label == "Profiling runs"
    # per job: its billed lines by stage, and the total is their sum to the cent
    (jc,) = report.by_job
    assert jc.job_id == job.pk and jc.profiled
    assert jc.profile.cost == sum((ln.cost for ln in report.lines if ln.is_profile), Decimal(0))
    assert jc.run.cost == sum((ln.cost for ln in report.lines if not ln.is_profile), Decimal(0))
    assert (jc.profile.cost, jc.run.cost) == (Decimal("11.41"), Decimal("57.04"))
    assert jc.cost == jc.profile.cost + jc.run.cost == report.total.cost == Decimal("68.45")
    assert (jc.profile.gpu_hours, jc.run.gpu_hours, jc.gpu_hours) == (
        Decimal("3.2000"),
        Decimal("16.0000"),
        Decimal("19.2000"),
    )


@pytest.mark.django_db
def test_a_job_run_with_declared_times_has_no_profiling_line(world: Any) -> None:
    profiled_job(world, t0=T0, name="p")
    job = make_job(world, name="declared")
    g = make_group(created=T0)
    allocate(g, "h20-2", T0, T0 + 60 * M)
    pl = place(g, job, rollout=["h20-2"], train=[], joined=T0)
    phase(pl, iteration=0, kind="rollout", nodes=["h20-2"], start=T0, minutes=20)
    report = cost_report(user=world.finance, start=DAY, end=DAY, now=NOW)
    declared = [ln for ln in report.lines if ln.job_id == job.pk]
    assert declared and {ln.stage for ln in declared} == {"run"}
    by_job = {j.job_id: j for j in report.by_job}
    assert not by_job[job.pk].profiled and by_job[job.pk].profile.cost == 0
    assert by_job[job.pk].cost == by_job[job.pk].run.cost == Decimal("14.80")
    # every job's total adds up to the report's
    assert sum((j.cost for j in report.by_job), Decimal(0)) == report.total.cost
    assert sum((t.cost for t in report.by_stage), Decimal(0)) == report.total.cost


def _cell(html: str, job_id: int, cls: str) -> Decimal:
    row = re.search(rf'<tr data-job="{job_id}">(.*?)</tr>', html, re.S)
    assert row, f"no per-job row for job {job_id}"
    m = re.search(rf'class="num {cls}">\$([0-9,.]+)<', row.group(1))
    assert m, f"no {cls} in job {job_id}'s row"
    return Decimal(m.group(1).replace(",", ""))


@pytest.mark.django_db
def test_page_csv_parquet_and_api_bill_the_profiling_run_alike(
    world: Any, client_as: Any, api_as: Any
) -> None:
    import pyarrow.parquet as pq

    job, prof, _prod = profiled_job(world, t0=T0)
    finance = client_as("finance")
    html = finance.get(f"/reports/cost/?{Q}").content.decode()
    rows = list(csv.DictReader(io.StringIO(finance.get(f"/reports/cost.csv?{Q}").content.decode())))
    table = pq.read_table(io.BytesIO(finance.get(f"/reports/cost.parquet?{Q}").content))
    api = api_as("finance").get(f"/api/v1/reports/cost/?{Q}").json()

    profile_rows = [r for r in rows if '"stage": "profile"' in r["Tags"]]
    run_rows = [r for r in rows if '"stage": "run"' in r["Tags"]]
    assert len(profile_rows) + len(run_rows) == len(rows) == 8  # 2 stages x 2 types x busy/idle
    assert {r["ResourceId"] for r in profile_rows} == {
        f"job-{job.pk}/H20/profile",
        f"job-{job.pk}/H800/profile",
    }
    assert {r["ResourceId"] for r in run_rows} == {f"job-{job.pk}/H20", f"job-{job.pk}/H800"}
    assert all(r["ChargeDescription"].startswith("Profiling run: ") for r in profile_rows)
    assert not any(r["ChargeDescription"].startswith("Profiling") for r in run_rows)
    assert all(f'"groups": [{prof.pk}]' in r["Tags"] for r in profile_rows)
    csv_profile = sum((Decimal(r["BilledCost"]) for r in profile_rows), Decimal(0))
    csv_run = sum((Decimal(r["BilledCost"]) for r in run_rows), Decimal(0))

    (api_job,) = api["by_job"]
    assert api_job["job_id"] == job.pk
    assert Decimal(api_job["profile_cost"]) == csv_profile == _cell(html, job.pk, "profile-cost")
    assert Decimal(api_job["run_cost"]) == csv_run == _cell(html, job.pk, "run-cost")
    assert (
        Decimal(api_job["cost"])
        == csv_profile + csv_run
        == _cell(html, job.pk, "job-total")
        == Decimal(api["total"]["cost"])
    )
    assert api_job["profile_gpu_hours"] == "3.2000" and api_job["gpu_hours"] == "19.2000"
    assert {ln["stage"] for ln in api["lines"]} == {"profile", "run"}
    assert [t["key"] for t in api["by_stage"]] == ["profile", "run"]
    assert Decimal(api["by_stage"][0]["cost"]) == csv_profile
    # the Parquet file holds the CSV's rows
    parquet = table.to_pylist()
    assert sorted(r["ResourceId"] for r in parquet) == sorted(r["ResourceId"] for r in rows)
    assert (
        sum((r["BilledCost"] for r in parquet if '"stage": "profile"' in r["Tags"]), Decimal(0))
        == csv_profile
    )
    # the page's per-job row: GPU-hours as billed (four decimals), so they add up as shown
    row = re.search(rf'<tr data-job="{job.pk}">(.*?)</tr>', html, re.S)
    assert row and re.findall(r'class="num">([0-9.,]+)<', row.group(1)) == [
        "3.2000",
        "16.0000",
        "19.2000",
    ]
    # the page: the stage table and a profiling badge on the job's profile lines
    assert 'id="by-stage"' in html and "Profiling runs" in html
    assert html.count('data-stage="profile"') == 2


@pytest.mark.django_db
def test_a_researcher_sees_only_their_tenants_profiling_runs(
    world: Any, client_as: Any, api_as: Any
) -> None:
    vision, _, _ = profiled_job(world, t0=T0, name="vision-p", tenant="vision")
    speech, _, _ = profiled_job(
        world, t0=T0, name="speech-p", tenant="speech", roll="h20-2", train="h800-2"
    )
    alice = cost_report(user=world.alice, start=DAY, end=DAY, now=NOW)
    assert {j.job_id for j in alice.by_job} == {vision.pk}
    assert {ln.job_id for ln in alice.lines} == {vision.pk}
    assert alice.by_stage[0].cost == Decimal("11.41")  # their own profiling run only
    finance = cost_report(user=world.finance, start=DAY, end=DAY, now=NOW)
    assert {j.job_id for j in finance.by_job} == {vision.pk, speech.pk}
    assert finance.by_stage[0].cost == Decimal("22.82")
    # the finance view: each tenant's and GPU type's row says what its profiling runs cost
    assert {t.key: t.profile_cost for t in finance.by_tenant} == {
        "speech": Decimal("11.41"),
        "vision": Decimal("11.41"),
    }
    assert {t.key: t.profile_cost for t in finance.by_gpu_type} == {
        "H20": Decimal("5.92"),  # 2 x $2.96
        "H800": Decimal("16.90"),  # 2 x $8.448
    }
    assert finance.total.profile_cost == Decimal("22.82")
    fin_api = api_as("finance").get(f"/api/v1/reports/cost/?{Q}").json()
    assert [t["profile_cost"] for t in fin_api["by_tenant"]] == ["11.41", "11.41"]
    assert fin_api["total"]["profile_cost"] == "22.82"
    assert "profile_cost" not in fin_api["lines"][0]
    fin_page = client_as("finance").get(f"/reports/cost/?{Q}").content.decode()
    assert "of which profiling runs" in fin_page
    assert fin_page.count('class="num profile-part">$11.41<') == 2  # speech and vision rows
    api = api_as("alice").get(f"/api/v1/reports/cost/?{Q}").json()
    assert [j["job"] for j in api["by_job"]] == ["vision-p"]
    body = client_as("alice").get(f"/reports/cost.csv?{Q}").content.decode()
    assert "vision-p" in body and "speech" not in body
    page = client_as("charlie").get(f"/reports/cost/?{Q}").content.decode()
    assert "speech-p" in page and "vision-p" not in page
