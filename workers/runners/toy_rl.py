"""The `toy-rl` runner: real on-policy RL on the CPU (GRPO-style group baseline).

Task: for each of `CONTEXTS` prompts, emit a sequence of `LENGTH` tokens from a vocabulary
of `VOCAB`; the reward is the fraction of tokens equal to a hidden target sequence of that
prompt. The policy is a softmax table of logits per (prompt, position). A rollout samples
`GROUP` responses per prompt from the current policy and scores them; training computes
group-relative advantages (reward minus its group's mean, over the group's std, as GRPO
does) and takes an Adam step on the policy-gradient. Rollout and training strictly alternate
(on-policy), so the mean reward rises over iterations: the proof that the policy state
survived every offload/reload between phases.

Offload serialises the real arrays (policy, Adam moments, the rollout buffer) to host bytes
and drops them; reload rebuilds them and checks their CRC, reported as `resident_ok`.
Each phase is padded with sleep to the job's emulated duration so a group's timeline looks
like the profile says.
"""

from __future__ import annotations

import io
import time
import zlib
from typing import Any

import numpy as np

from workers.runners.base import RunnerContext, WorkerContext
from workers.runners.emulated import phase_duration

CONTEXTS = 4
LENGTH = 3
VOCAB = 6
GROUP = 8  # responses per prompt (the GRPO group)
PROMPTS_PER_ROLLOUT = 16
LEARNING_RATE = 0.15


