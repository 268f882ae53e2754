"""Planning requests coalesce: one queued pass serves every request made before it starts."""

from __future__ import annotations

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


def test_a_burst_of_requests_enqueues_one_planning_pass(broker_mode: Any, monkeypatch: Any) -> None:
    from workers import tasks, triggers

    sent: list[int] = []
    monkeypatch.setattr(tasks.plan_task, "delay", lambda: sent.append(1))
    for _ in range(20):
        triggers.request_planning()
    assert sent == [1]


def test_a_request_after_the_pass_started_enqueues_another(
    broker_mode: Any, monkeypatch: Any
) -> None:
    from workers import plan_marker, tasks, triggers

    sent: list[int] = []
    monkeypatch.setattr(tasks.plan_task, "delay", lambda: sent.append(1))
    triggers.request_planning()
    plan_marker.clear()  # the pass took its snapshot: later jobs need a new pass
    triggers.request_planning()
    triggers.request_planning()
    assert sent == [1, 1]
