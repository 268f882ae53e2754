"""The kept days' sums per tenant, GPU type and stage (CostDayTenant, cost_totals): the
cost report's page read from them (its rows, its burn-down, the lines of the page's
tenants only) is the page read from every kept line, to the last digit, across a month's
edge, with dirty groups, for finance and a researcher; a day kept without its sums is read
from its lines.

The world is test_cost_days' (kept days, the engine's days after them, dirty groups, a
profiling run, two tenants).
"""

from __future__ import annotations

import importlib
from collections import defaultdict
from datetime import UTC, date, datetime
from typing import Any
from unittest import mock

import pytest
from django.apps import apps as django_apps
from django.db import connection

from rollmux_web.reports import cost_days
from rollmux_web.reports.exports import cost_report_json
from rollmux_web.reports.models import (
    CostDay,
    CostDayGroup,
    CostDayLine,
    CostDaySummed,
    CostDayTenant,
    CostGroupLife,
    CostGroupLifeDay,
    CostGroupLifeLine,
    CostMonth,
    CostMonthJobs,
)
from rollmux_web.reports.selectors import cost as cost_module
from rollmux_web.reports.selectors import cost_paged, cost_stored, cost_totals
from rollmux_web.reports.selectors.cost_figures import FIGURE_COLUMNS
from tests.reports.test_cost_days import _keep_to, _more_groups
from tests.reports.test_retention import NOW, build_world

# whole months, a month's edge both ways, days inside one month, the engine's days after
# the kept ones (to 2026-02-03), a range before the first kept day
RANGES = [
    (date(2026, 1, 1), date(2026, 1, 31)),
    (date(2026, 1, 1), date(2026, 2, 2)),
    (date(2026, 1, 6), date(2026, 2, 2)),
    (date(2026, 1, 6), date(2026, 1, 9)),
    (date(2026, 1, 20), date(2026, 2, 20)),
    (date(2025, 12, 1), date(2026, 2, 28)),
]


def _sums_of_lines() -> dict[tuple[Any, ...], list[Any]]:
    out: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0] * (1 + len(FIGURE_COLUMNS)))
    for day, tid, gid, stage, *figs in CostDayLine.objects.values_list(
        "day", "tenant_id", "gpu_type_id", "stage", *FIGURE_COLUMNS
    ):
        got = out[(day, tid, gid, stage)]
        got[0] += 1
        for i, v in enumerate(figs, 1):
            got[i] += v
    return dict(out)


def _kept_sums() -> dict[tuple[Any, ...], list[Any]]:
    return {
        (day, tid, gid, stage): [n, *figs]
        for day, tid, gid, stage, n, *figs in CostDayTenant.objects.values_list(
            "day", "tenant_id", "gpu_type_id", "stage", "lines", *FIGURE_COLUMNS
        )
    }


def _world(world: Any) -> None:
    build_world(world)
    _more_groups(world)
    _keep_to(date(2026, 2, 3))
    assert CostMonth.objects.exists()  # (January is summed as a month too)
    assert CostDayGroup.objects.filter(dirty=True).exists()  # (ranges with dirty groups)


@pytest.mark.django_db
def test_each_kept_day_keeps_its_lines_summed_per_tenant_type_and_stage(world: Any) -> None:
    _world(world)
    assert set(CostDaySummed.objects.values_list("day", flat=True)) == set(
        CostDay.objects.values_list("day", flat=True)
    )
    want = _sums_of_lines()
    assert len(want) > 20
    assert _kept_sums() == want


def _paged(user: Any, start: date, end: date, page: int, size: int) -> Any:
    return cost_module.cost_report_page(
        user=user, start=start, end=end, page=page, page_size=size, now=NOW
    )


