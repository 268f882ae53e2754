"""The cost report as Parquet: the FOCUS CSV's rows and columns, typed, from the page and API."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollmux_web.reports.exports import FOCUS_COLUMNS
from tests.reports.builders import allocate, make_group, make_job, phase, place

T0 = datetime(2026, 3, 10, tzinfo=UTC)
M = timedelta(minutes=1)
Q = "start=2026-03-10&end=2026-03-10"
PARQUET = "application/vnd.apache.parquet"
MONEY = ("BilledCost", "EffectiveCost", "ListCost")
PERIODS = ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd")


def thirds_of_a_cent(world: Any) -> None:
    """Three groups in `vision`, one in `speech`: 7-minute phases at $1.85 and $5.28 per
    GPU-hour, so every amount has thirds of a cent to round."""
    for i, name in enumerate(("p", "q", "r")):
        job = make_job(world, name=name, tenant="vision")
        g = make_group(created=T0)
        allocate(g, f"h20-{i}", T0 + i * M, T0 + (61 + 7 * i) * M)
        allocate(g, f"h800-{i}", T0 + i * M, T0 + (47 + 5 * i) * M)
        pl = place(g, job, rollout=[f"h20-{i}"], train=[f"h800-{i}"], joined=T0)
        phase(pl, iteration=0, kind="rollout", nodes=[f"h20-{i}"], start=T0 + 2 * M, minutes=7)
        phase(pl, iteration=0, kind="train", nodes=[f"h800-{i}"], start=T0 + 9 * M, minutes=7)
    job = make_job(world, name="speech-job", tenant="speech")
    g = make_group(created=T0)
    allocate(g, "h20-3", T0, T0 + 43 * M)
    allocate(g, "h800-3", T0, T0 + 43 * M)
    pl = place(g, job, rollout=["h20-3"], train=["h800-3"], joined=T0)
    phase(pl, iteration=0, kind="rollout", nodes=["h20-3"], start=T0, minutes=11)
    phase(pl, iteration=0, kind="train", nodes=["h800-3"], start=T0 + 11 * M, minutes=13)


def read_parquet(body: bytes) -> pa.Table:
    return pq.read_table(io.BytesIO(body))


def as_csv_text(table: pa.Table) -> list[dict[str, str]]:
    """Return the Parquet rows written out the way the CSV writes them."""
    out = []
    for row in table.to_pylist():
        text = {}
        for name, value in row.items():
            if isinstance(value, datetime):
                text[name] = value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            elif isinstance(value, Decimal):
                text[name] = str(value)
            else:
                text[name] = value
        out.append(text)
    return out


def csv_rows(body: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(body.decode())))


def total(rows: list[dict[str, Any]], column: str) -> Decimal:
    return sum((Decimal(str(r[column])) for r in rows), Decimal(0))


def page_total(html: str) -> Decimal:
    m = re.search(r'id="total-cost">\$([0-9,.-]+)<', html)
    assert m, "total-cost not on the page"
    return Decimal(m.group(1).replace(",", ""))


@pytest.mark.django_db
def test_parquet_holds_the_csv_rows_and_its_totals_agree_everywhere_to_the_cent(
    world: Any, client_as: Any, api_as: Any
) -> None:
    thirds_of_a_cent(world)
    page = client_as("finance")
    exported = page.get(f"/reports/cost.csv?{Q}")
    from_page = page.get(f"/reports/cost.parquet?{Q}")
    from_api = api_as("finance").get(f"/api/v1/reports/cost.parquet?{Q}")
    api_json = api_as("finance").get(f"/api/v1/reports/cost/?{Q}").json()
    html = page.get(f"/reports/cost/?{Q}").content.decode()

    for response in (from_page, from_api):
        assert response.status_code == 200
        assert response["Content-Type"] == PARQUET
        assert (
            response["Content-Disposition"]
            == 'attachment; filename="rollmux-cost-2026-03-10-2026-03-10.parquet"'
        )
    table = read_parquet(from_page.content)
    assert read_parquet(from_api.content).equals(table)
    rows = csv_rows(exported.content)
    # the same columns in the same order, and the same rows, value for value
    assert table.column_names == list(FOCUS_COLUMNS) == list(rows[0])
    assert len(rows) == table.num_rows == 16  # 4 jobs x 2 GPU types x busy and idle
    assert as_csv_text(table) == rows
    # exact money: every column total is the CSV's, the page's and the API's to the cent
    parquet_rows = table.to_pylist()
    for column in ("BilledCost", "EffectiveCost"):
        assert (
            total(parquet_rows, column)
            == total(rows, column)
            == Decimal(api_json["total"]["cost"])
            == page_total(html)
        )
    assert total(parquet_rows, "BilledCost") > 0
    assert total(parquet_rows, "BilledCost") % Decimal("0.01") == 0


@pytest.mark.django_db
def test_parquet_columns_have_types_finance_tools_read_exactly(world: Any, client_as: Any) -> None:
    thirds_of_a_cent(world)
    table = read_parquet(client_as("finance").get(f"/reports/cost.parquet?{Q}").content)
    schema = table.schema
    for name in PERIODS:
        assert schema.field(name).type == pa.timestamp("us", tz="UTC"), name
    for name in MONEY:
        assert schema.field(name).type == pa.decimal128(18, 2), name
    assert schema.field("ConsumedQuantity").type == pa.decimal128(18, 4)
    strings = set(FOCUS_COLUMNS) - set(PERIODS) - set(MONEY) - {"ConsumedQuantity"}
    assert "Tags" in strings and "SubAccountId" in strings
    for name in strings:
        assert schema.field(name).type == pa.string(), name
    first = table.slice(0, 1).to_pylist()[0]
    assert first["BillingPeriodStart"] == datetime(2026, 3, 10, tzinfo=UTC)
    assert first["BillingPeriodEnd"] == datetime(2026, 3, 11, tzinfo=UTC)
    assert first["Tags"].startswith('{"charge": ')


@pytest.mark.django_db
def test_a_researchers_parquet_holds_only_their_tenant(
    world: Any, client_as: Any, api_as: Any
) -> None:
    thirds_of_a_cent(world)
    seen = {}
    for who in ("alice", "charlie", "finance", "admin"):
        page = read_parquet(client_as(who).get(f"/reports/cost.parquet?{Q}").content)
        api = read_parquet(api_as(who).get(f"/api/v1/reports/cost.parquet?{Q}").content)
        assert api.equals(page), who
        seen[who] = set(page.column("SubAccountName").to_pylist())
        names = set(page.column("ResourceName").to_pylist())
        if who == "alice":
            assert names == {"p", "q", "r"}
        if who == "charlie":
            assert names == {"speech-job"}
    assert seen == {
        "alice": {"vision"},
        "charlie": {"speech"},
        "finance": {"vision", "speech"},
        "admin": {"vision", "speech"},
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("start=2026-03-10&end=2026-03-01", "before the start date"),
        ("start=2024-01-01&end=2026-03-01", "at most 366 days"),
        ("start=yesterday&end=2026-03-01", "Enter a valid date"),
    ],
    ids=["reversed", "too-long", "not-a-date"],
)
def test_a_bad_range_gets_the_same_clear_error_as_the_csv(
    world: Any, client_as: Any, api_as: Any, query: str, message: str
) -> None:
    page = client_as("finance")
    exported = page.get(f"/reports/cost.csv?{query}")
    parquet = page.get(f"/reports/cost.parquet?{query}")
    assert parquet.status_code == exported.status_code == 400
    assert parquet["Content-Type"].startswith("text/plain")
    assert parquet.content == exported.content
    assert message in parquet.content.decode()
    field = "start" if "valid date" in message else "end"
    assert f"{field}: " in parquet.content.decode()
    api = api_as("finance").get(f"/api/v1/reports/cost.parquet?{query}")
    json_api = api_as("finance").get(f"/api/v1/reports/cost/?{query}")
    assert api.status_code == json_api.status_code == 400
    assert api["Content-Type"] == "application/json"
    assert api.json() == json_api.json()
    err = api.json()["error"]
    assert err["code"] == "invalid" and message in " ".join(sum(err["fields"].values(), []))


@pytest.mark.django_db
def test_a_range_with_nothing_to_report_is_an_empty_parquet_with_every_column(
    world: Any, client_as: Any
) -> None:
    body = client_as("finance").get("/reports/cost.parquet?start=2025-01-01&end=2025-01-31")
    assert body.status_code == 200
    table = read_parquet(body.content)
    assert table.num_rows == 0
    assert table.column_names == list(FOCUS_COLUMNS)


@pytest.mark.django_db
def test_the_api_sends_parquet_to_a_client_that_asks_for_it_and_refuses_other_types(
    world: Any, api_as: Any
) -> None:
    thirds_of_a_cent(world)
    client = api_as("finance")
    asked = client.get(f"/api/v1/reports/cost.parquet?{Q}", HTTP_ACCEPT=PARQUET)
    assert asked.status_code == 200 and asked["Content-Type"] == PARQUET
    assert read_parquet(asked.content).num_rows == 16
    refused = client.get(f"/api/v1/reports/cost.parquet?{Q}", HTTP_ACCEPT="text/csv")
    assert refused.status_code == 406
    assert refused.json()["error"]["code"] == "not_acceptable"


@pytest.mark.django_db
def test_the_parquet_export_needs_a_login_and_a_token(world: Any, client: Any) -> None:
    from rest_framework.test import APIClient

    page = client.get(f"/reports/cost.parquet?{Q}")
    assert page.status_code == 302 and "/login" in page["Location"]
    api = APIClient().get(f"/api/v1/reports/cost.parquet?{Q}")
    assert api.status_code in (401, 403)
    assert api["Content-Type"] == "application/json"


@pytest.mark.django_db
def test_the_cost_page_links_the_parquet_beside_the_csv(world: Any, client_as: Any) -> None:
    thirds_of_a_cent(world)
    html = client_as("alice").get(f"/reports/cost/?{Q}").content.decode()
    csv_at = html.index(f'href="/reports/cost.csv?{Q.replace("&", "&amp;")}"')
    parquet_at = html.index(f'href="/reports/cost.parquet?{Q.replace("&", "&amp;")}"')
    assert 0 < parquet_at - csv_at < 200
