"""The one multi-node Ray cluster the multi-node tests share (imported by the conftest).

A head (the controller's Ray node: this test process connects to it) plus one Ray node per
inventory node of the multi-node world, each its own raylet process on loopback, built with
`ray.cluster_utils.Cluster`: 2 H20 + 2 H800 nodes, 2 GPUs declared each (`num_gpus` on a
CPU machine), labelled `rollmux.io/node=<name>`. Health checks are tightened so a killed
raylet is declared dead in about a second (production keeps Ray's defaults, ~15 s).

Object storage: the session's cluster comes with an S3-compatible server on loopback (moto's
ThreadedMotoServer, a dev dependency, on a free port, bucket `rollmux-checkpoints`),
started before the Ray nodes so that every one of them, like a production node, has the
standard AWS settings in its environment (AWS_ENDPOINT_URL, the keys, the region), which
`pyarrow.fs` reads; a test points ROLLMUX_CHECKPOINT_URI at `s3://rollmux-checkpoints/...`.

The single local Ray of the other Ray tests (`ray_cluster`) cannot share a process with
it, so the tests that use this cluster run last (`order_multinode_last`) and the fixture
shuts that local Ray down first.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from workers import ray_env

NODES = ("h20-0", "h20-1", "h800-0", "h800-1")
GPUS_PER_NODE = 2
# a killed raylet is dead after ~3 missed checks of 300 ms (Ray's default: 5 x 3 s)
FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 300,
    "health_check_timeout_ms": 300,
    "health_check_failure_threshold": 3,
}
# what docker-compose.yml and the KubeRay manifest set (RAY_health_check_period_ms=1000)
PRODUCTION_HEALTH_CHECKS = {"health_check_period_ms": 1000}


BUCKET = "rollmux-checkpoints"


@dataclass
class ObjectStorage:
    """An S3-compatible server on loopback with one bucket (moto, in this process)."""

    server: Any
    endpoint: str

    def uri(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def keys(self, prefix: str) -> list[str]:
        import boto3

        listed = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=prefix)
        return sorted(o["Key"] for o in listed.get("Contents", []))


def start_object_storage() -> ObjectStorage:
    """Start the S3 server on a free port; put its settings in this process's environment
    (the Ray nodes started after it inherit them); create the bucket."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="rollmux-test",
        AWS_SECRET_ACCESS_KEY="rollmux-test",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",  # never ask a cloud metadata endpoint
    )
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    return ObjectStorage(server, endpoint)


@dataclass
class MultiNode:
    cluster: Any
    nodes: dict[str, Any]  # inventory name -> ray._private.node.Node (its raylet process)
    address: str
    storage: ObjectStorage | None = None

    def ray_node_id(self, name: str) -> str:
        return str(self.nodes[name].node_id)

    def add(self, name: str, gpus: int = GPUS_PER_NODE) -> Any:
        """Start a Ray node for an inventory node (again, after a kill)."""
        from workers.dispatch.ray_dispatcher import NODE_LABEL

        node = self.cluster.add_node(
            num_cpus=0, num_gpus=gpus, labels={NODE_LABEL: name}, wait=True
        )
        self.nodes[name] = node
        return node


