"""gunicorn settings for production (docker-compose `web`): `gunicorn -c python:rollmux_web.gunicorn_conf`.

Several worker processes each count API requests; with PROMETHEUS_MULTIPROC_DIR set,
prometheus_client writes their samples to files that /metrics sums. The directory is
emptied when the master starts and a dead worker's live samples are dropped.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")


def _cpus() -> int:
    """The CPUs this process may run on (a container's cpuset, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _count(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


# One worker process per CPU, eight threads each for the database and Redis round trips:
# bench/api_submit.py on the 2-core development VM (docs/benchmarks.md) measured 2 x 8 at
# 172-192 jobs/s, p99 292-438 ms, and 3 x 4 at 137 jobs/s, p99 671 ms, with the controller
# working; more processes than CPUs only add context switches and GIL hand-offs.
workers = _count("GUNICORN_WORKERS", _cpus())
threads = _count("GUNICORN_THREADS", 8)
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "60"))
accesslog = "-"
# Request lines only: never query strings with secrets, and bodies are never logged.
access_log_format = '%(h)s "%(m)s %(U)s" %(s)s %(b)s %(M)sms'


def on_starting(server: Any) -> None:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        shutil.rmtree(directory, ignore_errors=True)
        Path(directory).mkdir(parents=True, exist_ok=True)


def child_exit(server: Any, worker: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
