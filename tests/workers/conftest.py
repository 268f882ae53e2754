"""Fixtures for the workflow tests: jobs, an in-process workflow, one shared local Ray."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rollmux_web.workflow import ports
from tests.workers.multinode import (
    multinode_cluster,
    multinode_workflow,
    multinode_world,
    order_multinode_last,
)
from workers.dispatch import PhaseOrder, PhaseReport, Probe

__all__ = ["multinode_cluster", "multinode_workflow", "multinode_world"]
USER_RUNNERS = "tests.workers.user_runners"


def pytest_collection_modifyitems(items: list[Any]) -> None:
    order_multinode_last(items)


def make_job(world: Any, **overrides: Any) -> Any:
    """Create a queued job row directly (the jobs app's submission rules are tested there)."""
    from rollmux_web.jobs.models import Job

    fields: dict[str, Any] = {
        "name": "job",
        "tenant": world.vision,
        "submitter": world.alice,
        "slo_class": world.silver,
        "runner": "emulated",
        "iterations": 3,
        "rollout_gpus": 8,
        "train_gpus": 8,
        "t_roll_max_s": 120.0,
        "t_roll_min_s": 100.0,
        "t_train_max_s": 40.0,
        "t_train_min_s": 30.0,
        "host_mem_gb": 300.0,
        "time_scale": 1000.0,
    }
    fields.update(overrides)
    if fields["runner"].startswith(USER_RUNNERS):  # the admin allowlisted the tests' runners
        from rollmux_web.inventory.models import RunnerPackage

        RunnerPackage.objects.get_or_create(path=USER_RUNNERS)
    return Job.objects.create(**fields)


def twin_job(world: Any, name: str, **overrides: Any) -> Any:
    """A job that direct-packs with its twin for free (rollout = training, bronze SLO)."""
    fields: dict[str, Any] = {
        "t_roll_max_s": 100.0,
        "t_roll_min_s": 100.0,
        "t_train_max_s": 100.0,
        "t_train_min_s": 100.0,
        "slo_class": world.bronze,
        "iterations": 50,
    }
    fields.update(overrides)
    return make_job(world, name=name, **fields)


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0, interval: float = 0.05) -> None:
    """Poll until predicate() is true; fail the test with a clear message on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


def all_done(job_ids: list[int]) -> Callable[[], bool]:
    from rollmux_web.jobs.models import TERMINAL_STATUSES, Job

    def check() -> bool:
        return Job.objects.filter(pk__in=job_ids).exclude(status__in=TERMINAL_STATUSES).count() == 0

    return check


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

    # the controller's queue named: another test's start_worker(queues=[...]) leaves its
    # selection on the app, and a worker started after it would consume only that queue
    with start_worker(
        app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=20,
        queues=[settings.CELERY_TASK_DEFAULT_QUEUE],
    ) as worker:  # fmt: skip
        yield worker


class Recorder:
    """A dispatcher that records what it was asked to run (nothing runs)."""

    def __init__(self) -> None:
        self.orders: list[PhaseOrder] = []

    def dispatch(self, order: PhaseOrder) -> None:
        self.orders.append(order)

    def probe(self, order: PhaseOrder) -> Probe:
        return Probe("running")

    def release(self, job_id: int, placement_id: int) -> None:
        pass

    def kill(self, job_id: int, placement_id: int) -> None:
        pass


@pytest.fixture
def recorder(settings: Any) -> Iterator[Recorder]:
    settings.CELERY_TASK_ALWAYS_EAGER = True
    rec = Recorder()
    with ports.override(dispatcher=rec):
        yield rec


def end_of(order: PhaseOrder, *, outcome: str = "ok", started: bool = True) -> PhaseReport:
    now = time.time()
    return PhaseReport(
        order.phase_id,
        outcome,
        started_at=now - 1.0 if started else None,
        finished_at=now,
        warm=True,
        metrics={"load_s": 0.25},
        group_id=order.group_id,
        job_id=order.job_id,
    )
