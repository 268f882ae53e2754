"""The controller's Celery worker keeps its database connection from one task to the next
(workers/connections.py): a new PostgreSQL connection per phase event was most of the
switch path's time (bench/control_plane.py)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from celery.fixups.django import DjangoWorkerFixup
from celery.signals import task_prerun
from django.conf import settings
from django.db import connection

from rollmux_web.celery import app

pytestmark = pytest.mark.django_db(transaction=True)


def backend_pid() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return int(cur.fetchone()[0])


class _Task:
    def __init__(self, eager: bool) -> None:
        self.request = SimpleNamespace(is_eager=eager)


def task_starts(*, eager: bool = False) -> None:
    """Send the signal a worker sends before each task (what the handler listens to)."""
    task = _Task(eager)
    task_prerun.send(sender=task, task_id="t", task=task, args=(), kwargs={})


def test_the_fixup_closes_the_connection_only_every_reuse_max_tasks() -> None:
    # Celery's Django fixup reads the setting: 0 or unset would close after every task
    assert settings.CELERY_DB_REUSE_MAX >= 100
    assert DjangoWorkerFixup(app).db_reuse_max == settings.CELERY_DB_REUSE_MAX


def test_a_task_keeps_a_healthy_connection() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: backend pids")
    pid = backend_pid()
    for _ in range(3):
        task_starts()
        assert backend_pid() == pid


def test_a_task_closes_a_connection_past_its_age_or_broken() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: backend pids")
    pid = backend_pid()
    connection.close_at = time.monotonic() - 1.0  # CONN_MAX_AGE reached
    task_starts()
    assert connection.connection is None
    second = backend_pid()
    assert second != pid
    # a connection whose last statement failed and that no longer answers: closed too
    connection.errors_occurred = True
    connection.connection.close()  # gone (as after a server restart)
    task_starts()
    assert connection.connection is None
    assert backend_pid() not in (pid, second)


def test_an_eager_task_leaves_the_callers_connection_alone() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: backend pids")
    pid = backend_pid()
    connection.close_at = time.monotonic() - 1.0
    task_starts(eager=True)  # in the caller's transaction (embedded mode, tests)
    assert backend_pid() == pid
