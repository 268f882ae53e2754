"""A resubmitted job keeps its history: first start time, and each attempt with why it ended."""

from __future__ import annotations

from typing import Any

import pytest

from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import JobStatus
from rollmux_web.workflow import services
from rollmux_web.workflow.models import Placement
from tests.workers.builders import Recorder, end_of, make_job

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_job_resubmitted_after_a_node_went_down_keeps_its_first_start(
    world: Any, recorder: Recorder, client_as: Any
) -> None:
    job = make_job(world, name="survivor", iterations=3)
    services.queue_plan()
    first = next(o for o in recorder.orders if o.job_id == job.pk)
    recorder.orders.clear()
    services.phase_finish(end_of(first))  # rollout 0 done: the job is running
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.started_at is not None
    started = job.started_at
    train_node = next(o for o in recorder.orders if o.job_id == job.pk).nodes[0]
    Node.objects.filter(name=train_node).update(state=NodeState.DOWN)
    assert services.node_down_resubmit(node_id=Node.objects.get(name=train_node).pk) == [job.pk]
    recorder.orders.clear()
    services.queue_plan()  # attempt 2, on other nodes
    again = next(o for o in recorder.orders if o.job_id == job.pk)
    services.phase_finish(end_of(again))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    assert job.started_at == started  # not the re-placement's time
    attempts = list(Placement.objects.filter(job=job).order_by("attempt"))
    assert [p.end_reason for p in attempts] == ["node_down", ""]
    html = client_as("alice").get(f"/jobs/{job.pk}/").content.decode()
    assert "Earlier attempts" in html and "a node went down" in html
    assert f"node {train_node} down" in html  # which node, from the lost phase
    assert "Placed (attempt 2)" in html
    assert f"group {attempts[0].group_id}" in html and f"group {attempts[1].group_id}" in html
    assert "direct_packing" not in html and "new_group" not in html  # labels, not enum values
    assert f"/timeline/jobs/{job.pk}/" in html