class _PolicyCheckpoint:
    """The checkpoint of a learner holding the policy and its Adam moments (`_state()`)."""

    updates: int

    def _state(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def checkpoint(self) -> bytes:
        s = self._state()
        out = io.BytesIO()
        np.savez(
            out,
            logits=s["logits"],
            adam_m=s["adam_m"],
            adam_v=s["adam_v"],
            updates=np.array(self.updates),
        )
        return out.getvalue()

    def restore(self, blob: bytes) -> None:
        s = self._state()
        with np.load(io.BytesIO(blob)) as data:
            s["logits"], s["adam_m"], s["adam_v"] = data["logits"], data["adam_m"], data["adam_v"]
            self.updates = int(data["updates"])


class ToyRLRunner(_PolicyCheckpoint):
    def __init__(self) -> None:
        self.ctx: RunnerContext | None = None
        self.arrays: dict[str, np.ndarray] | None = None
        self._host: dict[str, tuple[bytes, str, tuple[int, ...]]] | None = None
        self._host_crc = 0
        self.updates = 0
        self.switches = 0
        self.rng = np.random.default_rng(0)

    # --- lifecycle -------------------------------------------------------------------
    def setup(self, ctx: RunnerContext) -> None:
        self.ctx = ctx
        self.rng = np.random.default_rng(ctx.job_id * 1009 + ctx.seed)
        self.arrays = {
            "logits": np.zeros((CONTEXTS, LENGTH, VOCAB)),
            "adam_m": np.zeros((CONTEXTS, LENGTH, VOCAB)),
            "adam_v": np.zeros((CONTEXTS, LENGTH, VOCAB)),
            "target": _target(),  # the task is the same for every job
        }

    def _pad(self, started: float, iteration: int, kind: str) -> None:
        assert self.ctx is not None
        remaining = phase_duration(self.ctx, iteration, kind) - (time.monotonic() - started)
        if remaining > 0:
            time.sleep(remaining)

    def _state(self) -> dict[str, np.ndarray]:
        if self.arrays is None:
            self.reload()
        assert self.arrays is not None
        return self.arrays

    # --- phases ----------------------------------------------------------------------
    def rollout(self, iteration: int) -> dict[str, float]:
        """Sample GROUP responses per prompt from the current policy and score them."""
        started = time.monotonic()
        s = self._state()
        prompts, actions, rewards = sample(s["logits"], s["target"], self.rng, PROMPTS_PER_ROLLOUT)
        s["buf_prompts"], s["buf_actions"], s["buf_rewards"] = prompts, actions, rewards
        self._pad(started, iteration, "rollout")
        return rollout_metrics(rewards)

    def train(self, iteration: int) -> dict[str, float]:
        """Take one Adam step on the GRPO objective over the last rollout's responses."""
        started = time.monotonic()
        s = self._state()
        if "buf_rewards" not in s:
            raise RuntimeError("train phase without a rollout buffer: on-policy order broken")
        prompts, actions, rewards = s.pop("buf_prompts"), s.pop("buf_actions"), s.pop("buf_rewards")
        self.updates += 1
        metrics = grpo_step(s, prompts, actions, rewards, self.updates)
        self._pad(started, iteration, "train")
        return {"updates": float(self.updates), **metrics}

    # --- residency ---------------------------------------------------------------------
    def offload(self) -> None:
        """Move every array to host bytes (device memory freed), keeping a CRC to check."""
        if self.arrays is None:
            return
        self._host = {k: (v.tobytes(), v.dtype.str, v.shape) for k, v in self.arrays.items()}
        self._host_crc = _crc(self._host)
        self.arrays = None

    def reload(self) -> None:
        """Rebuild the arrays from host bytes (a warm start); raise if they were corrupted."""
        if self.arrays is not None or self._host is None:
            return
        if _crc(self._host) != self._host_crc:
            raise RuntimeError("resident state corrupted between phases")
        self.arrays = {
            k: np.frombuffer(raw, dtype=np.dtype(dt)).reshape(shape).copy()
            for k, (raw, dt, shape) in self._host.items()
        }
        self._host = None
        self.switches += 1

    def stats(self) -> dict[str, Any]:
        return {"updates": self.updates, "switches": self.switches}


def rollout_metrics(rewards: np.ndarray) -> dict[str, float]:
    """Return a rollout's metrics: its reward (`reward`, kept for older readers) and the
    training metrics the reward curve is drawn from (reward_mean, reward_std, samples)."""
    mean = float(rewards.mean())
    return {
        "reward": mean,
        "responses": float(rewards.size),
        "reward_mean": mean,
        "reward_std": float(rewards.std()),
        "samples": float(rewards.size),
    }


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    out: np.ndarray = z / z.sum(axis=-1, keepdims=True)
    return out


def _crc(host: dict[str, tuple[bytes, str, tuple[int, ...]]]) -> int:
    crc = 0
    for key in sorted(host):
        crc = zlib.crc32(host[key][0], crc)
    return crc


def sample(
    logits: np.ndarray, target: np.ndarray, rng: np.random.Generator, n_prompts: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sample GROUP responses for n_prompts random prompts; return (prompts, actions, rewards)."""
    prompts = rng.integers(0, CONTEXTS, size=n_prompts)
    probs = _softmax(logits[prompts])  # (P, L, V)
    cum = probs.cumsum(axis=-1)
    u = rng.random((n_prompts, GROUP, LENGTH, 1))
    actions = (u > cum[:, None, :, :]).sum(axis=-1)  # (P, G, L)
    actions = np.minimum(actions, VOCAB - 1)
    rewards = (actions == target[prompts][:, None, :]).mean(axis=-1)  # (P, G)
    return prompts, actions, rewards


def grpo_step(
    s: dict[str, np.ndarray],
    prompts: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    updates: int,
) -> dict[str, float]:
    """Take one Adam step (the `updates`-th) on the GRPO objective, in place on s."""
    adv = (rewards - rewards.mean(axis=1, keepdims=True)) / (
        rewards.std(axis=1, keepdims=True) + 1e-6
    )  # group-relative advantage (P, G)
    probs = _softmax(s["logits"][prompts])  # (P, L, V)
    onehot = np.eye(VOCAB)[actions]  # (P, G, L, V)
    grad_logp = onehot - probs[:, None, :, :]
    contrib = adv[:, :, None, None] * grad_logp  # ascent direction per response
    grad = np.zeros_like(s["logits"])
    np.add.at(grad, prompts, contrib.sum(axis=1))
    grad /= prompts.size * GROUP
    beta1, beta2 = 0.9, 0.999
    s["adam_m"] = beta1 * s["adam_m"] + (1 - beta1) * grad
    s["adam_v"] = beta2 * s["adam_v"] + (1 - beta2) * grad**2
    m_hat = s["adam_m"] / (1 - beta1**updates)
    v_hat = s["adam_v"] / (1 - beta2**updates)
    s["logits"] = s["logits"] + LEARNING_RATE * m_hat / (np.sqrt(v_hat) + 1e-8)
    return {
        "grad_norm": float(np.linalg.norm(grad)),
        "greedy_accuracy": float((s["logits"].argmax(axis=-1) == s["target"]).mean()),
    }


def _target() -> np.ndarray:
    return np.random.default_rng(12345).integers(0, VOCAB, size=(CONTEXTS, LENGTH))


# --- the two-sided form: the rollout side samples with the weights it last received, the
# trainer side updates them (every trainer rank takes the same step on every batch, so the
# replicas stay identical, as data-parallel ranks after their all-reduce) ------------------


class ToyRLRollout:
    def __init__(self) -> None:
        self.ctx: WorkerContext | None = None
        self.logits: np.ndarray | None = None
        self._host: bytes | None = None
        self.version = 0
        self.rng = np.random.default_rng(0)
        self.target = _target()

    def setup(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.rng = np.random.default_rng((ctx.job.job_id * 1009 + ctx.job.seed) * 31 + ctx.rank)
        self.logits = np.zeros((CONTEXTS, LENGTH, VOCAB))

    def _prompts(self) -> int:
        assert self.ctx is not None
        return max(1, PROMPTS_PER_ROLLOUT // self.ctx.world_size)

    def rollout(self, iteration: int) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        assert self.ctx is not None
        started = time.monotonic()
        self.reload()
        assert self.logits is not None
        prompts, actions, rewards = sample(self.logits, self.target, self.rng, self._prompts())
        remaining = phase_duration(self.ctx.job, iteration, "rollout") - (
            time.monotonic() - started
        )
        if remaining > 0:
            time.sleep(remaining)
        batch = {"iteration": np.array(iteration), "prompts": prompts, "actions": actions}
        batch["rewards"] = rewards
        return {**rollout_metrics(rewards), "weights_version": float(self.version)}, batch

    def receive_weights(self, weights: bytes, version: int) -> dict[str, float]:
        self.logits = np.frombuffer(weights, dtype=np.float64).reshape(CONTEXTS, LENGTH, VOCAB)
        self.logits = self.logits.copy()
        self._host = None
        self.version = version
        return {"weights_bytes": float(len(weights))}

    def offload(self) -> None:
        if self.logits is not None:
            self._host, self.logits = self.logits.tobytes(), None

    def reload(self) -> None:
        if self.logits is None and self._host is not None:
            self.receive_weights(self._host, self.version)

    def restore(self, blob: bytes) -> None:
        with np.load(io.BytesIO(blob)) as data:
            self.logits, self.version = data["logits"].copy(), int(data["updates"])
        self._host = None


class ToyRLTrainer(_PolicyCheckpoint):
    def __init__(self) -> None:
        self.ctx: WorkerContext | None = None
        self.arrays: dict[str, np.ndarray] | None = None
        self._host: dict[str, bytes] | None = None
        self.updates = 0

    def setup(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        shape = (CONTEXTS, LENGTH, VOCAB)
        self.arrays = {k: np.zeros(shape) for k in ("logits", "adam_m", "adam_v")}
        self.arrays["target"] = _target()

    def _state(self) -> dict[str, np.ndarray]:
        self.reload()
        assert self.arrays is not None
        return self.arrays

    def train(self, iteration: int, batches: list[Any]) -> dict[str, float]:
        assert self.ctx is not None
        started = time.monotonic()
        got = [b for b in batches if b is not None]
        if not got or any(int(b["iteration"]) != iteration for b in got):
            raise RuntimeError(f"training {iteration} without this iteration's rollout batches")
        s = self._state()
        prompts = np.concatenate([b["prompts"] for b in got])
        actions = np.concatenate([b["actions"] for b in got])
        rewards = np.concatenate([b["rewards"] for b in got])
        self.updates += 1
        metrics = grpo_step(s, prompts, actions, rewards, self.updates)
        remaining = phase_duration(self.ctx.job, iteration, "train") - (time.monotonic() - started)
        if remaining > 0:
            time.sleep(remaining)
        return {"updates": float(self.updates), "batch_reward": float(rewards.mean()), **metrics}

    def send_weights(self) -> bytes:
        return self._state()["logits"].tobytes()

    def offload(self) -> None:
        if self.arrays is not None:
            self._host = {k: v.tobytes() for k, v in self.arrays.items()}
            self.arrays = None

    def reload(self) -> None:
        if self.arrays is None and self._host is not None:
            shape = (CONTEXTS, LENGTH, VOCAB)
            self.arrays = {
                k: np.frombuffer(raw, dtype=np.int64 if k == "target" else np.float64)
                .reshape((CONTEXTS, LENGTH) if k == "target" else shape)
                .copy()
                for k, raw in self._host.items()
            }
            self._host = None


ToyRLRunner.rollout_side = ToyRLRollout  # type: ignore[attr-defined]
ToyRLRunner.trainer_side = ToyRLTrainer  # type: ignore[attr-defined]
