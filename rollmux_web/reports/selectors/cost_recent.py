"""Tenants' exact busy and idle cost over a recent range (the overview's last 24 hours),
from the kept closed hours (reports.cost_hours) plus the cost engine for the rest: the
same amounts as the engine's lines over the whole range.

The range [t0, hi) is cut at the kept hours [k0, k1) (the longest run of kept hours from
the first at or after t0, up to hi): the kept hours are summed in SQL for every group that
is clean on each of them, the engine runs over [t0, k0) and [k1, hi) for the other groups,
and over the whole range for the groups dirty on a kept hour or in an edge (or with a tail
split on one part and an uneven one on another: cost_engine._additivity), as
`cost_stored` does with kept days.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Sum

from rollmux_web.reports.models import CostHour, CostHourGroup, CostHourShare
from rollmux_web.reports.selectors.cost_engine import KEPT_DENOMINATOR
from rollmux_web.reports.selectors.cost_engine import cost_lines as engine_lines
from rollmux_web.reports.selectors.cost_figures import ZERO, exact_arithmetic
from rollmux_web.reports.selectors.cost_rows import CostResult

HOUR_S = 3600


def _kept_run(t0: datetime, hi: datetime) -> tuple[datetime, datetime] | None:
    """[k0, k1): the kept hours from the first kept one starting at or after t0, without a
    gap, ending at or before hi."""
    hours = list(
        CostHour.objects.filter(hour__gte=t0, hour__lte=hi)
        .order_by("hour")
        .values_list("hour", flat=True)
    )
    run: tuple[datetime, datetime] | None = None
    for h in hours:
        end = datetime.fromtimestamp(h.timestamp() + HOUR_S, h.tzinfo)
        if end > hi:
            break
        if run is not None and h != run[1]:
            break
        run = (h if run is None else run[0], end)
    return run


def _kept_sums(
    k0: datetime, k1: datetime, tenant_ids: set[int] | None, skip: set[int]
) -> tuple[Decimal, Decimal]:
    """The kept hours' exact busy and idle cost of the tenants' jobs in the clean groups."""
    qs = CostHourShare.objects.filter(hour__gte=k0, hour__lt=k1).exclude(group_id__in=skip)
    if tenant_ids is not None:
        qs = qs.filter(tenant_id__in=tenant_ids)
    busy = idle = ZERO
    if connection.vendor == "postgresql":  # (exact numeric sums)
        got = qs.aggregate(b=Sum("busy_cost"), i=Sum("idle_cost"))
        busy, idle = got["b"] or ZERO, got["i"] or ZERO
    else:  # (SQLite keeps the numerators as text)
        for b, i in qs.values_list("busy_cost", "idle_cost"):
            busy += b
            idle += i
    return busy / KEPT_DENOMINATOR, idle / KEPT_DENOMINATOR


def _flags(k0: datetime, k1: datetime) -> tuple[set[int], set[int], set[int]]:
    dirty: set[int] = set()
    tail: set[int] = set()
    uneven: set[int] = set()
    for gid, d, t, u in CostHourGroup.objects.filter(hour__gte=k0, hour__lt=k1).values_list(
        "group_id", "dirty", "tail", "uneven"
    ):
        for flag, into in ((d, dirty), (t, tail), (u, uneven)):
            if flag:
                into.add(gid)
    return dirty, tail, uneven


def _spend(results: list[CostResult]) -> tuple[Decimal, Decimal]:
    busy = idle = ZERO
    for res in results:
        for ln in res.lines:
            busy += ln.exact.busy_cost
            idle += ln.exact.idle_cost
    return busy, idle


@exact_arithmetic  # (each engine run pauses the cyclic collector itself)
def recent_spend(
    *, tenant_ids: set[int] | None, t0: datetime, t1: datetime, now: datetime, prices: Any
) -> tuple[Decimal, Decimal]:
    """Return the exact busy and idle cost of the tenants' jobs over [t0, min(t1, now)): the
    sums of the engine's lines over that range (`cost_engine.cost_lines`)."""
    hi = min(t1, now)
    run = _kept_run(t0, hi) if hi > t0 else None
    whole = dict(tenant_ids=tenant_ids, now=now, prices=prices, counterfactuals=False)
    if run is None:
        return _spend([engine_lines(t0=t0, t1=hi, **whole)])  # type: ignore[arg-type]
    k0, k1 = run
    dirty, tail, uneven = _flags(k0, k1)
    dirty |= tail & uneven
    edges = [(a, b) for a, b in ((t0, k0), (k1, hi)) if b > a]
    while True:
        parts = [engine_lines(t0=a, t1=b, skip_groups=dirty, **whole) for a, b in edges]  # type: ignore[arg-type]
        more = set().union(*(p.dirty_groups for p in parts))
        tails = tail.union(*(p.tail_groups for p in parts))
        unevens = uneven.union(*(p.uneven_groups for p in parts))
        more |= tails & unevens
        if more <= dirty:
            break
        dirty |= more  # (the edges again without them: they are computed whole below)
    if dirty:
        parts.append(engine_lines(t0=t0, t1=hi, only_groups=dirty, **whole))  # type: ignore[arg-type]
    busy, idle = _spend(parts)
    kept_busy, kept_idle = _kept_sums(k0, k1, tenant_ids, dirty)
    return busy + kept_busy, idle + kept_idle


__all__ = ["recent_spend"]
