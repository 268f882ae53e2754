"""`make run-cluster` as a user runs it: it starts quietly, serves the app, and Ctrl-C
stops the web server and exactly the Ray processes it started, without a stack trace."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from workers import ray_env

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
GCS_PORT, HTTP_PORT = 8187, 8188  # this checkout's ports: 8180-8189
# what a user should not have to read at every start: per-task and per-beat lines
CHATTER = re.compile(r"Task \S+\[.*\] succeeded|left to the server's beat|No hostname was supplied")


def _ray_pids(temp: str) -> list[int]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines() if temp in line]


def _wait_for(predicate, seconds: float, what: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        assert proc.poll() is None, f"run_cluster.py exited ({proc.returncode}) before {what}"
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {seconds} s")


def _serves() -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{HTTP_PORT}/healthz", timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def test_run_cluster_starts_quietly_and_stops_every_ray_process_without_a_stack_trace() -> None:
    work = Path(tempfile.mkdtemp(prefix="rmx-rc-", dir="/tmp"))  # short: Ray socket paths
    temp = str(work / "ray")
    env = {**os.environ, **ray_env.RAY_ENV}
    env.update(
        ROLLMUX_CLUSTER_DB=str(work / "cluster.sqlite3"), ROLLMUX_CLUSTER_PORT=str(GCS_PORT),
        ROLLMUX_HTTP_ADDR=f"127.0.0.1:{HTTP_PORT}", ROLLMUX_RAY_TEMP_DIR=temp,
        RAY_raylet_start_wait_time_s="120",
    )  # fmt: skip
    for name in ("DATABASE_URL", "REDIS_URL", "RAY_TMPDIR", "ROLLMUX_DISPATCHER"):
        env.pop(name, None)
    out, err = work / "stdout", work / "stderr"
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen([sys.executable, "bin/run_cluster.py"], cwd=ROOT, env=env,
                                stdout=o, stderr=e)  # fmt: skip
    try:
        _wait_for(lambda: b"RollMux on http" in out.read_bytes(), 300, "serving line", proc)
        _wait_for(_serves, 120, "health answer", proc)
        time.sleep(8)  # the embedded beat ticks (plan, reconcile, watch) a few times
        started = err.read_text()
        assert _ray_pids(temp), "no process runs in the cluster's temp directory " + temp
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _ray_pids(str(work)) + _ray_pids(f"runserver 127.0.0.1:{HTTP_PORT}"):
            os.kill(pid, signal.SIGKILL)  # what a failed run left behind, by pid
    stopped = err.read_text()[len(started) :]
    assert proc.returncode == 0, stopped[-3000:]
    assert not CHATTER.findall(started), started[-3000:]
    assert "Traceback" not in started + stopped, (started + stopped)[-3000:]
    assert "stopped the web server and the Ray processes" in out.read_text()
    deadline = time.monotonic() + 30  # every Ray process it started exits
    while _ray_pids(temp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _ray_pids(temp), _ray_pids(temp)
