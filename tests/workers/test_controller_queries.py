"""The group controller's phase-end path: what it writes, and its cost in database round
trips (every round trip is on the switch path between one phase's end and the next's start,
see bench/control_plane.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from rollmux_web import ports
from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow import services
from rollmux_web.workflow.models import (
    EndReason,
    IterationMetrics,
    PhaseRecord,
    PhaseState,
    Placement,
)
from tests.workers.builders import NoTriggers, Recorder, end_of, make_job
from workers.dispatch import PhaseOrder

pytestmark = pytest.mark.django_db(transaction=True)

# BEGIN, lock the group (+ async commit), claim the record (UPDATE ... RETURNING), read the
# open placements and jobs, insert the next phases, save the runtime, COMMIT.
PHASE_END_QUERIES = 7


def placed_pair(world: Any, recorder: Recorder, iterations: int = 2) -> list[PhaseOrder]:
    """Two jobs the planner packs into one group; return the first phases it dispatched."""
    for i in range(2):
        make_job(world, name=f"j{i}", iterations=iterations)
    services.queue_plan()
    assert recorder.orders, "the planner started no phase"
    first = list(recorder.orders)
    recorder.orders.clear()
    return first


def test_a_rollout_end_starts_the_training_in_a_bounded_number_of_round_trips(
    world: Any, recorder: Recorder
) -> None:
    order = placed_pair(world, recorder)[0]
    assert order.kind == "rollout"
    report = end_of(order)
    with CaptureQueriesContext(connection) as ctx:
        assert services.phase_finish(report) is True
    assert len(ctx.captured_queries) <= PHASE_END_QUERIES, [
        q["sql"][:80] for q in ctx.captured_queries
    ]
    # the record holds the host's stamps and metrics, the job's training was dispatched
    rec = PhaseRecord.objects.get(pk=order.phase_id)
    assert rec.state == PhaseState.SUCCEEDED
    assert rec.outcome == "ok"
    assert rec.metrics == {"load_s": 0.25}
    assert rec.warm_start is True
    assert abs(rec.finished_at.timestamp() - report.finished_at) < 1e-3  # type: ignore[operator]
    assert abs(rec.started_at.timestamp() - report.started_at) < 1e-3  # type: ignore[operator, union-attr]
    nxt = [o for o in recorder.orders if o.job_id == order.job_id]
    assert [(o.kind, o.iteration) for o in nxt] == [("train", 0)]
    assert PhaseRecord.objects.get(pk=nxt[0].phase_id).state == PhaseState.RUNNING
    placement = Placement.objects.get(pk=nxt[0].placement_id)
    pinned = {n.name for n in placement.rollout_nodes.all()} | {
        n.name for n in placement.train_nodes.all()
    }
    assert set(nxt[0].pinned_nodes) == pinned and set(nxt[0].nodes) <= pinned
    assert Job.objects.get(pk=order.job_id).status == JobStatus.RUNNING


def test_a_rollout_with_training_metrics_stores_them_in_the_claims_statement(
    world: Any, recorder: Recorder
) -> None:
    order = placed_pair(world, recorder)[0]
    report = end_of(order)
    report.metrics.update(reward_mean=0.5, reward_std=0.1, samples=64.0)
    with CaptureQueriesContext(connection) as ctx:
        assert services.phase_finish(report) is True
    # the upsert of the iteration's metrics is part of the claim's statement: no extra trip
    # (SQLite, the embedded default, has no UPDATE inside WITH: one statement more there)
    more = 0 if connection.vendor == "postgresql" else 1
    assert len(ctx.captured_queries) <= PHASE_END_QUERIES + more, [
        q["sql"][:80] for q in ctx.captured_queries
    ]
    row = IterationMetrics.objects.get(job_id=order.job_id)
    assert (row.iteration, row.reward_mean, row.samples, row.loss) == (0, 0.5, 64.0, None)
    assert row.placement_id == order.placement_id
    # a replay claims nothing, so it writes no metrics either
    report.metrics.update(reward_mean=0.9)
    assert services.phase_finish(report) is False
    assert IterationMetrics.objects.get(job_id=order.job_id).reward_mean == 0.5


def test_a_report_is_applied_once(world: Any, recorder: Recorder) -> None:
    order = placed_pair(world, recorder)[0]
    report = end_of(order)
    assert services.phase_finish(report) is True
    dispatched = len(recorder.orders)
    with CaptureQueriesContext(connection) as ctx:
        assert services.phase_finish(report) is False  # replayed: nothing happens
    assert len(recorder.orders) == dispatched
    assert not any(q["sql"].startswith("INSERT") for q in ctx.captured_queries)
    assert PhaseRecord.objects.filter(job_id=order.job_id, kind="train").count() == 1


def test_an_end_without_a_start_stamp_keeps_the_dispatch_stamp(
    world: Any, recorder: Recorder
) -> None:
    order = placed_pair(world, recorder)[0]
    dispatched_at = PhaseRecord.objects.get(pk=order.phase_id).started_at
    assert dispatched_at is not None
    services.phase_finish(end_of(order, started=False))
    rec = PhaseRecord.objects.get(pk=order.phase_id)
    assert rec.started_at == dispatched_at
    assert rec.finished_at is not None and rec.finished_at >= dispatched_at


def test_an_end_without_any_start_gets_its_end_as_start(world: Any, recorder: Recorder) -> None:
    order = placed_pair(world, recorder)[0]
    PhaseRecord.objects.filter(pk=order.phase_id).update(started_at=None)
    report = end_of(order, started=False)
    services.phase_finish(report)
    rec = PhaseRecord.objects.get(pk=order.phase_id)
    assert rec.started_at == rec.finished_at


def test_a_training_end_advances_the_job_and_the_last_one_completes_it(
    world: Any, recorder: Recorder
) -> None:
    order = placed_pair(world, recorder)[0]
    job_id = order.job_id
    for _ in range(4):  # 2 iterations x (rollout, train)
        services.phase_finish(end_of(order))
        mine = [o for o in recorder.orders if o.job_id == job_id]
        recorder.orders.clear()
        if not mine:
            break
        order = mine[0]
    job = Job.objects.get(pk=job_id)
    assert job.iterations_done == 2
    assert job.status == JobStatus.COMPLETED
    kinds = list(
        PhaseRecord.objects.filter(job_id=job_id)
        .order_by("iteration", "kind")
        .values_list("iteration", "kind", "state")
    )
    assert kinds == [
        (0, "rollout", "succeeded"),
        (0, "train", "succeeded"),
        (1, "rollout", "succeeded"),
        (1, "train", "succeeded"),
    ]


def test_a_failed_phase_resubmits_its_job(world: Any, recorder: Recorder, settings: Any) -> None:
    settings.ROLLMUX_MAX_ATTEMPTS = 3
    order = placed_pair(world, recorder)[0]
    failed = end_of(order, outcome=ports.Outcome.ERROR, reason="RuntimeError: boom")
    assert services.phase_finish(failed) is True
    record = PhaseRecord.objects.get(pk=order.phase_id)
    assert (record.state, record.outcome) == (PhaseState.FAILED, "error: RuntimeError: boom")
    job = Job.objects.get(pk=order.job_id)
    assert job.status == JobStatus.QUEUED
    assert "boom" in job.reason


def _node_of(order: PhaseOrder) -> Node:
    return Node.objects.get(name=order.nodes[0])


def test_a_phase_lost_with_its_node_takes_the_node_down_and_resubmits_the_job(
    world: Any, recorder: Recorder
) -> None:
    order = placed_pair(world, recorder)[0]
    node = _node_of(order).name
    lost = ports.PhaseReport.failed(
        order.phase_id, ports.Outcome.LOST, f"node {node} died (RayActorError)",
        lost_node=node, group_id=order.group_id, job_id=order.job_id,
    )  # fmt: skip
    assert services.phase_finish(lost) is True
    record = PhaseRecord.objects.get(pk=order.phase_id)
    assert (record.state, record.outcome) == (
        PhaseState.LOST,
        f"lost: node {node} died (RayActorError)",
    )
    down = Node.objects.get(name=node)
    assert (
        down.state == NodeState.DOWN
        and down.state_reason == f"Ray: node {node} died (RayActorError)"
    )
    placement = Placement.objects.get(pk=order.placement_id)
    assert placement.end_reason == EndReason.NODE_DOWN
    job = Job.objects.get(pk=order.job_id)
    assert job.status == JobStatus.QUEUED and f"node {node} went down" in job.reason


def test_a_lost_phase_without_a_lost_node_leaves_the_nodes_alone_whatever_its_reason_says(
    world: Any, recorder: Recorder
) -> None:
    # the reason is for people: a report whose words name a node takes nothing down
    order = placed_pair(world, recorder)[0]
    node = _node_of(order).name
    lost = ports.PhaseReport.failed(
        order.phase_id, ports.Outcome.LOST, f"node {node} died (RayActorError)",
        group_id=order.group_id, job_id=order.job_id,
    )  # fmt: skip
    assert services.phase_finish(lost) is True
    assert Node.objects.get(name=node).state == NodeState.UP
    assert Placement.objects.get(pk=order.placement_id).end_reason == EndReason.LOST


class _Sequence(Recorder, NoTriggers):
    """Records the dispatches and the drift checks asked for, in the order they happen."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, int]] = []

    def dispatch(self, order: PhaseOrder) -> None:
        super().dispatch(order)
        self.events.append(("dispatch", order.job_id))

    def request_drift_check(self, placement_id: int, iterations_done: int) -> None:
        self.events.append(("drift check", iterations_done))


