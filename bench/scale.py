"""Benchmark: the pages and list endpoints a user opens, on a fleet's worth of history.

Seeds a PostgreSQL database of its own (issue 25) with, at --scale 1:
- 5,000 + 5,000 nodes (H20 rollout pool, H800 training pool), 20 tenants with quotas;
- 100,000 finished jobs in 25,000 co-execution groups of 4 over 210 days, each job 50
  iterations of a rollout and a training phase: 10 million phase records;
- 2,000 live jobs in 500 open groups (25 iterations done, one rollout running per group),
  with their per-iteration training metrics; ~100,000 audit entries.
Jobs, groups, placements, node pins, allocations, nodes and audit entries go in by COPY
(psycopg 3 `cursor.copy`); the phase records are generated in the database from the copied
placements' schedule (`INSERT ... SELECT ... generate_series`): 10 million rows never cross
the wire. The seed is kept and re-used (a marker table records its scale); --reseed drops it.

Then it measures the server time of each page through Django's test client, in process
(settings' DATABASE_URL: the bench database), as an admin (every tenant) unless the row
says otherwise: p50 / p95 over --repeat runs after one warm-up, the SQL queries per request
and the rows PostgreSQL read for it (seq_tup_read + idx_tup_fetch of
pg_stat_xact_user_tables, the request run in one transaction), and for /metrics the body's
size and series count.

    createdb -h 127.0.0.1 -U postgres rollmux_scale_bench
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollmux_scale_bench \\
        nice -n 10 .venv/bin/python bench/scale.py [--scale 0.1] [--repeat 7] [--only cost]
    dropdb -h 127.0.0.1 -U postgres rollmux_scale_bench   # ~6 GB at --scale 1

Prints a table (no assertions); targets (issue 25): every page p95 < 500 ms, the month's
cost report < 1 s.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
import warnings
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rollmux_web.settings")

import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402

TENANTS = 20
PER_GROUP = 4
ITERATIONS = 50  # per finished job: 100 phase records
META_S = 1440  # a meta-iteration: 4 rollouts of <= 360 s back to back on the rollout node
ROLL_S, TRAIN_S = 360, 180
HISTORY_DAYS = 210
MARKER = "rollmux_bench_scale_seed"
SLOW_MS = 10_000  # a page whose warm-up took longer than this is timed once


# ----------------------------------------------------------------------------- seeding


def _copy(table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """COPY `rows` into `table` (psycopg 3), returning the count."""
    n = 0
    with connection.cursor() as cur:
        raw = cur.cursor  # the psycopg cursor under Django's wrapper
        cols = ", ".join(f'"{c}"' for c in columns)
        with raw.copy(f"COPY {table} ({cols}) FROM STDIN") as cp:
            for row in rows:
                cp.write_row(row)
                n += 1
    return n


def _next_id(table: str) -> int:
    with connection.cursor() as cur:
        cur.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {table}")
        return int(cur.fetchone()[0])


def _reset_sequence(table: str) -> None:
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
            f"(SELECT COALESCE(MAX(id), 1) FROM {table}))"
        )


def seeded_scale() -> float | None:
    with connection.cursor() as cur:
        cur.execute("SELECT to_regclass(%s)", [MARKER])
        if cur.fetchone()[0] is None:
            return None
        cur.execute(f"SELECT scale FROM {MARKER}")
        row = cur.fetchone()
        return float(row[0]) if row else None


def drop_all() -> None:
    with connection.cursor() as cur:
        cur.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")


def seed(scale: float, now: datetime) -> dict[str, Any]:
    """Seed the database at `scale`; return what the measurements need."""
    from rollmux_web.accounts.models import Role, Tenant
    from rollmux_web.inventory.models import GpuType
    from rollmux_web.quotas.models import Quota
    from tests.factories import make_user, make_world

    t_all = time.perf_counter()
    nodes_per_pool = max(8, int(5000 * scale))
    finished = max(PER_GROUP * 8, int(100_000 * scale)) // PER_GROUP * PER_GROUP
    live = max(PER_GROUP * 2, int(2000 * scale)) // PER_GROUP * PER_GROUP
    groups = finished // PER_GROUP
    live_groups = live // PER_GROUP
    assert live_groups <= nodes_per_pool

    with transaction.atomic():
        world = make_world(rollout_nodes=0, train_nodes=0)
        tenants = [world.vision, world.speech] + [
            Tenant.objects.create(name=f"team-{i:02d}") for i in range(TENANTS - 2)
        ]
        for i, t in enumerate(tenants[2:]):
            make_user(f"researcher-{i:02d}", Role.RESEARCHER, [t])
        for t in tenants:
            for g in GpuType.objects.all():
                Quota.objects.create(
                    tenant=t, gpu_type=g, max_gpus=4000, monthly_gpu_hours=2_000_000
                )
        submitters = {world.vision.pk: world.alice.pk, world.speech.pk: world.charlie.pk}
        researchers = dict(
            Tenant.objects.filter(members__user__username__startswith="researcher-").values_list(
                "pk", "members__user_id"
            )
        )
        submitters.update(researchers)
        tenant_ids = [t.pk for t in tenants]
        silver, gold = world.silver.pk, world.gold.pk

        t = time.perf_counter()
        node0 = _next_id("inventory_node")
        node_rows = []
        for i in range(nodes_per_pool):
            for k, (prefix, pool, gtype) in enumerate(
                (
                    ("h20", world.rollout_pool.pk, world.h20.pk),
                    ("h800", world.train_pool.pk, world.h800.pk),
                )
            ):
                node_rows.append(
                    (node0 + 2 * i + k, f"{prefix}-{i}", 8, 2048.0, "up", now, pool, gtype, "")
                )
        _copy(
            "inventory_node",
            (
                "id",
                "name",
                "gpus",
                "host_mem_gb",
                "state",
                "updated_at",
                "cluster_id",
                "gpu_type_id",
                "state_reason",
            ),
            node_rows,
        )
        _reset_sequence("inventory_node")

        def node_id(pool: int, i: int) -> int:  # pool 0 rollout, 1 train
            return node0 + 2 * i + pool

        print(f"  nodes: {2 * nodes_per_pool:,} ({time.perf_counter() - t:.1f} s)", flush=True)

        # the schedule: finished group k on node pair k % P, starting at h0 + k * span / G
        # (successive groups of a pair are HISTORY_DAYS / (G / P) apart: never overlapping)
        t = time.perf_counter()
        h0 = now - timedelta(days=HISTORY_DAYS)
        span = timedelta(days=HISTORY_DAYS - 2)
        group_len = timedelta(seconds=ITERATIONS * META_S)
        job0, group0, pl0, alloc0 = (
            _next_id(x)
            for x in (
                "jobs_job",
                "workflow_executiongroup",
                "workflow_placement",
                "workflow_nodeallocation",
            )
        )
        jobs, grows, allocs, pls, pins_r, pins_t, sched = [], [], [], [], [], [], []
        live_start = now - timedelta(hours=10)
        for k in range(groups + live_groups):
            is_live = k >= groups
            pair = (k - groups) if is_live else k % nodes_per_pool
            start = (
                live_start - timedelta(seconds=(k - groups) % 37 * 60)
                if is_live
                else h0 + span * k / groups
            )
            gid = group0 + k
            end = None if is_live else start + group_len + timedelta(seconds=META_S)
            grows.append((gid, start, end, False))
            for pool in (0, 1):
                allocs.append((alloc0 + 2 * k + pool, start, end, gid, node_id(pool, pair)))
            done = int((now - start).total_seconds() // META_S) if is_live else ITERATIONS
            for j in range(PER_GROUP):
                n = k * PER_GROUP + j
                jid, plid = job0 + n, pl0 + n
                tenant = tenant_ids[n % TENANTS]
                base = start + timedelta(seconds=j * ROLL_S)
                if is_live:
                    status, fin, it_done = "running", None, done
                else:
                    status = (
                        "cancelled" if n % 25 == 0 else "failed" if n % 17 == 0 else "completed"
                    )
                    fin, it_done = start + group_len, ITERATIONS
                jobs.append(
                    (
                        jid,
                        f"grpo-{n}",
                        "emulated",
                        "qwen2.5-7b",
                        0,
                        ITERATIONS,
                        8,
                        8,
                        360.0,
                        300.0,
                        180.0,
                        150.0,
                        300.0,
                        status,
                        "",
                        "",
                        False,
                        1,
                        it_done,
                        start - timedelta(minutes=n % 90),
                        start,
                        base,
                        fin,
                        fin or now,
                        gold if n % 3 == 0 else silver,
                        submitters[tenant],
                        tenant,
                        "declared",
                        0.0,
                    )
                )
                pls.append(
                    (
                        plid,
                        1,
                        "direct_packing" if j else "new_group",
                        0,
                        1.2,
                        start,
                        fin,
                        gid,
                        jid,
                        "" if is_live else status,
                        "",
                        "",
                    )
                )
                pins_r.append((plid, node_id(0, pair)))
                pins_t.append((plid, node_id(1, pair)))
                sched.append((jid, gid, plid, base, done, f"h20-{pair}", f"h800-{pair}", is_live))
        _copy(
            "jobs_job",
            (
                "id",
                "name",
                "runner",
                "model",
                "priority",
                "iterations",
                "rollout_gpus",
                "train_gpus",
                "t_roll_max_s",
                "t_roll_min_s",
                "t_train_max_s",
                "t_train_min_s",
                "host_mem_gb",
                "status",
                "reason",
                "error",
                "cancel_requested",
                "attempts",
                "iterations_done",
                "submitted_at",
                "placed_at",
                "started_at",
                "finished_at",
                "updated_at",
                "slo_class_id",
                "submitter_id",
                "tenant_id",
                "duration_source",
                "emulated_drift",
            ),
            jobs,
        )
        _copy(
            "workflow_executiongroup",
            ("id", "created_at", "released_at", "consolidation_due"),
            grows,
        )
        _copy("workflow_nodeallocation", ("id", "start", "end", "group_id", "node_id"), allocs)
        _copy(
            "workflow_placement",
            (
                "id",
                "attempt",
                "strategy",
                "marginal_cost_per_hour",
                "predicted_slowdown",
                "created_at",
                "ended_at",
                "group_id",
                "job_id",
                "end_reason",
                "move_reason",
                "move_requested",
            ),
            pls,
        )
        _copy("workflow_placement_rollout_nodes", ("placement_id", "node_id"), pins_r)
        _copy("workflow_placement_train_nodes", ("placement_id", "node_id"), pins_t)
        for table in (
            "jobs_job",
            "workflow_executiongroup",
            "workflow_nodeallocation",
            "workflow_placement",
        ):
            _reset_sequence(table)
        print(
            f"  jobs {len(jobs):,}, groups {len(grows):,}, placements {len(pls):,}, "
            f"allocations {len(allocs):,} ({time.perf_counter() - t:.1f} s)",
            flush=True,
        )

        # audit: a submission per job, a cancellation per cancelled job
        t = time.perf_counter()
        audit = []
        for row in jobs:
            jid, name, submitted, tenant, status = row[0], row[1], row[19], row[26], row[13]
            audit.append((submitted, "admin", "job.submit", "job", str(jid), name, str(tenant)))
            if status == "cancelled":
                audit.append((row[22], "admin", "job.cancel", "job", str(jid), name, str(tenant)))
        _copy(
            "audit_auditentry",
            ("at", "actor_name", "action", "object_type", "object_id", "object_name", "tenant"),
            audit,
        )
        print(f"  audit entries {len(audit):,} ({time.perf_counter() - t:.1f} s)", flush=True)

        # phase records, generated in the database from the schedule (COPY'd to a temp table)
        t = time.perf_counter()
        with connection.cursor() as cur:
            cur.execute(
                "CREATE TEMP TABLE bench_sched (job_id bigint, group_id bigint, placement_id "
                "bigint, base timestamptz, done int, rnode text, tnode text, live bool) "
                "ON COMMIT DROP"
            )
        _copy(
            "bench_sched",
            ("job_id", "group_id", "placement_id", "base", "done", "rnode", "tnode", "live"),
            sched,
        )
        with connection.cursor() as cur:
            # the load goes faster without the secondary indexes: drop them, build them after
            cur.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = "
                "'workflow_phaserecord' AND indexname NOT IN ('workflow_phaserecord_pkey', "
                "'uniq_phase')"
            )
            index_defs = cur.fetchall()
            for name, _ in index_defs:
                cur.execute(f'DROP INDEX "{name}"')
            cur.execute("SET LOCAL maintenance_work_mem = '512MB'")
            cur.execute("SET LOCAL work_mem = '256MB'")
            # consistent by construction: skip the foreign-key triggers (30 M look-ups)
            cur.execute("SET LOCAL session_replication_role = replica")
            cur.execute(
                """
                INSERT INTO workflow_phaserecord
                    (iteration, kind, node_names, state, warm_start, queued_at, started_at,
                     finished_at, outcome, metrics, group_id, job_id, placement_id, recovered,
                     reported_at, gpu_ids, ray_node_ids, work_s)
                SELECT i, k.kind,
                       jsonb_build_array(CASE k.kind WHEN 'rollout' THEN s.rnode ELSE s.tnode END),
                       'succeeded', i > 0, t0, t0, t0 + d, '', '{}', s.group_id,
                       s.job_id, s.placement_id, false, t0 + d, '{}', '{}', extract(epoch from d)
                FROM bench_sched s
                CROSS JOIN generate_series(0, s.done - 1) i
                CROSS JOIN (VALUES ('rollout', 0, 300, 60), ('train', 360, 150, 30))
                    AS k(kind, off, dur, jitter)
                CROSS JOIN LATERAL (SELECT
                    s.base + make_interval(secs => i * %s + k.off) AS t0,
                    make_interval(secs => k.dur + (s.job_id * 7 + i * 13) %% k.jitter) AS d) x
                ORDER BY t0
                """,
                [META_S],
            )
            phases = cur.rowcount
            # one rollout running in each live group: the member whose slot is now
            cur.execute(
                """
                INSERT INTO workflow_phaserecord
                    (iteration, kind, node_names, state, warm_start, queued_at, started_at,
                     outcome, metrics, group_id, job_id, placement_id, recovered, gpu_ids,
                     ray_node_ids, due_at)
                SELECT s.done, 'rollout', jsonb_build_array(s.rnode), 'running', true, t0, t0,
                       '', '{}', s.group_id, s.job_id, s.placement_id, false, '{}', '{}',
                       t0 + interval '6 minutes'
                FROM bench_sched s
                CROSS JOIN LATERAL (SELECT s.base + make_interval(secs => s.done * %s) AS t0) x
                WHERE s.live AND x.t0 <= %s AND x.t0 > %s - interval '6 minutes'
                """,
                [META_S, now, now],
            )
            phases += cur.rowcount
            print(f"  phase records {phases:,} ({time.perf_counter() - t:.1f} s)", flush=True)
            t = time.perf_counter()
            for _, ddl in index_defs:
                cur.execute(ddl)
            cur.execute("SET LOCAL session_replication_role = DEFAULT")
            print(f"  their indexes rebuilt ({time.perf_counter() - t:.1f} s)", flush=True)
            # the live jobs' training metrics (the reward curve, /metrics' reward series)
            cur.execute(
                """
                INSERT INTO workflow_iterationmetrics
                    (iteration, reward_mean, loss, recorded_at, job_id, placement_id)
                SELECT i, 0.1 + i * 0.01, 1.0 / (i + 1), s.base + make_interval(secs => i * %s),
                       s.job_id, s.placement_id
                FROM bench_sched s CROSS JOIN generate_series(0, s.done - 1) i WHERE s.live
                """,
                [META_S],
            )
            cur.execute(f"CREATE TABLE {MARKER} (scale float, seeded_at timestamptz)")
            cur.execute(f"INSERT INTO {MARKER} VALUES (%s, %s)", [scale, now])
    with connection.cursor() as cur:
        t = time.perf_counter()
        cur.execute("VACUUM ANALYZE")
        print(f"  vacuum analyze ({time.perf_counter() - t:.1f} s)", flush=True)
    print(f"seeded in {time.perf_counter() - t_all:.0f} s", flush=True)


# ----------------------------------------------------------------------------- measuring


def rows_read() -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT COALESCE(SUM(seq_tup_read), 0) + COALESCE(SUM(idx_tup_fetch), 0) "
            "FROM pg_stat_xact_user_tables"
        )
        return int(cur.fetchone()[0])


class Sample:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.queries = 0
        self.rows = 0
        self.size = 0
        self.status = 0


def measure(client: Any, url: str, repeat: int, **extra: Any) -> Sample:
    """GET `url` once to warm up, then `repeat` times; each request runs in a transaction
    so pg_stat_xact_user_tables counts its rows."""
    from django.test.utils import CaptureQueriesContext

    s = Sample()
    n = 0
    while n <= repeat:
        with transaction.atomic():
            before = rows_read()
            with CaptureQueriesContext(connection) as ctx:
                t = time.perf_counter()
                resp = client.get(url, **extra)
                ms = (time.perf_counter() - t) * 1000
            after = rows_read()
        if n == 0:
            if ms > SLOW_MS:  # minutes at size before a fix: one timed run after it
                repeat = 1
            s.status = resp.status_code
            s.queries = len(ctx.captured_queries)
            s.rows = after - before
            s.size = len(resp.content)
        else:
            s.times.append(ms)
        n += 1
    return s


def pct(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def pages(now: datetime) -> list[tuple[str, str, str]]:
    """(label, who, url) of every page and list endpoint measured."""
    from rollmux_web.jobs.models import Job
    from rollmux_web.workflow.models import ExecutionGroup, PhaseRecord

    month_end = date(now.year, now.month, 1) - timedelta(days=1)
    month_start = month_end.replace(day=1)
    q_start = (month_start - timedelta(days=62)).replace(day=1)
    finished = Job.objects.filter(status="completed").order_by("id").values_list("id", flat=True)
    mid_job = finished[finished.count() // 2]
    live_job = Job.objects.filter(status="running").order_by("id").values_list("id", flat=True)[0]
    mid_group = PhaseRecord.objects.filter(job_id=mid_job).values_list("group_id", flat=True)[0]
    first = PhaseRecord.objects.filter(group_id=mid_group).order_by("started_at")[0].started_at
    day0 = first.replace(hour=0, minute=0, second=0, microsecond=0)
    live_group = ExecutionGroup.objects.filter(released_at__isnull=True).order_by("id")[0].pk
    vision_job = Job.objects.filter(tenant__name="vision", status="completed").order_by("-id")[0].pk
    jobs_total = Job.objects.count()
    deep = max(1, jobs_total // 25 // 2)
    day = f"start={day0:%Y-%m-%dT%H:%M}&end={day0 + timedelta(days=1):%Y-%m-%dT%H:%M}"
    month = f"start={month_start}&end={month_end}"
    quarter = f"start={q_start}&end={month_end}"
    return [
        ("overview", "admin", "/"),
        ("overview (researcher)", "alice", "/"),
        ("jobs list", "admin", "/jobs/"),
        ("jobs list, status=running", "admin", "/jobs/?status=running"),
        ("jobs list, tenant=vision", "admin", "/jobs/?tenant=vision"),
        ("jobs list (researcher)", "alice", "/jobs/"),
        (f"jobs list, page {deep}", "admin", f"/jobs/?page={deep}"),
        ("job page (finished)", "admin", f"/jobs/{mid_job}/"),
        ("job page (running)", "admin", f"/jobs/{live_job}/"),
        ("job page (researcher)", "alice", f"/jobs/{vision_job}/"),
        ("groups list", "admin", "/groups/"),
        ("group Gantt, a day", "admin", f"/groups/{mid_group}/?{day}"),
        ("group Gantt (live)", "admin", f"/groups/{live_group}/"),
        ("inventory", "admin", "/inventory/"),
        ("cost report, a month", "finance", f"/reports/cost/?{month}"),
        ("cost report, a quarter", "finance", f"/reports/cost/?{quarter}"),
        ("cost report, month (researcher)", "alice", f"/reports/cost/?{month}"),
        ("SLO report, a month", "finance", f"/reports/slo/?{month}"),
        ("SLO report, month (researcher)", "alice", f"/reports/slo/?{month}"),
        ("job timeline (finished)", "admin", f"/timeline/jobs/{mid_job}/"),
        ("queue", "admin", "/queue/"),
        ("queue (researcher)", "alice", "/queue/"),
        ("fair share", "admin", "/fair-share/"),
        ("new job form", "alice", "/jobs/new/"),
        ("what-if", "admin", "/whatif/"),
        ("notifications", "alice", "/notifications/"),
        ("quotas", "admin", "/quotas/"),
        ("audit", "admin", "/audit/"),
        ("/metrics", "admin", "/metrics"),
        ("API jobs list", "admin", "/api/v1/jobs/"),
        (f"API jobs list, page {deep // 2}", "admin", f"/api/v1/jobs/?page={deep // 2}"),
        ("API job phases", "admin", f"/api/v1/jobs/{mid_job}/phases/"),
        ("API groups list", "admin", "/api/v1/groups/"),
        ("API nodes list", "admin", "/api/v1/nodes/"),
        ("API group", "admin", f"/api/v1/groups/{mid_group}/"),
        ("API job metrics (running)", "admin", f"/api/v1/jobs/{live_job}/metrics/"),
        ("API queue", "admin", "/api/v1/queue/"),
        ("API fair share", "admin", "/api/v1/fair-share/"),
        ("API tenants", "admin", "/api/v1/tenants/"),
        ("API audit list", "admin", "/api/v1/audit/"),
        ("API cost report, a month", "finance", f"/api/v1/reports/cost/?{month}"),
        ("API SLO report, a month", "finance", f"/api/v1/reports/slo/?{month}"),
    ]


def main() -> None:
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="1 = the issue's size")
    parser.add_argument("--reseed", action="store_true", help="drop the seed and seed again")
    parser.add_argument("--seed-only", action="store_true")
    parser.add_argument("--repeat", type=int, default=7, help="timed requests per page")
    parser.add_argument("--only", default="", help="measure only pages whose label has this")
    parser.add_argument(
        "--skip", default="", help="skip the pages whose label has one of these ('|' between)"
    )
    parser.add_argument(
        "--timeout", type=float, default=120, help="a statement taking longer is cut (s)"
    )
    parser.add_argument(
        "--rollup",
        action="store_true",
        help="first roll up every closed day (the rollup watermark: services.rollup_days)",
    )
    args = parser.parse_args()
    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("postgresql"):
        sys.exit("bench/scale.py needs PostgreSQL: set DATABASE_URL to a database of its own")
    settings.ALLOWED_HOSTS = ["*"]
    settings.DEBUG = False
    logging.getLogger("axes").setLevel(logging.WARNING)  # one line per force_login
    warnings.simplefilter("ignore")  # (no collected static files: not what is measured)
    print(f"database {db['NAME']}; load average {os.getloadavg()[0]:.1f} at the start")

    have = seeded_scale()
    if args.reseed or (have is not None and have != args.scale):
        if have is not None and not args.reseed:
            sys.exit(f"seeded at scale {have}, not {args.scale}: pass --reseed to re-seed")
        drop_all()
        have = None
    call_command("migrate", verbosity=0)
    now = datetime.now(UTC).replace(microsecond=0)
    if have is None:
        print(f"seeding at scale {args.scale}", flush=True)
        seed(args.scale, now)
    else:
        print(f"re-using the seed at scale {have}")
    if args.seed_only:
        return
    if args.rollup:
        from rollmux_web.workflow.models import PhaseRollup
        from rollmux_web.workflow.services import rollup_days

        t = time.perf_counter()
        days = rollup_days.advance(now, max_days=100_000)
        summaries = 0
        while n := rollup_days.summarise_jobs():
            summaries += n  # (the beat task does 500 a run)
        took = time.perf_counter() - t
        from rollmux_web.reports import cost_days

        t = time.perf_counter()
        kept = cost_days.keep_days(now, max_days=100_000)
        lives = len(cost_days.keep_lives(now, max_groups=100_000))  # (the beat: 500 a run)
        print(
            f"kept {len(kept)} days' cost amounts and {lives} more groups' lives in "
            f"{time.perf_counter() - t:.1f} s",
            flush=True,
        )
        print(
            f"rolled up {len(days)} days in {took:.1f} s "
            f"({took / max(len(days), 1):.2f} s a day); {PhaseRollup.objects.count():,} "
            f"rollup rows; {summaries:,} more jobs' SLO inputs kept; watermark "
            f"{rollup_days.last_closed_day(now)}",
            flush=True,
        )
        from rollmux_web.workflow.services import fair_share_hours

        t = time.perf_counter()
        kept = fair_share_hours.keep(now)  # (the retention beat's: fair share's closed hours)
        print(f"kept {kept:,} fair-share hours in {time.perf_counter() - t:.1f} s", flush=True)
        with connection.cursor() as cur:
            # the tables the rollup filled get their planner statistics, as autovacuum
            # would give them on a server that runs it (this one's may be off)
            t = time.perf_counter()
            cur.execute("ANALYZE")
            print(f"analyzed in {time.perf_counter() - t:.1f} s", flush=True)
    from rollmux_web.reports import cost_hours

    # the last day's closed hours, as the 10-minute beat keeps them (the researcher's
    # overview sums them: its last 24 hours start mid-day)
    t = time.perf_counter()
    hours = cost_hours.keep_hours(now)
    print(f"kept {len(hours)} closed hours' cost in {time.perf_counter() - t:.1f} s", flush=True)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT (SELECT COUNT(*) FROM jobs_job), (SELECT COUNT(*) FROM inventory_node), "
            "(SELECT reltuples::bigint FROM pg_class WHERE relname = 'workflow_phaserecord'), "
            "pg_size_pretty(pg_database_size(current_database()))"
        )
        jobs_n, nodes_n, phases_n, size = cur.fetchone()
    print(f"{jobs_n:,} jobs, {nodes_n:,} nodes, ~{phases_n:,} phase records, {size}")

    if not args.only or "fair share" in args.only:
        # a fresh process's (web worker's, controller's) first fair-share read: the stored
        # closed hours (FairShareHour) when the beat kept them, else the whole window
        from rollmux_web.workflow import fairshare
        from rollmux_web.workflow.models import FairShareHour

        fairshare.clear_usage_cache()
        with transaction.atomic():
            before = rows_read()
            t = time.perf_counter()
            fairshare.usage_gpu_s(datetime.now(UTC))
            took = time.perf_counter() - t
            read = rows_read() - before
        print(
            f"fair share, first read in a fresh process: {took * 1000:.0f} ms, {read:,} rows "
            f"read ({FairShareHour.objects.count():,} hours stored); load "
            f"{os.getloadavg()[0]:.1f}",
            flush=True,
        )
    clients: dict[str, Client] = {}
    for who in ("admin", "alice", "finance"):
        clients[who] = Client()
        clients[who].force_login(User.objects.get(username=who))
    print(
        f"\n{'page':<34} {'who':<8} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} "
        f"{'rows read':>11} {'KB':>7}"
    )
    with connection.cursor() as cur:
        cur.execute(f"SET statement_timeout = {int(args.timeout * 1000)}")
    for label, who, url in pages(now):
        skip = [x for x in args.skip.split("|") if x]
        if (args.only and args.only not in label) or any(x in label for x in skip):
            continue
        load = os.getloadavg()[0]
        slow = "cost" in label or "SLO" in label
        try:
            s = measure(clients[who], url, max(3, args.repeat // 2) if slow else args.repeat)
        except Exception as exc:  # a statement past --timeout: say so, go on
            print(f"{label:<34} {who:<8} failed: {type(exc).__name__} {str(exc)[:80]}")
            continue
        flag = "" if s.status == 200 else f"  HTTP {s.status}"
        print(
            f"{label:<34} {who:<8} {statistics.median(s.times):>8.0f} {pct(s.times, 95):>8.0f} "
            f"{s.queries:>8} {s.rows:>11,} {s.size / 1024:>7.0f}  load {load:.1f}{flag}",
            flush=True,
        )
        if label == "/metrics":
            body = clients[who].get(url).content.decode()
            series = [ln for ln in body.splitlines() if ln and not ln.startswith("#")]
            reward = sum(1 for ln in series if ln.startswith("rollmux_job_reward_mean"))
            print(
                f"{'':<34} {len(body) / 1024:.0f} KB, {len(series):,} series "
                f"({reward:,} rollmux_job_reward_mean)"
            )


if __name__ == "__main__":
    main()
