"""Benchmark concurrent job submissions through the REST API on PostgreSQL.

By default it builds a scratch database (drop + create + migrate + seed_demo), starts
production mode against it (gunicorn with ROLLMUX_EMBEDDED=false and DEBUG=false, plus
the Celery controller worker and beat on REDIS_URL, dispatching phases with the inline
dispatcher so the demo jobs and the submitted ones really run while it measures), and then:

1. baseline: one client submits --baseline-jobs jobs one after another;
2. load: --clients concurrent clients (threads, one HTTP session and one persona token
   each, spread over the demo researchers of both tenants) submit --jobs-per-client jobs;
3. check: every accepted job (HTTP 201) exists exactly once in the database, and no
   refused request left a row behind.

It prints throughput (jobs/s), latency p50/p90/p99/max, and the ratio of the concurrent
throughput to the single-client baseline, how many phases the controller finished during
the run and, for the phases of running jobs that ended during the load, the phase-end
latency: from the host's end stamp (finished_at) to the controller applying it
(reported_at), p50/p99/max (target p99 under 1 s: a phase event must not wait behind
submissions' planning passes), and the longest the controller's queues grew. The GPU caps of the demo tenants are raised to a value no run reaches and
their budgets lifted (the rows and caps stay, so the quota check still does its work for
every submission) so that every job is accepted.

    .venv/bin/python bench/api_submit.py                      # 32 clients x 50 jobs, gunicorn as production
    .venv/bin/python bench/api_submit.py --clients 8 --jobs-per-client 20 --workers 2
    .venv/bin/python bench/api_submit.py --url http://127.0.0.1:8000 --token KEY   # existing server

Set DATABASE_URL's server with --admin-url. REDIS_URL (a Redis db of your own) is required:
each submission enqueues a planning task there, which the controller consumes.
--no-controller measures the web tier alone (the planning tasks then pile up unconsumed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import psycopg
import requests

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
RESEARCHERS = ("alice", "bob", "charlie")
# the queues the controller consumes (settings: CELERY_TASK_DEFAULT_QUEUE, ROLLMUX_PHASE_QUEUE)
CONTROLLER_QUEUES = ("rollmux-phase", "rollmux")


def job_body(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "slo_class": "silver",
        "runner": "emulated",
        "iterations": 3,
        "rollout_gpus": 8,
        "train_gpus": 8,
        "t_roll_max_s": 120.0,
        "t_roll_min_s": 90.0,
        "t_train_max_s": 100.0,
        "host_mem_gb": 400.0,
        "model": "bench",
    }


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    refused: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_db(url: str, name: str) -> str:
    p = urlparse(url)
    return urlunparse(p._replace(path=f"/{name}"))


def create_scratch_db(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_scratch_db(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [PY, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


TOKEN_SCRIPT = """
from django.contrib.auth.models import User
from rollmux_web.accounts.models import ApiToken
from rollmux_web.quotas.models import Quota
Quota.objects.update(max_gpus=999_992, monthly_gpu_hours=None, monthly_budget_usd=None)
for name in {names!r}:
    key = ApiToken.new_key()
    ApiToken.objects.create(user=User.objects.get(username=name), name="bench",
                            prefix=key[:12], digest=ApiToken.hash_key(key))
    print(name, key)
