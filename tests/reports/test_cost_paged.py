"""A page of the cost report billed and summed in SQL (selectors.cost_paged) is the whole
report's page to the cent: every row, job, line and burn-down figure, on every page.

The world is test_cost_days': kept days, days after them (the engine's), dirty groups
over the whole range (their amounts added to the SQL's in Python), a profiling run,
two tenants, jobs finished and live.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any
from unittest import mock

import pytest

from rollmux_web.reports.exports import cost_report_json
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
