"""The Ray dispatcher on the multi-node cluster, without the web app: what fails a phase at
once (a runner that cannot be loaded, a node no Ray node serves) instead of "running"."""

from __future__ import annotations

import queue
import time
from typing import Any

import pytest

from tests.workers.forbidden_runner import MARKER
from workers.dispatch import PhaseOrder, PhaseReport
from workers.runners import RunnerContext

pytestmark = [pytest.mark.ray]
changes: list[tuple[str, bool, str]] = []  # what the dispatcher told on_node_change


def order(phase_id: int, runner: str, rollout: tuple[str, ...], train: tuple[str, ...]) -> Any:
    ctx = RunnerContext(
        job_id=900 + phase_id, iterations=2, t_roll_min_s=0.05, t_roll_max_s=0.05,
        t_train_min_s=0.05, t_train_max_s=0.05, host_mem_gb=1.0, weights_gb=1.0,
        runner_packages=("tests.workers.user_runners",),
    )  # fmt: skip
    return PhaseOrder(
        phase_id=phase_id, job_id=ctx.job_id, placement_id=1, kind="rollout", iteration=0,
        nodes=rollout, pinned_nodes=tuple(sorted(rollout + train)), runner=runner,
        context=ctx.to_dict(), group_id=1, rollout_nodes=rollout, train_nodes=train,
    )  # fmt: skip


@pytest.fixture
def dispatch(multinode_cluster: Any) -> Any:
    from workers.dispatch.ray_dispatcher import RayDispatcher

    reports: queue.Queue[PhaseReport] = queue.Queue()
    dispatcher = RayDispatcher(
        address=multinode_cluster.address,
        on_report=reports.put,
        on_node_change=lambda *change: changes.append(change) if change[0] == "h20-7" else None,
    )
    changes.clear()

    def run(o: PhaseOrder) -> tuple[PhaseReport, float]:
        t0 = time.monotonic()
        dispatcher.dispatch(o)
        report = reports.get(timeout=60)
        dispatcher.kill(o.job_id, o.placement_id)
        return report, time.monotonic() - t0

    return run


def test_a_runner_outside_the_allowlist_fails_with_a_load_error_and_is_never_imported(
    dispatch: Any,
) -> None:
    MARKER.unlink(missing_ok=True)
    report, _ = dispatch(order(1, "tests.workers.forbidden_runner:Runner", ("h20-0",), ("h800-0",)))
    assert report.load_error, report.outcome
    assert "not covered by the runner allowlist" in report.outcome
    assert "tests.workers.user_runners" in report.outcome  # it says what is allowed
    assert not MARKER.exists(), "a worker imported a module no allowlist names"


def test_a_node_no_ray_node_serves_fails_the_phase_at_once_naming_its_label(
    dispatch: Any,
) -> None:
    # and the dispatcher tells the inventory (through on_node_change) that it is missing
    report, took = dispatch(order(2, "emulated", ("h20-7",), ("h800-0",)))
    assert report.outcome == (
        "lost: node h20-7: no live Ray node has the label rollmux.io/node=h20-7"
    ), report.outcome  # the platform's failure (not the job's), naming what is missing
    assert changes == [("h20-7", False, report.outcome.removeprefix("lost: node "))]
    assert took < 5.0, "a missing node must fail the phase at once, not after a timeout"
