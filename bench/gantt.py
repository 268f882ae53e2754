"""Benchmark: server time to render group timelines and the cost report.

Prints (no assertions):
- group timeline with 1,000 and 10,000 phases in the window: the selector (query +
  geometry), the SVG, and the whole page through Django's test client; the bare
  phase query is printed beside them as the baseline the rendering adds to;
- the cost report over 10,000 jobs (40,000 phase records, 5,000 node allocations),
  with and without the month's daily burn-down, and its FOCUS rows as CSV rows and
  as a Parquet file.

Runs on DATABASE_URL (PostgreSQL) or SQLite by default, in a throwaway test database:
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollmux .venv/bin/python bench/gantt.py
"""

from __future__ import annotations

import os
import statistics
import sys
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

T0 = datetime(2026, 3, 1, tzinfo=UTC)
REPEAT = 5


def timed(fn: Callable[[], Any], repeat: int = REPEAT) -> tuple[float, Any]:
    """Return the median wall time in ms over `repeat` runs (after one warm-up) and a result."""
    result = fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), result


def build_group(world: Any, phases: int) -> Any:
    """Return a group of 5 jobs on 3 rollout nodes and 1 training node with `phases` phases."""
    from rollmux_web.inventory.models import Node
    from rollmux_web.jobs.models import Job
    from rollmux_web.workflow.models import ExecutionGroup, NodeAllocation, PhaseRecord, Placement

    g = ExecutionGroup.objects.create()
    span = timedelta(seconds=phases * 30)
    nodes = {n.name: n for n in Node.objects.all()}
    for name in ("h20-0", "h20-1", "h20-2", "h800-0"):
        NodeAllocation.objects.create(group=g, node=nodes[name], start=T0, end=T0 + span)
    placements = []
    for j in range(5):
        job = Job.objects.create(
            name=f"bench-{phases}-{j}",
            tenant=world.vision,
            submitter=world.alice,
            slo_class=world.silver,
            iterations=phases,
            rollout_gpus=8,
            train_gpus=8,
            t_roll_max_s=60,
            t_roll_min_s=40,
            t_train_max_s=30,
            t_train_min_s=20,
            host_mem_gb=300,
        )
        placements.append(Placement.objects.create(job=job, group=g, strategy="direct_packing"))
    rows = []
    for i in range(phases):
        pl = placements[i % 5]
        kind = "rollout" if (i // 5) % 2 == 0 else "train"
        node = f"h20-{i % 3}" if kind == "rollout" else "h800-0"
        start = T0 + timedelta(seconds=i * 30)
        rows.append(
            PhaseRecord(
                job_id=pl.job_id,
                group=g,
                placement=pl,
                iteration=i // 10,
                kind=kind,
                node_names=[node],
                state="succeeded",
                warm_start=i >= 10,
                queued_at=start,
                started_at=start,
                finished_at=start + timedelta(seconds=25 + i % 4),
            )
        )
    PhaseRecord.objects.bulk_create(rows, batch_size=5000)
    # bulk_create bypasses the unique (placement, iteration, kind) check only in name:
    # iterations are distinct per placement by construction (i // 10 with i % 5)
    return g, T0, T0 + span


def bench_timeline(world: Any, client: Any) -> None:
    from rollmux_web.workflow.models import NodeAllocation

    print("group timeline (median of 5, ms)")
    print(
        f"{'phases':>8} {'mode':>12} {'query only':>11} {'selector':>9} {'+svg':>8} "
        f"{'page':>8} {'svg KB':>7} {'elements':>9}"
    )
    for n in (1000, 10000):
        g, t0, t1 = build_group(world, n)
        for mode, width in (("1200 px", 1200), ("4000 px", 4000)):
            bench_window(world, client, g.pk, n, t0, t1, mode, width)
        # a zoomed window of one tenth: every phase is its own bar again
        bench_window(world, client, g.pk, n, t0, t0 + (t1 - t0) / 10, "zoom 1/10", 1200)
        # the next group takes the same nodes over the same time: a node is never allocated
        # to two groups at once (the database's exclusion constraint), so free them first
        NodeAllocation.objects.filter(group_id=g.pk).delete()


def bench_window(
    world: Any, client: Any, gid: int, n: int, t0: Any, t1: Any, mode: str, width: int
) -> None:
    from django.db.models import Q

    from rollmux_web.reports import selectors, svg
    from rollmux_web.workflow.models import PhaseRecord

    start, end = t0.isoformat(), t1.isoformat()

    def query() -> list[Any]:
        return list(
            PhaseRecord.objects.filter(group_id=gid, started_at__lt=t1)
            .filter(Q(finished_at__gt=t0) | Q(finished_at__isnull=True))
            .values_list(
                "id",
                "job_id",
                "iteration",
                "kind",
                "node_names",
                "warm_start",
                "started_at",
                "finished_at",
                "state",
            )
        )

    def select() -> Any:
        return selectors.group_timeline(
            user=world.alice, group_id=gid, start=start, end=end, width=width
        )

    def page() -> Any:
        return client.get(f"/groups/{gid}/", {"start": start[:19], "end": end[:19], "width": width})

    q_ms, _ = timed(query)
    sel_ms, tl = timed(select)
    svg_ms, out = timed(lambda: svg.timeline_svg(tl))
    page_ms, resp = timed(page)
    assert resp.status_code == 200
    elements = len(tl.bars) + len(tl.aggregates) + len(tl.bubbles)
    merged = f"  (aggregated {tl.aggregated_count})" if tl.aggregated_count else ""
    print(
        f"{n:>8} {mode:>12} {q_ms:>11.1f} {sel_ms:>9.1f} {sel_ms + svg_ms:>8.1f} "
        f"{page_ms:>8.1f} {len(out) / 1024:>7.0f} {elements:>9}{merged}"
    )


def build_jobs(world: Any, jobs: int) -> None:
    """Create `jobs` jobs in groups of 4 over March: 2 iterations each, shared training node."""
    from rollmux_web.inventory.models import Node
    from rollmux_web.jobs.models import Job
    from rollmux_web.workflow.models import ExecutionGroup, NodeAllocation, PhaseRecord, Placement

    nodes = {n.name: n for n in Node.objects.all()}
    per_group = 4
    groups = jobs // per_group
    slot = timedelta(days=28) / (groups // 8 + 1)
    job_rows = [
        Job(
            name=f"cost-{i}",
            tenant=world.vision if i % 3 else world.speech,
            submitter=world.alice if i % 3 else world.charlie,
            slo_class=world.silver,
            iterations=2,
            rollout_gpus=8,
            train_gpus=8,
            t_roll_max_s=600,
            t_roll_min_s=400,
            t_train_max_s=300,
            t_train_min_s=200,
            host_mem_gb=300,
            status="completed",
        )
        for i in range(jobs)
    ]
    Job.objects.bulk_create(job_rows, batch_size=5000)
    group_rows = ExecutionGroup.objects.bulk_create([ExecutionGroup() for _ in range(groups)])
    allocs, placements = [], []
    for k, g in enumerate(group_rows):
        start = T0 + (k // 8) * slot
        for name in (f"h20-{k % 8}", f"h800-{k % 8}"):
            allocs.append(NodeAllocation(group=g, node=nodes[name], start=start, end=start + slot))
        for j in range(per_group):
            placements.append(
                Placement(
                    job=job_rows[k * per_group + j], group=g, strategy="direct_packing", attempt=1
                )
            )
    NodeAllocation.objects.bulk_create(allocs, batch_size=5000)
    Placement.objects.bulk_create(placements, batch_size=5000)
    through_r = Placement.rollout_nodes.through
    through_t = Placement.train_nodes.through
    pins_r, pins_t, phases = [], [], []
    for idx, pl in enumerate(placements):
        k = idx // per_group
        j = idx % per_group
        pins_r.append(through_r(placement_id=pl.pk, node_id=nodes[f"h20-{k % 8}"].pk))
        pins_t.append(through_t(placement_id=pl.pk, node_id=nodes[f"h800-{k % 8}"].pk))
        base = T0 + (k // 8) * slot + timedelta(minutes=j * 5)
        for it in range(2):
            r0 = base + timedelta(minutes=it * 20)
            phases.append(
                PhaseRecord(
                    job_id=pl.job_id,
                    group_id=pl.group_id,
                    placement=pl,
                    iteration=it,
                    kind="rollout",
                    node_names=[f"h20-{k % 8}"],
                    state="succeeded",
                    warm_start=True,
                    queued_at=r0,
                    started_at=r0,
                    finished_at=r0 + timedelta(minutes=4),
                )
            )
            phases.append(
                PhaseRecord(
                    job_id=pl.job_id,
                    group_id=pl.group_id,
                    placement=pl,
                    iteration=it,
                    kind="train",
                    node_names=[f"h800-{k % 8}"],
                    state="succeeded",
                    warm_start=True,
                    queued_at=r0,
                    started_at=r0 + timedelta(minutes=4),
                    finished_at=r0 + timedelta(minutes=7),
                )
            )
    through_r.objects.bulk_create(pins_r, batch_size=5000)
    through_t.objects.bulk_create(pins_t, batch_size=5000)
    PhaseRecord.objects.bulk_create(phases, batch_size=5000)
    print(
        f"cost data: {jobs} jobs, {groups} groups, {len(allocs)} node allocations, "
        f"{len(phases)} phase records"
    )


def bench_cost(world: Any) -> None:
    from rollmux_web.reports.exports import focus_parquet, focus_rows
    from rollmux_web.reports.selectors import cost_report

    build_jobs(world, 10000)
    start, end = date(2026, 3, 1), date(2026, 3, 31)
    now = datetime(2026, 4, 2, tzinfo=UTC)
    ms, rep = timed(
        lambda: cost_report(
            user=world.finance, start=start, end=end, now=now, with_burn_down=False
        ),
        repeat=3,
    )
    print(
        f"cost report, 10,000 jobs, one month:            {ms:8.0f} ms "
        f"({len(rep.lines)} lines, total ${rep.total.cost:,.2f})"
    )
    ms_bd, _ = timed(
        lambda: cost_report(user=world.finance, start=start, end=end, now=now), repeat=3
    )
    print(f"  with the daily burn-down (31 buckets):        {ms_bd:8.0f} ms")
    mtd = datetime(2026, 3, 31, 12, tzinfo=UTC)  # month to date: report and burn-down in one pass
    ms_mtd, _ = timed(
        lambda: cost_report(user=world.finance, start=start, end=end, now=mtd), repeat=3
    )
    print(f"  month to date, report + burn-down in one pass: {ms_mtd:8.0f} ms")
    ms_r, rep_r = timed(
        lambda: cost_report(user=world.alice, start=start, end=end, now=now, with_burn_down=False),
        repeat=3,
    )
    print(f"  as a researcher (one tenant, {len(rep_r.lines)} lines):    {ms_r:8.0f} ms")
    ms_csv, rows = timed(lambda: focus_rows(rep), repeat=3)
    print(f"  FOCUS rows for the CSV ({len(rows)} rows):         {ms_csv:8.0f} ms")
    ms_pq, parquet = timed(lambda: focus_parquet(rep), repeat=3)
    print(
        f"  the same rows as a Parquet file:               {ms_pq:8.0f} ms "
        f"({len(parquet) / 1024:.0f} KB, building the rows included)"
    )


def main() -> None:
    import argparse

    from django.conf import settings
    from django.test import Client

    from tests.factories import make_world

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("all", "timeline", "cost"), default="all")
    part = parser.parse_args().part
    settings.ALLOWED_HOSTS = ["*"]
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("postgresql"):
        # its own scratch database: never the one a concurrent test run is using
        db.setdefault("TEST", {})["NAME"] = f"{db['NAME']}_gantt_bench"
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    print(f"database: {engine}")
    old = setup_databases(verbosity=0, interactive=False)
    try:
        world = make_world(rollout_nodes=8, train_nodes=8)
        client = Client()
        client.force_login(world.alice)
        if part in ("all", "timeline"):
            bench_timeline(world, client)
        if part in ("all", "cost"):
            bench_cost(world)
    finally:
        teardown_databases(old, verbosity=0)


if __name__ == "__main__":
    main()
