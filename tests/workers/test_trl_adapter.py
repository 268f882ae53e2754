"""A real `trl.GRPOTrainer` as an `external` job (issue 21 item 4): examples/trl_grpo.py run
as its own process, its generation and optimizer steps granted by the group controller
through the `rollmux` phase API over Redis, its metrics stored per iteration."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow.models import IterationMetrics, PhaseRecord, PhaseState
from tests.workers.builders import all_done, make_job, wait_for
from workers import triggers

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


@pytest.mark.slow
def test_a_trl_grpo_trainer_runs_generation_and_optimizer_steps_as_granted_phases(
    world: Any, inline_workflow: Any, clean_broker: None, settings: Any, tmp_path: Path
) -> None:
    # a real job's clock (time scale 1) and generous worst cases: the trainer's process
    # takes its time to import torch and TRL on a loaded machine
    job = make_job(
        world, name="trl-grpo", runner="external", iterations=STEPS, time_scale=1.0,
        t_roll_min_s=60.0, t_roll_max_s=600.0, t_train_min_s=60.0, t_train_max_s=600.0,
    )  # fmt: skip
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
    }
    log = tmp_path / "trainer.log"
    started = time.monotonic()
    with log.open("wb") as out:
        trainer = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "trl_grpo.py"),
             "--job-id", str(job.pk), "--redis-url", settings.REDIS_URL,
             "--steps", str(STEPS), "--output-dir", str(tmp_path / "trl"), "--timeout", "600"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            triggers.request_planning()
            wait_for(lambda: all_done([job.pk])() or trainer.poll() not in (None, 0), timeout=600)
            code = trainer.wait(timeout=120)
        finally:
            if trainer.poll() is None:
                trainer.kill()
    wall = time.monotonic() - started
    text = log.read_text(errors="replace")
    print(f"TRL adapter: {STEPS} GRPO steps through the phase API in {wall:.1f} s wall")
    ran = list(PhaseRecord.objects.filter(job=job).values_list("kind", "iteration", "outcome"))
    assert code == 0, (ran, text[-3000:])
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED, (job.reason, text[-3000:])
    assert f"trained {STEPS} steps" in text

    # every iteration's generation and optimizer step ran as a phase, in the runtime's order
    phases = list(PhaseRecord.objects.filter(job=job).order_by("started_at", "pk"))
    assert [(p.kind, p.iteration) for p in phases] == [
        (kind, i) for i in range(STEPS) for kind in ("rollout", "train")
    ]
    assert all(p.state == PhaseState.SUCCEEDED for p in phases)
    for earlier, later in zip(phases, phases[1:], strict=False):
        assert earlier.finished_at is not None and later.started_at is not None
        assert earlier.finished_at <= later.started_at  # one phase at a time, as granted
    rollout, train = phases[0], phases[1]
    # 4 prompts x 4 completions scored by the reward function; the loss, KL and entropy of
    # the update TRL computed
    assert rollout.metrics["samples"] == 16.0
    assert 0.0 <= rollout.metrics["reward_mean"] <= 1.0
    assert {"loss", "kl", "entropy"} <= set(train.metrics)

    rows = list(IterationMetrics.objects.filter(job=job).order_by("iteration"))
    assert [r.iteration for r in rows] == list(range(STEPS))
    assert all(r.reward_mean is not None and r.loss is not None for r in rows)
    assert Job.objects.get(pk=job.pk).iterations_done == STEPS
