"""/healthz and /readyz: liveness answers whatever the dependencies do; readiness checks the
database, the broker and Ray for real and names the one that failed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rollmux_web.inventory.models import Cluster

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


def test_healthz_answers_any_host_without_login(client, settings):
    settings.ALLOWED_HOSTS = ["rollmux.example.internal"]
    # kubelet probes by pod IP: no allowed Host, no session, no HTTPS redirect
    resp = client.get("/healthz", HTTP_HOST="10.1.2.3:8000")
    assert resp.status_code == 200 and resp.json() == {"status": "ok"}
    assert resp["Cache-Control"] == "no-store"
    # every other path still enforces ALLOWED_HOSTS
    assert client.get("/accounts/login/", HTTP_HOST="10.1.2.3:8000").status_code == 400


def test_readyz_is_ready_with_postgres_redis_and_a_reachable_ray_head(client, world, settings):
    assert settings.REDIS_URL, "the test run uses a real Redis"
    settings.CELERY_TASK_ALWAYS_EAGER = False
    with socket.socket() as head:  # a listening socket plays the Ray head's GCS port
        head.bind(("127.0.0.1", 0))
        head.listen()
        settings.ROLLMUX_RAY_ADDRESS = f"127.0.0.1:{head.getsockname()[1]}"
        resp = client.get("/readyz")
    body = resp.json()
    assert resp.status_code == 200, body
    assert body["status"] == "ok" and body["failed"] == []
    assert body["checks"]["database"]["detail"] == "postgresql answers"
    assert body["checks"]["broker"]["detail"] == "redis answers"
    assert body["checks"]["ray"]["detail"].startswith("reachable: 127.0.0.1:")


def test_readyz_names_the_broker_and_the_pool_ray_head_that_are_down(client, world, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.REDIS_URL = f"redis://127.0.0.1:{_closed_port()}/0"
    dead = f"ray://127.0.0.1:{_closed_port()}"
    Cluster.objects.filter(pk=world.train_pool.pk).update(ray_address=dead)
    resp = client.get("/readyz")
    body = resp.json()
    assert resp.status_code == 503
    assert body["status"] == "unavailable" and body["failed"] == ["broker", "ray"]
    assert body["checks"]["database"]["ok"] is True
    assert "ConnectionError" in body["checks"]["broker"]["detail"]
    assert dead in body["checks"]["ray"]["detail"]


def test_readyz_names_the_database_when_postgres_is_unreachable(tmp_path):
    """A server process whose DATABASE_URL points at a closed port (a real failed connect)."""
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{_closed_port()}/nothing",
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        "ROLLMUX_RAY_ADDRESS": "local",
    }
    code = (
        "import django, json; django.setup();"
        "from django.test import Client;"
        "r = Client().get('/readyz'); print(r.status_code); print(r.content.decode())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    status, body = proc.stdout.split("\n", 1)
    body = json.loads(body)
    assert status == "503" and body["failed"] == ["database"]
    assert "OperationalError" in body["checks"]["database"]["detail"]
    assert body["checks"]["broker"]["ok"] and body["checks"]["ray"]["ok"]
