"""The Ray dispatcher on the multi-node cluster, without the web app: what fails a phase at
once (a runner that cannot be loaded, a node no Ray node serves, a Ray node with fewer GPUs
than the job needs there) or within seconds (a node whose GPUs other Ray work holds)
instead of "running" or a minute's timeout."""

from __future__ import annotations

import contextlib
import queue
import time
from typing import Any

import pytest

from tests.workers.forbidden_runner import MARKER
from workers.dispatch import Outcome, PhaseOrder, PhaseReport
from workers.runners import RunnerContext

pytestmark = [pytest.mark.ray]
changes: list[tuple[str, bool, str]] = []  # what the dispatcher told on_node_change


def order(
    phase_id: int,
    runner: str,
    rollout: tuple[str, ...],
    train: tuple[str, ...],
    gpus: dict[str, int] | None = None,
) -> Any:
    ctx = RunnerContext(
        job_id=900 + phase_id, iterations=2, t_roll_min_s=0.05, t_roll_max_s=0.05,
        t_train_min_s=0.05, t_train_max_s=0.05, host_mem_gb=1.0, weights_gb=1.0,
        runner_packages=("tests.workers.user_runners",),
    )  # fmt: skip
    return PhaseOrder(
        phase_id=phase_id, job_id=ctx.job_id, placement_id=1, kind="rollout", iteration=0,
        nodes=rollout, pinned_nodes=tuple(sorted(rollout + train)), runner=runner,
        context=ctx.to_dict(), group_id=1, rollout_nodes=rollout, train_nodes=train,
        node_gpus=gpus or {},
    )  # fmt: skip


@pytest.fixture
def dispatch(multinode_cluster: Any) -> Any:
    from workers.dispatch.ray_dispatcher import RayDispatcher

    reports: queue.Queue[PhaseReport] = queue.Queue()
    dispatcher = RayDispatcher(
        address=multinode_cluster.address,
        on_report=reports.put,
        # only what it takes down (its node watcher also tells every live node it sees)
        on_node_change=lambda *change: None if change[1] else changes.append(change),
    )
    changes.clear()

    def run(o: PhaseOrder) -> tuple[PhaseReport, float]:
        t0 = time.monotonic()
        dispatcher.dispatch(o)
        report = reports.get(timeout=60)
        dispatcher.kill(o.job_id, o.placement_id)
        return report, time.monotonic() - t0

    return run


def test_coordinators_created_at_once_all_run_on_the_controllers_ray_node(
    multinode_cluster: Any,
) -> None:
    # not on a GPU node: a coordinator there would die with that node, and its phase would
    # end `lost: actor died` instead of naming the node (the fault test's placement `lost`);
    # and at the controller's priority, not below it (Ray's worker niceness, 15)
    import os

    import ray

    from workers.dispatch.ray_dispatcher import NODE_LABEL, RayDispatcher

    dispatcher = RayDispatcher(address=multinode_cluster.address, on_report=lambda r: None)
    orders = [order(20 + i, "emulated", ("h20-0",), ("h800-0",)) for i in range(6)]
    handles = [dispatcher.coordinator(o) for o in orders]  # created at once, no phase yet
    try:
        stats = ray.get([h.stats.remote() for h in handles])
    finally:
        for o in orders:
            dispatcher.kill(o.job_id, o.placement_id)
    controller = ray.get_runtime_context().get_node_id()  # this process drives the cluster
    gpu_nodes = {multinode_cluster.ray_node_id(n): n for n in multinode_cluster.nodes}
    nodes = [s["ray_node_id"] for s in stats]
    assert nodes == [controller] * len(orders), [gpu_nodes.get(n, n[:12]) for n in nodes]
    assert [s["niceness"] for s in stats] == [os.nice(0)] * len(orders)
    # a GPU node's worker processes (the phases' work) keep Ray's lower priority
    on_gpu_node = (
        ray.remote(num_cpus=0)(Holder).options(label_selector={NODE_LABEL: "h20-0"}).remote()
    )
    try:
        assert ray.get(on_gpu_node.niceness.remote(), timeout=60) > os.nice(0)
    finally:
        ray.kill(on_gpu_node, no_restart=True)


def test_a_runner_outside_the_allowlist_fails_with_a_load_error_and_is_never_imported(
    dispatch: Any,
) -> None:
    MARKER.unlink(missing_ok=True)
    report, _ = dispatch(order(1, "tests.workers.forbidden_runner:Runner", ("h20-0",), ("h800-0",)))
    assert report.load_error, report.summary
    assert "not covered by the runner allowlist" in report.reason
    assert "tests.workers.user_runners" in report.reason  # it says what is allowed
    assert not MARKER.exists(), "a worker imported a module no allowlist names"


def test_a_node_no_ray_node_serves_fails_the_phase_at_once_naming_its_label(
    dispatch: Any,
) -> None:
    # and the dispatcher tells the inventory (through on_node_change) that it is missing
    report, took = dispatch(order(2, "emulated", ("h20-7",), ("h800-0",)))
    assert report.summary == (
        "lost: node h20-7: no live Ray node has the label rollmux.io/node=h20-7"
    ), report.summary  # the platform's failure (not the job's), naming what is missing
    assert report.outcome is Outcome.LOST and report.lost_node == "h20-7"
    assert changes == [("h20-7", False, report.reason.removeprefix("node "))]
    assert took < 5.0, "a missing node must fail the phase at once, not after a timeout"


