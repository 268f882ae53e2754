"""Co-located execution in one process (inline dispatcher, eager Celery) on PostgreSQL: the
embedded topology runs a co-located job's phases on its training node too."""

from __future__ import annotations

from typing import Any

import pytest

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow.models import NodeAllocation, PhaseRecord, Placement
from tests.workers.builders import all_done, make_job, wait_for
from workers import triggers

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_colocated_job_runs_alone_on_its_training_node_in_process(
    world: Any, inline_workflow: Any, settings: Any
) -> None:
    settings.ROLLMUX_COLOCATED_ON_ARRIVAL = True
    job = make_job(world, name="solo", iterations=3, slo_class=world.bronze, model="Qwen2.5-7B")
    triggers.request_planning()
    wait_for(all_done([job.pk]), timeout=60)
    assert Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED
    placement = Placement.objects.get(job=job)
    assert placement.strategy == "colocated" and not placement.rollout_nodes.exists()
    (node,) = placement.train_nodes.values_list("name", flat=True)
    nodes = set(
        NodeAllocation.objects.filter(group=placement.group).values_list("node__name", flat=True)
    )
    assert nodes == {node}
    phases = list(PhaseRecord.objects.filter(job=job).order_by("started_at"))
    # no sync phase although its model has weights to sync on a disaggregated placement
    assert [(p.kind, p.iteration) for p in phases] == [
        (k, i) for i in range(3) for k in ("rollout", "train")
    ]
    assert all(p.node_names == [node] for p in phases)
    assert all(a.finished_at <= b.started_at for a, b in zip(phases, phases[1:], strict=False))
