"""Run a single-object runner (users' existing runners) on the two-sided worker protocol.

The adapter keeps one instance of the user's class in the first rollout worker and one in
the first trainer worker (the other ranks idle), and moves the job's state between them
with the runner's own `checkpoint()` / `restore()`:

- after a rollout, the rollout instance's `checkpoint()` is its batch: the trainer
  instance `restore()`s it, then runs `train`;
- the trainer instance's `checkpoint()` after training is the weights the sync sends to the
  rollout pool; the rollout instance `restore()`s them before its next rollout.

So a runner whose checkpoint captures its whole state (what a resumed job needs anyway)
runs unchanged across separate nodes. A runner whose rollout leaves state its checkpoint
omits must move to the two-sided protocol (`workers.runners.base.PoolRunner`), as the
built-in `toy-rl` did. The in-process dispatcher still runs single-object runners as one
object.
"""

from __future__ import annotations

from typing import Any

from workers.runners.base import Runner, WorkerContext


def single_object_sides(cls: type[Any]) -> tuple[type[Any], type[Any]]:
    """Return the (rollout side, trainer side) adapter classes for a single-object runner."""

    class Rollout(_AdaptedRollout):
        runner_cls = cls

    class Trainer(_AdaptedTrainer):
        runner_cls = cls

    Rollout.__name__ = Rollout.__qualname__ = f"{cls.__name__}Rollout"
    Trainer.__name__ = Trainer.__qualname__ = f"{cls.__name__}Trainer"
    return Rollout, Trainer


class _Adapted:
    runner_cls: type[Any]

    def __init__(self) -> None:
        self.runner: Runner | None = None  # only rank 0 holds an instance

    def setup(self, ctx: WorkerContext) -> None:
        if ctx.rank == 0:
            self.runner = self.runner_cls()
            self.runner.setup(ctx.job)

    def offload(self) -> None:
        if self.runner is not None:
            self.runner.offload()

    def reload(self) -> None:
        if self.runner is not None:
            self.runner.reload()

    def restore(self, blob: bytes) -> None:
        if self.runner is not None and blob:
            self.runner.restore(blob)


class _AdaptedRollout(_Adapted):
    def rollout(self, iteration: int) -> tuple[dict[str, float], Any]:
        if self.runner is None:
            return {}, None
        metrics = self.runner.rollout(iteration)
        return metrics, self.runner.checkpoint()

    def receive_weights(self, weights: bytes, version: int) -> dict[str, float]:
        self.restore(weights)
        return {}


class _AdaptedTrainer(_Adapted):
    @property
    def holds_weights(self) -> bool:
        """Only rank 0 holds the object: the sync takes every shard from it."""
        return self.runner is not None

    def train(self, iteration: int, batches: list[Any]) -> dict[str, float]:
        if self.runner is None:
            return {}
        state = next((b for b in batches if b), None)
        if state is not None:
            self.runner.restore(state)
        return self.runner.train(iteration)

    def send_weights(self) -> bytes:
        return self.runner.checkpoint() if self.runner is not None else b""

    def checkpoint(self) -> bytes:
        return self.send_weights()