def test_a_ray_node_with_fewer_gpus_than_the_job_needs_there_fails_the_phase_at_once(
    dispatch: Any, multinode_cluster: Any
) -> None:
    # h800-0's Ray node declares 2 GPUs; the job's 4 training GPUs on it cannot all be had
    report, took = dispatch(
        order(4, "emulated", ("h20-0",), ("h800-0",), gpus={"h20-0": 2, "h800-0": 4})
    )
    reason = (
        "h800-0: no live Ray node has the label rollmux.io/node=h800-0 with 4 GPU"
        f" (its Ray node {multinode_cluster.ray_node_id('h800-0')[:12]} has 2)"
    )
    assert report.summary == f"lost: node {reason}", report.summary
    assert report.lost_node == "h800-0"
    assert ("h800-0", False, reason) in changes  # the inventory is told, with the reason
    print(f"\nh800-0 short of GPUs: the phase failed {took:.2f} s after its dispatch")
    assert took < 5.0, "a node that lacks GPUs must fail the phase at once"


class Holder:
    """Other Ray work that holds GPUs of a node (not RollMux's)."""

    def ping(self) -> int:
        return 1

    def niceness(self) -> int:
        import os

        return os.nice(0)


def test_workers_whose_node_gpus_other_ray_work_holds_fail_within_seconds_naming_it(
    dispatch: Any, multinode_cluster: Any
) -> None:
    import ray

    from workers.dispatch.ray_dispatcher import NODE_LABEL

    node = multinode_cluster.add("h800-6", gpus=2)
    holder = (
        ray.remote(num_cpus=0)(Holder)
        .options(num_gpus=2, label_selector={NODE_LABEL: "h800-6"})
        .remote()
    )
    try:
        assert ray.get(holder.ping.remote(), timeout=30) == 1
        # the label and the GPU count are right: only the coordinator's wait can tell
        report, took = dispatch(
            order(5, "emulated", ("h20-0",), ("h800-6",), gpus={"h20-0": 2, "h800-6": 2})
        )
        told = list(changes)  # (before its Ray node is removed below: that one is a death)
    finally:
        ray.kill(holder, no_restart=True)
        with contextlib.suppress(ValueError):
            ray.util.remove_placement_group(ray.util.get_placement_group("rollmux-gpus-h800-6"))
        multinode_cluster.cluster.remove_node(node)
        multinode_cluster.nodes.pop("h800-6")
    assert report.summary == (
        "lost: workers cannot be created: the GPUs of h800-6 are held by other Ray work:"
        " its Ray node has 0 of 2 GPU free, its GPU placement group rollmux-gpus-h800-6"
        " (2 x 1 GPU) needs them all"
    ), report.summary
    assert not any(name == "h800-6" for name, _, _ in told), "the node itself is fine"
    print(f"\nh800-6's GPUs held: the phase failed {took:.2f} s after its dispatch")
    # the coordinator's own start and the busy wait (3 s), on a loaded machine: never the
    # 60 s creation timeout
    assert took < 30.0, f"took {took:.1f} s"


def test_a_worker_whose_gpu_shares_other_jobs_hold_fails_within_seconds_naming_it(
    dispatch: Any, multinode_cluster: Any
) -> None:
    # every share of the node's GPU taken by other jobs' resident workers (ROLLMUX_GPU_SHARE
    # of them per GPU; here one actor holds all of the GPU's bundle, the same to Ray)
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from workers.dispatch.ray_coordinator import GPU_SHARE, node_gpu_group

    node = multinode_cluster.add("h800-7", gpus=1)
    group = node_gpu_group("h800-7", 1)  # the node's GPU group, as the coordinators make it
    holder = (
        ray.remote(num_cpus=0)(Holder)
        .options(
            num_gpus=1.0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=0
            ),
        )
        .remote()
    )
    try:
        assert ray.get(holder.ping.remote(), timeout=30) == 1
        report, took = dispatch(
            order(6, "emulated", ("h20-0",), ("h800-7",), gpus={"h20-0": 2, "h800-7": 1})
        )
        told = list(changes)
    finally:
        ray.kill(holder, no_restart=True)
        ray.util.remove_placement_group(group)
        multinode_cluster.cluster.remove_node(node)
        multinode_cluster.nodes.pop("h800-7")
    assert report.summary == (
        f"lost: workers cannot be created: GPU 0 of h800-7 holds {GPU_SHARE} resident workers"
        f" already (ROLLMUX_GPU_SHARE={GPU_SHARE})"
    ), report.summary
    assert not any(name == "h800-7" for name, _, _ in told), "the node itself is fine"
    print(f"\nh800-7's GPU shares taken: the phase failed {took:.2f} s after its dispatch")
    assert took < 30.0, f"took {took:.1f} s"  # the busy wait (3 s), not the 60 s timeout
