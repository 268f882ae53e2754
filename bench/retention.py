"""Benchmark: archiving phase records (issue 25) and the reports before and after.

Seeds a month of co-execution groups (GROUPS groups of 5 jobs, each job ITERATIONS
iterations: a rollout and a training), then prints (no assertions):
- the month's cost report and SLO report on raw phase records (the baseline);
- archiving every job (Parquet to a temporary directory, rollups, deletes) in batches:
  phases per second, the rollup rows written per phase record;
- the same reports after every closed day was rolled up (the rollup watermark, raw rows
  kept: services.rollup_days), and after archiving, and whether they equal the baseline
  to the cent.

Runs in a throwaway test database on DATABASE_URL:
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollmux .venv/bin/python bench/retention.py
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rollmux_web.settings")

import django  # noqa: E402

django.setup()

from django.test.utils import setup_databases, teardown_databases  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 6, 1, tzinfo=UTC)
GROUPS = 16
ITERATIONS = 150


def timed(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    result = fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), result


def seed(world: Any) -> int:
    from rollmux_web.inventory.models import Node
    from rollmux_web.jobs.models import Job, JobStatus
    from rollmux_web.workflow.models import ExecutionGroup, NodeAllocation, PhaseRecord, Placement

    rng = random.Random(1)
    nodes = {n.name: n for n in Node.objects.all()}
    rows = []
    for g_i in range(GROUPS):
        start = T0 + timedelta(days=g_i * 1.7)
        end = start + timedelta(days=6)
        g = ExecutionGroup.objects.create()
        ExecutionGroup.objects.filter(pk=g.pk).update(created_at=start, released_at=end)
        roll, train = f"h20-{g_i % 8}", f"h800-{g_i % 8}"
        for n in (roll, train):
            NodeAllocation.objects.create(group=g, node=nodes[n], start=start, end=end)
        for j in range(5):
            job = Job.objects.create(
                name=f"g{g_i}-j{j}", tenant=world.vision if j % 2 else world.speech,
                submitter=world.alice, slo_class=world.silver, iterations=ITERATIONS,
                rollout_gpus=8, train_gpus=8, t_roll_max_s=600, t_train_max_s=300,
                host_mem_gb=300, status=JobStatus.COMPLETED, finished_at=end,
            )  # fmt: skip
            pl = Placement.objects.create(job=job, group=g, strategy="direct_packing")
            Placement.objects.filter(pk=pl.pk).update(created_at=start, ended_at=end)
            pl.rollout_nodes.set([nodes[roll]])
            pl.train_nodes.set([nodes[train]])
            t = start + timedelta(minutes=j * 11)
            for it in range(ITERATIONS):
                r = timedelta(seconds=rng.uniform(200, 600), microseconds=rng.randrange(10**6))
                tr = timedelta(seconds=rng.uniform(100, 300), microseconds=rng.randrange(10**6))
                for kind, node, a, b in (
                    ("rollout", roll, t, t + r),
                    ("train", train, t + r, t + r + tr),
                ):
                    rows.append(
                        PhaseRecord(
                            job=job, group=g, placement=pl, iteration=it, kind=kind,
                            node_names=[node], state="succeeded", queued_at=a, started_at=a,
                            finished_at=b,
                        )
                    )  # fmt: skip
                t += timedelta(seconds=3300)  # five jobs take turns within the hour
    PhaseRecord.objects.bulk_create(rows, batch_size=5000)
    return len(rows)


def reports(world: Any) -> tuple[float, float, Any]:
    from rollmux_web.reports.exports import cost_report_json
    from rollmux_web.reports.selectors import cost_report, slo_report, slo_report_json

    def cost() -> Any:
        return cost_report_json(
            cost_report(user=world.finance, start=date(2026, 1, 1), end=date(2026, 1, 31), now=NOW)
        )

    def slo() -> Any:
        return slo_report_json(
            slo_report(user=world.finance, start=date(2026, 1, 1), end=date(2026, 1, 31), now=NOW)
        )

    cost_ms, c = timed(cost)
    slo_ms, s = timed(slo)
    return cost_ms, slo_ms, (c, s)


def main() -> None:
    from django.conf import settings

    from rollmux_web.workflow.models import PhaseRecord, PhaseRollup
    from rollmux_web.workflow.services import retention, rollup_days
    from tests.factories import make_world

    old = setup_databases(verbosity=0, interactive=False)
    try:
        world = make_world(rollout_nodes=8, train_nodes=8)
        n = seed(world)
        raw_cost, raw_slo, before = reports(world)
        # every closed day rolled up (the rollup watermark), raw rows kept
        t = time.perf_counter()
        days = rollup_days.advance(NOW, max_days=10_000)
        roll_took = time.perf_counter() - t
        day_rollups = PhaseRollup.objects.count()
        mark_cost, mark_slo, marked = reports(world)
        with tempfile.TemporaryDirectory() as tmp:
            settings.ROLLMUX_ARCHIVE_URI = tmp
            t = time.perf_counter()
            batches = retention.eligible_batches(NOW, max_batches=10_000)
            for ids in batches:
                retention.archive_jobs(ids, now=NOW)
            took = time.perf_counter() - t
            size = sum(f.stat().st_size for f in Path(tmp).rglob("*.parquet"))
        rollups = PhaseRollup.objects.count()
        left = PhaseRecord.objects.count()
        roll_cost, roll_slo, after = reports(world)
        print(f"{n} phase records of {GROUPS * 5} jobs, {len(batches)} batches "
              f"(ROLLMUX_ARCHIVE_BATCH_PHASES={settings.ROLLMUX_ARCHIVE_BATCH_PHASES})")  # fmt: skip
        print(f"archived in {took:.2f} s: {n / took:,.0f} phase records/s; {left} left; "
              f"{rollups} rollup rows ({n / max(rollups, 1):.1f} phase records per row); "
              f"Parquet {size / n:.0f} bytes per phase record")  # fmt: skip
        print(f"rolled up {len(days)} closed days in {roll_took:.2f} s (watermark, raw rows "
              f"kept): {day_rollups} rollup rows; archiving then added "
              f"{rollups - day_rollups}")  # fmt: skip
        print("| report (January) | raw rows, ms | watermark, ms | archived, ms | ratios |")
        print("|---|---|---|---|---|")
        for name, a, b, c in (
            ("cost", raw_cost, mark_cost, roll_cost),
            ("SLO", raw_slo, mark_slo, roll_slo),
        ):
            print(f"| {name} | {a:.0f} | {b:.0f} | {c:.0f} | {b / a:.2f}, {c / a:.2f} |")
        print("cost report equal to the cent (watermark, archived):", before[0] == marked[0],
              before[0] == after[0])  # fmt: skip
        print("SLO report equal:", before[1] == marked[1], before[1] == after[1])
    finally:
        teardown_databases(old, verbosity=0)


if __name__ == "__main__":
    main()
