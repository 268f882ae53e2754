"""Read side of the inventory: GPU types, price history, pools and nodes.

Prices are a step function per GPU type: each GpuPrice holds from its
`effective_from` until the next row. Costs multiply allocated time by this
function, so a price change never alters what past allocations cost.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import Count, Q, QuerySet

from rollmux_web.inventory.models import Cluster, GpuPrice, GpuType, Node, RunnerPackage
from scheduler.costs import allocation_cost

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


MICRO = Decimal(1_000_000)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _us(dt: datetime) -> int:
    return (dt - _EPOCH) // timedelta(microseconds=1)


class PriceBook:
    """Price history of every GPU type, loaded once; integrates price x time exactly.

    The one price book of the product (the cost report, the overview and any report that
    prices many intervals). Times are integer epoch microseconds so that a report over
    many thousands of phases does no datetime or Decimal arithmetic in its inner loop.
    Before a type's first recorded price its GPUs cost nothing here (there was no price
    to bill by).
    """

    def __init__(self, rows: Iterable[tuple[int, str, Decimal, datetime]]) -> None:
        """Build from (type id, type name, price per GPU-hour, effective from) rows, in time order."""
        self._since_us: dict[int, list[int]] = defaultdict(list)
        self._price: dict[int, list[Decimal]] = defaultdict(list)
        self._ids: dict[str, int] = {}
        for type_id, name, price, since in rows:
            self._since_us[type_id].append(_us(since))
            self._price[type_id].append(Decimal(price))
            self._ids[name] = type_id

    def type_id(self, gpu_type: int | str) -> int:
        """Return the id of a GPU type given by id or name (-1: no price known)."""
        return gpu_type if isinstance(gpu_type, int) else self._ids.get(gpu_type, -1)

    def price_at(self, type_id: int, t: datetime) -> Decimal:
        """Return the price per GPU-hour in force at `t` (0 before the first price)."""
        i = bisect.bisect_right(self._since_us.get(type_id, []), _us(t)) - 1
        return self._price[type_id][i] if i >= 0 else Decimal(0)

    def split_us(self, type_id: int, a: int, b: int) -> list[tuple[int, int]]:
        """Cut [a, b) (epoch microseconds) at price changes: (price index, microseconds)."""
        since = self._since_us.get(type_id)
        if not since or b <= a:
            return []
        i = bisect.bisect_right(since, a) - 1
        n = len(since)
        if i >= 0 and (i + 1 == n or since[i + 1] >= b):
            return [(i, b - a)]  # the common case: one price throughout
        out = []
        for k in range(max(i, 0), n):
            seg_lo = max(a, since[k])
            seg_hi = b if k + 1 == n else min(b, since[k + 1])
            if seg_hi > seg_lo:
                out.append((k, seg_hi - seg_lo))
            if seg_hi >= b:
                break
        return out

    def flat_index(self, type_id: int, a: int, b: int) -> int | None:
        """Return the index of the one price in force throughout [a, b), or None.

        None when the price changes inside [a, b) or [a, b) starts before the first
        price: then spans must be cut with split_us.
        """
        since = self._since_us.get(type_id)
        if not since:
            return None
        i = bisect.bisect_right(since, a) - 1
        return i if i >= 0 and (i + 1 == len(since) or since[i + 1] >= b) else None

    def amount(self, type_id: int, index: int, us: int, gpus: int) -> Decimal:
        """Return gpus x the index-th price x `us` microseconds (the core's one cost
        arithmetic, `scheduler.costs.allocation_cost`, in Decimal)."""
        return allocation_cost(Decimal(us) / MICRO, gpus, self._price[type_id][index])

    def cost(self, gpu_type: int | str, gpus: int, start: datetime, end: datetime) -> Decimal:
        """Return the $ cost of `gpus` GPUs held over [start, end) under the price history."""
        type_id = self.type_id(gpu_type)
        return sum(
            (
                self.amount(type_id, i, us, gpus)
                for i, us in self.split_us(type_id, _us(start), _us(end))
            ),
            Decimal(0),
        )


def price_book() -> PriceBook:
    """Return the price history of every GPU type in one query."""
    return PriceBook(
        GpuPrice.objects.order_by("gpu_type_id", "effective_from").values_list(
            "gpu_type_id", "gpu_type__name", "price_per_gpu_hour", "effective_from"
        )
    )


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


def runner_package_list() -> QuerySet[RunnerPackage]:
    return RunnerPackage.objects.order_by("path")


def runner_allowlist() -> list[str]:
    """Return the registered runner paths (the built-ins are allowed without an entry)."""
    return list(RunnerPackage.objects.order_by("path").values_list("path", flat=True))
