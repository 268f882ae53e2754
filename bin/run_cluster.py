"""`make run-cluster`: the demo on a local multi-node Ray cluster (one raylet per node).

1. migrate its own SQLite database (var/cluster.sqlite3: `make run`'s data is untouched),
   seed the demo users and a small inventory: 2 H20 + 2 H800 nodes, 2 GPUs each;
2. start a Ray head (the controller's node: no GPUs) and one Ray node per inventory node,
   each its own raylet process on loopback, labelled `rollmux.io/node=<name>` and
   declaring the node's GPUs (`ray.cluster_utils.Cluster`; `ray start --address` refuses
   to join a second node on one machine with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0);
3. submit a few small demo jobs (the first run only) and serve the web app (embedded:
   Celery runs in the web process, which dispatches to the cluster).

Ctrl-C or SIGTERM stops the web server (its own session: it gets SIGINT from this script,
after which its Ray driver leaves the cluster cleanly), then exactly the Ray processes this
script started (by their pids, through the Cluster's process handles): never a
machine-wide `ray stop`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workers import ray_env  # noqa: E402  (after the path)

NODES = {"H20": ("h20-0", "h20-1"), "H800": ("h800-0", "h800-1")}
GPUS_PER_NODE = 2
DEMO_JOBS = [  # name, runner, model, t_roll (min, max), t_train (min, max), iterations
    ("cluster-emu-a", "emulated", "Qwen2.5-7B", (240, 300), (80, 100), 40),
    ("cluster-emu-b", "emulated", "Qwen2.5-7B", (200, 260), (90, 110), 40),
    ("cluster-toy-rl", "toy-rl", "toy", (120, 160), (60, 80), 60),
]
# A real RL job on the wall clock (time scale 1): `hf-grpo` trains a ~1M-parameter Llama
# by GRPO (its reward curve rises), its phases declared as measured here (seconds); it runs
# in a co-execution group of its own (seed_demo.REAL_JOBS says why).
REAL_JOBS = [
    ("cluster-hf-grpo", "hf-grpo", "llama-1M", (0.5, 2), (1, 3), 100),
]


def _django(db: Path) -> None:
    os.environ["DATABASE_URL"] = f"sqlite:///{db}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rollmux_web.settings")
    os.environ.setdefault("DEBUG", "true")
    import django

    django.setup()


def seed(db: Path) -> None:
    """Migrate, seed the demo users, shrink the inventory to the cluster's four nodes."""
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)
    call_command("seed_demo", "--if-empty", "--no-jobs")
    from rollmux_web.inventory.models import GpuType, Node
    from rollmux_web.workflow.models import NodeAllocation

    wanted = {name for names in NODES.values() for name in names}
    GpuType.objects.filter(name__in=NODES).update(gpus_per_node=GPUS_PER_NODE)
    used = set(NodeAllocation.objects.values_list("node__name", flat=True))
    Node.objects.exclude(name__in=wanted).exclude(name__in=used).delete()
    Node.objects.filter(name__in=wanted).update(gpus=GPUS_PER_NODE)


def submit_demo_jobs() -> None:
    from django.contrib.auth.models import User

    from rollmux_web.jobs.models import Job
    from rollmux_web.jobs.services import job_submit

    if Job.objects.exists():
        return
    user = User.objects.get(username="alice")
    tenant = user.profile.tenants.first()
    for name, runner, model, (rmin, rmax), (tmin, tmax), iterations in DEMO_JOBS + REAL_JOBS:
        spec = {
            "name": name, "tenant": tenant.name if tenant else None, "model": model,
            "slo_class": "bronze", "runner": runner, "rollout_gpus": GPUS_PER_NODE,
            "train_gpus": GPUS_PER_NODE, "t_roll_min_s": float(rmin), "t_roll_max_s": float(rmax),
            "t_train_min_s": float(tmin), "t_train_max_s": float(tmax), "host_mem_gb": 200.0,
            "iterations": iterations,
        }  # fmt: skip
        if (name, runner, model, (rmin, rmax), (tmin, tmax), iterations) in REAL_JOBS:
            spec |= {"time_scale": 1.0, "host_mem_gb": 16.0}
        job = job_submit(user=user, spec=spec, channel="seed")
        print(f"  job #{job.pk} {job.name} ({runner})")


