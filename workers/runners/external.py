"""The `external` runner: the phase is run by the job's own trainer through `rollmux.phase`.

A phase here grants the trainer its next phase over the control channel and blocks until
the trainer reports the end of it; the trainer keeps its own state, so offload/reload and
checkpoint/restore are the trainer's business (the shim calls are no-ops).
"""

from __future__ import annotations

import rollmux
from workers.runners.base import RunnerContext


class ExternalRunner:
    def __init__(self) -> None:
        self.ctx: RunnerContext | None = None
        self.channel: rollmux.Channel | None = None
        self.timeout_s = 3600.0

    def setup(self, ctx: RunnerContext) -> None:
        self.ctx = ctx
        self.channel = rollmux.channel_for(ctx.channel.get("redis_url"))
        self.timeout_s = float(ctx.channel.get("timeout_s", 3600.0))

    def _grant(self, kind: str, iteration: int) -> dict[str, float]:
        assert self.ctx is not None and self.channel is not None
        job_id = self.ctx.job_id
        self.channel.push(rollmux.grant_key(job_id), {"kind": kind, "iteration": iteration})
        done = self.channel.pop(rollmux.done_key(job_id, kind, iteration), self.timeout_s)
        if done is None:
            raise TimeoutError(
                f"the trainer did not finish {kind} {iteration} in {self.timeout_s} s"
            )
        if done["outcome"] != "ok":
            raise RuntimeError(f"the trainer reported {done['outcome']}")
        return {k: float(v) for k, v in (done.get("metrics") or {}).items()}

    def rollout(self, iteration: int) -> dict[str, float]:
        return self._grant("rollout", iteration)

    def train(self, iteration: int) -> dict[str, float]:
        return self._grant("train", iteration)

    def offload(self) -> None:
        return None

    def reload(self) -> None:
        return None

    def checkpoint(self) -> bytes:
        return b""

    def restore(self, blob: bytes) -> None:
        return None
