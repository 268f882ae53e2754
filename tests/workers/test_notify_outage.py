"""The notifications worker as docker-compose.yml runs it survives a Redis outage and
delivers again once Redis is back, as the other workers do (issue 24 item 10: it exited
for good with "Unrecoverable error: AttributeError ... hostname", gossip's restart on a
dead connection: celery/kombu#582)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.workers.builders import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.celery]
ROOT = Path(__file__).resolve().parents[2]
REDIS_PORT = 8183  # this checkout's ports: 8180-8189


def _redis(tmp: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        ["redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp)],
        stdout=(tmp / "redis.log").open("ab"), stderr=subprocess.STDOUT,
    )  # fmt: skip

    def answers() -> bool:
        try:
            socket.create_connection(("127.0.0.1", REDIS_PORT), timeout=0.5).close()
            return True
        except OSError:
            assert proc.poll() is None, (tmp / "redis.log").read_text()[-2000:]
            return False

    wait_for(answers, timeout=20)
    return proc


def _compose_command(service: str) -> list[str]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = [
        os.path.expandvars(word.replace("${ROLLMUX_NOTIFY_THREADS:-4}", "4"))
        for word in compose["services"][service]["command"]
    ]
    assert command[0] == "celery"
    return [sys.executable, "-m", "celery", *command[1:]]


def _ping(app: Any, queue: str) -> str:
    return str(app.send_task("workers.tasks.ping", queue=queue).get(timeout=90))


def test_the_compose_notify_worker_survives_a_redis_outage(tmp_path: Path, settings: Any) -> None:
    from celery import Celery

    url = f"redis://127.0.0.1:{REDIS_PORT}/0"
    redis = _redis(tmp_path)
    env = {
        **os.environ,
        "REDIS_URL": url,
        "ROLLMUX_WORKER_METRICS_PORT": "",
        "ROLLMUX_DISPATCHER": "inline",
    }
    log = tmp_path / "notify.log"
    worker = subprocess.Popen(
        _compose_command("notify-worker"), cwd=ROOT, env=env, stdout=log.open("ab"),
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    app = Celery("probe", broker=url, backend=url, set_as_current=False)  # tasks stay on ours
    try:
        assert _ping(app, settings.ROLLMUX_NOTIFY_QUEUE) == "pong", log.read_text()[-3000:]
        for _ in range(2):  # an outage, and another one after it
            redis.kill()
            redis.wait()
            time.sleep(5.0)
            assert worker.poll() is None, log.read_text()[-4000:]
            redis = _redis(tmp_path)
            assert _ping(app, settings.ROLLMUX_NOTIFY_QUEUE) == "pong", log.read_text()[-3000:]
        assert worker.poll() is None
        assert "Unrecoverable error" not in log.read_text()
    finally:
        os.killpg(worker.pid, 15)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, 9)
            worker.wait()
        redis.kill()
        redis.wait()


def test_every_worker_waits_out_an_outage_however_long(settings: Any) -> None:
    from rollmux_web.celery import app

    # Celery's default gives up after 100 attempts, and the worker exits
    assert app.conf.broker_connection_max_retries is None
