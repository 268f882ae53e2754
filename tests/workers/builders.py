"""Builders of the workflow tests: job rows, waits, a recording dispatcher, triggers that do
nothing, phase reports.

Tests import these from here (fixtures live in conftest.py and are never imported).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from workers.dispatch import Outcome, PhaseOrder, PhaseReport, Probe

USER_RUNNERS = "tests.workers.user_runners"


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


class NoTriggers:
    """The workflow's triggers doing nothing (tests and benches that drive planning and the
    controller themselves); subclass it to record the calls a test is about."""

    def request_planning(self) -> None: ...

    def request_cancel(self, job_id: int) -> None: ...

    def node_state_changed(self, node_id: int) -> None: ...

    def request_drift_check(self, placement_id: int, iterations_done: int) -> None: ...


def end_of(
    order: PhaseOrder, *, outcome: Outcome = Outcome.OK, reason: str = "", started: bool = True
) -> PhaseReport:
    now = time.time()
    return PhaseReport(
        order.phase_id,
        outcome,
        reason=reason,
        started_at=now - 1.0 if started else None,
        finished_at=now,
        warm=True,
        metrics={"load_s": 0.25},
        group_id=order.group_id,
        job_id=order.job_id,
    )


def record_curve(job: Any, attempts: list[list[float]], *, start: int = 0) -> list[Any]:
    """Record a reward curve for `job` as the controller would: one new placement per
    attempt (in one group), attempt k's rewards at the iterations that follow attempt k-1's, each
    with a std of 0.1 and a loss. Returns the placements."""
    from django.utils import timezone

    from rollmux_web.workflow.models import ExecutionGroup, Placement
    from rollmux_web.workflow.services.training_metrics import iteration_metrics_record

    group = ExecutionGroup.objects.create()
    placements, it = [], start
    before = Placement.objects.filter(job=job).count()  # (attempts already placed)
    for attempt, rewards in enumerate(attempts, start=before + 1):
        p = Placement.objects.create(
            job=job, group=group, strategy="direct_packing", attempt=attempt
        )
        placements.append(p)
        for reward in rewards:
            iteration_metrics_record(
                job_id=job.pk, placement_id=p.pk, iteration=it, now=timezone.now(),
                metrics={"reward_mean": reward, "reward_std": 0.1, "samples": 64.0,
                         "loss": 1.0 - reward},
            )  # fmt: skip
            it += 1
    return placements
