"""What-if runs: the simulator as a Celery task on a real worker and Redis, and the page."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from rollmux_web.reports.models import WhatIfRun
from rollmux_web.reports.whatif_services import whatif_start

SMALL_TRACE = "\n".join(
    json.dumps(j)
    for j in [
        {
            "id": "a",
            "arrival_s": 0,
            "iterations": 6,
            "rollout_gpus": 8,
            "train_gpus": 8,
            "t_roll_max_s": 300,
            "t_roll_min_s": 200,
            "t_train_max_s": 100,
            "host_mem_gb": 300,
            "slo": 1.5,
        },
        {
            "id": "b",
            "arrival_s": 60,
            "iterations": 6,
            "rollout_gpus": 8,
            "train_gpus": 8,
            "t_roll_max_s": 280,
            "t_train_max_s": 120,
            "host_mem_gb": 300,
            "slo": 1.5,
        },
        {
            "id": "c",
            "arrival_s": 120,
            "iterations": 4,
            "rollout_gpus": 8,
            "train_gpus": 8,
            "t_roll_max_s": 90,
            "t_train_max_s": 300,
            "host_mem_gb": 300,
            "slo": 2.0,
        },
    ]
)
BAD_TRACE = SMALL_TRACE.splitlines()[0] + '\n{"id": "x", "arrival_s": 0, "iterations": 2}\n'


@pytest.fixture
def worker(settings: Any) -> Iterator[Any]:
    """A real Celery worker thread on the Redis broker (REDIS_URL), its db emptied first."""
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (a real broker)")
    import redis
    from celery.contrib.testing.worker import start_worker

    from rollmux_web.celery import app

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    queues = [settings.CELERY_TASK_DEFAULT_QUEUE, settings.ROLLMUX_SIM_QUEUE]
    with start_worker(
        app, pool="solo", perform_ping_check=False, shutdown_timeout=20, queues=queues
    ) as w:
        yield w


def wait_finished(run_id: int, timeout: float = 60.0) -> WhatIfRun:
    deadline = time.monotonic() + timeout
    seen: list[float] = []
    while time.monotonic() < deadline:
        run = WhatIfRun.objects.get(pk=run_id)
        seen.append(run.progress)
        if run.status in (WhatIfRun.Status.DONE, WhatIfRun.Status.FAILED):
            return run
        time.sleep(0.05)
    raise AssertionError(f"what-if run {run_id} not finished in {timeout} s (progress {seen[-3:]})")


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_whatif_run_simulates_the_policies_on_a_real_worker(world: Any, worker: Any) -> None:
    run = whatif_start(
        user=world.alice,
        source="upload",
        trace_text=SMALL_TRACE,
        policies=["rollmux", "solo-disagg", "colocated"],
        seed=7,
    )
    run = wait_finished(run.pk)
    assert run.status == WhatIfRun.Status.DONE, run.error
    assert run.progress == 1.0
    policies = run.result["policies"]
    assert set(policies) == {"rollmux", "solo-disagg", "colocated"}
    assert all(p["jobs"] == 3 for p in policies.values())
    ratio = run.result["ratios"]["solo-disagg/rollmux"]
    # three jobs with complementary bubbles: sharing must not cost more than dedicated pools
    assert ratio >= 1.0
    assert ratio == pytest.approx(
        policies["solo-disagg"]["total_cost_usd"] / policies["rollmux"]["total_cost_usd"],
        abs=1e-4,  # the simulator reports ratios to four decimals
    )


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_bad_trace_fails_the_run_with_line_and_field(world: Any, worker: Any) -> None:
    run = whatif_start(
        user=world.alice, source="upload", trace_text=BAD_TRACE, policies=["rollmux"], seed=0
    )
    run = wait_finished(run.pk)
    assert run.status == WhatIfRun.Status.FAILED
    assert "line 2" in run.error and "not in the format" in run.error


@pytest.mark.django_db
def test_the_page_rejects_an_upload_not_in_the_format_naming_line_and_field(
    world: Any, client_as: Any
) -> None:
    resp = client_as("alice").post(
        "/whatif/",
        {
            "source": "upload",
            "policies": ["rollmux", "solo-disagg"],
            "seed": "0",
            "trace": SimpleUploadedFile("t.jsonl", BAD_TRACE.encode()),
        },
    )
    assert resp.status_code == 400
    html = resp.content.decode()
    assert "line 2" in html and "field" in html
    assert not WhatIfRun.objects.exists()
    resp = client_as("alice").post(
        "/whatif/",
        {
            "source": "upload",
            "policies": ["rollmux"],
            "seed": "0",
            "trace": SimpleUploadedFile("t.bin", b"\xff\xfe\x00"),
        },
    )
    assert resp.status_code == 400 and "not UTF-8" in resp.content.decode()
    resp = client_as("alice").post(
        "/whatif/", {"source": "queue", "policies": ["rollmux"], "seed": "0"}
    )
    assert resp.status_code == 400 and "nothing to simulate" in resp.content.decode()


def done_run(world: Any, result: dict[str, Any]) -> WhatIfRun:
    """Return alice's finished run of rollmux and solo-disagg with this simulator result."""
    return WhatIfRun.objects.create(
        created_by=world.alice,
        trace_text=SMALL_TRACE,
        policies=["rollmux", "solo-disagg"],
        status=WhatIfRun.Status.DONE,
        progress=1.0,
        result=result,
    )


