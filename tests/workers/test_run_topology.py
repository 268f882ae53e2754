"""Faults in the `bin/run.sh` production-like topology (PostgreSQL, Redis, a Ray head of its
own, a Celery controller restarted when it dies, beat): kill -9 the controller mid-phase,
then take Redis away and back mid-phase. Nothing is lost, run twice or counted against a
job, and the controller picks up what ended during the outage within seconds."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rollmux_web.jobs.models import TERMINAL_STATUSES, Job, JobStatus
from rollmux_web.workflow.models import EndReason, PhaseRecord, PhaseState, Placement
from tests.factories import database_url
from tests.workers.builders import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.ray]
ROOT = Path(__file__).resolve().parents[2]
# this helper's loopback ports: the Ray head takes 8130-8137, the web server 8138, Redis 8139
RAY_PORT, WEB_PORT, REDIS_PORT = 8130, 8138, 8139
ITERATIONS = 6


def _descendants(pid: int) -> list[int]:
    """Return the pids of a process's descendants (from /proc: no name matching)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _controller_pid(run_pid: int) -> int | None:
    for pid in _descendants(run_pid):
        try:
            cmd = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"worker" in cmd and b"controller@%h" in cmd:
            return pid
    return None


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


def _broker_app() -> Any:
    from celery import Celery

    url = f"redis://127.0.0.1:{REDIS_PORT}/0"
    # not the current app: a Celery() made current (the default) would take over this
    # thread's `shared_task`s, and later tests' `.delay()` would go to this dead broker
    return Celery("probe", broker=url, backend=url, set_as_current=False)


def _jobs() -> list[int]:
    from django.contrib.auth.models import User

    from rollmux_web.accounts.models import Tenant
    from rollmux_web.quotas.models import SloClass

    alice = User.objects.get(username="alice")
    common = dict(
        tenant=Tenant.objects.get(name="vision"), submitter=alice, runner="toy-rl",
        slo_class=SloClass.objects.get(name="bronze"), iterations=ITERATIONS, rollout_gpus=8,
        train_gpus=8, t_roll_max_s=120.0, t_roll_min_s=100.0, t_train_max_s=60.0,
        t_train_min_s=50.0, host_mem_gb=300.0, time_scale=200.0, model="toy",
    )  # fmt: skip
    return [Job.objects.create(name=f"topo-{i}", **common).pk for i in range(3)]


def _progress(ids: list[int]) -> int:
    return sum(Job.objects.filter(pk__in=ids).values_list("iterations_done", flat=True))


def test_a_killed_controller_and_a_redis_outage_cost_nothing(tmp_path: Path) -> None:
    redis = _redis(tmp_path)
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": f"redis://127.0.0.1:{REDIS_PORT}/0",
        "ROLLMUX_RAY_PORT": str(RAY_PORT),
        "ROLLMUX_PORT": str(WEB_PORT),
        "ROLLMUX_SEED_ARGS": "--no-jobs",
        "ROLLMUX_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        # no live moves (a move is a new placement: the attempts below would count it)
        "ROLLMUX_CONSOLIDATION": "false",
        "ROLLMUX_DRIFT_REPLAN": "false",
    }
    log = tmp_path / "run.log"
    run = subprocess.Popen(
        ["bin/run.sh"], cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        app = _broker_app()
        try:  # the demo inventory is seeded and the controller answers
            wait_for(lambda: _controller_pid(run.pid) is not None, timeout=150)
            app.send_task("workers.tasks.ping", queue="rollmux").get(timeout=180)
        except Exception:
            text = "\n".join(x for x in log.read_text().splitlines() if "due task" not in x)
            raise AssertionError(text[-6000:]) from None
        ids = _jobs()
        app.send_task("workers.tasks.plan", queue="rollmux")
        wait_for(lambda: _progress(ids) >= 2, timeout=90)

        # 1. kill -9 the controller while phases run; run.sh starts it again
        wait_for(lambda: PhaseRecord.objects.filter(job_id__in=ids, state="running").exists())
        killed = _controller_pid(run.pid)
        assert killed is not None
        os.kill(killed, signal.SIGKILL)
        wait_for(lambda: _controller_pid(run.pid) not in (None, killed), timeout=30)
        wait_for(lambda: _progress(ids) >= 8, timeout=90)

        # 2. Redis goes away mid-phase and comes back (no persistence: queued messages lost)
        wait_for(lambda: PhaseRecord.objects.filter(job_id__in=ids, state="running").exists())
        down_at = datetime.now(UTC)
        redis.kill()
        redis.wait()
        time.sleep(3.0)  # phases end meanwhile; their reports cannot reach the controller
        redis = _redis(tmp_path)
        back_at = datetime.now(UTC)
        wait_for(
            lambda: (
                Job.objects.filter(pk__in=ids).exclude(status__in=TERMINAL_STATUSES).count() == 0
            ),
            timeout=120,
        )
        # (recorded after the fact: phases whose stamps say they ended during the outage)
        late = [
            (p.reported_at - back_at).total_seconds()
            for p in PhaseRecord.objects.filter(
                job_id__in=ids, finished_at__gte=down_at, finished_at__lt=back_at
            )
        ]
        print(f"outage: {len(late)} phases ended during it; applied {late} s after Redis returned")
        assert late, "phases must end during the outage"
        assert max(late) < 5.0, late
    finally:
        os.killpg(run.pid, signal.SIGTERM)  # run.sh's own session: its Ray head, workers, beat
        try:
            run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        redis.kill()
        redis.wait()
    for job in Job.objects.filter(pk__in=ids):
        assert job.status == JobStatus.COMPLETED, (job.reason, log.read_text()[-3000:])
        # no phase was lost: a job was placed again only to move it (consolidation on a
        # departure: its placement ended 'moved' at an iteration boundary), never resubmitted
        moved = Placement.objects.filter(job=job, end_reason=EndReason.MOVED).count()
        assert job.attempts == 1 + moved, list(
            Placement.objects.filter(job=job).values_list("attempt", "end_reason")
        )
        assert not Placement.objects.filter(job=job, end_reason__in=["failed", "lost"]).exists()
        assert set(PhaseRecord.objects.filter(job=job).values_list("state", flat=True)) == {
            PhaseState.SUCCEEDED
        }
        records = PhaseRecord.objects.filter(job=job, kind__in=["rollout", "train"])
        assert sorted(records.values_list("iteration", "kind")) == sorted(
            (i, k) for i in range(ITERATIONS) for k in ("rollout", "train")
        )
        # the policy's update count says every training ran exactly once (none twice)
        trains = records.filter(kind="train").order_by("iteration")
        assert [int(p.metrics["updates"]) for p in trains] == list(range(1, ITERATIONS + 1))
