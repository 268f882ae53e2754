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

from workers.runners import RunnerContext
from workers.runners.emulated import phase_duration

CONTEXTS = 4
LENGTH = 3
VOCAB = 6
GROUP = 8  # responses per prompt (the GRPO group)
PROMPTS_PER_ROLLOUT = 16
LEARNING_RATE = 0.15


class ToyRLRunner:
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
        target_rng = np.random.default_rng(12345)  # the task is the same for every job
        self.arrays = {
            "logits": np.zeros((CONTEXTS, LENGTH, VOCAB)),
            "adam_m": np.zeros((CONTEXTS, LENGTH, VOCAB)),
            "adam_v": np.zeros((CONTEXTS, LENGTH, VOCAB)),
            "target": target_rng.integers(0, VOCAB, size=(CONTEXTS, LENGTH)),
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
        logits = s["logits"]
        prompts = self.rng.integers(0, CONTEXTS, size=PROMPTS_PER_ROLLOUT)
        probs = _softmax(logits[prompts])  # (P, L, V)
        cum = probs.cumsum(axis=-1)
        u = self.rng.random((PROMPTS_PER_ROLLOUT, GROUP, LENGTH, 1))
        actions = (u > cum[:, None, :, :]).sum(axis=-1)  # (P, G, L)
        actions = np.minimum(actions, VOCAB - 1)
        rewards = (actions == s["target"][prompts][:, None, :]).mean(axis=-1)  # (P, G)
        s["buf_prompts"], s["buf_actions"], s["buf_rewards"] = prompts, actions, rewards
        self._pad(started, iteration, "rollout")
        return {"reward": float(rewards.mean()), "responses": float(rewards.size)}

    def train(self, iteration: int) -> dict[str, float]:
        """Take one Adam step on the GRPO objective over the last rollout's responses."""
        started = time.monotonic()
        s = self._state()
        if "buf_rewards" not in s:
            raise RuntimeError("train phase without a rollout buffer: on-policy order broken")
        prompts, actions, rewards = s.pop("buf_prompts"), s.pop("buf_actions"), s.pop("buf_rewards")
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
        self.updates += 1
        beta1, beta2 = 0.9, 0.999
        s["adam_m"] = beta1 * s["adam_m"] + (1 - beta1) * grad
        s["adam_v"] = beta2 * s["adam_v"] + (1 - beta2) * grad**2
        m_hat = s["adam_m"] / (1 - beta1**self.updates)
        v_hat = s["adam_v"] / (1 - beta2**self.updates)
        s["logits"] = s["logits"] + LEARNING_RATE * m_hat / (np.sqrt(v_hat) + 1e-8)
        self._pad(started, iteration, "train")
        return {
            "updates": float(self.updates),
            "grad_norm": float(np.linalg.norm(grad)),
            "greedy_accuracy": float((s["logits"].argmax(axis=-1) == s["target"]).mean()),
        }

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

    def stats(self) -> dict[str, Any]:
        return {"updates": self.updates, "switches": self.switches}


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    out: np.ndarray = z / z.sum(axis=-1, keepdims=True)
    return out


def _crc(host: dict[str, tuple[bytes, str, tuple[int, ...]]]) -> int:
    crc = 0
    for key in sorted(host):
        crc = zlib.crc32(host[key][0], crc)
    return crc
