"""The readiness checks: each returns a Check (ok, and what it found or why it failed)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlparse

from django.conf import settings

TIMEOUT_S = 2.0
RAY_DEFAULT_PORT = 6379  # the GCS port of `ray start --head`


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    seconds: float


def _failure(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


def check_database() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return f"{connection.vendor} answers"


def check_broker() -> str:
    if settings.CELERY_TASK_ALWAYS_EAGER or not settings.REDIS_URL:
        return "embedded: tasks run in this process"
    import redis

    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S
    )
    try:
        client.ping()
    finally:
        client.close()
    return "redis answers"


def ray_addresses() -> list[str]:
    """Return every Ray address the workers connect to: the setting and each pool's own."""
    from rollmux_web.inventory.models import Cluster

    found = {settings.ROLLMUX_RAY_ADDRESS}
    # a database outage is the database check's to report; still check the configured head
    with contextlib.suppress(Exception):
        found.update(Cluster.objects.values_list("ray_address", flat=True))
    return sorted(a for a in found if a and a not in ("local", "auto"))


def _host_port(address: str) -> tuple[str, int]:
    parsed = urlparse(address if "://" in address else f"ray://{address}")
    if not parsed.hostname:
        raise ValueError(f"no host in Ray address {address!r}")
    return parsed.hostname, parsed.port or RAY_DEFAULT_PORT


def check_ray() -> str:
    """Connect to each Ray head's GCS port (the web app itself does not join the cluster)."""
    addresses = ray_addresses()
    if not addresses:
        return "local: each worker starts its own Ray"
    for address in addresses:
        host, port = _host_port(address)
        try:
            socket.create_connection((host, port), timeout=TIMEOUT_S).close()
        except OSError as exc:
            raise ConnectionError(f"{address} unreachable ({_failure(exc)})") from exc
    return "reachable: " + ", ".join(addresses)


CHECKS: dict[str, Callable[[], str]] = {
    "database": check_database,
    "broker": check_broker,
    "ray": check_ray,
}


def run_checks() -> list[Check]:
    """Run every readiness check; a failing one never stops the others."""
    out = []
    for name, fn in CHECKS.items():
        start = time.perf_counter()
        try:
            detail, ok = fn(), True
        except Exception as exc:  # a probe reports every failure, whatever its kind
            detail, ok = _failure(exc), False
        out.append(Check(name, ok, detail, round(time.perf_counter() - start, 4)))
    return out
