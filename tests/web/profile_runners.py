"""Runners of the profiling tests, named by import path ("tests.web.profile_runners:Class").

They record what their context said (the `profile` flag) in a file the test reads, since
the runner may run in another thread or process than the test.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from workers.runners import RunnerContext

# wall-clock seconds of each phase: at time scale 100 that is 30 and 20 profile seconds
ROLLOUT_S = 0.3
TRAIN_S = 0.2


class MeasuredRunner:
    """A user's runner that takes fixed times (it measures its real phases)."""

    def __init__(self) -> None:
        self.ctx: RunnerContext | None = None

    def _log(self, what: str, iteration: int) -> None:
        assert self.ctx is not None
        path = os.environ.get("ROLLMUX_TEST_RUNNER_LOG")
        if path:
            with open(path, "a") as f:
                f.write(json.dumps([self.ctx.job_id, what, iteration, self.ctx.profile]) + "\n")

    def setup(self, ctx: RunnerContext) -> None:
        self.ctx = ctx

    def rollout(self, iteration: int) -> dict[str, float]:
        self._log("rollout", iteration)
        time.sleep(ROLLOUT_S)
        return {}

    def train(self, iteration: int) -> dict[str, float]:
        self._log("train", iteration)
        time.sleep(TRAIN_S)
        return {}

    def offload(self) -> None: ...

    def reload(self) -> None: ...

    def checkpoint(self) -> bytes:
        return b""

    def restore(self, blob: bytes) -> None: ...


class FailsWhenProfiled(MeasuredRunner):
    """Fails its first rollout when profiled (e.g. out of memory at the maximum length)."""

    def rollout(self, iteration: int) -> dict[str, Any]:
        assert self.ctx is not None
        if self.ctx.profile:
            raise RuntimeError("CUDA out of memory at 32768 tokens")
        return super().rollout(iteration)
