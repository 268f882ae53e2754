"""Fixtures for the workflow tests: jobs, an in-process workflow, one shared local Ray."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from rollmux_web import ports
from tests.workers.multinode import (
    multinode_cluster,
    multinode_workflow,
    multinode_world,
    order_multinode_last,
)

__all__ = ["multinode_cluster", "multinode_workflow", "multinode_world"]


def pytest_collection_modifyitems(items: list[Any]) -> None:
    order_multinode_last(items)


@pytest.fixture
def eager_celery(settings: Any) -> Iterator[Any]:
    """Run Celery tasks in-process (as the embedded default does), without a beat thread."""
    from rollmux_web.celery import app

    old = (app.conf.task_always_eager, app.conf.task_eager_propagates)
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    settings.CELERY_TASK_ALWAYS_EAGER = True
    settings.ROLLMUX_EMBEDDED_BEAT = False
    from workers import embedded

    embedded.set_serving(True)  # this test process plays the embedded web server
    yield app
    embedded.set_serving(False)
    app.conf.task_always_eager, app.conf.task_eager_propagates = old


@pytest.fixture
def inline_workflow(eager_celery: Any, settings: Any, tmp_path: Any) -> Iterator[Any]:
    """The workflow with the in-process dispatcher: phases on threads, reports in-process."""
    from workers.composition import deliver_report
    from workers.dispatch.inline import InlineDispatcher

    settings.ROLLMUX_CHECKPOINT_DIR = str(tmp_path / "ckpt")
    dispatcher = InlineDispatcher(on_report=deliver_report)
    with ports.override(dispatcher=dispatcher):
        yield dispatcher
    dispatcher.shutdown()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """One local Ray for every Ray test, advertising the test world's node resources."""
    from workers.dispatch import ray_dispatcher

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    resources = {f"node:h20-{i}": 1.0 for i in range(4)} | {f"node:h800-{i}": 1.0 for i in range(4)}
    ray_dispatcher.ensure_ray("local", resources=lambda: resources)
    yield ray_dispatcher.ray_address()
    ray_dispatcher.shutdown_ray()


@pytest.fixture
def clean_broker(settings: Any) -> Iterator[None]:
    """Empty this run's Redis db (stale task messages of earlier runs would replay)."""
    import redis

    r = redis.Redis.from_url(settings.REDIS_URL)
    r.flushdb()
    yield
    r.flushdb()


@pytest.fixture
def ray_workflow(
    ray_cluster: str, settings: Any, tmp_path: Any, clean_broker: None
) -> Iterator[Any]:
    """The workflow on the shared local Ray: actors publish their phase events to Redis."""
    from workers.composition import deliver_report, report_config
    from workers.dispatch.ray_dispatcher import RayDispatcher

    settings.ROLLMUX_CHECKPOINT_DIR = str(tmp_path / "ckpt")
    settings.ROLLMUX_EMBEDDED_BEAT = False
    dispatcher = RayDispatcher(
        address=ray_cluster, on_report=deliver_report, report=report_config()
    )
    with ports.override(dispatcher=dispatcher):
        yield dispatcher


@pytest.fixture
def celery_worker_thread(ray_workflow: Any, settings: Any) -> Iterator[Any]:
    """A real Celery worker (threads pool) consuming the Redis broker in this process."""
    from celery.contrib.testing.worker import start_worker

    from rollmux_web.celery import app

    # the controller's queues named: another test's start_worker(queues=[...]) leaves its
    # selection on the app, and a worker started after it would consume only that queue
    with start_worker(
        app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=20,
        queues=list(settings.ROLLMUX_CONTROLLER_QUEUES),
    ) as worker:  # fmt: skip
        yield worker
