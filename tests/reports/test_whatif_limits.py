"""What-if runs are bounded: refused at upload over a limit (the field named), stopped over
their wall time or memory, failed by reconcile when their worker died, and served fairly."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from rollmux_web.reports import tasks
from rollmux_web.reports.models import WhatIfRun
from rollmux_web.reports.whatif_runs import runs_reconcile
from tests.reports.test_whatif_task import SMALL_TRACE

ONE = json.loads(SMALL_TRACE.splitlines()[0])


def _post(client: Any, text: str, policies: tuple[str, ...] = ("rollmux",)) -> Any:
    return client.post(
        "/whatif/",
        {
            "source": "upload",
            "policies": list(policies),
            "seed": "0",
            "trace": SimpleUploadedFile("t.jsonl", text.encode()),
        },
    )


@pytest.mark.django_db
def test_a_tiny_trace_of_1e8_iterations_is_refused_at_upload_naming_the_field(
    world: Any, client_as: Any
) -> None:
    # the 83-byte trace of the reliability pass: one job, 1e8 iterations (over the trace
    # format's bound), and one within the format but over the what-if limit
    text = "# one huge job\n" + json.dumps({**ONE, "iterations": 100_000_000})
    resp = _post(client_as("alice"), text)
    body = resp.content.decode()
    assert resp.status_code == 400
    assert "line 2, field &#x27;iterations&#x27;: must be &lt;= 1,000,000" in body
    text = "# one huge job\n" + json.dumps({**ONE, "iterations": 500_000})
    resp = _post(client_as("alice"), text)
    body = resp.content.decode()
    assert resp.status_code == 400
    assert "line 2, job &#x27;a&#x27;, field &#x27;iterations&#x27;: 500,000" in body
    assert "ROLLMUX_WHATIF_MAX_ITERATIONS" in body
    assert not WhatIfRun.objects.exists()  # nothing half-written


@pytest.mark.django_db
def test_too_many_jobs_or_simulated_events_are_refused(
    world: Any, client_as: Any, settings: Any
) -> None:
    settings.ROLLMUX_WHATIF_MAX_JOBS = 2
    three = "\n".join(json.dumps({**ONE, "id": f"j{i}"}) for i in range(3))
    body = _post(client_as("alice"), three).content.decode()
    assert "The trace has 3 jobs; a what-if run takes at most 2" in body
    settings.ROLLMUX_WHATIF_MAX_JOBS = 100
    settings.ROLLMUX_WHATIF_MAX_EVENTS = 50  # 3 jobs x 6 iterations x 2 phases x 2 policies
    body = _post(client_as("alice"), three, ("rollmux", "solo-disagg")).content.decode()
    assert "add up to 72 simulated phases over 2 policies" in body
    assert "ROLLMUX_WHATIF_MAX_EVENTS" in body
    assert not WhatIfRun.objects.exists()


@pytest.mark.django_db
def test_a_tenant_may_queue_only_so_many_runs(world: Any, client_as: Any, settings: Any) -> None:
    settings.ROLLMUX_WHATIF_MAX_QUEUED_PER_TENANT = 1
    c = client_as("alice")
    WhatIfRun.objects.create(created_by=world.alice, tenant="vision", trace_text=SMALL_TRACE)
    resp = _post(c, SMALL_TRACE)
    assert resp.status_code == 400
    assert "1 what-if runs waiting or running; at most 1 at a time" in resp.content.decode()
    # another tenant is not held back by it
    assert _post(client_as("charlie"), SMALL_TRACE).status_code == 302


def _pending(world: Any, user: str, tenant: str) -> WhatIfRun:
    return WhatIfRun.objects.create(
        created_by=world.user(user), tenant=tenant, trace_text=SMALL_TRACE, policies=["rollmux"]
    )


@pytest.mark.django_db
def test_a_run_over_its_wall_time_or_memory_is_stopped_and_says_why(
    world: Any, settings: Any, monkeypatch: Any
) -> None:
    settings.ROLLMUX_WHATIF_MAX_WALL_S = 0.0
    run = _pending(world, "alice", "vision")
    assert tasks.run_whatif(run.pk) == "failed"
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.FAILED
    assert "stopped" in run.error and "ROLLMUX_WHATIF_MAX_WALL_S" in run.error
    settings.ROLLMUX_WHATIF_MAX_WALL_S = 900.0
    settings.ROLLMUX_WHATIF_MAX_MEMORY_MB = 512
    readings = iter([100.0] + [5000.0] * 1000)  # the simulation grew by 4.9 GB
    monkeypatch.setattr(tasks, "_rss_mb", lambda: next(readings))
    run = _pending(world, "alice", "vision")
    assert tasks.run_whatif(run.pk) == "failed"
    run.refresh_from_db()
    assert "needed 4,900 MB, over the 512 MB" in run.error
    assert "ROLLMUX_WHATIF_MAX_MEMORY_MB" in run.error


@pytest.mark.django_db
def test_reconcile_fails_a_running_run_whose_worker_stopped_beating(world: Any) -> None:
    now = timezone.now()
    dead = _pending(world, "alice", "vision")
    alive = _pending(world, "charlie", "speech")
    WhatIfRun.objects.filter(pk=dead.pk).update(
        status=WhatIfRun.Status.RUNNING,
        started_at=now - timedelta(minutes=5),
        heartbeat_at=now - timedelta(minutes=2),
    )
    WhatIfRun.objects.filter(pk=alive.pk).update(
        status=WhatIfRun.Status.RUNNING,
        started_at=now - timedelta(minutes=5),
        heartbeat_at=now - timedelta(seconds=5),
    )
    assert runs_reconcile(now=now) == [dead.pk]
    dead.refresh_from_db()
    alive.refresh_from_db()
    assert dead.status == WhatIfRun.Status.FAILED and "worker stopped" in dead.error
    assert alive.status == WhatIfRun.Status.RUNNING
    assert tasks.reconcile_whatif() == 0  # idempotent: nothing left to fail


@pytest.mark.django_db
def test_one_tenants_queue_of_runs_does_not_starve_another(world: Any) -> None:
    queued = [_pending(world, "alice", "vision") for _ in range(3)]
    late = _pending(world, "charlie", "speech")  # queued after all of vision's
    order = []
    for run in [*queued, late]:  # one task per run, in queue order
        assert tasks.run_whatif(run.pk) == "done"
        order.append(
            WhatIfRun.objects.filter(status=WhatIfRun.Status.DONE)
            .order_by("-started_at", "-id")
            .values_list("tenant", flat=True)
            .first()
        )
    # speech's run takes the second turn, not the fourth
    assert order == ["vision", "speech", "vision", "vision"]
    assert tasks.run_whatif(late.pk) == "skipped"  # a task with nothing left to run


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_whose_worker_is_killed_is_failed_by_reconcile(world: Any, settings: Any) -> None:
    """kill -9 of the process simulating a run: it stops beating, reconcile fails the run."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tests.factories import database_url

    # long enough to still be simulating when killed (a few seconds of simulated phases)
    trace = "\n".join(
        json.dumps({**ONE, "id": f"j{i}", "arrival_s": i, "iterations": 4000}) for i in range(40)
    )
    run = WhatIfRun.objects.create(
        created_by=world.alice, tenant="vision", trace_text=trace, policies=["rollmux"]
    )
    code = (
        "import django; django.setup();"
        "import rollmux_web.reports.tasks as t; t.HEARTBEAT_S = 0.2;"
        f"t.run_whatif({run.pk})"
    )
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "rollmux_web.settings",
    }
    root = Path(__file__).resolve().parents[2]
    worker = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=root)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            run.refresh_from_db()
            if run.status == WhatIfRun.Status.RUNNING and run.heartbeat_at != run.started_at:
                break  # claimed and beating
            assert worker.poll() is None, "the worker ended before it could be killed"
            time.sleep(0.1)
        assert run.status == WhatIfRun.Status.RUNNING
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
    finally:
        if worker.poll() is None:
            worker.kill()
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.RUNNING  # nothing else would ever end it
    assert runs_reconcile() == []  # its heartbeat is still fresh
    later = timezone.now() + timedelta(seconds=settings.ROLLMUX_WHATIF_STALE_S + 1)
    assert runs_reconcile(now=later) == [run.pk]
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.FAILED and "worker stopped" in run.error