def test_a_training_end_asks_for_the_drift_check_after_the_dispatch(
    world: Any, recorder: Recorder, settings: Any
) -> None:
    """Every WINDOW iterations the drift re-plan looks at the job's last phases: not in the
    controller's transaction (no read of its phase records there), but in a task asked for
    once the next phases are dispatched."""
    from scheduler.replan import WINDOW

    settings.ROLLMUX_DRIFT_REPLAN = True
    pending = placed_pair(world, recorder, iterations=WINDOW + 1)
    job_id = pending[0].job_id
    seq = _Sequence()
    with ports.override(dispatcher=seq, triggers=seq):
        while True:  # end the pair's phases in turn, to the job's WINDOW-th training
            order = pending.pop(0)
            if (order.job_id, order.kind, order.iteration) == (job_id, "train", WINDOW - 1):
                break
            services.phase_finish(end_of(order))
            pending += seq.orders
            seq.orders.clear()
        seq.events.clear()
        with CaptureQueriesContext(connection) as ctx:
            assert services.phase_finish(end_of(order)) is True
    reads = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("SELECT")]
    assert not any('FROM "workflow_phaserecord"' in q for q in reads), reads
    # the training end saves the job's iterations on top of a rollout end's statements
    assert len(ctx.captured_queries) <= PHASE_END_QUERIES + 1, [
        q["sql"][:80] for q in ctx.captured_queries
    ]
    assert seq.events[-1] == ("drift check", WINDOW)
    assert ("dispatch", order.job_id) in seq.events[:-1]
