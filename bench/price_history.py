"""Benchmark pricing allocations against the price history (what cost reports do).

Builds, inside a transaction that is rolled back at the end, two GPU types with
--changes price changes each over 30 days and --allocations random allocations, then
prices every allocation two ways and prints the time of each and their ratio:

1. baseline: `price_segments(gpu_type, start, end)` per allocation (one query each);
2. `price_book()` once, then `PriceBook.cost(...)` per allocation (one query in all).

It checks that both give the same total to the cent.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollmux_platform \
        .venv/bin/python bench/price_history.py --allocations 5000 --changes 50
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rollmux_web.settings")


class Rollback(Exception):
    pass


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--allocations", type=int, default=5000)
    parser.add_argument("--changes", type=int, default=50, help="price changes per GPU type")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    import django

    django.setup()
    from django.db import connection, transaction

    from rollmux_web.inventory.models import GpuPrice, GpuType
    from rollmux_web.inventory.selectors import price_book, price_segments

    rng = random.Random(args.seed)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    span = timedelta(days=30)
    try:
        with transaction.atomic():
            names = []
            for i, base in enumerate((Decimal("1.85"), Decimal("5.28"))):
                g = GpuType.objects.create(
                    name=f"bench-{i}-{rng.random():.6f}", gpus_per_node=8, host_mem_gb=2048
                )
                names.append((g, g.name))
                moments = sorted(t0 + span * rng.random() for _ in range(args.changes))
                GpuPrice.objects.bulk_create(
                    [GpuPrice(gpu_type=g, price_per_gpu_hour=base, effective_from=t0)]
                    + [
                        GpuPrice(
                            gpu_type=g,
                            price_per_gpu_hour=(base * Decimal(0.5 + rng.random())).quantize(
                                Decimal("0.0001")
                            ),
                            effective_from=m,
                        )
                        for m in moments
                    ]
                )
            allocations = []
            for _ in range(args.allocations):
                g, name = rng.choice(names)
                start = t0 + span * rng.random()
                allocations.append(
                    (g, name, 8, start, start + timedelta(hours=rng.uniform(0.1, 48)))
                )

            tic = time.perf_counter()
            total_a = Decimal(0)
            for g, _, gpus, start, end in allocations:
                for a, b, price in price_segments(g, start, end):
                    total_a += Decimal((b - a).total_seconds()) / Decimal(3600) * gpus * price
            per_interval = time.perf_counter() - tic

            tic = time.perf_counter()
            book = price_book()
            total_b = sum(
                (book.cost(name, gpus, start, end) for _, name, gpus, start, end in allocations),
                Decimal(0),
            )
            with_book = time.perf_counter() - tic

            print(
                f"allocations={args.allocations} price changes per GPU type={args.changes} db={connection.vendor}"
            )
            print(
                f"price_segments per allocation: {per_interval:8.3f} s  ({per_interval / args.allocations * 1e6:7.1f} us each)"
            )
            print(
                f"price_book once + cost():      {with_book:8.3f} s  ({with_book / args.allocations * 1e6:7.1f} us each)"
            )
            print(f"speed-up: {per_interval / with_book:.1f}x")
            print(
                f"total cost ${total_a.quantize(Decimal('0.01'))} vs ${total_b.quantize(Decimal('0.01'))}: "
                f"{'equal' if total_a.quantize(Decimal('0.01')) == total_b.quantize(Decimal('0.01')) else 'DIFFERENT'}"
            )
            raise Rollback
    except Rollback:
        pass


if __name__ == "__main__":
    main()
