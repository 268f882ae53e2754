"""What the benches of the live control plane share (bench/control_plane.py,
bench/long_tail.py): a scratch database, a flushed Redis db, Ray (one local, or a head plus
one Ray node per inventory node, each its own raylet) and the controller's Celery worker in
a process of its own, as deployed.

    from bench import live

    live.setup()  # Ray's environment and Django, before any model is imported
    with live.Stack("control_plane") as stack:  # scratch database `bench_<name>_<db>`
        world = make_world(...)
        address = stack.local_ray() or stack.multinode(names, gpus=1, port=None)
        with stack.worker(pool="threads", concurrency=2):
            ...  # submit, triggers.request_planning(), wait, read the phase records

Use a Redis db of your own: it is flushed. Everything the stack started is stopped and the
scratch database dropped on the way out, also after an error.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def setup() -> None:
    """Apply Ray's environment (workers/ray_env.py) and set Django up (once)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from workers import ray_env

    ray_env.apply(override=False)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rollmux_web.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()


def pct(values: list[float], q: float) -> float:
    """Return the q-th percentile of `values` (nearest rank; nan when empty)."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def wait_done(ids: list[int], timeout: float) -> float:
    """Wait until every job is in a terminal state; return the seconds it took."""
    from rollmux_web.jobs.models import TERMINAL_STATUSES, Job

    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if not Job.objects.filter(pk__in=ids).exclude(status__in=TERMINAL_STATUSES).exists():
            return time.monotonic() - start
        time.sleep(0.1)
    raise SystemExit(f"jobs did not finish within {timeout} s")


def ping_worker(n: int = 0) -> list[float]:
    """Wait for the worker to answer, then return `n` Celery task round trips (seconds)."""
    from rollmux_web.celery import app

    app.send_task("workers.tasks.ping").get(timeout=120)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        app.send_task("workers.tasks.ping").get(timeout=30)
        out.append(time.perf_counter() - t)
    return out


class Stack:
    """A scratch database and a flushed Redis db, then the Ray and the Celery worker the
    bench asks for; all of it undone on exit."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.db_name = ""
        self.checkpoints = Path(os.environ.get("TMPDIR", "/tmp")) / f"rollmux-bench-{name}"
        self.address = ""
        self._old_name = ""
        self._undo: list[Callable[[], None]] = []

    def __enter__(self) -> Stack:
        import redis
        from django.conf import settings
        from django.db import connection
        from django.test.utils import setup_test_environment

        if connection.vendor != "postgresql" or not settings.REDIS_URL:
            raise SystemExit("set DATABASE_URL (PostgreSQL) and REDIS_URL")
        setup_test_environment()
        redis.Redis.from_url(settings.REDIS_URL).flushdb()
        self._old_name = connection.settings_dict["NAME"]
        # its own scratch database, so a test run on the same DATABASE_URL is not disturbed
        connection.settings_dict.setdefault("TEST", {})["NAME"] = (
            f"bench_{self.name}_{self._old_name}"
        )
        self.db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
        settings.ROLLMUX_CHECKPOINT_DIR = str(self.checkpoints)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        from django.db import connection

        from workers.dispatch import ray_dispatcher

        for undo in reversed(self._undo):
            with contextlib.suppress(Exception):
                undo()
        ray_dispatcher.shutdown_ray()
        connection.creation.destroy_test_db(self._old_name, verbosity=0)

    def local_ray(self) -> str:
        """Start one local Ray advertising a resource per inventory node; return its address."""
        from rollmux_web.inventory.models import Node
        from workers.dispatch import ray_dispatcher

        resources = {n.ray_resource: 1.0 for n in Node.objects.all()}
        ray_dispatcher.ensure_ray("local", resources=lambda: resources)
        return self._connected(ray_dispatcher.ray_address())

    def multinode(
        self,
        names: tuple[str, ...],
        *,
        gpus: int,
        port: int | None = None,
        health_checks: dict[str, int] | None = None,
    ) -> str:
        """Start a head and one Ray node per name (labelled with it, `gpus` GPUs each);
        return its address. The inventory must say what the Ray nodes declare."""
        from tests.workers.multinode import start_cluster

        cluster = start_cluster(names, port=port, gpus=gpus, health_checks=health_checks)
        self._undo.append(cluster.cluster.shutdown)
        return self._connected(cluster.address)

    def _connected(self, address: str) -> str:
        """Give this process a Ray dispatcher at `address` (it enqueues the planning passes;
        the worker dispatches)."""
        from rollmux_web import ports
        from workers.composition import deliver_report, report_config
        from workers.dispatch.ray_dispatcher import RayDispatcher

        previous = ports.configure(
            dispatcher=RayDispatcher(
                address=address, on_report=deliver_report, report=report_config()
            )
        )
        self._undo.append(lambda: ports.restore(previous))
        self.address = address
        return address

    @contextlib.contextmanager
    def worker(
        self,
        *,
        pool: str = "threads",
        concurrency: int = 2,
        log_level: str = "WARNING",
        env: dict[str, str] | None = None,
    ) -> Iterator[subprocess.Popen[Any]]:
        """Run the controller's Celery worker (`celery worker -Q <the controller's queue>`,
        as bin/run.sh starts it) on the scratch database and this Ray, with `env` on top;
        yield it once it answers a ping; stop it (TERM, then KILL after 30 s) on exit."""
        from django.conf import settings

        from tests.factories import database_url

        full = dict(os.environ)
        full.update(
            DATABASE_URL=database_url(self.db_name),
            REDIS_URL=settings.REDIS_URL,
            ROLLMUX_RAY_ADDRESS=self.address,
            ROLLMUX_CHECKPOINT_DIR=str(self.checkpoints),
            **(env or {}),
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "rollmux_web", "worker", "-P", pool,
             "-c", str(concurrency), "-Q", ",".join(settings.ROLLMUX_CONTROLLER_QUEUES), "-l", log_level,
             "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=full,
        )  # fmt: skip
        try:
            ping_worker()
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
