"""Where Ray ran each phase (issue 24 item 17): the job page, the Gantt tooltips and
trace.json show the Ray node ids, GPU ids and weight-sync bytes the phases API has; another
tenant's member of a shared group shows none of it. The real multi-node Ray run is
tests/workers/test_multinode.py; here the records are written directly."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rollmux_web.workflow.models import PhaseRecord
from tests.reports.builders import allocate, make_group, make_job, phase, place

T0 = datetime(2026, 3, 10, tzinfo=UTC)
M = timedelta(minutes=1)
RAY_H20 = "a1b2c3d4e5f6" + "0" * 44
RAY_H800 = "f00dfeed" + "1" * 48


@pytest.fixture
def shared(world: Any) -> Any:
    g = make_group(created=T0)
    for n in ("h20-0", "h20-1", "h800-0"):
        allocate(g, n, T0, T0 + 60 * M)
    ours = make_job(world, name="ours")
    theirs = make_job(world, name="theirs", tenant="speech")
    for job, roll, start in ((ours, "h20-0", T0), (theirs, "h20-1", T0 + 30 * M)):
        pl = place(g, job, rollout=[roll], train=["h800-0"], joined=T0)
        r = phase(pl, iteration=0, kind="rollout", nodes=[roll], start=start, minutes=10)
        t = phase(pl, iteration=0, kind="train", nodes=["h800-0"], start=start + 10 * M,
                  minutes=5)  # fmt: skip
        s = phase(pl, iteration=0, kind="sync", nodes=[roll], start=start + 15 * M, minutes=1)
        PhaseRecord.objects.filter(pk__in=[r.pk, s.pk]).update(
            ray_node_ids={roll: RAY_H20}, gpu_ids={roll: [0, 1]}
        )
        PhaseRecord.objects.filter(pk=t.pk).update(
            ray_node_ids={"h800-0": RAY_H800}, gpu_ids={"h800-0": [1]}
        )
        PhaseRecord.objects.filter(pk=s.pk).update(bytes_moved=15_231_000_000)
    return g, ours, theirs


@pytest.mark.django_db
def test_the_job_page_says_which_ray_nodes_and_gpus_ran_it_and_what_syncs_moved(
    shared: Any, client_as: Any
) -> None:
    _g, ours, _theirs = shared
    page = client_as("alice").get(f"/jobs/{ours.pk}/").content.decode()
    assert 'id="ray-nodes"' in page
    assert RAY_H20 in page and RAY_H800 in page
    assert "<td>0, 1</td>" in page and "<td>1</td>" in page
    assert "Weight syncs: 1, 15.2 GB in all" in page


@pytest.mark.django_db
def test_tooltips_and_trace_json_carry_the_ray_placement_of_ones_own_jobs_only(
    shared: Any, client_as: Any
) -> None:
    g, ours, theirs = shared
    svg = html.unescape(client_as("alice").get(f"/groups/{g.pk}/").content.decode())
    assert "· on Ray node a1b2c3d4… (GPUs 0, 1)" in svg
    assert "· on Ray node f00dfeed… (GPU 1)" in svg
    assert "· moved 15.2 GB" in svg
    trace = client_as("alice").get(f"/groups/{g.pk}/trace.json").json()
    mine = [e for e in trace["traceEvents"] if e.get("args", {}).get("job_id") == ours.pk]
    sync = next(e for e in mine if e["cat"] == "sync")
    assert sync["args"]["ray_node_ids"] == {"h20-0": RAY_H20}
    assert sync["args"]["gpu_ids"] == {"h20-0": [0, 1]}
    assert sync["args"]["bytes_moved"] == 15_231_000_000
    # the other tenant's member: its phases are there, where Ray ran them and its bytes not
    others = [e for e in trace["traceEvents"] if e["ph"] == "X" and "job_id" not in e["args"]]
    assert len(others) == 3
    assert not any({"ray_node_ids", "gpu_ids", "bytes_moved"} & set(e["args"]) for e in others)
    theirs_tips = [t for t in svg.split('data-tip="') if t.startswith("another tenant")]
    assert theirs_tips and not any("Ray node" in t or "moved" in t for t in theirs_tips)
    # the job's own timeline and trace too
    job_svg = html.unescape(client_as("alice").get(f"/timeline/jobs/{ours.pk}/").content.decode())
    assert "on Ray node a1b2c3d4… (GPUs 0, 1)" in job_svg
    job_trace = client_as("alice").get(f"/timeline/jobs/{ours.pk}/trace.json").json()
    assert any(e.get("args", {}).get("bytes_moved") for e in job_trace["traceEvents"])
    assert theirs.pk not in {e.get("args", {}).get("job_id") for e in trace["traceEvents"]}
