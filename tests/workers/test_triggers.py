"""Planning requests coalesce: one queued pass serves every request made before it starts,
and passes start at most once per ROLLMUX_PLAN_MIN_INTERVAL_S."""

from __future__ import annotations

import time
from typing import Any

import pytest


@pytest.fixture
def broker_mode(settings: Any, clean_broker: None) -> Any:
    """Real Redis, tasks not eager (as with a separate Celery worker)."""
    from rollmux_web.celery import app

    settings.CELERY_TASK_ALWAYS_EAGER = False
    app.conf.task_always_eager = False
    yield
    app.conf.task_always_eager = settings.CELERY_TASK_ALWAYS_EAGER


@pytest.fixture
def sent(monkeypatch: Any) -> list[float]:
    """The countdown of every planning pass enqueued (0: at once)."""
    from workers import tasks

    out: list[float] = []
    monkeypatch.setattr(tasks.plan_task, "delay", lambda: out.append(0.0))
    monkeypatch.setattr(
        tasks.plan_task, "apply_async", lambda countdown=0.0, **kw: out.append(countdown)
    )
    return out


def test_a_burst_of_requests_enqueues_one_planning_pass(
    broker_mode: Any, sent: list[float]
) -> None:
    from workers import triggers

    for _ in range(20):
        triggers.request_planning()
    assert sent == [0.0]  # nothing ran lately: at once


def test_a_request_after_the_pass_started_enqueues_another(
    broker_mode: Any, settings: Any, sent: list[float]
) -> None:
    from workers import plan_marker, triggers

    settings.ROLLMUX_PLAN_MIN_INTERVAL_S = 0.0
    triggers.request_planning()
    plan_marker.clear()  # the pass took its snapshot: later jobs need a new pass
    triggers.request_planning()
    triggers.request_planning()
    assert sent == [0.0, 0.0]


def test_the_next_pass_waits_for_the_end_of_the_interval(
    broker_mode: Any, settings: Any, sent: list[float]
) -> None:
    from workers import plan_marker, triggers

    settings.ROLLMUX_PLAN_MIN_INTERVAL_S = 2.0
    triggers.request_planning()
    plan_marker.clear()  # a pass starts now
    triggers.request_planning()  # a job committed during it: the next pass, spaced
    triggers.request_planning()  # ... which this one shares
    assert len(sent) == 2 and sent[0] == 0.0
    assert 1.5 < sent[1] <= 2.0


def test_a_request_after_a_quiet_interval_plans_at_once(
    broker_mode: Any, settings: Any, sent: list[float]
) -> None:
    from workers import plan_marker, triggers

    settings.ROLLMUX_PLAN_MIN_INTERVAL_S = 0.2
    plan_marker.clear()  # a pass started ...
    time.sleep(0.3)  # ... longer ago than the interval
    triggers.request_planning()
    assert sent == [0.0]


def test_countdown_is_bounded_by_the_interval() -> None:
    from workers.plan_marker import countdown

    assert countdown(None, 100.0, 0.5) == 0.0
    assert countdown(99.8, 100.0, 0.5) == pytest.approx(0.3)
    assert countdown(90.0, 100.0, 0.5) == 0.0
    assert countdown(200.0, 100.0, 0.5) == 0.5  # another host's clock ahead: at most once
    assert countdown(99.9, 100.0, 0.0) == 0.0  # no spacing configured


@pytest.mark.django_db(transaction=True)
def test_a_pass_that_finds_the_planner_lock_busy_stays_the_pending_one(
    broker_mode: Any, settings: Any, sent: list[float]
) -> None:
    """Under a submission storm every request used to queue a planning task of its own
    (each task cleared the marker before it found the lock busy and retried): 489 of them
    in the controller's queue (issue 24 item 12). Now the marker is cleared only by the
    pass that holds the lock."""
    import psycopg
    from celery.exceptions import Retry

    from rollmux_web.workflow.services.locks import PLAN_LOCK_KEY
    from tests.factories import database_url
    from workers import tasks, triggers

    settings.ROLLMUX_PLAN_MIN_INTERVAL_S = 0.0
    triggers.request_planning()
    with psycopg.connect(database_url(), autocommit=True) as other:  # another pass runs
        assert other.execute("SELECT pg_try_advisory_lock(%s)", [PLAN_LOCK_KEY]).fetchone()[0]
        with pytest.raises(Retry):
            tasks.plan_task.run()  # the lock is busy: it retries ...
        for _ in range(10):
            triggers.request_planning()  # ... and these ride on it
        assert sent == [0.0]
        other.execute("SELECT pg_advisory_unlock(%s)", [PLAN_LOCK_KEY])
    tasks.plan_task.run()  # the lock is free: this pass starts, requests need the next one
    triggers.request_planning()
    assert sent == [0.0, 0.0]


def test_phase_events_have_their_own_queue_which_the_controller_takes_first(
    settings: Any,
) -> None:
    from rollmux_web.celery import app
    from workers import composition

    routes = {name: app.amqp.router.route({}, name)["queue"].name for name in (
        "workers.tasks.phase_started", "workers.tasks.phase_finished", "workers.tasks.phase_tail",
        "workers.tasks.plan", "workers.tasks.reconcile", "workers.tasks.drift_check",
    )}  # fmt: skip
    phase, default = settings.ROLLMUX_PHASE_QUEUE, settings.CELERY_TASK_DEFAULT_QUEUE
    assert {routes[f"workers.tasks.phase_{k}"] for k in ("started", "finished", "tail")} == {phase}
    assert {routes["workers.tasks.plan"], routes["workers.tasks.reconcile"]} == {default}
    assert [phase, default] == settings.ROLLMUX_CONTROLLER_QUEUES
    # the job hosts publish their events there too (a Ray actor sends them itself)
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.CELERY_BROKER_URL = "redis://broker.example:6379/0"
    assert composition.report_config() == {"broker_url": settings.CELERY_BROKER_URL, "queue": phase}
