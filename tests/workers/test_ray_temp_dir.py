"""Every Ray the app starts keeps its sessions in a temp directory of its own
(ROLLMUX_RAY_TEMP_DIR), never Ray's machine-wide /tmp/ray, where the address file that any
bare `ray.init()` on the machine reads would lead it into the app's Ray (issue 24 item 13):
the embedded local Ray (`make run`), the local cluster of `make run-cluster`, and the Ray
head of `bin/run.sh` (`ray start --temp-dir`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from workers import ray_env

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
GCS_PORT = 8185  # this checkout's ports: 8180-8189

LOCAL = """
import json, ray
from workers.dispatch.ray_dispatcher import ensure_ray
ensure_ray("local")
print(json.dumps({"session": ray._private.worker._global_node.get_session_dir_path()}))
ray.shutdown()
"""

CLUSTER = """
import json, runpy, sys
from workers import ray_env
ray_env.apply()
run_cluster = runpy.run_path("bin/run_cluster.py", run_name="run_cluster")
temp = ray_env.own_temp_dir()
from ray.cluster_utils import Cluster
args = {**run_cluster["head_node_args"](int(sys.argv[1]), temp), "num_cpus": 0}
cluster = Cluster(initialize_head=True, head_node_args=args)
from pathlib import Path
written = {str(f): f.read_text().strip() for f in (Path(temp) / "ray" / "ray_current_cluster",
           Path("/tmp/ray/ray_current_cluster")) if f.exists()}  # (shutdown removes it)
print(json.dumps({"session": cluster.head_node.get_session_dir_path(),
                  "gcs": cluster.head_node.gcs_address, "written": written}))
cluster.shutdown()
"""


def _run(script: str, temp: str, *args: str) -> dict[str, str]:
    env = {**os.environ, **ray_env.RAY_ENV, ray_env.TEMP_DIR_ENV: temp}
    env["RAY_raylet_start_wait_time_s"] = "120"  # a loaded machine starts a raylet slowly
    env.pop("RAY_TMPDIR", None)
    for _ in range(3):  # a raylet on a loaded machine can die starting (ray-project/ray#65983)
        proc = subprocess.run(
            [sys.executable, "-c", script, *args], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        if proc.returncode == 0 or "timed out during startup" not in proc.stderr:
            break
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_default_temp_directory_is_the_checkouts_own_and_short(monkeypatch) -> None:
    monkeypatch.delenv(ray_env.TEMP_DIR_ENV, raising=False)
    default = ray_env.temp_dir()
    assert default != "/tmp/ray" and Path(default).name.startswith("rollmux-ray-")
    assert len(default) < 40  # Ray's socket paths under it stay within 107 characters
    monkeypatch.setenv(ray_env.TEMP_DIR_ENV, "/srv/ray-tmp")
    assert ray_env.temp_dir() == "/srv/ray-tmp"


def test_the_embedded_local_ray_keeps_its_sessions_in_its_own_temp_directory() -> None:
    temp = tempfile.mkdtemp(prefix="rmx-", dir="/tmp")  # short: socket paths
    out = _run(LOCAL, temp)
    assert Path(out["session"]).resolve().is_relative_to(Path(temp).resolve()), out


def test_the_run_cluster_ray_writes_its_address_only_into_its_own_temp_directory() -> None:
    temp = tempfile.mkdtemp(prefix="rmx-", dir="/tmp")
    out = _run(CLUSTER, temp, str(GCS_PORT))
    assert Path(out["session"]).resolve().is_relative_to(Path(temp).resolve()), out
    # the address file a bare ray.init() reads: in its own directory, not /tmp/ray
    address_file = str(Path(temp) / "ray" / "ray_current_cluster")
    assert out["written"][address_file] == out["gcs"], out
    assert out["written"].get("/tmp/ray/ray_current_cluster") != out["gcs"], out


def test_bin_run_sh_starts_its_ray_head_in_its_own_temp_directory() -> None:
    script = (ROOT / "bin" / "run.sh").read_text()
    assert "ray_dir=${ROLLMUX_RAY_TEMP_DIR:-/tmp/rollmux-ray-$RAY_PORT}" in script
    assert '--temp-dir="$ray_dir"' in script  # `ray start` writes its address file there too