@pytest.mark.django_db
def test_pages_from_the_tenant_sums_equal_pages_from_every_line(world: Any) -> None:
    """Every page's figures, exact (not only their cents), and its burn-down: from the
    sums (the rows, the tenants a page falls in) and from every kept line (the sums taken
    away: the statement sums every line of the range)."""
    _world(world)
    from_sums = 0
    for start, end in RANGES:
        for who in ("finance", "alice"):
            user = world.user(who)
            whole = cost_module.cost_report(user=user, start=start, end=end, now=NOW)
            count = len(whole.by_job)
            for size in (1, 2, 200):
                for page in range(1, -(-count // size) + 2):  # (and one past the last)
                    with mock.patch.object(
                        cost_paged, "jobs_per_tenant", wraps=cost_totals.jobs_per_tenant
                    ) as counted:
                        got = _paged(user, start, end, page, size)
                    from_sums += counted.call_count
                    with (
                        mock.patch.object(cost_paged, "row_sums", return_value=None),
                        mock.patch.object(cost_stored, "bucket_sums", return_value=None),
                    ):
                        want = _paged(user, start, end, page, size)
                    where = (start, end, who, size, page)
                    assert got.jobs_count == want.jobs_count == count, where
                    assert got.any_profiling == want.any_profiling, where
                    assert got.lines == want.lines, where
                    for rows in ("by_tenant", "by_gpu_type", "by_stage"):
                        assert getattr(got, rows) == getattr(want, rows), (where, rows)
                    assert got.total == want.total, where
                    assert got.burn_down == want.burn_down, where
                    if page <= -(-count // size):
                        assert cost_report_json(got, page=page, page_size=size) == (
                            cost_report_json(whole, page=page, page_size=size)
                        ), where
    assert from_sums > 150


@pytest.mark.django_db
def test_a_day_kept_without_its_sums_is_read_from_its_lines(world: Any) -> None:
    """A day kept before the sums were (no CostDaySummed row): a range holding it reads
    every line (the same page); the ranges without it still read the sums."""
    _world(world)
    CostDaySummed.objects.filter(day=date(2026, 1, 7)).delete()
    CostDayTenant.objects.filter(day=date(2026, 1, 7)).delete()
    for start, end, summed in (
        (date(2026, 1, 1), date(2026, 1, 31), False),
        (date(2026, 1, 6), date(2026, 1, 9), False),
        (date(2026, 1, 8), date(2026, 2, 2), True),
    ):
        for who in ("finance", "alice"):
            user = world.user(who)
            whole = cost_module.cost_report(user=user, start=start, end=end, now=NOW)
            with mock.patch.object(
                cost_paged, "jobs_per_tenant", wraps=cost_totals.jobs_per_tenant
            ) as counted:
                got = _paged(user, start, end, 1, 2)
            assert counted.called is summed, (start, end, who)
            assert cost_report_json(got, page=1, page_size=2) == cost_report_json(
                whole, page=1, page_size=2
            ), (start, end, who)


@pytest.mark.django_db
def test_the_migration_sums_the_days_kept_before_it(world: Any) -> None:
    _world(world)
    kept = _kept_sums()
    CostDayTenant.objects.all().delete()
    CostDaySummed.objects.all().delete()
    migration = importlib.import_module("rollmux_web.reports.migrations.0006_cost_day_tenants")
    migration.sum_kept_days(None, mock.Mock(connection=connection))
    assert _kept_sums() == kept
    assert CostDaySummed.objects.count() == CostDay.objects.count()


def _counts() -> dict[date, Any]:
    return dict(CostMonthJobs.objects.values_list("month", "counts"))


@pytest.mark.django_db
def test_jobs_of_whole_months_are_counted_from_the_months_counts(world: Any) -> None:
    """A range's jobs from the kept months' counts (a job in two months counted once),
    the other days' and the engine's jobs added: the count from every row, and the same
    when a month is not counted (every row is then counted)."""
    _world(world)
    _keep_to(date(2026, 3, 2))
    assert set(_counts()) == {date(2026, 1, 1), date(2026, 2, 1)}
    ranges = [
        (date(2026, 1, 1), date(2026, 1, 31)),
        (date(2026, 1, 1), date(2026, 2, 28)),
        (date(2026, 1, 1), date(2026, 3, 3)),
        (date(2026, 1, 6), date(2026, 2, 28)),
        (date(2025, 12, 1), date(2026, 2, 10)),
    ]
    for missing in (False, True):
        if missing:
            CostMonthJobs.objects.filter(month=date(2026, 2, 1)).delete()
        for start, end in ranges:
            for who in ("finance", "alice"):
                user = world.user(who)
                whole = cost_module.cost_report(user=user, start=start, end=end, now=NOW)
                with mock.patch.object(
                    cost_totals, "_count_distinct", wraps=cost_totals._count_distinct
                ) as every_row:
                    got = _paged(user, start, end, 1, 1)
                where = (start, end, who, missing)
                assert got.jobs_count == len(whole.by_job), where
                # (every row counted only when a month of the range is not counted)
                assert every_row.called is (missing and end >= date(2026, 2, 28)), where


@pytest.mark.django_db
def test_a_month_kept_before_a_counted_one_counts_that_one_again(world: Any) -> None:
    _world(world)
    _keep_to(date(2026, 3, 2))
    want = _counts()
    CostMonthJobs.objects.filter(month=date(2026, 2, 1)).update(counts={})
    assert cost_days.count_months([date(2026, 1, 1)]) == [date(2026, 2, 1)]
    assert _counts() == want
    # (a job in both months: February counts it after January)
    assert any(before == "2026-01-01" for by in want[date(2026, 2, 1)].values() for before in by)


@pytest.mark.django_db
def test_the_migration_counts_the_months_kept_before_it(world: Any) -> None:
    _world(world)
    _keep_to(date(2026, 3, 2))
    want = _counts()
    CostMonthJobs.objects.all().delete()
    migration = importlib.import_module("rollmux_web.reports.migrations.0007_cost_month_jobs")
    migration.count_kept_months(django_apps, mock.Mock(connection=connection))
    assert _counts() == want


@pytest.mark.django_db
def test_a_dirty_groups_job_without_an_engine_line_has_every_row_counted(world: Any) -> None:
    """The months' counts count a dirty group's rows' jobs, right only when the engine
    has a line for each (it runs over that group): one without is counted from the rows."""
    _world(world)
    dirty = set(CostDayGroup.objects.filter(dirty=True).values_list("group_id", flat=True))
    lo, hi = date(2026, 1, 1), date(2026, 2, 1)
    plan = cost_stored.StoredPlan([], lo, hi, None, dirty, True)
    args = dict(lo=lo, hi=hi, months=[lo], tenant_ids=None, dirty=dirty,
                parts=cost_paged.kept_parts(plan))  # fmt: skip
    jobs = set(CostDayLine.objects.filter(group_id__in=dirty).values_list("tenant_id", "job_id"))
    assert jobs
    with mock.patch.object(
        cost_totals, "_count_distinct", wraps=cost_totals._count_distinct
    ) as every_row:
        assert cost_totals.jobs_per_tenant(**args, engine=sorted(jobs))
        assert not every_row.called
        assert cost_totals.jobs_per_tenant(**args, engine=sorted(jobs)[1:])
        assert every_row.called


@pytest.mark.django_db
def test_pages_reading_kept_group_lives_equal_pages_running_the_engine(world: Any) -> None:
    """A dirty group whose whole life a range holds is read from its kept life (lines and
    burn-down days) instead of the engine over the range: every page the same, exactly;
    a range that cuts its life runs the engine."""
    _world(world)
    lives = dict(CostGroupLife.objects.values_list("group_id", "lo"))
    assert lives and CostGroupLifeLine.objects.exists() and CostGroupLifeDay.objects.exists()
    hits: list[set[int]] = []
    real = cost_stored.kept_lives

    def spy(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        if got is not None:
            hits.append(got[1])
        return got

    for start, end in [*RANGES, (date(2026, 1, 7), date(2026, 1, 31))]:
        for who in ("finance", "alice"):
            user = world.user(who)
            for size in (1, 200):
                with mock.patch.object(cost_stored, "kept_lives", side_effect=spy):
                    got = _paged(user, start, end, 1, size)
                with mock.patch.object(cost_stored, "kept_lives", return_value=None):
                    want = _paged(user, start, end, 1, size)
                where = (start, end, who, size)
                assert got.jobs_count == want.jobs_count, where
                assert got.lines == want.lines, where
                for rows in ("by_tenant", "by_gpu_type", "by_stage", "total", "burn_down"):
                    assert getattr(got, rows) == getattr(want, rows), (where, rows)
    assert len(hits) > 5 and set().union(*hits) <= set(lives)


@pytest.mark.django_db
def test_the_kept_sums_counts_and_lives_go_with_their_days(world: Any) -> None:
    _world(world)
    _keep_to(date(2026, 3, 2))
    assert CostGroupLife.objects.filter(lo__lt=datetime(2026, 2, 1, tzinfo=UTC)).exists()
    with mock.patch.object(cost_days.settings, "ROLLMUX_ROLLUP_RETENTION_MONTHS", 1):
        cost_days.purge_days(datetime(2026, 3, 5, tzinfo=UTC))  # (cutoff: 2026-02-01)
    assert not CostDayTenant.objects.filter(day__lt=date(2026, 2, 1)).exists()
    assert not CostDaySummed.objects.filter(day__lt=date(2026, 2, 1)).exists()
    assert list(CostMonthJobs.objects.values_list("month", flat=True)) == [date(2026, 2, 1)]
    old = CostGroupLife.objects.filter(lo__lt=datetime(2026, 2, 1, tzinfo=UTC))
    assert not old.exists()
    kept = set(CostGroupLife.objects.values_list("group_id", flat=True))
    assert set(CostGroupLifeLine.objects.values_list("group_id", flat=True)) <= kept
    assert set(CostGroupLifeDay.objects.values_list("group_id", flat=True)) <= kept
