"""Concurrent submissions, planning passes and phase events on PostgreSQL: no deadlock or
serialisation failure reaches a caller, and no node is ever allocated twice at once."""

from __future__ import annotations

import queue
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone

from rollmux_web import ports
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job
from rollmux_web.jobs.services import JobRejected, job_submit
from rollmux_web.workflow.models import ExecutionGroup, NodeAllocation
from rollmux_web.workflow.services import phase_finish, queue_plan
from tests.factories import job_spec
from tests.workers.builders import NoTriggers, end_of
from workers.dispatch import PhaseOrder, Probe

pytestmark = pytest.mark.django_db(transaction=True)

OVERLAPS = """
    SELECT count(*) FROM workflow_nodeallocation a JOIN workflow_nodeallocation b
      ON a.node_id = b.node_id AND a.id < b.id
     AND tstzrange(a.start, a."end", '[)') && tstzrange(b.start, b."end", '[)')
"""


class QueueDispatcher:
    """Records dispatched phases for a controller thread to finish (nothing runs)."""

    def __init__(self) -> None:
        self.orders: queue.Queue[PhaseOrder] = queue.Queue()

    def dispatch(self, order: PhaseOrder) -> None:
        self.orders.put(order)

    def probe(self, order: PhaseOrder) -> Probe:
        return Probe("running")

    def release(self, job_id: int, placement_id: int) -> None: ...

    def kill(self, job_id: int, placement_id: int) -> None: ...


@pytest.fixture
def postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("row locks, advisory locks and the exclusion constraint are PostgreSQL's")


def test_two_allocations_of_one_node_cannot_overlap_in_time(world: Any, postgres: None) -> None:
    node = _any_node()
    g1, g2 = ExecutionGroup.objects.create(), ExecutionGroup.objects.create()
    t0 = timezone.now() - timedelta(minutes=10)
    NodeAllocation.objects.create(node=node, group=g1, start=t0, end=t0 + timedelta(seconds=10))
    with pytest.raises(IntegrityError), transaction.atomic():
        NodeAllocation.objects.create(
            node=node, group=g2, start=t0 + timedelta(seconds=9), end=t0 + timedelta(seconds=30)
        )
    # back to back is fine: [start, end) ranges
    NodeAllocation.objects.create(
        node=node, group=g2, start=t0 + timedelta(seconds=10), end=t0 + timedelta(seconds=30)
    )


def _any_node() -> Any:
    from rollmux_web.inventory.models import Node

    return Node.objects.order_by("pk").first()


@pytest.mark.slow
def test_concurrent_submissions_and_planning_never_surface_a_deadlock(
    world: Any, settings: Any, postgres: None
) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True
    settings.ROLLMUX_EMBEDDED_BEAT = False
    dispatcher = QueueDispatcher()
    errors: list[BaseException] = []
    submitted: list[int] = []
    stop = threading.Event()

    def guarded(fn: Any) -> Any:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # what a caller (a view, a task) would have seen
                errors.append(exc)
            finally:
                connection.close()

        return run

    def submitter(n: int) -> None:
        for i in range(12):
            try:
                job = job_submit(
                    user=world.alice,
                    spec=job_spec(name=f"c{n}-{i}", iterations=2, slo_class="bronze"),
                    channel="test",
                )
                submitted.append(job.pk)
            except JobRejected:
                pass  # a quota said no: an answer, not an error

    def planner() -> None:
        while not stop.is_set():
            queue_plan()

    def controller() -> None:
        while not stop.is_set():
            try:
                order = dispatcher.orders.get(timeout=0.1)
            except queue.Empty:
                continue
            phase_finish(end_of(order))

    with ports.override(dispatcher=dispatcher):
        # planning is driven by the planner threads here, not by each commit
        previous = ports.configure(triggers=NoTriggers())
        try:
            threads = [threading.Thread(target=guarded(lambda n=n: submitter(n))) for n in range(4)]
            threads += [threading.Thread(target=guarded(planner)) for _ in range(2)]
            threads += [threading.Thread(target=guarded(controller)) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads[:4]:
                t.join(timeout=60)
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and not errors:
                live = Job.objects.filter(pk__in=submitted).exclude(status__in=TERMINAL_STATUSES)
                if not live.exists():
                    break
                time.sleep(0.2)
            stop.set()
            for t in threads:
                t.join(timeout=30)
        finally:
            ports.restore(previous)
    deadlocks = [e for e in errors if isinstance(e, OperationalError)]
    assert not deadlocks, deadlocks[:3]
    assert not errors, errors[:3]
    assert len(submitted) >= 12, "the submissions must actually race the planners"
    assert not Job.objects.filter(pk__in=submitted).exclude(status__in=TERMINAL_STATUSES).exists()
    with connection.cursor() as cur:
        cur.execute(OVERLAPS)
        assert cur.fetchone()[0] == 0, "a node was allocated to two groups at once"
    assert NodeAllocation.objects.count() >= 2
