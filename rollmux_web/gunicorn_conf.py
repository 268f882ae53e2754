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
workers = int(os.environ.get("GUNICORN_WORKERS", "3"))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
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
