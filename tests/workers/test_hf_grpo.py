"""The `hf-grpo` runner in one process: it learns, its residency and checkpoints are real.

No database, no Ray: the runner's sides called as the pool workers call them. The
multi-node end-to-end run is tests/workers/test_multinode_hf_grpo.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from scheduler.model_shape import host_mem_refusal, llama_shape  # noqa: E402
from workers.dispatch.pool import cut_weights, join_weights, nbytes  # noqa: E402
from workers.runners import RunnerContext, WorkerContext, runner_class  # noqa: E402
from workers.runners.hf_grpo import (  # noqa: E402
    CheckpointError,
    HfGrpoRollout,
    HfGrpoRunner,
    HfGrpoTrainer,
    unpack,
)


def context(job_id: int = 1, model: str = "") -> RunnerContext:
    return RunnerContext(
        job_id=job_id, iterations=30, t_roll_min_s=0.0, t_roll_max_s=0.0,
        t_train_min_s=0.0, t_train_max_s=0.0, host_mem_gb=1.0, model=model,
    )  # fmt: skip


def sides(job_id: int = 1) -> tuple[HfGrpoRollout, HfGrpoTrainer]:
    job = context(job_id)
    rollout, trainer = HfGrpoRollout(), HfGrpoTrainer()
    rollout.setup(WorkerContext(job=job, role="rollout", rank=0, world_size=1, node="n"))
    trainer.setup(WorkerContext(job=job, role="train", rank=0, world_size=1, node="n"))
    return rollout, trainer


def iterate(rollout: HfGrpoRollout, trainer: HfGrpoTrainer, i: int) -> tuple[dict, dict]:
    """One iteration as the pool workers run it: rollout, train, sync (sharded in two)."""
    got, batch = rollout.rollout(i)
    trained = trainer.train(i, [batch])
    pieces = cut_weights(trainer.send_weights(), 2)
    rollout.receive_weights(join_weights(pieces), trainer.updates)
    trainer.offload()
    return got, trained


def test_hf_grpo_is_a_builtin_two_sided_runner() -> None:
    cls = runner_class("hf-grpo")
    assert cls.rollout_side is HfGrpoRollout and cls.trainer_side is HfGrpoTrainer
    assert llama_shape("").parameters == 84_160  # the ~0.1M default
    assert 10e6 <= llama_shape("llama-25M").parameters <= 40e6


def test_the_default_model_learns_single_digit_addition() -> None:
    rollout, trainer = sides()
    rewards = [iterate(rollout, trainer, i)[0]["reward_mean"] for i in range(24)]
    first, last = np.mean(rewards[:3]), np.mean(rewards[-3:])
    print(f"\nhf-grpo reward: first 3 iterations {first:.3f}, last 3 {last:.3f}")
    # measured: ~0.02 -> ~0.5 over 24 iterations (seeded); a policy that does not learn stays
    # near its first value
    assert last > first + 0.2, rewards


def test_offload_empties_the_live_state_and_reload_brings_it_back() -> None:
    rollout, trainer = sides()
    iterate(rollout, trainer, 0)  # AdamW has moments now
    trainer.reload()
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    moments = [t.clone() for t in trainer._tensors()[len(before) :]]
    assert moments, "AdamW's moments are part of the resident state"
    trainer.offload()
    assert all(p.numel() == 0 for p in trainer.model.parameters())
    assert trainer.host.resident and trainer.host.buffer.is_shared()
    trainer.reload()
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(
        torch.equal(a, b) for a, b in zip(moments, trainer._tensors()[len(before) :], strict=True)
    )


def test_a_restored_trainer_continues_exactly_where_it_stopped(tmp_path: Any) -> None:
    rollout, trainer = sides()
    for i in range(3):
        iterate(rollout, trainer, i)
    blob = trainer.checkpoint()
    tensors, meta = unpack(blob)
    assert meta["updates"] == 3 and "rng.torch" in tensors
    _, batch = rollout.rollout(3)
    straight = trainer.train(3, [batch])
    # a new trainer elsewhere, restored from the checkpoint, takes the same step
    _, fresh = sides()
    fresh.restore(blob)
    again = fresh.train(3, [batch])
    assert again["updates"] == straight["updates"] == 4.0
    assert again["loss"] == pytest.approx(straight["loss"], rel=1e-5)
    trainer.reload()
    fresh.reload()
    for (k, a), b in zip(
        trainer.model.state_dict().items(), fresh.model.state_dict().values(), strict=True
    ):
        assert torch.allclose(a, b, atol=1e-6), k
    # the rollout side takes the policy (and its version) from the same checkpoint
    other, _ = sides()
    other.restore(blob)
    assert other.version == 3


@pytest.mark.parametrize(
    ("blob", "why"),
    [
        (b"", "empty"),
        (b"\x10\x00\x00\x00\x00\x00\x00\x00{not json", "corrupt"),
        (None, "not an hf-grpo checkpoint"),
    ],
)
def test_a_bad_checkpoint_fails_the_restore_saying_why(blob: bytes | None, why: str) -> None:
    if blob is None:
        from safetensors.torch import save

        blob = save({"x": torch.zeros(2)}, metadata={"format": "something-else"})
    _, trainer = sides()
    with pytest.raises(CheckpointError, match=why):
        trainer.restore(blob)


def test_a_checkpoint_of_another_model_size_fails_the_restore() -> None:
    trainer = HfGrpoTrainer()
    trainer.setup(WorkerContext(job=context(model="llama-0.5M"), role="train", rank=0,
                                world_size=1, node="n"))  # fmt: skip
    _, small = sides()
    with pytest.raises(CheckpointError, match="another model size"):
        trainer.restore(small.checkpoint())


def test_weights_are_cut_into_whole_tensors_one_shard_per_rollout_worker() -> None:
    _, trainer = sides()
    weights = trainer.send_weights()
    pieces = cut_weights(weights, 3)
    assert len(pieces) == 3 and all(pieces)
    assert sum(nbytes(p) for p in pieces) == nbytes(weights) == 84_160 * 4
    assert set(join_weights(pieces)) == set(weights)


def test_a_model_too_big_for_its_host_memory_is_refused_naming_the_field() -> None:
    assert host_mem_refusal("llama-0.1M", 1.0) is None
    why = host_mem_refusal("llama-100M", 0.5)
    assert why is not None and "0.5 GB cannot hold" in why


def test_the_single_object_form_runs_inline() -> None:
    runner = HfGrpoRunner()
    runner.setup(context())
    runner.reload()
    assert runner.rollout(0)["samples"] == 256.0
    trained = runner.train(0)
    runner.offload()
    assert trained["updates"] == 1.0 and trained["weights_bytes"] == 84_160 * 4
    assert {"loss", "kl", "entropy", "tokens_per_s", "reward_mean", "reward_std"} <= set(trained)