@pytest.mark.django_db
def test_a_finished_run_compares_policies_and_stops_polling(world: Any, client_as: Any) -> None:
    run = done_run(
        world,
        {
            "policies": {
                "rollmux": {"jobs": 3, "total_cost_usd": 100.0, "slo_attainment": 1.0},
                "solo-disagg": {"jobs": 3, "total_cost_usd": 184.0, "slo_attainment": 1.0},
            },
            "ratios": {"solo-disagg/rollmux": 1.84},
        },
    )
    c = client_as("alice")
    html = c.get(f"/whatif/{run.pk}/").content.decode()
    assert "1.84×" in html and html.count("<svg") >= 2 and "Total cost" in html
    assert c.get(f"/whatif/{run.pk}/", HTTP_HX_REQUEST="true").status_code == 286
    assert client_as("charlie").get(f"/whatif/{run.pk}/").status_code == 404


@pytest.mark.django_db
def test_the_headline_says_when_policies_finished_different_jobs_and_names_the_infeasible(
    world: Any, client_as: Any
) -> None:
    ok = {"jobs": 3, "completed": 3, "total_cost_usd": 90.0, "infeasible": [], "never_started": []}
    short = {
        "jobs": 3,
        "completed": 2,
        "total_cost_usd": 60.0,
        "infeasible": [{"id": "job-7", "reason": "needs 24 rollout nodes, the pool has 16"}],
        "never_started": [],
    }
    run = done_run(
        world,
        {"policies": {"rollmux": short, "solo-disagg": ok}, "ratios": {"solo-disagg/rollmux": 1.5}},
    )
    html = client_as("alice").get(f"/whatif/{run.pk}/").content.decode()
    assert "The policies finished different sets of jobs" in html
    assert "rollmux 2 of 3, solo-disagg 3 of 3" in html
    assert "Infeasible under <strong>rollmux</strong>: job-7" in html
    # the same jobs finished everywhere: no warning
    run.result = {"policies": {"rollmux": ok, "solo-disagg": ok}, "ratios": {}}
    run.save()
    html = client_as("alice").get(f"/whatif/{run.pk}/").content.decode()
    assert "different sets of jobs" not in html and "Infeasible under" not in html


@pytest.fixture
def eager(settings: Any) -> Iterator[None]:
    from rollmux_web.celery import app

    old = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = old


@pytest.mark.django_db(transaction=True)
def test_the_current_queue_is_simulated_as_a_trace_of_visible_jobs(
    world: Any, client_as: Any, eager: None
) -> None:
    from tests.reports.builders import make_job

    make_job(
        world,
        name="queued-a",
        status="queued",
        t_roll_max_s=300.0,
        t_roll_min_s=200.0,
        t_train_max_s=100.0,
        t_train_min_s=80.0,
    )
    make_job(world, name="running-b", status="running", iterations=5, iterations_done=2)
    make_job(world, name="speech-c", tenant="speech", status="queued")
    resp = client_as("alice").post(
        "/whatif/", {"source": "queue", "policies": ["rollmux", "solo-disagg"], "seed": "1"}
    )
    assert resp.status_code == 302
    run = WhatIfRun.objects.get()
    lines = [json.loads(x) for x in run.trace_text.splitlines()]
    # alice's tenant only; a running job brings its remaining iterations
    assert sorted((x["iterations"], x["tenant"]) for x in lines) == [(3, "vision"), (3, "vision")]
    run = wait_finished(run.pk)
    assert run.status == WhatIfRun.Status.DONE, run.error
    assert run.result["policies"]["rollmux"]["jobs"] == 2
    # the run says whose queue it simulated (issue 24 item 18: it did so silently)
    page = client_as("alice").get(f"/whatif/{run.pk}/").content.decode()
    assert "the current queue: vision&#x27;s queued and running jobs only" in page


@pytest.mark.django_db
def test_the_form_says_whose_jobs_the_current_queue_holds(world: Any, client_as: Any) -> None:
    researcher = client_as("alice").get("/whatif/").content.decode()
    assert (
        "The current queue: vision&#x27;s queued and running jobs only (other tenants&#x27; "
        "jobs are not simulated)" in researcher
    )
    admin = client_as("admin").get("/whatif/").content.decode()
    assert "The current queue: every tenant&#x27;s queued and running jobs" in admin


