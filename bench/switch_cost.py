"""Benchmark a job switch on this machine's CPU: warm reload vs cold restore vs the phase.

For three sizes of the `hf-grpo` model (a config-built Llama; `--models`), one trainer side
(the side that holds the most: weights, AdamW's moments) is measured:

- phase: one training phase (GRPO, two passes over a rollout's 256 samples), its work time;
- warm: `reload` after `offload` (the paper's warm start: the state comes back from host
  memory; here from a shared-memory buffer into fresh process memory);
- cold: what a job's new worker does before its first phase when the job resumes
  elsewhere (the paper's cold start): build the model from its config, read the checkpoint
  from the checkpoint storage (a local directory: ROLLMUX_CHECKPOINT_URI's default kind)
  and restore it (safetensors). A new worker process also starts Python and imports torch
  and transformers: measured once (`--no-import` skips it) and printed beside, not added.

Each figure is the median of `--repeats` runs; the ratios are within this run.

    .venv/bin/python bench/switch_cost.py --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.model_shape import llama_shape  # noqa: E402
from workers.dispatch.storage import CheckpointStore  # noqa: E402
from workers.runners import RunnerContext, WorkerContext  # noqa: E402
from workers.runners.hf_grpo import HfGrpoRollout, HfGrpoTrainer  # noqa: E402


def worker(cls: type, model: str, role: str) -> Any:
    job = RunnerContext(
        job_id=1, iterations=10, t_roll_min_s=0.0, t_roll_max_s=0.0, t_train_min_s=0.0,
        t_train_max_s=0.0, host_mem_gb=64.0, model=model,
    )  # fmt: skip
    side = cls()
    side.setup(WorkerContext(job=job, role=role, rank=0, world_size=1, node="bench"))
    return side


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(model: str, repeats: int, store: CheckpointStore) -> dict[str, float]:
    rollout = worker(HfGrpoRollout, model, "rollout")
    trainer = worker(HfGrpoTrainer, model, "train")
    phase, warm, cold = [], [], []
    for i in range(repeats):
        _, batch = rollout.rollout(i)
        phase.append(timed(lambda b=batch, i=i: trainer.train(i, [b])))  # offloads at its end
        warm.append(timed(trainer.reload))
        store.write(1, i + 1, trainer.checkpoint())
        trainer.offload()

        def cold_start(i: int = i) -> None:
            fresh = worker(HfGrpoTrainer, model, "train")
            blob = store.read(1, i + 1)
            assert blob is not None
            fresh.restore(blob)

        cold.append(timed(cold_start))
    return {
        "parameters": float(llama_shape(model).parameters),
        "state_mb": len(store.read(1, repeats) or b"") / 2**20,
        "phase_s": statistics.median(phase),
        "warm_s": statistics.median(warm),
        "cold_s": statistics.median(cold),
    }


def import_seconds() -> float:
    """Return a new process's start and its imports of torch and transformers (the part of a
    cold start this process cannot time again: it has them loaded)."""
    code = "import torch, transformers; from transformers import LlamaForCausalLM"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="llama-0.1M,llama-2M,llama-20M")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-import", action="store_true")
    args = parser.parse_args()
    print(f"{'model':<12}{'params':>12}{'ckpt MB':>9}{'phase s':>10}{'warm s':>10}{'cold s':>9}"
          f"{'cold/warm':>11}{'phase/warm':>12}{'cold/phase':>12}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            m = measure(model, args.repeats, CheckpointStore(str(Path(tmp) / model)))
            print(
                f"{model:<12}{m['parameters']:>12,.0f}{m['state_mb']:>9.1f}{m['phase_s']:>10.3f}"
                f"{m['warm_s']:>10.4f}{m['cold_s']:>9.3f}{m['cold_s'] / m['warm_s']:>10.1f}x"
                f"{m['phase_s'] / m['warm_s']:>11.1f}x{m['cold_s'] / m['phase_s']:>11.2f}x"
            )
    if not args.no_import:
        print(f"a new worker process's start + imports of torch and transformers: "
              f"{import_seconds():.1f} s (a cold start on a new node pays it too)")  # fmt: skip


if __name__ == "__main__":
    main()
