"""The closed days' kept cost amounts (reports.cost_days, issue 25: the month's cost
report under 1 s): a report summing kept days plus the engine for the rest gives the
engine's figures over the whole range from the rows, to the cent, in every line.

The world is test_retention's: members coming and going (idle time split by membership
segments, and while no member is present by membership weights: dirty and tail groups),
a price change in the middle of a day, phases across midnight, a long-tail hand-over, a
co-located rollout at a rollout speed factor, a profiling run, a failed phase.
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest

from rollmux_web.inventory.models import Cluster, Node, PoolKind
from rollmux_web.inventory.selectors import price_book
from rollmux_web.reports import cost_days
from rollmux_web.reports.exports import cost_report_json
from rollmux_web.reports.models import CostDay, CostDayGroup, CostDayLine
from rollmux_web.reports.selectors import cost as cost_module
from rollmux_web.reports.selectors import cost_stored
from rollmux_web.reports.selectors.cost_engine import KEPT_DENOMINATOR
from rollmux_web.reports.selectors.cost_engine import cost_lines as engine_lines
from rollmux_web.reports.selectors.cost_figures import bill_lines, exact_arithmetic
from rollmux_web.workflow.models import PhaseRecord, RollupWatermark
from rollmux_web.workflow.services import rollup_days
from tests.reports.builders import allocate, make_group, make_job, place
from tests.reports.test_retention import NOW, T, _close, _finish, _phases, build_world

MARK = date(2026, 1, 8)  # the rollup watermark: days before it closed and kept
# ranges straddling the watermark and day boundaries, starting before, on and after the
# first kept day, one inside the kept days, one after them (the engine alone)
RANGES = [
    (date(2026, 1, 1), date(2026, 1, 31)),
    (date(2026, 1, 5), date(2026, 1, 8)),
    (date(2026, 1, 6), date(2026, 1, 9)),
    (date(2026, 1, 6), date(2026, 1, 7)),
    (date(2026, 1, 7), date(2026, 1, 7)),
    (date(2026, 1, 8), date(2026, 1, 12)),
]


def _more_groups(world: Any) -> None:
    """Groups whose idle time while no member is present is split by membership weights:
    C (two members of different spans, nodes kept after both left, on an open day: found
    dirty by the run after the kept days), E (two members of equal spans, nodes kept an
    hour and a half after: a tail that adds up) and F (its node allocated on a day none
    of its members was: dirty that day)."""
    rng = random.Random(7)
    h20, h800 = world.h20, world.h800
    roll = Cluster.objects.get(kind=PoolKind.ROLLOUT)
    train = Cluster.objects.get(kind=PoolKind.TRAIN)
    for name, pool, kind in (
        ("h20-8", roll, h20), ("h800-8", train, h800), ("h20-9", roll, h20), ("h800-9", train, h800)
    ):  # fmt: skip
        Node.objects.create(name=name, cluster=pool, gpu_type=kind, gpus=8, host_mem_gb=2048)
    h = timedelta(hours=1)
    specs = {
        # group: nodes (rollout, train), allocation, members' (joined, left)
        "c": (("h20-8", "h800-8"), (T + 24 * h, T + 96 * h + 6 * h),
              [(T + 24 * h, T + 96 * h), (T + 60 * h, T + 90 * h)]),
        "e": (("h20-9",), (T + 20 * h, T + 47 * h + timedelta(minutes=30)),
              [(T + 20 * h, T + 46 * h), (T + 20 * h, T + 46 * h)]),
        "f": (("h800-9",), (T + 36 * h, T + 50 * h), [(T + 36 * h, T + 47 * h)]),
    }  # fmt: skip
    for key, (nodes, (a, b), spans) in specs.items():
        group = make_group(created=a, released=b)
        for node in nodes:
            allocate(group, node, a, b)
        members = []
        for i, (joined, left) in enumerate(spans):
            job = make_job(world, name=f"{key}{i + 1}", tenant="vision" if i else "speech")
            pl = place(group, job, rollout=[nodes[0]], train=[nodes[-1]], joined=joined, left=left)
            members.append((pl, joined, left))
            _finish(job, left)
        PhaseRecord.objects.bulk_create(
            _phases(rng, members, a, b, roll=[nodes[0]], train=[nodes[-1]], gap=(20, 90))
        )


def _keep_to(mark: date) -> None:
    while (RollupWatermark.objects.values_list("day", flat=True).first() or date.min) < mark:
        assert rollup_days.advance(NOW, max_days=1)
    cost_days.keep_days(NOW, max_days=1000)


def _window(start: date, end: date) -> tuple[datetime, datetime]:
    return (
        datetime.combine(start, time.min, tzinfo=UTC),
        datetime.combine(end + timedelta(days=1), time.min, tzinfo=UTC),
    )


@exact_arithmetic
def _billed(result: Any) -> list[tuple[Any, ...]]:
    bill_lines(result.lines)
    return [
        (ln.tenant, ln.job_id, ln.gpu_type, ln.stage, ln.group_ids, ln.closed_us,
         ln.busy_gpu_hours, ln.idle_gpu_hours, ln.busy_cost, ln.idle_cost,
         ln.solo_disagg_cost, ln.colocated_cost)
        for ln in result.lines
    ]  # fmt: skip


@pytest.mark.django_db
def test_kept_days_plus_the_rest_equal_the_engine_over_the_whole_range(world: Any) -> None:
    jobs = build_world(world)
    _more_groups(world)
    _keep_to(MARK)
    kept = list(CostDay.objects.order_by("day").values_list("day", flat=True))
    assert kept[0] == T.date() and kept[-1] == MARK - timedelta(days=1)
    assert CostDayLine.objects.exists()
    # groups summed from kept days, one with a tail that adds up, and dirty ones
    assert CostDayGroup.objects.filter(dirty=False, tail=False).exists()
    assert CostDayGroup.objects.filter(dirty=False, tail=True, uneven=False).exists()
    assert CostDayGroup.objects.filter(dirty=True).exists()
    assert CostDayGroup.objects.filter(uneven=True, tail=False, dirty=False).exists()
    prices = price_book()
    for start, end in RANGES:
        t0, t1 = _window(start, end)
        for tenants in (None, {world.vision.pk}):
            kw = dict(tenant_ids=tenants, t0=t0, t1=t1, now=NOW, prices=prices)
            for buckets in ((), [t0 + timedelta(days=i) for i in range((t1 - t0).days + 1)]):
                with mock.patch.object(cost_stored, "engine_lines", wraps=engine_lines) as engine:
                    got = cost_stored.cost_lines(**kw, buckets=buckets, counterfactuals=True)
                want = engine_lines(**kw, buckets=buckets, counterfactuals=True)
                where = (start, end, tenants, bool(buckets))
                assert got.lines, where
                # every cent, GPU-hour and group of every billed line
                assert _billed(got) == _billed(want), where
                for a, b in zip(got.lines, want.lines, strict=True):
                    _close(vars(a.exact), vars(b.exact), str(where))
                assert got.group_costs == want.group_costs, where
                # (the engine also lists days with nothing spent, as zeros)
                for k in got.per_bucket_tenant.keys() | want.per_bucket_tenant.keys():
                    a, b = (r.per_bucket_tenant.get(k, Decimal(0)) for r in (got, want))
                    assert abs(a - b) < Decimal("1e-18"), (where, k)
                if start >= T.date() - timedelta(days=5) and start < MARK:
                    # the kept days were read: the engine ran only for the days after them
                    # or for the dirty groups over the whole range
                    for call in engine.call_args_list:
                        assert call.kwargs["t0"] >= _window(MARK, MARK)[0] or (
                            call.kwargs.get("only_groups")
                        ), (where, call.kwargs)
    # the whole report, page and API data, as the engine alone gives it
    for start, end in RANGES:
        for who in ("finance", "alice"):
            got = cost_report_json(
                cost_module.cost_report(user=world.user(who), start=start, end=end, now=NOW)
            )
            with (
                mock.patch.object(cost_module, "cost_lines", engine_lines),
                # (burn_down's; the engine alone reads no kept group life)
                mock.patch.object(
                    cost_module,
                    "stored_plan",
                    lambda lives=False, **kw: engine_lines(**kw),
                ),
            ):
                want = cost_report_json(
                    cost_module.cost_report(user=world.user(who), start=start, end=end, now=NOW)
                )
            assert got == want, (start, end, who)
    # (p1 ran after the watermark: its lines came from the engine alone)
    kept_jobs = set(CostDayLine.objects.values_list("job_id", flat=True))
    assert {jobs[n].pk for n in ("a1", "a2", "a3", "b1")} <= kept_jobs
    assert jobs["p1"].pk not in kept_jobs


@pytest.mark.django_db
def test_a_day_is_kept_once_and_only_behind_the_rollup_watermark(world: Any) -> None:
    build_world(world)
    assert cost_days.keep_days(NOW) == []  # no watermark yet: nothing is closed
    _keep_to(date(2026, 1, 7))
    days = list(CostDay.objects.values_list("day", flat=True))
    n = CostDayLine.objects.count()
    assert max(days) == date(2026, 1, 6)
    # the same day again, or a day past the watermark: nothing written
    assert cost_days.keep_day(date(2026, 1, 6), now=NOW) is None
    assert cost_days.keep_day(date(2026, 1, 7), now=NOW) is None
    assert cost_days.keep_days(NOW) == []
    assert CostDayLine.objects.count() == n
    # every kept amount is a whole numerator over the kept denominator
    for row in CostDayLine.objects.all():
        for v in (row.busy_cost, row.idle_cost, row.busy_gpu_hours, row.idle_gpu_hours):
            assert v == v.to_integral_value(), row
    assert KEPT_DENOMINATOR % 3_600 == 0


@pytest.mark.django_db
def test_the_api_pages_the_jobs_and_keeps_the_totals(world: Any, client_as: Any) -> None:
    build_world(world)
    _keep_to(MARK)
    url = "/api/v1/reports/cost/?start=2026-01-01&end=2026-01-31"
    whole = client_as("finance").get(url + "&page_size=5000").json()
    jobs = [j["job_id"] for j in whole["by_job"]]
    assert whole["jobs_count"] == len(jobs) >= 3 and whole["pages"] == 1
    pages = [client_as("finance").get(f"{url}&page_size=2&page={p}").json() for p in (1, 2)]
    assert [j["job_id"] for p in pages for j in p["by_job"]] == jobs[:4]
    for p in pages:
        assert p["total"] == whole["total"] and p["by_tenant"] == whole["by_tenant"]
        assert p["pages"] == -(-len(jobs) // 2)
        on_page = {j["job_id"] for j in p["by_job"]}
        assert p["lines"] == [ln for ln in whole["lines"] if ln["job_id"] in on_page]
    bad = client_as("finance").get(url + "&page=99")
    assert bad.status_code == 400 and "page" in bad.content.decode()
    assert client_as("finance").get(url + "&page_size=0").status_code == 400


@pytest.mark.django_db
def test_kept_days_go_with_their_rollups(world: Any, settings: Any) -> None:
    build_world(world)
    _keep_to(MARK)
    assert CostDay.objects.count() == 3
    settings.ROLLMUX_ROLLUP_RETENTION_MONTHS = 1
    # a month and a few days later: the kept days of January's first week are past it
    assert cost_days.purge_days(datetime(2026, 3, 5, tzinfo=UTC)) == 3
    assert not CostDayLine.objects.exists() and not CostDayGroup.objects.exists()
    settings.ROLLMUX_ROLLUP_RETENTION_MONTHS = 0  # (0: kept forever, as the rollups)
    _keep_to(date(2026, 1, 9))
    assert cost_days.purge_days(datetime(2027, 1, 1, tzinfo=UTC)) == 0
