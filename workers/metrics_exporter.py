"""Serve a Celery worker's own Prometheus metrics on an HTTP port.

The worker runs the planning passes and the group controller, so the admission, wait,
switch and resubmission series (rollmux_web/metrics.py) are observed in its process, not
in the web app's. With ROLLMUX_WORKER_METRICS_PORT set, `celery worker` serves them at
http://<host>:<port>/metrics (Prometheus scrapes each worker; docker-compose gives each
worker service its port). A prefork pool's children write their samples to
PROMETHEUS_MULTIPROC_DIR, emptied here when the worker starts, and the exporter sums them.
Imported by the composition root (workers/composition.py, when Django starts) so the
handlers connect before the worker starts; nothing here imports Django at import time.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from celery.signals import celeryd_init, worker_process_shutdown, worker_ready

log = logging.getLogger(__name__)
PORT_ENV = "ROLLMUX_WORKER_METRICS_PORT"
ADDR_ENV = "ROLLMUX_WORKER_METRICS_ADDR"


@celeryd_init.connect  # type: ignore[untyped-decorator]
def _reset_multiprocess_dir(**_: Any) -> None:
    """Drop the samples a previous run of this worker left (before the pool forks)."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory and os.environ.get(PORT_ENV):
        shutil.rmtree(directory, ignore_errors=True)
        Path(directory).mkdir(parents=True, exist_ok=True)


@worker_ready.connect  # type: ignore[untyped-decorator]
def start_exporter(**_: Any) -> int | None:
    """Start the metrics HTTP server in the worker's main process; return its port."""
    raw = os.environ.get(PORT_ENV, "").strip()
    if not raw:
        return None
    from prometheus_client import start_http_server

    from rollmux_web.metrics import process_registry

    port = int(raw)
    start_http_server(port, addr=os.environ.get(ADDR_ENV, "0.0.0.0"), registry=process_registry())
    log.info("worker metrics on port %s", port)
    return port


@worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def _mark_dead(pid: int | None = None, **_: Any) -> None:
    """Let a prefork child's live samples go when it exits (its counters stay summed)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR") and pid:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
