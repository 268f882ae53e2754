"""Read side of the inventory: GPU types, price history, pools and nodes.

Prices are a step function per GPU type: each GpuPrice holds from its
`effective_from` until the next row. Costs multiply allocated time by this
function, so a price change never alters what past allocations cost.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Q, QuerySet

from rollmux_web.inventory.models import Cluster, GpuPrice, GpuType, Node

PriceStep = tuple[datetime, Decimal]
Segment = tuple[datetime, datetime, Decimal]


def _gpu_type_id(gpu_type: GpuType | int | str) -> int:
    if isinstance(gpu_type, GpuType):
        return gpu_type.pk
    if isinstance(gpu_type, int):
        return gpu_type
    return GpuType.objects.values_list("pk", flat=True).get(name=gpu_type)


def _steps(gpu_type_id: int) -> list[PriceStep]:
    return list(
        GpuPrice.objects.filter(gpu_type_id=gpu_type_id)
        .order_by("effective_from")
        .values_list("effective_from", "price_per_gpu_hour")
    )


def step_price_at(steps: Sequence[PriceStep], when: datetime) -> Decimal:
    """Return the price in force at `when` from steps sorted by time.

    Before the first recorded price the first price applies: a GPU type has a
    price from the moment it exists, and a cluster may predate its first record.
    """
    if not steps:
        raise LookupError("GPU type has no price")
    i = bisect.bisect_right([s[0] for s in steps], when) - 1
    return steps[max(i, 0)][1]


def step_segments(steps: Sequence[PriceStep], start: datetime, end: datetime) -> list[Segment]:
    """Split [start, end) into contiguous pieces of constant price."""
    if end <= start:
        return []
    if not steps:
        raise LookupError("GPU type has no price")
    out: list[Segment] = []
    cursor = start
    price = step_price_at(steps, start)
    for effective_from, next_price in steps:
        if effective_from <= cursor:
            continue
        if effective_from >= end:
            break
        out.append((cursor, effective_from, price))
        cursor, price = effective_from, next_price
    out.append((cursor, end, price))
    return out


def price_at(gpu_type: GpuType | int | str, when: datetime) -> Decimal:
    """Return the price per GPU-hour of a GPU type (object, id or name) at `when`."""
    return step_price_at(_steps(_gpu_type_id(gpu_type)), when)


def price_segments(gpu_type: GpuType | int | str, start: datetime, end: datetime) -> list[Segment]:
    """Return [(from, to, price per GPU-hour)] covering [start, end) without gaps."""
    return step_segments(_steps(_gpu_type_id(gpu_type)), start, end)


def current_prices() -> dict[str, Decimal]:
    """Return the price per GPU-hour in force now for every GPU type, by name."""
    out: dict[str, Decimal] = {}
    rows = GpuPrice.objects.order_by("gpu_type__name", "-effective_from").values_list(
        "gpu_type__name", "price_per_gpu_hour"
    )
    for name, price in rows:
        out.setdefault(name, price)
    return out


@dataclass(frozen=True)
class PriceBook:
    """Every GPU type's price history loaded once, for reports that price many intervals."""

    steps: dict[str, list[PriceStep]]

    def at(self, gpu_type: str, when: datetime) -> Decimal:
        return step_price_at(self.steps.get(gpu_type, []), when)

    def segments(self, gpu_type: str, start: datetime, end: datetime) -> list[Segment]:
        return step_segments(self.steps.get(gpu_type, []), start, end)

    def cost(self, gpu_type: str, gpus: int, start: datetime, end: datetime) -> Decimal:
        """Return the $ cost of `gpus` GPUs held over [start, end) under the price history."""
        total = Decimal(0)
        for a, b, price in self.segments(gpu_type, start, end):
            hours = Decimal((b - a).total_seconds()) / Decimal(3600)
            total += hours * gpus * price
        return total


def price_book() -> PriceBook:
    """Return the price history of every GPU type in one query."""
    steps: dict[str, list[PriceStep]] = {}
    for name, when, price in GpuPrice.objects.order_by("effective_from").values_list(
        "gpu_type__name", "effective_from", "price_per_gpu_hour"
    ):
        steps.setdefault(name, []).append((when, price))
    return PriceBook(steps=steps)


def gpu_type_list() -> QuerySet[GpuType]:
    # Meta.ordering does not apply to GROUP BY queries: order explicitly.
    return (
        GpuType.objects.prefetch_related("prices")
        .annotate(node_count=Count("nodes"))
        .order_by("name")
    )


def gpu_type_current_price(gpu_type: GpuType) -> Decimal | None:
    """Return the latest price row's price (uses prefetched prices when available)."""
    prices = sorted(gpu_type.prices.all(), key=lambda p: p.effective_from)
    return prices[-1].price_per_gpu_hour if prices else None


def cluster_list() -> QuerySet[Cluster]:
    return (
        Cluster.objects.select_related("gpu_type")
        .annotate(
            node_count=Count("nodes"),
            nodes_up=Count("nodes", filter=Q(nodes__state="up")),
        )
        .order_by("kind", "name")
    )


def node_list(
    *, cluster: str | None = None, gpu_type: str | None = None, state: str | None = None
) -> QuerySet[Node]:
    qs = Node.objects.select_related("cluster", "gpu_type")
    if cluster:
        qs = qs.filter(cluster__name=cluster)
    if gpu_type:
        qs = qs.filter(gpu_type__name=gpu_type)
    if state:
        qs = qs.filter(state=state)
    return qs.order_by("cluster__kind", "name")
