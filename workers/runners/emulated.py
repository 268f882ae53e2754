"""The `emulated` runner: sleeps each phase's duration, scaled down, over a resident state.

A phase lasts a duration drawn in [min, max] of the job's profile (times its configured
drift, `drift_factor`), divided by the job's time scale (a 300 s phase takes 1.5 s at scale 200). The draw is seeded by (job, iteration,
kind) so a phase re-run after a failure lasts as long as the first time. The job's resident
state is a real buffer of the declared host memory scaled down by `STATE_FRACTION`, copied to
host memory on offload and back on reload, so residency costs what a memcpy of it costs.
"""

from __future__ import annotations

import bisect
import json
import random
import threading
import time
import zlib
from typing import Any

from workers.runners.base import RunnerContext, WorkerContext

# 400 GB of declared state -> about 4 MB of real buffer.
STATE_FRACTION = 1e-5


def phase_duration(ctx: RunnerContext, iteration: int, kind: str) -> float:
    """Return the wall-clock seconds a phase lasts: a seeded draw in [min, max] / time scale
    (a rollout x the context's rollout speed factor: co-located, on the training GPUs)."""
    if kind == "rollout":
        lo, hi = ctx.t_roll_min_s, ctx.t_roll_max_s
        factor = ctx.rollout_speed_factor
    else:
        lo, hi, factor = ctx.t_train_min_s, ctx.t_train_max_s, 1.0
    seed = zlib.crc32(f"{ctx.job_id}:{ctx.seed}:{iteration}:{kind}".encode())
    return (
        random.Random(seed).uniform(lo, hi) * factor * drift_factor(ctx, iteration) / ctx.time_scale
    )


def drift_factor(ctx: RunnerContext, iteration: int) -> float:
    """Return the configured drift of an iteration: 1 + drift x its progress i/(n-1) (the
    simulator's increasing template, scheduler.sim.drift.drift_factors)."""
    if not ctx.drift:
        return 1.0
    return 1.0 + ctx.drift * iteration / max(1, ctx.iterations - 1)


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


# --- the two-sided form (one worker per GPU of the job's nodes, on Ray) -------------------

# 14 GB of bf16 weights (a 7B model) -> 140 KB moved per sync: a real blob, scaled down.
WEIGHTS_FRACTION = 1e-5
BATCH_BYTES = 4096  # one rollout worker's batch (token ids and rewards, scaled down)


def weights_nbytes(ctx: RunnerContext) -> int:
    """Return the size of the emulated weight blob: the model's weights scaled down."""
    return max(1024, int(ctx.weights_gb * 2**30 * WEIGHTS_FRACTION))


def _stamp(blob: bytes | bytearray) -> int:
    return int.from_bytes(blob[:8], "little")


class _Resident:
    """A worker whose share of the job's state moves to host memory between phases."""

    state: _State | None

    def offload(self) -> None:
        if self.state is not None:
            self.state.offload()

    def reload(self) -> None:
        if self.state is not None:
            self.state.reload()


# Long-tail migration: a rollout's responses, as scheduler.sim.longtail models them (its
# LongTailModel's defaults): log-normal lengths, decode time proportional to length, the
# rollout ending with its slowest response.
RESPONSES = 128
LENGTH_SIGMA = 0.4


def response_lengths(ctx: RunnerContext, iteration: int) -> list[float]:
    """Return the rollout's response lengths as shares of the slowest one, sorted (a seeded
    draw per job and iteration: a re-run rollout has the same tail)."""
    rng = random.Random(zlib.crc32(f"{ctx.job_id}:{ctx.seed}:{iteration}:lengths".encode()))
    raw = [rng.lognormvariate(0.0, LENGTH_SIGMA) for _ in range(RESPONSES)]
    top = max(raw)
    return sorted(x / top for x in raw)


