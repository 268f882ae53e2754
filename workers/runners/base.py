"""The runner protocols and the contexts runners are given (no registry: see `__init__`).

Two shapes of runner:

- a **single-object runner** (`Runner`): one object with `rollout` and `train`, the shape
  users' existing runners have. The in-process dispatcher runs it as is; on Ray the
  `adapter` module runs it whole in one worker (see there).
- a **two-sided runner** (`PoolRunner`): a class naming a `rollout_side` and a
  `trainer_side`. On Ray every GPU of the job's rollout nodes runs one rollout side and
  every GPU of its training nodes one trainer side (each a resident worker pinned to its
  node); the dispatcher moves the batches from rollout to training and the weights back
  (`sync`) through Ray's object store. Each side is told its node, GPU ids, rank and peers
  (`WorkerContext`).

Standard library only: this module is imported inside Ray workers and by the web app.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class RunnerContext:
    """Everything a runner knows about its job: the profile and how to scale time."""

    job_id: int
    iterations: int
    t_roll_min_s: float
    t_roll_max_s: float
    t_train_min_s: float
    t_train_max_s: float
    host_mem_gb: float
    time_scale: float = 1.0
    seed: int = 0
    channel: dict[str, Any] = field(default_factory=dict)  # for `external`: how to reach it
    model: str = ""  # the job's model name (e.g. "Qwen2.5-7B")
    weights_gb: float = 0.0  # the model's weights (bf16) the sync phase moves
    runner_packages: tuple[str, ...] = ()  # the runner allowlist's entries (what may be imported)
    # A profiling run (a job submitted without phase times, run alone before it is planned):
    # run each phase at the maximum token length, the worst case admission plans on. The
    # phase times above are then the emulation's configured distribution for `emulated` and
    # `toy-rl`, and 0 (unknown) for other runners.
    profile: bool = False
    # A rollout here takes its profiled time x this: the training type's rollout speed
    # factor when the placement is co-located (rollouts on the training GPUs), else 1.0.
    # The emulating runners sleep it; a real runner just runs slower or faster.
    rollout_speed_factor: float = 1.0
    # `emulated` only: iteration i of n runs (1 + drift x i/(n-1)) times its draw (the paper's
    # increasing drift template, scheduler.sim.drift), so a job can leave its estimates
    drift: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["runner_packages"] = list(self.runner_packages)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunnerContext:
        data = dict(data)
        data["runner_packages"] = tuple(data.get("runner_packages") or ())
        return cls(**data)


@dataclass(frozen=True)
class Peer:
    """One worker of a job, as its peers see it."""

    role: str  # "rollout" or "train"
    rank: int  # within its pool (0 .. world_size - 1)
    node: str  # the inventory node name
    gpu_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class WorkerContext:
    """What one worker of a two-sided runner is told: its job, where it runs and its peers."""

    job: RunnerContext
    role: str  # "rollout" or "train"
    rank: int
    world_size: int  # workers in this worker's pool
    node: str
    ray_node_id: str = ""
    gpu_ids: tuple[int, ...] = ()  # what Ray gave this worker (CUDA_VISIBLE_DEVICES)
    peers: tuple[Peer, ...] = ()  # every worker of the job, both pools


@runtime_checkable
class Runner(Protocol):
    """The single-object protocol (built-in `emulated`/`toy-rl` and users' classes)."""

    def setup(self, ctx: RunnerContext) -> None: ...

    def rollout(self, iteration: int) -> dict[str, float]: ...

    def train(self, iteration: int) -> dict[str, float]: ...

    def offload(self) -> None: ...

    def reload(self) -> None: ...

    def checkpoint(self) -> bytes: ...

    def restore(self, blob: bytes) -> None: ...


class RolloutSide(Protocol):
    """One rollout worker of a two-sided runner (one per rollout GPU)."""

    def setup(self, ctx: WorkerContext) -> None: ...

    def rollout(self, iteration: int) -> tuple[dict[str, float], Any]:
        """Generate with the weights last received; return (metrics, batch for the trainers)."""
        ...

    def receive_weights(self, weights: bytes, version: int) -> dict[str, float]:
        """Take the weights of `version` (iterations trained) before the next rollout."""
        ...

    def offload(self) -> None: ...

    def reload(self) -> None: ...

    def restore(self, blob: bytes) -> None:
        """Resume from the trainer's checkpoint (take the policy weights from it)."""
        ...

    # Long-tail migration (optional: a rollout side with all three takes part; the
    # coordinator calls them from another thread while `rollout` runs):
    # - progress() -> float: the share of this rollout's responses done so far (0..1);
    # - release_tail() -> Any: stop now and return the unfinished responses (opaque to the
    #   platform, handed to a peer); `rollout` then returns what it finished;
    # - take_tail(work) -> None: take over a released peer's unfinished responses; this
    #   worker's `rollout` returns only when they are done too.


class TrainerSide(Protocol):
    """One trainer worker of a two-sided runner (one per training GPU)."""

    def setup(self, ctx: WorkerContext) -> None: ...

    def train(self, iteration: int, batches: list[Any]) -> dict[str, float]:
        """Update on every rollout worker's batch of this iteration (one per rollout rank)."""
        ...

    def send_weights(self) -> bytes:
        """Return the current weights; the sync sends one shard of them per rollout worker."""
        ...

    def offload(self) -> None: ...

    def reload(self) -> None: ...

    def checkpoint(self) -> bytes: ...

    def restore(self, blob: bytes) -> None: ...


class PoolRunner(Protocol):
    """A two-sided runner: the classes of its rollout and trainer workers."""

    rollout_side: type[RolloutSide]
    trainer_side: type[TrainerSide]
