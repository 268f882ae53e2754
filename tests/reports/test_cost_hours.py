"""The last day's kept closed hours (reports.cost_hours): the overview's last 24 hours
summed from them plus the engine for the edges give the engine's exact busy and idle
cost over the whole range, so the same cents, for every tenant and every moment.

The world is test_cost_days' (test_retention's and more): members coming and going, idle
time while no member is present split by membership weights (dirty, tail and uneven
groups), a price change in the middle of a day, phases across hours and midnight, a
long-tail hand-over, a co-located rollout, a profiling run; and a live group with an open
allocation and a running phase.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest

from rollmux_web.inventory.models import Cluster, Node
from rollmux_web.inventory.selectors import price_book
from rollmux_web.reports import cost_hours
from rollmux_web.reports.models import CostHour, CostHourGroup, CostHourShare
from rollmux_web.reports.selectors import cost_recent
from rollmux_web.reports.selectors.cost_engine import cost_lines as engine_lines
from rollmux_web.reports.selectors.cost_figures import cents, sum_lines
from rollmux_web.reports.selectors.overview import cluster_overview
from tests.reports.builders import allocate, make_group, make_job, phase, place
from tests.reports.test_cost_days import _more_groups
from tests.reports.test_retention import T, build_world

H = timedelta(hours=1)
US = timedelta(microseconds=1)
MIN = timedelta(minutes=1)
# moments whose last 24 hours cross members joining and leaving, the price change, the
# dirty and tail groups' days, midnight, and the live group's running phase
MOMENTS = [
    T + 26 * H + timedelta(minutes=7, microseconds=3),
    T + 33 * H + timedelta(minutes=41, seconds=9),
    T + 47 * H + timedelta(minutes=59, microseconds=999_999),
    T + 61 * H + timedelta(minutes=12),
    T + 75 * H + timedelta(minutes=30, microseconds=77),
    T + 98 * H + timedelta(minutes=5),
]


def _live_group(world: Any) -> None:
    """A group still allocated, its member still in it, a rollout still running."""
    for name, kind in (("h20-7", world.h20), ("h800-7", world.h800)):
        pool = Cluster.objects.get(gpu_type=kind)
        Node.objects.create(name=name, cluster=pool, gpu_type=kind, gpus=8, host_mem_gb=2048)
    g = make_group(created=T + 30 * H)
    for node in ("h20-7", "h800-7"):
        allocate(g, node, T + 30 * H + 17 * US, None)
    job = make_job(world, name="live", tenant="vision")
    pl = place(g, job, rollout=["h20-7"], train=["h800-7"], joined=T + 30 * H + 17 * US)
    phase(pl, iteration=0, kind="rollout", nodes=["h20-7"], start=T + 31 * H, minutes=52.5)
    phase(pl, iteration=0, kind="train", nodes=["h800-7"], start=T + 32 * H, minutes=21)
    phase(pl, iteration=1, kind="rollout", nodes=["h20-7"], start=T + 33 * H, minutes=None)


def _tail_and_uneven(world: Any) -> None:
    """A group whose idle split is uneven in one kept hour (a member joins mid-hour) and
    has a tail in the next (its members leave 20 minutes before its nodes go, with equal
    weights that hour): each hour adds up alone, a range with both does not."""
    for name, kind in (("h20-6", world.h20), ("h800-6", world.h800)):
        pool = Cluster.objects.get(gpu_type=kind)
        Node.objects.create(name=name, cluster=pool, gpu_type=kind, gpus=8, host_mem_gb=2048)
    a, b = T + 50 * H, T + 53 * H
    g = make_group(created=a, released=b)
    for node in ("h20-6", "h800-6"):
        allocate(g, node, a, b)
    members = []
    for name, joined in (("m1", a), ("m2", a + timedelta(minutes=90))):
        job = make_job(world, name=name, tenant="speech" if name == "m1" else "vision")
        left = b - timedelta(minutes=20)
        members.append(place(g, job, rollout=["h20-6"], train=["h800-6"], joined=joined, left=left))
    t = a + timedelta(minutes=3)
    for i, pl in enumerate([members[0], members[0], members[1], members[0], members[1]]):
        phase(pl, iteration=i, kind="rollout", nodes=["h20-6"], start=t, minutes=17.25)
        phase(pl, iteration=i, kind="train", nodes=["h800-6"], start=t + 20 * MIN, minutes=9)
        t += 32 * MIN


def _engine(tenants: set[int] | None, now: datetime) -> tuple[Decimal, Decimal]:
    lines = engine_lines(
        tenant_ids=tenants, t0=now - 24 * H, t1=now, now=now, prices=price_book()
    ).lines
    return (
        sum((ln.exact.busy_cost for ln in lines), Decimal(0)),
        sum((ln.exact.idle_cost for ln in lines), Decimal(0)),
    )


@pytest.mark.django_db
def test_the_last_24_hours_from_kept_hours_equal_the_engine_over_the_rows(world: Any) -> None:
    build_world(world)
    _more_groups(world)
    _live_group(world)
    _tail_and_uneven(world)
    tenants = (None, {world.vision.pk}, {world.speech.pk})
    dirty = tail = False
    for now in MOMENTS:
        # the beat ran an hour before: the last closed hours are not kept yet
        cost_hours.keep_hours(now - H)
        assert CostHour.objects.exists()
        # (an hour with no member present on a node is dirty: no weights in it)
        dirty |= CostHourGroup.objects.filter(dirty=True).exists()
        tail |= CostHourGroup.objects.filter(tail=True, dirty=False).exists()
        for kept_now in (False, True):
            if kept_now:
                cost_hours.keep_hours(now)
            for ids in tenants:
                with mock.patch.object(cost_recent, "engine_lines", wraps=engine_lines) as eng:
                    busy, idle = cost_recent.recent_spend(
                        tenant_ids=ids, t0=now - 24 * H, t1=now, now=now, prices=price_book()
                    )
                want_busy, want_idle = _engine(ids, now)
                where = (now, ids, kept_now)
                assert busy + idle > 0, where
                assert abs(busy - want_busy) < Decimal("1e-18"), where
                assert abs(idle - want_idle) < Decimal("1e-18"), where
                assert (cents(busy), cents(idle)) == (cents(want_busy), cents(want_idle))
                # the engine ran over the edges (the hour before the first kept one, the
                # hours after the last: GRACE and the beat's lag) or for dirty groups
                edge = 2 * H if kept_now else 3 * H
                for call in eng.call_args_list:
                    kw = call.kwargs
                    assert kw.get("only_groups") or kw["t1"] - kw["t0"] < edge, (where, kw)
    assert dirty and tail
    # the researcher's overview shows the engine's figure (the cost report's rounding)
    now = MOMENTS[3]
    cost_hours.keep_hours(now)
    lines = engine_lines(
        tenant_ids={world.vision.pk}, t0=now - 24 * H, t1=now, now=now, prices=price_book()
    ).lines
    want = sum_lines(lines, key="total", label="Total").cost
    assert want > 0
    assert cluster_overview(user=world.alice, now=now).cost_last_day == want


@pytest.mark.django_db
def test_an_hour_is_kept_once_only_when_closed_and_old_hours_go(world: Any) -> None:
    build_world(world)
    now = MOMENTS[2]
    kept = cost_hours.keep_hours(now)
    # the hours of the last 26 ending an hour (GRACE) before now, each once
    last = cost_hours.floor_hour(now) - cost_hours.HOUR
    assert kept[0] == cost_hours.floor_hour(now - cost_hours.KEEP) and kept[-1] == last - H
    assert len(kept) == len(set(kept)) == CostHour.objects.count()
    n = CostHourShare.objects.count()
    assert n > 0
    assert cost_hours.keep_hour(kept[3], now=now) is None  # kept already
    assert cost_hours.keep_hour(last, now=now) is None  # closes an hour after its end
    assert cost_hours.keep_hours(now) == [] and CostHourShare.objects.count() == n
    # every kept amount is a whole numerator over the kept denominator
    for row in CostHourShare.objects.all():
        assert row.busy_cost == row.busy_cost.to_integral_value()
        assert row.idle_cost == row.idle_cost.to_integral_value()
    # a day later: the old hours are deleted, the new ones kept
    later = cost_hours.keep_hours(now + 24 * H)
    first = cost_hours.floor_hour(now + 24 * H - cost_hours.KEEP)
    assert later[-1] == last + 23 * H
    assert min(CostHour.objects.values_list("hour", flat=True)) == first
    assert not CostHourShare.objects.filter(hour__lt=first).exists()
