"""Stopping `bin/run.sh` stops every process it started, in turn too (embedded mode).

Embedded, the web server is the driver of a local Ray. Stopped with TERM (as a supervisor
or `kill` stops run.sh), it died before Ray's own shutdown ran; its GCS and raylet went
with it, but the raylet's dashboard and runtime-env agents stayed, orphaned, and ignored
TERM: every stop of `make run` left two processes behind (QA pass 10). run.sh now finds its
processes' descendants before it stops them and stops those left, by pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.factories import database_url
from tests.workers.builders import wait_for
from tests.workers.test_run_topology import _descendants

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.ray]
ROOT = Path(__file__).resolve().parents[2]
WEB_PORT = 8141  # this test's loopback port


def _cmdline(pid: int) -> bytes:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""


def _running(pid: int) -> bool:
    """Return True when `pid` is a process that has not exited (a zombie has)."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_stopping_embedded_run_sh_leaves_none_of_its_processes(tmp_path: Path) -> None:
    # (a short path: Ray's socket paths under it must fit AF_UNIX's 107 bytes)
    ray_dir = tempfile.mkdtemp(prefix="rm-stop-", dir="/tmp")
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "ROLLMUX_PORT": str(WEB_PORT),
        "ROLLMUX_RAY_TEMP_DIR": ray_dir,
    }
    for name in ("REDIS_URL", "ROLLMUX_EMBEDDED", "ROLLMUX_RAY_ADDRESS"):
        env.pop(name, None)  # embedded: in-process tasks, the web server's own local Ray
    log = tmp_path / "run.log"
    run = subprocess.Popen(
        ["bin/run.sh"], cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    started: list[int] = []
    try:
        try:  # the local Ray is up: its raylet has started its agents
            wait_for(
                lambda: any(
                    _cmdline(p).startswith(b"ray::DashboardAgent") for p in _descendants(run.pid)
                ),
                timeout=150,
                interval=0.5,
            )
        except AssertionError:
            raise AssertionError(log.read_text()[-4000:]) from None
        started = _descendants(run.pid)
        run.send_signal(signal.SIGTERM)  # run.sh alone, as a supervisor stops it
        run.wait(timeout=90)
        left = [(p, _cmdline(p).split(b"\0")[0]) for p in started if _running(p)]
        assert not left, left
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        for p in started:  # (what a failed run.sh left: by pid, never a `ray stop`)
            if _running(p):
                os.kill(p, signal.SIGKILL)
        shutil.rmtree(ray_dir, ignore_errors=True)
