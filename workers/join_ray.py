"""Join a Ray cluster as a zero-resource node, then run a command: the Celery controller's
entry point in production (docker-compose.yml; see workers/README.md "Topologies").

    python -m workers.join_ray --address=ray-head:6379 -- celery -A rollmux_web worker ...

The controller is a Ray driver on a node of its own, not a Ray Client: `ray.init(address=
<GCS>)` needs a raylet on the driver's machine, so this starts one (`ray start`, no CPUs,
no GPUs, label `rollmux.io/role=controller`: nothing is ever scheduled on it but the job
coordinators, which run on the controller's node) and then replaces itself with the
command. It imports no Ray itself (the `ray` CLI does the work).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from workers import ray_env

ROLE_LABEL = "rollmux.io/role=controller"


def join(address: str, *, attempts: int = 30, wait_s: float = 2.0) -> None:
    """Start a zero-resource Ray node joined to `address`; retry while the head starts."""
    cmd = [
        "ray", "start", f"--address={address}", "--num-cpus=0", "--num-gpus=0",
        f"--labels={ROLE_LABEL}", "--disable-usage-stats",
    ]  # fmt: skip
    for attempt in range(1, attempts + 1):
        # the coordinators' node: its worker processes at the controller's priority
        env = {**os.environ, **ray_env.CONTROLLER_NODE_ENV}
        if subprocess.run(cmd, check=False, env=env).returncode == 0:
            return
        print(f"join_ray: ray start failed (attempt {attempt}/{attempts})", file=sys.stderr)
        time.sleep(wait_s)
    raise SystemExit(f"join_ray: could not join the Ray cluster at {address}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", required=True, help="the Ray head's GCS address")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    join(args.address)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
