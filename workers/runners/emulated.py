"""The `emulated` runner: sleeps each phase's duration, scaled down, over a resident state.

A phase lasts a duration drawn in [min, max] of the job's profile, divided by the job's
time scale (a 300 s phase takes 1.5 s at scale 200). The draw is seeded by (job, iteration,
kind) so a phase re-run after a failure lasts as long as the first time. The job's resident
state is a real buffer of the declared host memory scaled down by `STATE_FRACTION`, copied to
host memory on offload and back on reload, so residency costs what a memcpy of it costs.
"""

from __future__ import annotations

import json
import random
import time
import zlib

from workers.runners import RunnerContext

# 400 GB of declared state -> about 4 MB of real buffer.
STATE_FRACTION = 1e-5


def phase_duration(ctx: RunnerContext, iteration: int, kind: str) -> float:
    """Return the wall-clock seconds a phase lasts: a seeded draw in [min, max] / time scale."""
    lo, hi = (
        (ctx.t_roll_min_s, ctx.t_roll_max_s)
        if kind == "rollout"
        else (ctx.t_train_min_s, ctx.t_train_max_s)
    )
    seed = zlib.crc32(f"{ctx.job_id}:{ctx.seed}:{iteration}:{kind}".encode())
    return random.Random(seed).uniform(lo, hi) / ctx.time_scale


class EmulatedRunner:
    def __init__(self) -> None:
        self.ctx: RunnerContext | None = None
        self._device: bytearray | None = None
        self._host: bytes | None = None
        self.iterations_trained = 0

    def setup(self, ctx: RunnerContext) -> None:
        self.ctx = ctx
        size = max(1, int(ctx.host_mem_gb * 2**30 * STATE_FRACTION))
        self._device = bytearray(random.Random(ctx.job_id).randbytes(min(size, 1 << 16)))
        self._device.extend(bytes(size - len(self._device)))

    def _duration(self, iteration: int, kind: str) -> float:
        assert self.ctx is not None
        return phase_duration(self.ctx, iteration, kind)

    def _run(self, iteration: int, kind: str) -> dict[str, float]:
        if self._device is None:
            self.reload()
        duration = self._duration(iteration, kind)
        time.sleep(duration)
        return {"emulated_s": duration}

    def rollout(self, iteration: int) -> dict[str, float]:
        return self._run(iteration, "rollout")

    def train(self, iteration: int) -> dict[str, float]:
        metrics = self._run(iteration, "train")
        self.iterations_trained = iteration + 1
        metrics["iterations_trained"] = float(self.iterations_trained)
        return metrics

    def offload(self) -> None:
        if self._device is not None:
            self._host = bytes(self._device)
            self._device = None

    def reload(self) -> None:
        if self._device is None and self._host is not None:
            self._device = bytearray(self._host)

    def checkpoint(self) -> bytes:
        return json.dumps({"iterations_trained": self.iterations_trained}).encode()

    def restore(self, blob: bytes) -> None:
        self.iterations_trained = int(json.loads(blob)["iterations_trained"])
