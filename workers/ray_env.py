"""The environment every Ray process this project starts runs with (standard library only).

Without it Ray on this kind of machine reports usage, binds to the eth0 address and probes
cloud metadata endpoints (docs: the environment notes); with it, Ray stays on loopback.
The scripts that start Ray themselves (`bin/run_cluster.py`, `bench/`, the multi-node test
cluster) apply it before importing Ray; `make test` and `bin/run.sh` export the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # node IP 127.0.0.1, not the eth0 address
    "RAY_AUTH_MODE": "disabled",
    # the dashboard's cloud-metadata probe and `ray start`'s usage notice: a closed port
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "no_proxy": "127.0.0.1,localhost,::1",
}


# Every Ray this project starts keeps its sessions (sockets, logs) in a temp directory of
# its own, never Ray's machine-wide default (/tmp/ray): a Ray started there is the one any
# bare `ray.init()` on the machine attaches to (`ray_current_cluster`). ROLLMUX_RAY_TEMP_DIR
# names it; unset: one per user and checkout (below). bin/run.sh's Ray head: its own default.
TEMP_DIR_ENV = "ROLLMUX_RAY_TEMP_DIR"


def temp_dir() -> str:
    """Return the temp directory for the Rays this checkout starts: ROLLMUX_RAY_TEMP_DIR, or
    /tmp/rollmux-ray-<8 hex of the user and the checkout> (short on purpose: Ray's socket
    paths under it must stay within the 107 characters of a Unix socket path)."""
    explicit = os.environ.get(TEMP_DIR_ENV, "").strip()
    if explicit:
        return explicit
    checkout = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(f"{os.getuid()}:{checkout}".encode()).hexdigest()[:8]
    return os.path.join(tempfile.gettempdir(), f"rollmux-ray-{digest}")


def own_temp_dir() -> str:
    """Return `temp_dir()` for this process's Ray nodes, and point RAY_TMPDIR there too:
    ray.cluster_utils.Cluster writes the address file a bare `ray.init()` reads into Ray's
    default directory ($RAY_TMPDIR/ray), whatever the nodes' temp_dir."""
    path = temp_dir()
    os.environ["RAY_TMPDIR"] = path
    Path(path, "ray").mkdir(parents=True, exist_ok=True)
    return path


# The Ray node the job coordinators run on (the controller's: `workers.join_ray` in compose,
# the head in bin/run.sh, KubeRay, `make run-cluster` and the multi-node tests and bench, the
# one local Ray when embedded). Ray starts every worker process at niceness 15, below its
# own daemons and the controller: a coordinator sits on every phase switch's path (it
# publishes the phase's end, takes the next phase), and at 15 it waited behind every other
# process of a busy machine. At 0 it runs at the controller's priority. The GPU nodes keep
# Ray's 15: their workers run the phases, which must not starve the raylet.
CONTROLLER_NODE_ENV = {"RAY_worker_niceness": "0"}
CONTROLLER_NODE_CONFIG = {"worker_niceness": 0}  # the same, as a local Ray's _system_config


@contextlib.contextmanager
def controller_node() -> Iterator[None]:
    """Start the controller's Ray node inside this block (`ray.cluster_utils.Cluster`'s head:
    its raylet takes CONTROLLER_NODE_ENV from this process's environment, the Ray nodes
    started after the block do not)."""
    saved = {key: os.environ.get(key) for key in CONTROLLER_NODE_ENV}
    os.environ.update(CONTROLLER_NODE_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def apply(*, override: bool = True) -> None:
    """Set RAY_ENV in this process's environment (children inherit it)."""
    for key, value in RAY_ENV.items():
        if override:
            os.environ[key] = value
        else:
            os.environ.setdefault(key, value)
