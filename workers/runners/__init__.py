"""Runners: the code a phase runs, chosen per job by `Job.runner`.

A runner implements one protocol (`Runner`): `setup` once when the job's actor starts,
`rollout` and `train` once per iteration, `offload` after each phase (state moves to host
memory: residency) and `reload` before the next one (a warm start), `checkpoint` after each
training phase and `restore` when a resubmitted job resumes from its last completed iteration.

Built-in names: `emulated`, `toy-rl` and `external` (a trainer that owns its loop and uses
`rollmux.phase`). Anything else is an import path "package.module:Class". This package
imports neither Django nor Ray: runners run inside Ray actors or in-process threads.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

PROTOCOL_METHODS = ("setup", "rollout", "train", "offload", "reload", "checkpoint", "restore")
_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunnerContext:
        return cls(**data)


@runtime_checkable
class Runner(Protocol):
    """The protocol every runner implements (built-in or a user's class)."""

    def setup(self, ctx: RunnerContext) -> None: ...

    def rollout(self, iteration: int) -> dict[str, float]: ...

    def train(self, iteration: int) -> dict[str, float]: ...

    def offload(self) -> None: ...

    def reload(self) -> None: ...

    def checkpoint(self) -> bytes: ...

    def restore(self, blob: bytes) -> None: ...


class RunnerLoadError(ValueError):
    """The runner name is neither built in nor an importable class with the protocol."""


def _builtin(name: str) -> type[Any] | None:
    if name == "emulated":
        from workers.runners.emulated import EmulatedRunner

        return EmulatedRunner
    if name == "toy-rl":
        from workers.runners.toy_rl import ToyRLRunner

        return ToyRLRunner
    if name == "external":
        from workers.runners.external import ExternalRunner

        return ExternalRunner
    return None


BUILTIN_RUNNERS = ("emulated", "toy-rl", "external")


def runner_class(name: str) -> type[Any]:
    """Return the runner class for a name: a built-in or "package.module:Class"."""
    builtin = _builtin(name)
    if builtin is not None:
        return builtin
    if not _IMPORT_PATH.match(name):
        raise RunnerLoadError(
            f"runner {name!r} is not one of {', '.join(BUILTIN_RUNNERS)} "
            "nor an import path of the form package.module:Class"
        )
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RunnerLoadError(f"runner {name!r}: cannot import {module_name!r} ({exc})") from exc
    cls = getattr(module, attr, None)
    if cls is None or not isinstance(cls, type):
        raise RunnerLoadError(f"runner {name!r}: {module_name!r} has no class {attr!r}")
    missing = [m for m in PROTOCOL_METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise RunnerLoadError(f"runner {name!r} lacks the runner methods: {', '.join(missing)}")
    return cls


def validate_runner_name(name: str) -> str | None:
    """Return an error message for a runner name that cannot be loaded, or None when it can."""
    try:
        runner_class(name)
    except RunnerLoadError as exc:
        return str(exc)
    return None


def make_runner(name: str) -> Runner:
    """Instantiate the runner for a job (not yet set up)."""
    return runner_class(name)()  # type: ignore[no-any-return]
