"""The workflow API: phase records and co-execution groups, scoped by tenant."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.utils import timezone

from rollmux_web.inventory.models import Node
from rollmux_web.workflow.models import ExecutionGroup, NodeAllocation, PhaseRecord, Placement
from tests.workers.builders import make_job

pytestmark = pytest.mark.django_db


def _place(job: Any, group: ExecutionGroup, rollout: str, train: str) -> Placement:
    p = Placement.objects.create(job=job, group=group, strategy="direct_packing")
    p.rollout_nodes.set([Node.objects.get(name=rollout)])
    p.train_nodes.set([Node.objects.get(name=train)])
    for name in (rollout, train):
        node = Node.objects.get(name=name)
        if not NodeAllocation.objects.filter(node=node, end__isnull=True).exists():
            NodeAllocation.objects.create(node=node, group=group, start=timezone.now())
    return p


@pytest.fixture
def shared(world: Any) -> dict[str, Any]:
    """A group shared by alice's (vision) and charlie's (speech) jobs, and one of speech only."""
    shared = ExecutionGroup.objects.create()
    mine = make_job(world, name="alice-grpo")
    theirs = make_job(world, name="charlie-secret", tenant=world.speech, submitter=world.charlie)
    p_mine = _place(mine, shared, "h20-0", "h800-0")
    p_theirs = _place(theirs, shared, "h20-1", "h800-0")
    only_speech = ExecutionGroup.objects.create()
    solo = make_job(world, name="charlie-solo", tenant=world.speech, submitter=world.charlie)
    _place(solo, only_speech, "h20-2", "h800-1")
    now = timezone.now()
    for p, job in ((p_mine, mine), (p_theirs, theirs)):
        PhaseRecord.objects.create(
            job=job,
            group=shared,
            placement=p,
            iteration=0,
            kind="rollout",
            node_names=["h20-0"],
            state="succeeded",
            warm_start=False,
            queued_at=now,
            started_at=now,
            finished_at=now,
            metrics={"reward": 0.25},
        )
    return {"shared": shared, "only_speech": only_speech, "mine": mine, "theirs": theirs}


def test_a_job_phases_are_listed_for_its_tenant(api_as: Any, shared: Any) -> None:
    r = api_as("bob").get(f"/api/v1/jobs/{shared['mine'].pk}/phases/")
    assert r.status_code == 200
    (phase,) = r.json()["results"]
    assert phase["kind"] == "rollout" and phase["iteration"] == 0
    assert phase["metrics"] == {"reward": 0.25} and phase["duration_s"] == 0.0


def test_another_tenants_job_phases_are_404(api_as: Any, shared: Any) -> None:
    r = api_as("alice").get(f"/api/v1/jobs/{shared['theirs'].pk}/phases/")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"
    assert api_as("alice").get("/api/v1/jobs/abc/phases/").status_code == 404


def test_groups_show_other_tenants_members_without_identity(api_as: Any, shared: Any) -> None:
    r = api_as("alice").get("/api/v1/groups/")
    assert r.status_code == 200
    ids = [g["id"] for g in r.json()["results"]]
    assert ids == [shared["shared"].pk], "a group of speech only is not listed for vision"
    members = r.json()["results"][0]["members"]
    visible = [m for m in members if not m["hidden"]]
    hidden = [m for m in members if m["hidden"]]
    assert [m["name"] for m in visible] == ["alice-grpo"]
    assert len(hidden) == 1 and "name" not in hidden[0] and "job" not in hidden[0]
    # no times either: not a `left_at: null` ("still here") beside `active`
    assert "joined_at" not in hidden[0] and "left_at" not in hidden[0]
    assert hidden[0]["rollout_nodes"] == ["h20-1"]
    assert "charlie-secret" not in r.content.decode()
    group = r.json()["results"][0]
    assert group["rollout_nodes"] == ["h20-0", "h20-1"] and group["train_nodes"] == ["h800-0"]
    assert group["meta_iteration"]["t_cycle_s"] == pytest.approx(160.0)


def test_group_detail_is_404_for_a_group_without_your_tenant(api_as: Any, shared: Any) -> None:
    assert api_as("alice").get(f"/api/v1/groups/{shared['only_speech'].pk}/").status_code == 404
    r = api_as("charlie").get(f"/api/v1/groups/{shared['only_speech'].pk}/")
    assert r.status_code == 200
    assert [m["name"] for m in r.json()["members"]] == ["charlie-solo"]


def test_admin_sees_every_member(api_as: Any, shared: Any) -> None:
    r = api_as("admin").get(f"/api/v1/groups/{shared['shared'].pk}/")
    assert r.status_code == 200
    assert sorted(m["name"] for m in r.json()["members"]) == ["alice-grpo", "charlie-secret"]


def test_anonymous_callers_are_refused(client: Any, shared: Any) -> None:
    assert client.get("/api/v1/groups/").status_code in (401, 403)
    assert client.get(f"/api/v1/jobs/{shared['mine'].pk}/phases/").status_code in (401, 403)


def test_cluster_snapshot_holds_up_nodes_and_active_groups(shared: Any) -> None:
    from rollmux_web.workflow.selectors import cluster_snapshot

    state = cluster_snapshot()
    assert len(state.nodes) == 8
    assert state.spec.rollout.name == "H20" and state.spec.train.price_per_gpu_hour == 5.28
    groups = {g.id: g for g in state.groups}
    core = groups[str(shared["shared"].pk)]
    assert core.rollout_nodes == ("h20-0", "h20-1") and core.train_nodes == ("h800-0",)
    assert sorted(m.job.id for m in core.members) == sorted(
        [str(shared["mine"].pk), str(shared["theirs"].pk)]
    )


def test_live_group_states_are_the_snapshots_groups_without_reading_the_nodes(
    shared: Any, django_assert_max_num_queries: Any
) -> None:
    # the overview and a live group's page read only their groups (issue 25: the whole
    # snapshot reads every node of the pools, 10,000 at a fleet's size)
    from rollmux_web.workflow.selectors import cluster_snapshot, live_group_states

    whole = {g.id: g for g in cluster_snapshot().groups}
    ids = [shared["shared"].pk, ExecutionGroup.objects.exclude(pk=shared["shared"].pk)[0].pk]
    with django_assert_max_num_queries(6):  # groups, allocations, placements (+2), starts
        some = live_group_states(ids)
    assert set(some) == set(ids)
    assert all(some[gid] == whole[str(gid)] for gid in ids)
    assert live_group_states([]) == {}


def test_the_records_choices_are_the_cores_words() -> None:
    from rollmux_web.workflow.models import PhaseKind as RecordKind
    from rollmux_web.workflow.models import Strategy as RecordStrategy
    from scheduler.model import PhaseKind, Strategy

    # every phase the core's runtime can start and every strategy Algorithm 1 can pick is
    # a value the records accept; `sync` is the weight transfer the Ray dispatcher runs
    assert {k.value for k in PhaseKind} | {"sync"} == set(RecordKind.values)
    # (`profile` is no choice of Algorithm 1: a profiling run's placement, services.profiling)
    assert {s.value for s in Strategy} | {"profile"} == set(RecordStrategy.values)


def test_a_phase_says_where_its_time_went(api_as: Any, shared: Any) -> None:
    # (QA pass 12: the records hold the host's split, the API returned none of it)
    PhaseRecord.objects.filter(job=shared["mine"]).update(setup_s=6.6, load_s=0.02, work_s=0.05)
    (phase,) = api_as("bob").get(f"/api/v1/jobs/{shared['mine'].pk}/phases/").json()["results"]
    assert (phase["setup_s"], phase["load_s"], phase["work_s"]) == (6.6, 0.02, 0.05)
    schema = api_as("bob").get("/api/schema/").content.decode()
    assert "seconds of the phase's own work" in schema


def test_the_schema_says_the_apis_iteration_is_0_based_where_pages_count_from_1(
    api_as: Any, shared: Any
) -> None:
    (phase,) = api_as("bob").get(f"/api/v1/jobs/{shared['mine'].pk}/phases/").json()["results"]
    assert phase["iteration"] == 0  # the stored index, as it always was
    schema = yaml.safe_load(api_as("bob").get("/api/schema/").content)
    props = schema["components"]["schemas"]
    for name in ("Phase", "IterationMetrics"):
        assert "0-based; pages show it + 1" in props[name]["properties"]["iteration"]["description"]
    describe = schema["paths"]["/api/v1/jobs/{job_id}/describe/"]["get"]["description"]
    assert "`phases.last.iteration` counts from 1" in describe
    assert "0-based; pages show it + 1" in describe