"""


def prepare(env: dict[str, str], clients: int) -> list[str]:
    """Migrate, seed, lift quotas and mint one token per client (the demo researchers in
    turn, so each client has its own per-token rate limit); return the tokens."""
    manage(env, "migrate", "--noinput")
    manage(env, "seed_demo")
    names = [RESEARCHERS[i % len(RESEARCHERS)] for i in range(max(clients, 1))]
    out = manage(env, "shell", "-c", TOKEN_SCRIPT.format(names=names))
    return [line.split()[1] for line in out.strip().splitlines()[-len(names) :]]


def start_gunicorn(
    env: dict[str, str], port: int, workers: int, threads: int
) -> subprocess.Popen[bytes]:
    cmd = [
        str(Path(PY).with_name("gunicorn")),
        "rollmux_web.wsgi",
        "-b",
        f"127.0.0.1:{port}",
        "-w",
        str(workers),
        "--threads",
        str(threads),
        "--log-level",
        "warning",
    ]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)


def start_controller(env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    """Start the controller worker and beat as bin/run.sh does (inline dispatcher)."""
    celery = str(Path(PY).with_name("celery"))
    common = {"cwd": ROOT, "env": {**env, "ROLLMUX_DISPATCHER": "inline"}}
    # tasks left in this Redis db by earlier runs name rows of other databases
    subprocess.run(
        [celery, "-A", "rollmux_web", "purge", "-f", "-Q", ",".join(CONTROLLER_QUEUES)],
        capture_output=True,
        timeout=120,
        **common,  # type: ignore[arg-type]
    )
    worker = [celery, "-A", "rollmux_web", "worker", "-n", f"bench-controller-{os.getpid()}@%h"]
    worker += ["-l", "WARNING", "-P", "threads", "-c", "2", "-Q", ",".join(CONTROLLER_QUEUES)]
    worker += ["--without-mingle", "--without-gossip"]
    beat = [celery, "-A", "rollmux_web", "beat", "-l", "WARNING"]
    beat += ["-s", str(Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-beat-{os.getpid()}")]
    return [
        subprocess.Popen(worker, start_new_session=True, **common),  # type: ignore[call-overload]
        subprocess.Popen(beat, start_new_session=True, **common),  # type: ignore[call-overload]
    ]


CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """Return the user + system CPU seconds of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _group_pids(pgid: int) -> list[int]:
    """Return the processes of a process group (gunicorn's master and its workers)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _db_backend_pids(db_url: str) -> list[int]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(r[0]) for r in rows]


def cpu_sample(
    procs: dict[str, list[subprocess.Popen[bytes]]], db_url: str | None
) -> dict[str, dict[int, float]]:
    """Return CPU seconds so far per role: each started process group, the database
    backends of the run's database (PostgreSQL server processes, when local) and this
    process (the load-generating clients)."""
    out: dict[str, dict[int, float]] = {}
    for role, group in procs.items():
        out[role] = {pid: _cpu_s(pid) for p in group for pid in _group_pids(p.pid)}
    if db_url:
        with contextlib.suppress(psycopg.Error):
            out["postgres"] = {pid: _cpu_s(pid) for pid in _db_backend_pids(db_url)}
    out["bench clients"] = {os.getpid(): time.process_time()}
    return out


def cpu_used(
    before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]
) -> dict[str, float]:
    """Return the CPU seconds each role used between two samples (a process that started in
    between counts from 0; one that ended is missed)."""
    out = {}
    for role, now in after.items():
        was = before.get(role, {})
        out[role] = sum(max(cpu - was.get(pid, 0.0), 0.0) for pid, cpu in now.items())
    return out


def cpu_report(used: dict[str, float], jobs: int, idle: dict[str, float], wall_s: float) -> None:
    """Print CPU ms per accepted job per role over the load, and what the controller would
    have used in that time without submissions (its rate in the idle window before)."""
    per_job = {role: s * 1000 / max(jobs, 1) for role, s in used.items()}
    parts = ", ".join(f"{role} {ms:.1f}" for role, ms in per_job.items())
    print(f"CPU ms per accepted job during the load: {parts}; total {sum(per_job.values()):.1f}")
    role = "controller+beat"
    if role in idle and role in per_job:
        base = idle[role] * wall_s * 1000 / max(jobs, 1)
        print(
            f"  the controller without submissions (the running jobs, watch, reconcile): "
            f"{idle[role] * 1000:.0f} ms/s, i.e. {base:.1f} of its {per_job[role]:.1f} ms per job"
        )


def phases_finished(db_url: str) -> int:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM workflow_phaserecord WHERE finished_at IS NOT NULL"
        ).fetchone()
    return int(row[0]) if row else 0


PHASE_END_SQL = """
SELECT EXTRACT(EPOCH FROM reported_at - finished_at), recovered
FROM workflow_phaserecord
WHERE finished_at >= to_timestamp(%s) AND finished_at <= to_timestamp(%s)
  AND reported_at IS NOT NULL
