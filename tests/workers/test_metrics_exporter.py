"""A real `celery worker` process serves its own /metrics: the planning pass it runs counts
admissions and waits in the worker, not in the web app."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rollmux_web.jobs.models import Job, JobStatus
from tests.factories import database_url
from tests.workers.builders import make_job, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PORT = 8181  # one of this checkout's ports (PROTOCOL: ops 8180-8189)


def _scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=2) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _answers() -> bool:
    try:
        _scrape()
    except OSError:
        return False
    return True


def test_the_worker_exports_the_admissions_of_the_passes_it_runs(
    world: Any, settings: Any, tmp_path: Path, clean_broker: None
) -> None:
    from workers.tasks import plan_task

    job = make_job(world, name="scraped", iterations=1, time_scale=1000.0)
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "ROLLMUX_DISPATCHER": "inline",  # the phases themselves are not under test here
        "ROLLMUX_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "ROLLMUX_WORKER_METRICS_PORT": str(PORT),
        "ROLLMUX_WORKER_METRICS_ADDR": "127.0.0.1",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "rollmux_web", "worker", "-P", "threads",
         "-c", "1", "-Q", settings.CELERY_TASK_DEFAULT_QUEUE, "-n", "metrics@%h",
         "--without-mingle", "--without-gossip"],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(_answers, timeout=60, interval=0.2)
        before = _scrape()
        assert before.get(("rollmux_admission_attempts_total", (("result", "fit"),)), 0) == 0
        plan_task.delay()
        wait_for(lambda: Job.objects.get(pk=job.pk).status != JobStatus.QUEUED, timeout=30)
        # the attempt is counted when decided, the wait when its batch commits
        wait_for(
            lambda: (
                _scrape().get(("rollmux_admission_attempts_total", (("result", "fit"),))) == 1
                and ("rollmux_admission_wait_time_seconds_count", (("slo_class", "silver"),))
                in _scrape()
            ),
            timeout=10,
        )
        after = _scrape()
        assert after[("rollmux_admission_wait_time_seconds_count", (("slo_class", "silver"),))] == 1
        assert (
            after[("rollmux_admission_attempt_duration_seconds_count", (("result", "fit"),))] == 1
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    assert worker.returncode is not None, log.read_text()[-2000:]
