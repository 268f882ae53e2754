"""A page of the cost report billed and summed in SQL (selectors.cost_paged) is the whole
report's page to the cent: every row, job, line and burn-down figure, on every page.

The world is test_cost_days': kept days, days after them (the engine's), dirty groups
over the whole range (their amounts added to the SQL's in Python), a profiling run,
two tenants, jobs finished and live.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Any
from unittest import mock

import pytest
from django.db.models import Sum

from rollmux_web.reports import cost_days
from rollmux_web.reports.exports import cost_report_json
from rollmux_web.reports.models import CostDayLine, CostMonth, CostMonthLine
from rollmux_web.reports.selectors import cost as cost_module
from rollmux_web.reports.selectors import cost_paged
from tests.reports.test_cost_days import MARK, RANGES, _keep_to, _more_groups
from tests.reports.test_retention import NOW, build_world

CSRF = re.compile(r'(?:X-CSRFToken": "|name="csrfmiddlewaretoken" value=")[^"]+')


@pytest.mark.django_db
def test_every_page_billed_in_sql_equals_the_whole_reports_page(world: Any) -> None:
    build_world(world)
    _more_groups(world)
    _keep_to(MARK)
    sql_pages = 0
    for start, end in [*RANGES, (date(2026, 1, 1), date(2026, 1, 7))]:
        for who in ("finance", "alice"):
            user = world.user(who)
            whole = cost_module.cost_report(user=user, start=start, end=end, now=NOW)
            count = len(whole.by_job)
            assert count, (start, end, who)
            for size in (1, 2, 200):
                for page in range(1, -(-count // size) + 1):
                    with mock.patch.object(
                        cost_module, "paged_lines", wraps=cost_paged.paged_lines
                    ) as sql:
                        got = cost_module.cost_report_page(
                            user=user, start=start, end=end, page=page, page_size=size, now=NOW
                        )
                    sql_pages += sql.call_count
                    where = (start, end, who, size, page)
                    assert got.jobs_count == count, where
                    assert got.has_profiling == whole.has_profiling, where
                    assert cost_report_json(got, page=page, page_size=size) == cost_report_json(
                        whole, page=page, page_size=size
                    ), where
    # (most ranges start on a kept day: their pages came from the SQL)
    assert sql_pages > 50


def _page(response: Any) -> str:
    """The page's HTML but its CSRF tokens (a new one each request)."""
    return CSRF.sub("", response.content.decode())


@pytest.mark.django_db
def test_the_cost_page_is_the_same_from_sql_as_from_every_line(world: Any, client_as: Any) -> None:
    build_world(world)
    _more_groups(world)
    _keep_to(MARK)
    for query in ("start=2026-01-01&end=2026-01-31", "start=2026-01-06&end=2026-01-09&page=2"):
        for who in ("finance", "alice"):
            url = f"/reports/cost/?{query}"
            with mock.patch.object(cost_module, "now_or", return_value=NOW):
                got = client_as(who).get(url)
                # (elsewhere than PostgreSQL: the whole report, sliced)
                with mock.patch.object(cost_module, "connection", mock.Mock(vendor="other")):
                    want = client_as(who).get(url)
            assert got.status_code == want.status_code == 200
            assert _page(got) == _page(want), (query, who)
    bad = client_as("finance").get("/reports/cost/?start=2026-01-01&end=2026-01-31&page=99")
    assert bad.status_code == 200 and "page: &#x27;99&#x27; is not a page" in bad.content.decode()


@pytest.mark.django_db
def test_pages_over_whole_kept_months_equal_the_whole_report(world: Any) -> None:
    """Whole months read from their sums (CostMonthLine), the other days from the kept
    days: every page the whole report's, before and after the next month is summed (a
    job's line across the months' boundary: one month's row alone, then with the day
    rows after it, then with the next month's)."""
    build_world(world)
    _more_groups(world)
    _keep_to(date(2026, 2, 3))
    assert list(CostMonth.objects.values_list("month", flat=True)) == [date(2026, 1, 1)]
    assert cost_days.keep_month(date(2026, 2, 1), now=NOW) is False  # (not all kept yet)
    jan = CostMonthLine.objects.filter(month=date(2026, 1, 1))
    day_sums = CostDayLine.objects.filter(day__lt=date(2026, 2, 1)).aggregate(
        b=Sum("busy_cost"), i=Sum("idle_cost")
    )
    assert jan.aggregate(b=Sum("busy_cost"), i=Sum("idle_cost")) == day_sums
    ranges = [
        (date(2026, 1, 1), date(2026, 1, 31)),
        (date(2026, 1, 1), date(2026, 2, 2)),
        (date(2026, 1, 1), date(2026, 2, 20)),
        (date(2026, 1, 6), date(2026, 2, 2)),
        (date(2025, 12, 1), date(2026, 2, 28)),
    ]
    _same_pages(world, ranges)
    _keep_to(date(2026, 3, 2))
    assert CostMonth.objects.count() == 2
    assert CostMonthLine.objects.filter(multi=True, month=date(2026, 1, 1)).exists()
    assert CostMonthLine.objects.filter(multi=True, month=date(2026, 2, 1)).exists()
    assert CostMonthLine.objects.filter(multi=False).exists()
    _same_pages(world, [*ranges, (date(2026, 2, 1), date(2026, 2, 28))])
    # a month with a day past the rollup retention goes (its days are summed no more)
    with mock.patch.object(cost_days.settings, "ROLLMUX_ROLLUP_RETENTION_MONTHS", 1):
        cost_days.purge_days(datetime(2026, 3, 5, tzinfo=UTC))
    assert list(CostMonth.objects.values_list("month", flat=True)) == [date(2026, 2, 1)]
    assert not CostMonthLine.objects.filter(month=date(2026, 1, 1)).exists()


def _same_pages(world: Any, ranges: list[tuple[date, date]]) -> None:
    for start, end in ranges:
        for who in ("finance", "alice"):
            user = world.user(who)
            whole = cost_module.cost_report(user=user, start=start, end=end, now=NOW)
            count = len(whole.by_job)
            for size in (1, 200):
                for page in range(1, -(-count // size) + 1):
                    with mock.patch.object(
                        cost_module, "paged_lines", wraps=cost_paged.paged_lines
                    ) as sql:
                        got = cost_module.cost_report_page(
                            user=user, start=start, end=end, page=page, page_size=size, now=NOW
                        )
                    where = (start, end, who, size, page)
                    assert sql.call_count == 1, where
                    assert got.jobs_count == count, where
                    assert cost_report_json(got, page=page, page_size=size) == cost_report_json(
                        whole, page=page, page_size=size
                    ), where
