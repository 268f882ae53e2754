"""The environment every Ray process this project starts runs with (standard library only).

Without it Ray on this kind of machine reports usage, binds to the eth0 address and probes
cloud metadata endpoints (docs: the environment notes); with it, Ray stays on loopback.
The scripts that start Ray themselves (`bin/run_cluster.py`, `bench/`, the multi-node test
cluster) apply it before importing Ray; `make test` and `bin/run.sh` export the same.
"""

from __future__ import annotations

import os

RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # node IP 127.0.0.1, not the eth0 address
    "RAY_AUTH_MODE": "disabled",
    # the dashboard's cloud-metadata probe and `ray start`'s usage notice: a closed port
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "no_proxy": "127.0.0.1,localhost,::1",
}


def apply(*, override: bool = True) -> None:
    """Set RAY_ENV in this process's environment (children inherit it)."""
    for key, value in RAY_ENV.items():
        if override:
            os.environ[key] = value
        else:
            os.environ.setdefault(key, value)
