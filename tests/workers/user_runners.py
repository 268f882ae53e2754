"""Users' runners loaded by import path in the tests ("tests.workers.user_runners:Class")."""

from __future__ import annotations

import threading
from typing import Any

from workers.runners.emulated import EmulatedRunner
from workers.runners.toy_rl import ToyRLRunner


class FlakyRunner(EmulatedRunner):
    """Fails iteration 1's training once per process (the first attempt), then works."""

    failed: set[int] = set()
    lock = threading.Lock()

    def train(self, iteration: int) -> dict[str, float]:
        assert self.ctx is not None
        with self.lock:
            first = iteration == 1 and self.ctx.job_id not in self.failed
            if first:
                self.failed.add(self.ctx.job_id)
        if first:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return super().train(iteration)


class BrokenRunner(EmulatedRunner):
    """Always fails its first rollout."""

    def rollout(self, iteration: int) -> dict[str, float]:
        raise ValueError("reward model unreachable")


class NotARunner:
    def setup(self, ctx: Any) -> None: ...


class FlakyToyRL(ToyRLRunner):
    """toy-rl (the single-object form) whose iteration 1's training fails once per job."""

    failed: set[int] = set()
    lock = threading.Lock()

    def train(self, iteration: int) -> dict[str, float]:
        assert self.ctx is not None
        with self.lock:
            first = iteration == 1 and self.ctx.job_id not in self.failed
            if first:
                self.failed.add(self.ctx.job_id)
        if first:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return super().train(iteration)
