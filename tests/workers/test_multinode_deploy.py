"""The KubeRay manifest cannot run here: check by parsing that it has the shape the
dispatcher needs (labelled GPU nodes per pool, a controller that is a driver on a node)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from workers.dispatch.ray_dispatcher import NODE_LABEL

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = yaml.safe_load((ROOT / "deploy" / "kuberay" / "raycluster.yaml").read_text())


def test_the_raycluster_has_labelled_h20_and_h800_worker_groups() -> None:
    assert CLUSTER["apiVersion"] == "ray.io/v1" and CLUSTER["kind"] == "RayCluster"
    groups = {g["groupName"]: g for g in CLUSTER["spec"]["workerGroupSpecs"]}
    assert set(groups) == {"h20", "h800"}
    for name, group in groups.items():
        params = group["rayStartParams"]
        assert json.loads(json.loads(params["resources"])) == {name.upper(): 8}
        assert params["num-gpus"] == "8"
        # one Ray node per machine, labelled with the name the inventory gives it
        assert params["labels"] == f"{NODE_LABEL}=$K8S_NODE_NAME"
        (container,) = group["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["K8S_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        assert container["resources"]["requests"]["nvidia.com/gpu"] == 8  # the whole machine


def test_the_controller_is_a_driver_on_the_head_node_not_a_ray_client() -> None:
    head = CLUSTER["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0" and head["rayStartParams"]["num-cpus"] == "0"
    containers = {c["name"]: c for c in head["template"]["spec"]["containers"]}
    controller = containers["rollmux-controller"]
    assert controller["command"][:4] == ["celery", "-A", "rollmux_web", "worker"]
    assert controller["command"][-2:] == ["-Q", "rollmux-phase,rollmux"]
    env = {e["name"]: e.get("value") for e in controller["env"]}
    assert env["ROLLMUX_RAY_ADDRESS"] == "127.0.0.1:6379"  # not ray://
    # it shares the head's Ray session directory (the raylet's sockets)
    mounts = {m["mountPath"] for m in controller["volumeMounts"]}
    assert "/tmp/ray" in mounts
    assert "/tmp/ray" in {m["mountPath"] for m in containers["ray-head"]["volumeMounts"]}
