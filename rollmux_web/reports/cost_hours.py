"""Keep the last day's closed hours' cost per tenant (issue 25: the overview under 500 ms).

A researcher's overview shows their tenants' cost over the last 24 hours: a range that
starts mid-day, so the kept days (reports.cost_days) cannot serve it, and at a fleet's size
the cost engine spent ~400 ms on its ~20,000 phase records. Here each closed UTC hour of the
last day is run through the engine once, keyed by group (`cost_engine.group_amounts`, as a
kept day), and per (group, tenant) its exact busy and idle cost are kept as integer
numerators over `cost_engine.KEPT_DENOMINATOR` (`CostHourShare`), with the groups whose
idle split does not add up over hours (`CostHourGroup`: dirty, tail, uneven; cost_days
explains why those do not). `selectors.cost_recent` sums the kept hours in SQL and runs the
engine only for the range's edges and the dirty groups: the same exact amounts.

- An hour is closed once the rollup's GRACE has passed after its end (a phase's end is
  stamped when its report comes in: a report later than that is not counted, as for the
  rolled-up days and fair share's stored hours).
- Idempotent: an hour is kept once (its `CostHour` row, written in the hour's transaction).
- Only the hours a last-24-hours range can use are kept (KEEP); older ones are deleted.
- A price recorded later with an effective time before a kept hour is not applied to it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db import IntegrityError, transaction

from rollmux_web.inventory.selectors import price_book
from rollmux_web.reports.cost_days import numerator
from rollmux_web.reports.models import CostHour, CostHourGroup, CostHourShare
from rollmux_web.reports.selectors._time import us
from rollmux_web.reports.selectors.cost_engine import group_amounts
from rollmux_web.reports.selectors.cost_fetch import fetch_cost_inputs
from rollmux_web.reports.selectors.cost_figures import exact_arithmetic
from rollmux_web.reports.selectors.cost_rows import CostWindow
from rollmux_web.workflow.services.rollup_days import GRACE

log = logging.getLogger(__name__)
HOUR = timedelta(hours=1)
KEEP = timedelta(hours=26)  # the last 24 hours from any moment of the next two hours


def floor_hour(t: datetime) -> datetime:
    """The start of the UTC hour `t` falls in."""
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def closed_until(now: datetime) -> datetime:
    """The end of the last hour closed at `now` (GRACE after it)."""
    return floor_hour(now - GRACE)


@exact_arithmetic
def keep_hour(hour: datetime, *, now: datetime) -> int | None:
    """Keep the cost shares of the hour from `hour` if it is closed and not kept yet: the
    number of shares kept, None otherwise."""
    lo, hi = hour, hour + HOUR
    if hi > closed_until(now) or lo != floor_hour(lo):
        return None
    try:
        with transaction.atomic():
            # (a second keeper waits on the hour's key, then finds it taken)
            CostHour.objects.create(hour=lo, computed_at=now)
            inputs = fetch_cost_inputs(tenant_ids=None, t0=lo, hi_dt=hi, now_us=us(now))
            if inputs is None:
                return 0
            amounts, _alloc, flags = group_amounts(
                inputs, CostWindow(lo=us(lo), hi=us(hi), now_us=us(now)), price_book()
            )
            dirty = set(flags.dirty)
            shares: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])
            for a in amounts:
                busy, idle = numerator(a.figures.busy_cost), numerator(a.figures.idle_cost)
                if busy is None or idle is None:
                    dirty.add(a.group_id)  # (not a multiple of 1 / KEPT_DENOMINATOR)
                    continue
                got = shares[(a.group_id, a.tenant_id)]
                got[0] += busy
                got[1] += idle
            CostHourShare.objects.bulk_create(
                (
                    CostHourShare(hour=lo, group_id=gid, tenant_id=tid, busy_cost=b, idle_cost=i)
                    for (gid, tid), (b, i) in shares.items()
                    if gid not in dirty
                ),
                batch_size=2000,
            )
            CostHourGroup.objects.bulk_create(
                CostHourGroup(
                    hour=lo,
                    group_id=gid,
                    dirty=gid in dirty,
                    tail=gid in flags.tail,
                    uneven=gid in flags.uneven,
                )
                for gid in sorted(dirty | flags.tail | flags.uneven)
            )
    except IntegrityError:
        return None  # kept by another run
    log.info("kept the cost of the hour from %s: %d shares", lo, len(shares))
    return sum(1 for gid, _t in shares if gid not in dirty)


def keep_hours(now: datetime) -> list[datetime]:
    """Keep the closed hours of the last KEEP not kept yet, and delete older ones (the
    beat's body, with the closed days')."""
    first = floor_hour(now - KEEP)
    for model in (CostHourShare, CostHourGroup, CostHour):
        model.objects.filter(hour__lt=first).delete()
    kept = set(CostHour.objects.values_list("hour", flat=True))
    done = []
    hour = first
    while hour + HOUR <= closed_until(now):
        if hour not in kept and keep_hour(hour, now=now) is not None:
            done.append(hour)
        hour += HOUR
    return done


__all__ = ["closed_until", "floor_hour", "keep_hour", "keep_hours"]