def head_node_args(port: int, temp_dir: str) -> dict[str, Any]:
    """Return the Ray head's arguments: the GCS on `port`, no dashboard, its own temp dir."""
    return {
        "num_cpus": 1, "gcs_server_port": port, "include_dashboard": False, "temp_dir": temp_dir,
    }  # fmt: skip


def start_head(port: int) -> Any:
    """Start the Ray head (the controller's node) in its own temp directory; return the
    Cluster, to which `add_nodes` adds the inventory's nodes."""
    from ray.cluster_utils import Cluster

    temp_dir = ray_env.own_temp_dir()  # not /tmp/ray: no bare ray.init() attaches to it
    print(f"  Ray temp directory {temp_dir} (ROLLMUX_RAY_TEMP_DIR)")
    with ray_env.controller_node():  # the head: the coordinators' node (its workers at 0)
        return Cluster(
            initialize_head=True, head_node_args=head_node_args(port, temp_dir),
            shutdown_at_exit=True,
        )  # fmt: skip


def add_nodes(cluster: Any) -> None:
    """Add one labelled Ray node per inventory node, declaring its GPUs."""
    from rollmux_web.inventory.models import Node

    for node in Node.objects.order_by("name"):
        cluster.add_node(
            num_cpus=0, num_gpus=node.gpus, labels={"rollmux.io/node": node.name}, wait=True,
            temp_dir=ray_env.temp_dir(),
        )  # fmt: skip
        print(f"  Ray node for {node.name}: {node.gpus} GPUs, label rollmux.io/node={node.name}")


def _stop_web(web: subprocess.Popen[bytes]) -> None:
    """Stop the web server as Ctrl-C would (SIGINT: Django and Ray's driver shut down
    cleanly), then SIGTERM, then SIGKILL, each after a grace period; by its pid only."""
    for sig, grace in ((signal.SIGINT, 15), (signal.SIGTERM, 10)):
        if web.poll() is not None:
            return
        web.send_signal(sig)
        try:
            web.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
    web.kill()
    web.wait()


def main() -> int:
    ray_env.apply()
    port = int(os.environ.get("ROLLMUX_CLUSTER_PORT", "8146"))
    http = os.environ.get("ROLLMUX_HTTP_ADDR", "127.0.0.1:8000")
    db = Path(os.environ.get("ROLLMUX_CLUSTER_DB", ROOT / "var" / "cluster.sqlite3"))
    db.parent.mkdir(parents=True, exist_ok=True)
    _django(db)
    seed(db)
    print(f"Ray head on 127.0.0.1:{port}, one Ray node per inventory node:")

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    t0 = time.monotonic()
    cluster: Any = None
    web: subprocess.Popen[bytes] | None = None
    try:
        cluster = start_head(port)
        add_nodes(cluster)
        print(f"  cluster up in {time.monotonic() - t0:.1f} s")
        submit_demo_jobs()
        env = dict(os.environ, ROLLMUX_DISPATCHER="ray", ROLLMUX_RAY_ADDRESS=str(cluster.address))
        env.pop("REDIS_URL", None)  # embedded: Celery runs in the web process
        # its own session: Ctrl-C reaches this script only, which then stops the web server
        # before the cluster (both at once left the web process's Ray driver printing stack
        # traces as the cluster went away under it)
        web = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", http, "--noreload"],
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        print(f"RollMux on http://{http}  (alice / demo-alice, admin / demo-admin); Ctrl-C stops")
        return web.wait()
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM: also while the cluster is still starting
        return 0
    finally:
        if web is not None:
            _stop_web(web)  # first, while its Ray driver can still say goodbye to the cluster
        if cluster is not None:
            cluster.shutdown()  # the head and every node process it started, by pid
        print("stopped the web server and the Ray processes this script started")


if __name__ == "__main__":
    sys.exit(main())