def free_port() -> int:
    """Return a loopback port nothing listens on now (never Redis's 6379, which is taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_cluster(
    names: tuple[str, ...] = NODES,
    *,
    port: int | None = None,
    gpus: int = GPUS_PER_NODE,
    object_storage: bool = False,
    health_checks: dict[str, int] | None = None,
) -> MultiNode:
    """Start a head and one labelled Ray node per name (with `object_storage`, an S3 server
    first, whose settings every node inherits); connect this process to it.

    The head's GCS port is a free one unless given: two test runs on one machine (CI and a
    developer, or two checkouts) must not join each other's cluster.
    """
    port = port or free_port()
    ray_env.apply()
    from ray.cluster_utils import Cluster

    from workers.dispatch import ray_dispatcher

    ray_dispatcher.shutdown_ray()  # a local Ray of earlier tests, if any
    storage = start_object_storage() if object_storage else None
    with ray_env.controller_node():  # the head: the coordinators' node, as in production
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 2,
                "gcs_server_port": port,
                "include_dashboard": False,
                "_system_config": FAST_HEALTH_CHECKS if health_checks is None else health_checks,
            },
        )
    multinode = MultiNode(cluster, {}, str(cluster.address), storage)
    for name in names:
        multinode.add(name, gpus)
    ray_dispatcher.ensure_ray(multinode.address)
    return multinode


@pytest.fixture(scope="session")
def multinode_cluster() -> Iterator[MultiNode]:
    from workers.dispatch import ray_dispatcher

    multinode = start_cluster(object_storage=True)
    yield multinode
    ray_dispatcher.shutdown_ray()
    multinode.cluster.shutdown()
    if multinode.storage is not None:
        multinode.storage.server.stop()


@pytest.fixture
def multinode_world(world: Any) -> Any:
    """The test world shrunk to the cluster's inventory: 2 H20 + 2 H800 nodes of 2 GPUs."""
    from rollmux_web.inventory.models import GpuType, Node

    Node.objects.exclude(name__in=NODES).delete()
    Node.objects.update(gpus=GPUS_PER_NODE)
    GpuType.objects.update(gpus_per_node=GPUS_PER_NODE)
    return world


@pytest.fixture
def multinode_workflow(
    multinode_cluster: MultiNode, settings: Any, tmp_path: Any, clean_broker: None
) -> Iterator[Any]:
    """The workflow on the multi-node cluster, with a real Celery worker in this process."""
    from celery.contrib.testing.worker import start_worker

    from rollmux_web import ports
    from rollmux_web.celery import app
    from workers import triggers
    from workers.composition import deliver_report, report_config
    from workers.dispatch.ray_dispatcher import RayDispatcher

    settings.ROLLMUX_CHECKPOINT_DIR = str(tmp_path / "ckpt")  # one directory every node reaches
    settings.ROLLMUX_EMBEDDED_BEAT = False
    dispatcher = RayDispatcher(
        address=multinode_cluster.address,
        on_report=deliver_report,
        report=report_config(),
        on_node_change=triggers.node_ray_changed,  # the Ray node watcher, as in production
    )
    dispatcher.warm()
    with (
        ports.override(dispatcher=dispatcher),
        start_worker(  # the controller's queues named (see conftest's celery_worker_thread)
            app,
            pool="threads",
            concurrency=2,
            perform_ping_check=False,
            shutdown_timeout=20,
            queues=list(settings.ROLLMUX_CONTROLLER_QUEUES),
        ),  # fmt: skip
    ):
        try:
            yield dispatcher
        finally:
            dispatcher.stop()  # the node watch first: its last change's task still runs here


def wait_all_done(job_ids: list[int], timeout: float) -> None:
    """Wait until the jobs are done; on timeout fail with their states, reasons and phases."""
    from rollmux_web.jobs.models import Job
    from rollmux_web.workflow.models import PhaseRecord
    from tests.workers.builders import all_done, wait_for

    try:
        wait_for(all_done(job_ids), timeout=timeout)
    except AssertionError:
        jobs = list(Job.objects.filter(pk__in=job_ids).values_list("name", "status", "reason"))
        phases = list(
            PhaseRecord.objects.filter(job_id__in=job_ids)
            .exclude(state="succeeded")
            .values_list("job_id", "kind", "iteration", "state", "outcome")
        )
        raise AssertionError(
            f"not done in {timeout} s: {jobs}; unfinished phases {phases}"
        ) from None


def order_multinode_last(items: list[Any]) -> None:
    """Run the tests that use the multi-node cluster after every other test."""
    items.sort(key=lambda item: "multinode_cluster" in getattr(item, "fixturenames", ()))