"""
UNREPORTED_SQL = """
SELECT count(*) FROM workflow_phaserecord
WHERE state = 'running' AND due_at IS NOT NULL AND due_at <= to_timestamp(%s)
"""


def phase_end_latencies(
    db_url: str, t0: float, t1: float, settle_s: float = 60.0
) -> tuple[list[float], int]:
    """Return the phase-end latencies (s) of the phases that ended between t0 and t1 (wall
    clock) and how many of them `reconcile` recovered, once the phases due by t1 are all
    reported (at most settle_s later: a report still queued at t1 counts with its wait)."""
    deadline = time.monotonic() + settle_s
    with psycopg.connect(db_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(UNREPORTED_SQL, (t1,)).fetchone()
            if not row or not row[0]:
                break
            time.sleep(0.5)
        rows = conn.execute(PHASE_END_SQL, (t0, t1)).fetchall()
    return [max(float(r[0]), 0.0) for r in rows], sum(1 for r in rows if r[1])


class QueueWatch:
    """Sample the controller's queue lengths in Redis every half second (the longest seen)."""

    def __init__(self, redis_url: str, queues: tuple[str, ...]) -> None:
        import redis

        self.client = redis.Redis.from_url(redis_url, socket_timeout=2.0)
        self.queues = queues
        self.longest = dict.fromkeys(queues, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                pipe = self.client.pipeline(transaction=False)
                for q in self.queues:
                    pipe.llen(q)
                for q, n in zip(self.queues, pipe.execute(), strict=True):
                    self.longest[q] = max(self.longest[q], int(n))
            except Exception:  # a sample lost is a sample lost
                continue

    def __enter__(self) -> QueueWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def phase_end_report(latencies: list[float], recovered: int, longest: dict[str, int]) -> None:
    ms = [x * 1000 for x in latencies]
    print(
        f"phase-end latency of running jobs during the load ({len(ms)} phases, "
        f"{recovered} recovered by reconcile): ms p50 {pct(ms, 50):.1f}  p99 {pct(ms, 99):.1f}  "
        f"max {max(ms, default=float('nan')):.1f}  (target p99 < 1000)"
    )
    print(
        "longest controller queues during the load: "
        + ", ".join(f"{q} {n}" for q, n in longest.items())
    )


def wait_ready(url: str, token: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            r = requests.get(
                f"{url}/api/v1/jobs/?page_size=1",
                headers={"Authorization": f"Bearer {token}"},
                timeout=5,
            )
            if r.status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    raise SystemExit(f"server at {url} did not become ready")


def client(url: str, token: str, names: list[str], result: Result, start: threading.Event) -> None:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    start.wait()
    for name in names:
        t0 = time.perf_counter()
        try:
            r = session.post(f"{url}/api/v1/jobs/", json=job_body(name), timeout=60)
        except requests.RequestException as exc:
            with result.lock:
                result.errors.append(f"{name}: {exc}")
            continue
        dt = time.perf_counter() - t0
        with result.lock:
            result.latencies.append(dt)
            if r.status_code == 201:
                result.accepted.append(name)
            else:
                result.refused[r.status_code] = result.refused.get(r.status_code, 0) + 1
                if len(result.errors) < 5:
                    result.errors.append(f"{name}: HTTP {r.status_code} {r.text[:200]}")


def run_load(
    url: str, tokens: list[str], clients: int, per_client: int, tag: str
) -> tuple[Result, float]:
    result = Result()
    start = threading.Event()
    threads = []
    for c in range(clients):
        names = [f"{tag}-c{c:03d}-{i:04d}" for i in range(per_client)]
        t = threading.Thread(
            target=client, args=(url, tokens[c % len(tokens)], names, result, start), daemon=True
        )
        t.start()
        threads.append(t)
    t0 = time.perf_counter()
    start.set()
    for t in threads:
        t.join()
    return result, time.perf_counter() - t0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def report(label: str, result: Result, wall_s: float) -> float:
    n = len(result.accepted)
    rate = n / wall_s if wall_s > 0 else float("nan")
    lat = [x * 1000 for x in result.latencies]
    print(
        f"{label:<28} {n:>6} accepted in {wall_s:7.2f} s = {rate:7.1f} jobs/s | latency ms "
        f"p50 {pct(lat, 50):7.1f}  p90 {pct(lat, 90):7.1f}  p99 {pct(lat, 99):7.1f}  "
        f"max {max(lat, default=float('nan')):7.1f}  mean {statistics.fmean(lat) if lat else float('nan'):7.1f}"
    )
    if result.refused:
        print(f"{'':<28} refused: {result.refused}")
    for e in result.errors[:5]:
        print(f"{'':<28} error: {e}")
    return rate


def verify(db_url: str, tag: str, accepted: list[str]) -> bool:
    """Check every accepted job exists exactly once and nothing else carries the run's tag."""
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT name, count(*) FROM jobs_job WHERE name LIKE %s GROUP BY name",
            (f"{tag}-%",),
        ).fetchall()
    counts = dict(rows)
    missing = [n for n in accepted if n not in counts]
    duplicated = {n: c for n, c in counts.items() if c != 1}
    unexpected = set(counts) - set(accepted)
    ok = not missing and not duplicated and not unexpected and len(set(accepted)) == len(accepted)
    print(
        f"check {tag}: {len(accepted)} accepted, {sum(counts.values())} rows in jobs_job; "
        f"missing {len(missing)}, duplicated {len(duplicated)}, unexpected {len(unexpected)} "
        f"-> {'OK' if ok else 'FAILED'}"
    )
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--jobs-per-client", type=int, default=50)
    ap.add_argument("--baseline-jobs", type=int, default=100)
    # production's gunicorn settings (rollmux_web/gunicorn_conf.py: one process per CPU, 8
    # threads each, unless GUNICORN_WORKERS / GUNICORN_THREADS say otherwise)
    from rollmux_web import gunicorn_conf

    ap.add_argument(
        "--workers", type=int, default=gunicorn_conf.workers, help="gunicorn worker processes"
    )
    ap.add_argument(
        "--threads", type=int, default=gunicorn_conf.threads, help="gunicorn threads per worker"
    )
    ap.add_argument("--admin-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--db-name", default="rollmux_bench_api_submit")
    ap.add_argument("--keep-db", action="store_true")
    ap.add_argument(
        "--idle-s",
        type=float,
        default=10.0,
        help="seconds to sample the processes' CPU with no submission before the load",
    )
    ap.add_argument(
        "--queue",
        action="append",
        help=f"a controller queue to watch in REDIS_URL (default: {', '.join(CONTROLLER_QUEUES)})",
    )
    ap.add_argument("--url", help="use a running server instead of starting one")
    ap.add_argument("--token", action="append", help="API token(s) for --url")
    ap.add_argument("--database-url", help="the database of --url, for the exactly-once check")
    ap.add_argument(
        "--no-controller", action="store_true", help="do not start the Celery controller and beat"
    )
    args = ap.parse_args(argv)

    procs: list[subprocess.Popen[bytes]] = []
    roles: dict[str, list[subprocess.Popen[bytes]]] = {}
    db_url = args.database_url
    try:
        if args.url:
            if not args.token:
                raise SystemExit("--url needs --token")
            url, tokens = args.url.rstrip("/"), list(args.token)
        else:
            db_url = with_db(args.admin_url, args.db_name)
            if not os.environ.get("REDIS_URL"):
                raise SystemExit("set REDIS_URL (a Redis db of your own) for production mode")
            env = {
                **os.environ,
                "DATABASE_URL": db_url,
                "DEBUG": "false",
                "ROLLMUX_EMBEDDED": "false",
                "SECRET_KEY": os.environ.get("SECRET_KEY") or uuid.uuid4().hex * 2,
                # plain HTTP on loopback: no TLS-terminating proxy in front of this gunicorn
                "ROLLMUX_SECURE_SSL_REDIRECT": "false",
                "ROLLMUX_SECURE_COOKIES": "false",
            }
            print(f"scratch database {args.db_name}: create, migrate, seed_demo ...", flush=True)
            create_scratch_db(args.admin_url, args.db_name)
            tokens = prepare(env, args.clients)
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            roles["gunicorn"] = [start_gunicorn(env, port, args.workers, args.threads)]
            if not args.no_controller:
                roles["controller+beat"] = start_controller(env)
            procs += [p for group in roles.values() for p in group]
            wait_ready(url, tokens[0])
            print(
                f"gunicorn on {url}: {args.workers} workers x {args.threads} threads; "
                f"controller {'off' if args.no_controller else 'on (inline dispatcher) + beat'}"
            )
        print(f"cpu count {os.cpu_count()}; load average {os.getloadavg()[0]:.2f}")
        run_id = uuid.uuid4().hex[:8]

        # warm every worker's connections and imports before measuring
        run_load(url, tokens, min(args.clients, 8), 2, f"warm-{run_id}")

        base_tag = f"base-{run_id}"
        base, base_wall = run_load(url, tokens[:1], 1, args.baseline_jobs, base_tag)
        base_rate = report("baseline (1 client)", base, base_wall)

        load_tag = f"load-{run_id}"
        idle: dict[str, float] = {}
        if args.idle_s > 0:  # what the running jobs cost the controller with no submission
            sample = cpu_sample(roles, db_url)
            time.sleep(args.idle_s)
            used = cpu_used(sample, cpu_sample(roles, db_url))
            idle = {role: cpu / args.idle_s for role, cpu in used.items()}
        phases_before = phases_finished(db_url) if db_url else 0
        cpu_before = cpu_sample(roles, db_url)
        queues = tuple(args.queue or CONTROLLER_QUEUES)
        watch = QueueWatch(os.environ["REDIS_URL"], queues) if os.environ.get("REDIS_URL") else None
        load_t0 = time.time()
        with watch or contextlib.nullcontext():
            load, load_wall = run_load(url, tokens, args.clients, args.jobs_per_client, load_tag)
        load_t1 = time.time()
        cpu_after = cpu_sample(roles, db_url)
        rate = report(f"load ({args.clients} x {args.jobs_per_client})", load, load_wall)
        cpu_report(cpu_used(cpu_before, cpu_after), len(load.accepted), idle, load_wall)
        print(f"load average after the load {os.getloadavg()[0]:.2f}")
        print(f"throughput ratio load / baseline: {rate / base_rate:.2f}x")
        if db_url:
            print(
                f"phases finished by the controller during the load: "
                f"{phases_finished(db_url) - phases_before}"
            )
            latencies, recovered = phase_end_latencies(db_url, load_t0, load_t1)
            phase_end_report(latencies, recovered, watch.longest if watch else {})

        ok = True
        if db_url:
            ok = verify(db_url, base_tag, base.accepted) and ok
            ok = verify(db_url, load_tag, load.accepted) and ok
        else:
            print("no --database-url: exactly-once check skipped")
        expected = args.clients * args.jobs_per_client
        if len(load.accepted) != expected:
            print(f"only {len(load.accepted)} of {expected} submissions were accepted")
            ok = False
        return 0 if ok else 1
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if not args.url and not args.keep_db:
            drop_scratch_db(args.admin_url, args.db_name)


if __name__ == "__main__":
    sys.exit(main())
