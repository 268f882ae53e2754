"""Benchmark a planning pass on PostgreSQL: a burst of queued jobs, then an idle pass.

Seeds a scratch database (`<name>_bench_plan_pass` next to DATABASE_URL's, dropped at the
end) with N nodes per pool (8 GPUs each) and J queued jobs (8 rollout + 8 training GPUs,
profiles varied deterministically so some direct-pack, some scale rollouts, some need new
groups and the rest wait for capacity), then prints:

- the first pass: placements, waiting jobs, seconds, placements per second, and the
  longest single transaction of the pass (the planner's batches);
- an idle pass (nothing changed: every waiting job still waits): its time, median of 5.

Phases are not run (a dispatcher that records nothing); the pass's own work is measured.
With --worker-heap the pass runs in a process set up as the controller worker that runs
it in production: the planning services imported and the heap frozen
(`workers.warmup.freeze_heap`) before the pass, so neither the first import nor full
garbage collections over the start-up objects (which the worker never scans) count.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollmux_x .venv/bin/python bench/plan_pass.py \\
        --size 1k   # or --size 5k (5,000 + 5,000 nodes, 10,000 queued), or --nodes/--jobs
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.workers.builders import NoTriggers  # noqa: E402  (after the path)


class _Nothing(NoTriggers):
    """A dispatcher and a set of triggers that do nothing (the pass alone is measured)."""

    def dispatch(self, order: Any) -> None: ...

    def probe(self, order: Any) -> Any:
        raise NotImplementedError

    def release(self, job_id: int, placement_id: int) -> None: ...

    def kill(self, job_id: int, placement_id: int) -> None: ...


def _seed(nodes: int, jobs: int) -> None:
    from rollmux_web.jobs.models import Job, JobStatus
    from tests.factories import make_world

    world = make_world(rollout_nodes=nodes, train_nodes=nodes)
    rows = []
    for i in range(jobs):
        roll = 60.0 + (i * 37) % 240  # 60-300 s rollouts, 30-150 s trainings
        train = 30.0 + (i * 53) % 120
        rows.append(
            Job(
                name=f"burst-{i}", tenant=world.vision, submitter=world.alice,
                slo_class=(world.bronze, world.silver, world.gold)[i % 3], runner="emulated",
                iterations=20, rollout_gpus=8 * (1 + i % 2), train_gpus=8,
                t_roll_max_s=roll, t_roll_min_s=roll * 0.8, t_train_max_s=train,
                t_train_min_s=train * 0.8, host_mem_gb=300.0, time_scale=100.0,
                status=JobStatus.QUEUED, reason="waiting for the planner",
            )
        )  # fmt: skip
    Job.objects.bulk_create(rows, batch_size=1000)


def _fingerprint() -> str:
    """Return a hash of the first pass's decisions: each placed job (by name) with its
    strategy, its group (named by the group's first-placed job) and its node names, so two
    runs on the same seeded queue can be compared (decisions identical: equal hashes)."""
    import hashlib

    from rollmux_web.workflow.models import Placement

    rows = Placement.objects.select_related("job").prefetch_related("rollout_nodes", "train_nodes")
    first: dict[int, str] = {}
    lines = []
    for p in rows.order_by("pk"):
        group = first.setdefault(p.group_id, p.job.name)
        lines.append(
            f"{p.job.name}|{p.strategy}|{group}|"
            f"{','.join(sorted(n.name for n in p.rollout_nodes.all()))}|"
            f"{','.join(sorted(n.name for n in p.train_nodes.all()))}"
        )
    lines.sort()
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def _plan() -> Any:
    from rollmux_web.workflow import services

    fn = getattr(services, "queue_plan", None) or services.plan_pass  # (before the rename)
    return fn()


class _DecisionCpu:
    """Count the CPU seconds of the core's decisions (`levers.place_job`), to split the
    pass's CPU between deciding and the rest (reading, writing, the ORM)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.calls = 0
        from rollmux_web.workflow import levers

        self._module: Any = levers
        self._real = levers.place_job

    def __enter__(self) -> _DecisionCpu:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.process_time()
            try:
                return self._real(*args, **kwargs)
            finally:
                self.calls += 1
                self.cpu += time.process_time() - t

        self._module.place_job = timed
        return self

    def __exit__(self, *exc: object) -> None:
        self._module.place_job = self._real


class _LongestTransaction:
    """Time each planning transaction: the batches' `atomic_with_retry` calls (before the
    batches, the whole pass was one transaction)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.count = 0
        try:
            from rollmux_web.workflow.services import planning

            self._module: Any = planning
            self._real = planning.atomic_with_retry
        except (ImportError, AttributeError):
            self._module = None

    def __enter__(self) -> _LongestTransaction:
        if self._module is not None:

            def timed(fn: Any, **kwargs: Any) -> Any:
                t = time.perf_counter()
                try:
                    return self._real(fn, **kwargs)
                finally:
                    self.count += 1
                    self.longest = max(self.longest, time.perf_counter() - t)

            self._module.atomic_with_retry = timed
        return self

    def __exit__(self, *exc: object) -> None:
        if self._module is not None:
            self._module.atomic_with_retry = self._real


class _Profile:
    """With --profile N: run the first pass under cProfile and print its N costliest
    functions by own time and by cumulative time (the wall figures then include the
    profiler's overhead)."""

    def __init__(self, args: argparse.Namespace) -> None:
        import cProfile

        self.top = args.profile
        self.prof = cProfile.Profile() if self.top else None

    def __enter__(self) -> _Profile:
        if self.prof is not None:
            self.prof.enable()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.prof is not None:
            self.prof.disable()

    def report(self) -> None:
        if self.prof is None:
            return
        import pstats

        for order in ("tottime", "cumulative"):
            print(f"profile of the first pass, by {order}:")
            pstats.Stats(self.prof, stream=sys.stdout).sort_stats(order).print_stats(self.top)


def _backend_cpu_s() -> float | None:
    """Return the CPU seconds this connection's PostgreSQL backend has used (its /proc stat,
    when the server runs on this machine), else None."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _cpu() -> tuple[float, float | None]:
    return time.process_time(), _backend_cpu_s()


def _cpu_line(before: tuple[float, float | None], placed: int) -> str:
    """Say the pass's CPU time (this process and its PostgreSQL backend): on a loaded
    machine the wall time counts other processes' turns, the CPU time hardly does."""
    own = time.process_time() - before[0]
    after = _backend_cpu_s()
    db = after - before[1] if after is not None and before[1] is not None else None
    text = f"first pass CPU: planner process {own:.2f} s"
    if db is not None:
        text += (
            f", its PostgreSQL backend {db:.2f} s; {placed / (own + db):.0f} placements per "
            "CPU-second of both (what the wall rate approaches on an idle machine)"
        )
    return text


def run(args: argparse.Namespace) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rollmux_web.settings")
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    if connection.vendor != "postgresql":
        raise SystemExit("set DATABASE_URL to a PostgreSQL database")
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"{old_name}_bench_plan_pass"
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    nothing = _Nothing()
    try:
        from rollmux_web import ports

        previous = ports.configure(dispatcher=nothing, triggers=nothing)  # type: ignore[arg-type]
    except ImportError:  # before the ports (main before issue 10)
        from workers.dispatch import set_dispatcher

        set_dispatcher(nothing)  # type: ignore[arg-type]
        previous = None
    try:
        import scheduler.planner  # noqa: F401  (imported once per worker: not the pass's time)

        t = time.perf_counter()
        _seed(args.nodes, args.jobs)
        print(f"seeded {args.nodes} + {args.nodes} nodes, {args.jobs} queued jobs "
              f"in {time.perf_counter() - t:.1f} s")  # fmt: skip
        if args.worker_heap:
            from rollmux_web.workflow import services  # noqa: F401  (the worker's tasks import it)
            from workers.warmup import freeze_heap

            freeze_heap()
        load = os.getloadavg()[0]
        cpu = _cpu()
        t = time.perf_counter()
        with _LongestTransaction() as probe, _DecisionCpu() as decisions, _Profile(args) as prof:
            first = _plan()
        took = time.perf_counter() - t
        if not probe.count:  # one transaction for the whole pass
            probe.longest, probe.count = took, 1
        placed = len(first.placed)
        print(f"first pass: {placed} placed, {len(first.waiting)} waiting, "
              f"{len(first.infeasible)} infeasible in {took:.2f} s = {placed / took:.0f} "
              f"placements/s; {probe.count} transactions, the longest {probe.longest:.2f} s "
              f"(1-min load average {load:.1f} at its start)")  # fmt: skip
        print(_cpu_line(cpu, placed))
        print(f"  of which the core's decisions: {decisions.cpu:.2f} s CPU over "
              f"{decisions.calls} decisions ({decisions.cpu / max(1, decisions.calls) * 1000:.2f} "
              "ms each)")  # fmt: skip
        prof.report()
        print(f"decisions fingerprint (job -> strategy, group, nodes): {_fingerprint()}")
        idle = []
        for _ in range(5):
            t = time.perf_counter()
            _plan()
            idle.append(time.perf_counter() - t)
        print(f"idle pass (nothing changed): median {statistics.median(idle) * 1000:.1f} ms "
              f"(min {min(idle) * 1000:.1f}, max {max(idle) * 1000:.1f}) over 5")  # fmt: skip
        print(
            f"load average (1/5/15 min) at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
        )
    finally:
        if previous is not None:
            ports.restore(previous)
        connection.creation.destroy_test_db(old_name, verbosity=0)


SIZES = {"1k": (1000, 2000), "5k": (5000, 10000)}  # nodes per pool, queued jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=None, help="nodes per pool")
    parser.add_argument("--jobs", type=int, default=None, help="queued jobs")
    parser.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="1k",
        help="a preset: 1k = 1,000 + 1,000 nodes and 2,000 queued (the 200/s target), "
        "5k = 5,000 + 5,000 nodes and 10,000 queued (issue 25: reported); "
        "--nodes / --jobs override it",
    )
    parser.add_argument(
        "--worker-heap",
        action="store_true",
        help="set the process up as the controller worker before the pass: the planning "
        "services imported, the heap frozen (workers.warmup.freeze_heap)",
    )
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N",
        help="profile the first pass (cProfile) and print its N costliest functions",
    )  # fmt: skip
    args = parser.parse_args()
    nodes, jobs = SIZES[args.size]
    args.nodes = nodes if args.nodes is None else args.nodes
    args.jobs = jobs if args.jobs is None else args.jobs
    if args.nodes < 1 or args.jobs < 1:
        parser.error("--nodes and --jobs must be >= 1")
    run(args)


if __name__ == "__main__":
    main()