@pytest.mark.django_db(transaction=True)
def test_embedded_mode_answers_the_post_before_the_simulation_ends(
    world: Any, client_as: Any, eager: None, monkeypatch: Any
) -> None:
    import threading

    import scheduler.sim

    release = threading.Event()
    real = scheduler.sim.run_simulation

    def held(*args: Any, **kwargs: Any) -> Any:
        assert release.wait(30), "the test never released the simulation"
        return real(*args, **kwargs)

    monkeypatch.setattr(scheduler.sim, "run_simulation", held)
    resp = client_as("alice").post(
        "/whatif/",
        {
            "source": "upload",
            "policies": ["rollmux", "solo-disagg"],
            "seed": "0",
            "trace": SimpleUploadedFile("t.jsonl", SMALL_TRACE.encode()),
        },
    )
    # the request came back while the simulation was still held: it runs on its own thread
    assert resp.status_code == 302
    run = WhatIfRun.objects.get()
    assert run.status in (WhatIfRun.Status.PENDING, WhatIfRun.Status.RUNNING)
    release.set()
    run = wait_finished(run.pk)
    assert run.status == WhatIfRun.Status.DONE, run.error
    assert set(run.result["policies"]) == {"rollmux", "solo-disagg"}


def _trace_of(n: int) -> str:
    first = json.loads(SMALL_TRACE.splitlines()[0])
    return "\n".join(json.dumps({**first, "id": f"j{i}", "arrival_s": i}) for i in range(n))


@pytest.mark.django_db
def test_optimal_on_a_trace_it_cannot_search_is_refused_naming_the_field(
    world: Any, client_as: Any
) -> None:
    resp = client_as("alice").post(
        "/whatif/",
        {
            "source": "upload",
            "policies": ["rollmux", "optimal"],
            "seed": "0",
            "trace": SimpleUploadedFile("t.jsonl", _trace_of(9).encode()),
        },
    )
    assert resp.status_code == 400
    errors = resp.context["form"].errors
    assert "policies" in errors and "at most 8 jobs" in errors["policies"][0]
    assert "has 9" in errors["policies"][0]
    assert not WhatIfRun.objects.exists()


@pytest.mark.django_db
def test_a_skipped_policy_is_explained_on_the_run_page(world: Any, client_as: Any) -> None:
    run = WhatIfRun.objects.create(
        created_by=world.alice,
        trace_text=SMALL_TRACE,
        policies=["optimal"],
        status=WhatIfRun.Status.DONE,
        progress=1.0,
        result={"policies": {}, "ratios": {}, "skipped": {"optimal": "too many jobs"}},
    )
    html = client_as("alice").get(f"/whatif/{run.pk}/").content.decode()
    assert "was not simulated: too many jobs" in html
    assert "Side by side" not in html  # no empty comparison table


@pytest.mark.django_db(transaction=True)
def test_the_comparison_is_labelled_formatted_and_in_policy_order(world: Any, worker: Any) -> None:
    run = whatif_start(
        user=world.alice,
        source="upload",
        trace_text=SMALL_TRACE,
        policies=["random", "solo-disagg", "rollmux"],  # not the report order
        seed=3,
    )
    run = wait_finished(run.pk)
    assert run.status == WhatIfRun.Status.DONE, run.error
    policies = run.result["policies"]
    html = Client()
    html.force_login(world.alice)
    page = html.get(f"/whatif/{run.pk}/").content.decode()
    head = page[page.index("<thead><tr><th>Metric</th>") :]
    head = head[: head.index("</thead>")]
    assert head.index("rollmux") < head.index("solo-disagg") < head.index("random")
    cost = policies["rollmux"]["total_cost_usd"]
    assert f"${cost:,.0f}" in page  # dollars, thousands separated, no scientific notation
    assert "e+0" not in page and "{&quot;" not in page and "_usd" not in page
    assert " USD" not in page and " x<" not in page  # charts in the table's units too
    assert "Mean queue delay" in page and "Bubble fraction" in page
    rollout = policies["rollmux"]["bubble_fraction"]["rollout"]
    assert f"rollout {rollout:.1%}" in page
    assert "direct packing" in page or "new group" in page  # admissions in words
    from rollmux_web.inventory.models import Node

    h20 = Node.objects.filter(gpu_type__name="H20", state="up").count()
    assert f"Simulated cluster: rollout pool H20: {h20} nodes x 8 GPUs at $1.85/GPU-h" in page


@pytest.mark.django_db
def test_an_empty_upload_gets_one_message(world: Any, client_as: Any) -> None:
    resp = client_as("alice").post(
        "/whatif/",
        {
            "source": "upload",
            "policies": ["rollmux"],
            "seed": "0",
            "trace": SimpleUploadedFile("t.jsonl", b""),
        },
    )
    assert resp.status_code == 400
    assert resp.context["form"].errors["trace"] == ["The submitted file is empty."]


@pytest.mark.django_db
def test_the_whatif_cluster_is_the_planners(world: Any) -> None:
    from rollmux_web.inventory.models import Node, NodeState
    from rollmux_web.reports.whatif_runs import current_spec
    from rollmux_web.workflow.snapshot import cluster_spec

    # a drained node still counts (it may take work again), a down one does not
    Node.objects.filter(name="h20-0").update(state=NodeState.DRAINED)
    Node.objects.filter(name="h20-1").update(state=NodeState.DOWN)
    spec = current_spec()
    assert spec == cluster_spec()
    assert spec.rollout.nodes == Node.objects.filter(gpu_type__name="H20").count() - 1
