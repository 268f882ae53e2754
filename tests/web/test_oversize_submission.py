"""A submission that can never fit the cluster is refused, naming the field and the numbers.

The world has 4 H20 (rollout) and 4 H800 (training) nodes of 8 GPUs. The capacity a
submission is checked against is the live planner's: nodes up or drained, down ones not.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import Job
from rollmux_web.jobs.services import JobRejected, validate_spec
from tests.factories import job_spec

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        (
            {"rollout_gpus": 128},
            "rollout_gpus",
            "128 GPUs need 16 H20 nodes; the rollout pool has 4 H20 nodes (32 GPUs)",
        ),
        (
            {"train_gpus": 40},
            "train_gpus",
            "40 GPUs need 5 H800 nodes; the training pool has 4 H800 nodes (32 GPUs)",
        ),
    ],
)
def test_the_api_refuses_a_job_larger_than_its_pool(
    api_as: Any, world: Any, overrides: dict[str, Any], field: str, message: str
) -> None:
    resp = api_as("alice").post("/api/v1/jobs/", job_spec(**overrides), format="json")
    assert resp.status_code == 400, resp.content
    err = resp.json()["error"]
    assert err["message"].startswith(f"{field}: ")
    assert message in err["fields"][field][0]
    assert Job.objects.count() == 0


def test_a_job_as_large_as_the_whole_pool_is_accepted(api_as: Any, world: Any) -> None:
    resp = api_as("alice").post(
        "/api/v1/jobs/", job_spec(rollout_gpus=32, train_gpus=32), format="json"
    )
    assert resp.status_code == 201, resp.content


def test_down_nodes_do_not_count_and_drained_ones_do(world: Any) -> None:
    rollout = list(Node.objects.filter(cluster=world.rollout_pool).order_by("name"))
    Node.objects.filter(pk=rollout[0].pk).update(state=NodeState.DOWN)
    Node.objects.filter(pk=rollout[1].pk).update(state=NodeState.DRAINED)
    # 4 nodes: one is down, so the pool can hold 3 (the drained one will come back or go
    # down; until then a job that needs it waits in the queue).
    with pytest.raises(JobRejected) as refused:
        validate_spec(user=world.alice, spec=job_spec(rollout_gpus=32))
    text = refused.value.fields["rollout_gpus"][0]
    assert "the rollout pool has 3 H20 nodes (24 GPUs), not counting 1 down node" in text
    assert "train_gpus" not in refused.value.fields
    validate_spec(user=world.alice, spec=job_spec(rollout_gpus=24))  # fits, drained included


def test_the_form_and_the_upload_show_the_same_field_error(client_as: Any, world: Any) -> None:
    c = client_as("alice")
    form = {k: str(v) for k, v in job_spec(train_gpus=72).items()}
    resp = c.post("/jobs/new/", form)
    assert resp.status_code == 400
    assert "<li>72 GPUs need 9 H800 nodes; the training pool has 4" in resp.content.decode()
    content = json.dumps(job_spec(rollout_gpus=128)).encode()
    resp = c.post("/jobs/upload/", {"file": SimpleUploadedFile("s.json", content)})
    assert resp.status_code == 400
    assert "rollout_gpus: 128 GPUs need 16 H20 nodes" in resp.content.decode()
    assert Job.objects.count() == 0