class EmulatedRollout(_Resident):
    """A rollout worker: sleeps its phase over a resident state, reports the weights it has.

    Its responses finish along `response_lengths` (progress), and it takes part in
    long-tail migration: released, it stops at once and hands its unfinished responses
    over; the peer that takes them still ends at the rollout's end (the consolidation
    rule sizes the tail to fit the peers' free batch slots: scheduler.sim.longtail)."""

    def __init__(self) -> None:
        self.ctx: WorkerContext | None = None
        self.state: _State | None = None
        self.weights_version = 0  # iterations trained into the weights this worker holds
        self.weights_crc = 0
        self._running: tuple[float, float, list[float]] | None = None  # start, length, tail
        self._released = threading.Event()
        self._taken = 0

    def setup(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.state = _State(ctx.job, ctx.world_size)

    def rollout(self, iteration: int) -> tuple[dict[str, float], bytes]:
        assert self.ctx is not None
        duration = phase_duration(self.ctx.job, iteration, "rollout")
        self._released.clear()
        self._taken = 0
        start = time.monotonic()
        self._running = (start, duration, response_lengths(self.ctx.job, iteration))
        released = self._released.wait(duration)
        self._running = None
        batch = iteration.to_bytes(8, "little") + bytes(BATCH_BYTES - 8)
        metrics = {"emulated_s": duration, "weights_version": float(self.weights_version)}
        if released:
            metrics["released_after_s"] = time.monotonic() - start
        if self._taken:
            metrics["tail_responses_taken"] = float(self._taken)
        return metrics, batch

    def _done_share(self) -> tuple[int, int]:
        running = self._running
        if running is None:  # (the coordinator asks only while this worker's call runs)
            return 0, RESPONSES
        start, duration, lengths = running
        reached = (time.monotonic() - start) / duration if duration > 0 else 1.0
        return bisect.bisect_right(lengths, reached), len(lengths)

    def progress(self) -> float:
        done, total = self._done_share()
        return done / total

    def release_tail(self) -> dict[str, int]:
        done, total = self._done_share()
        workers = self.ctx.world_size if self.ctx else 1
        self._released.set()
        return {"responses": -(-(total - done) // max(1, workers))}  # this worker's share

    def take_tail(self, work: dict[str, int]) -> None:
        self._taken += int(work.get("responses", 0))

    def receive_weights(self, weights: bytes, version: int) -> dict[str, float]:
        if _stamp(weights) != version:
            raise RuntimeError(f"weights of version {_stamp(weights)} arrived for {version}")
        self.weights_version = version
        self.weights_crc = zlib.crc32(weights)
        return {"weights_bytes": float(len(weights))}

    def restore(self, blob: bytes) -> None:
        self.weights_version = int(json.loads(blob)["iterations_trained"])


class EmulatedTrainer(_Resident):
    """A trainer worker: sleeps its phase, stamps the weights with the iterations trained."""

    def __init__(self) -> None:
        self.ctx: WorkerContext | None = None
        self.state: _State | None = None
        self.weights = bytearray()
        self.iterations_trained = 0

    def setup(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.state = _State(ctx.job, ctx.world_size)
        self.weights = bytearray(weights_nbytes(ctx.job))

    def train(self, iteration: int, batches: list[Any]) -> dict[str, float]:
        assert self.ctx is not None
        seen = sorted(_stamp(b) for b in batches if b)
        if any(s != iteration for s in seen):
            raise RuntimeError(f"training {iteration} got batches of iterations {seen}")
        duration = phase_duration(self.ctx.job, iteration, "train")
        time.sleep(duration)
        self.iterations_trained = iteration + 1
        self.weights[:8] = self.iterations_trained.to_bytes(8, "little")
        return {
            "emulated_s": duration,
            "iterations_trained": float(self.iterations_trained),
            "batches": float(len(seen)),
        }

    def send_weights(self) -> bytes:
        return bytes(self.weights)

    def checkpoint(self) -> bytes:
        return json.dumps({"iterations_trained": self.iterations_trained}).encode()

    def restore(self, blob: bytes) -> None:
        self.iterations_trained = int(json.loads(blob)["iterations_trained"])
        self.weights[:8] = self.iterations_trained.to_bytes(8, "little")


class _State:
    """A worker's share of the job's resident state: device buffer <-> host copy."""

    def __init__(self, ctx: RunnerContext, workers: int) -> None:
        size = max(1, int(ctx.host_mem_gb * 2**30 * STATE_FRACTION / max(1, workers)))
        self.device: bytearray | None = bytearray(size)
        self.host: bytes | None = None

    def offload(self) -> None:
        if self.device is not None:
            self.host, self.device = bytes(self.device), None

    def reload(self) -> None:
        if self.device is None and self.host is not None:
            self.device = bytearray(self.host)


EmulatedRunner.rollout_side = EmulatedRollout  # type: ignore[attr-defined]
EmulatedRunner.trainer_side = EmulatedTrainer  # type: ignore[attr-defined]
