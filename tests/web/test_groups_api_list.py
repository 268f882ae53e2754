"""GET /api/v1/groups/: every group's members and nodes, in a bounded number of queries."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from rollmux_web.inventory.models import Node
from rollmux_web.jobs.services import job_submit
from rollmux_web.workflow.models import ExecutionGroup, NodeAllocation, Placement
from tests.factories import job_spec

pytestmark = pytest.mark.django_db


def _group(world: Any, user: Any, rollout: str, train: str) -> ExecutionGroup:
    job = job_submit(user=user, spec=job_spec(), channel="t")
    group = ExecutionGroup.objects.create()
    p = Placement.objects.create(job=job, group=group, attempt=1, strategy="new_group")
    p.rollout_nodes.set(Node.objects.filter(name=rollout))
    p.train_nodes.set(Node.objects.filter(name=train))
    for name in (rollout, train):
        NodeAllocation.objects.create(
            node=Node.objects.get(name=name), group=group, start=timezone.now()
        )
    return group


def test_the_group_list_shows_members_and_nodes_of_every_group(api_as: Any, world: Any) -> None:
    groups = [_group(world, world.alice, f"h20-{i}", f"h800-{i}") for i in range(2)]
    body = api_as("alice").get("/api/v1/groups/").json()
    by_id = {g["id"]: g for g in body["results"]}
    for i, group in enumerate(groups):
        got = by_id[group.pk]
        assert [m["rollout_nodes"] for m in got["members"]] == [[f"h20-{i}"]]
        assert got["members"][0]["hidden"] is False and got["members"][0]["job"]
        assert sorted(n["name"] for n in got["nodes"]) == [f"h20-{i}", f"h800-{i}"]
        assert got["rollout_nodes"] == [f"h20-{i}"] and got["train_nodes"] == [f"h800-{i}"]


def test_the_group_list_costs_the_same_queries_for_two_groups_or_four(
    api_as: Any, world: Any
) -> None:
    client = api_as("alice")
    client.get("/api/v1/me/")  # the token's last_used_at is written once, here
    counts = []
    for i in range(4):
        _group(world, world.alice if i % 2 else world.bob, f"h20-{i}", f"h800-{i}")
        if i in (1, 3):
            with CaptureQueriesContext(connection) as ctx:
                assert client.get("/api/v1/groups/").status_code == 200
            counts.append(len(ctx.captured_queries))
    assert counts[0] == counts[1], counts  # no query per group
    assert counts[1] <= 12, counts


def test_a_released_group_lists_its_past_members_and_the_nodes_it_had(
    api_as: Any, world: Any
) -> None:
    group = _group(world, world.alice, "h20-0", "h800-0")
    now = timezone.now()
    Placement.objects.filter(group=group).update(ended_at=now, end_reason="finished")
    NodeAllocation.objects.filter(group=group).update(end=now)
    ExecutionGroup.objects.filter(pk=group.pk).update(released_at=now)
    got = api_as("alice").get("/api/v1/groups/?active=false").json()["results"][0]
    assert got["id"] == group.pk and got["active"] is False
    assert [(m["active"], m["rollout_nodes"]) for m in got["members"]] == [(False, ["h20-0"])]
    assert sorted(n["name"] for n in got["nodes"]) == ["h20-0", "h800-0"]
