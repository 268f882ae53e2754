"""Runners: the code a phase runs, chosen per job by `Job.runner`.

A runner implements one protocol (`Runner`): `setup` once when the job's actor starts,
`rollout` and `train` once per iteration, `offload` after each phase (state moves to host
memory: residency) and `reload` before the next one (a warm start), `checkpoint` after each
training phase and `restore` when a resubmitted job resumes from its last completed iteration.

Built-in names: `emulated`, `toy-rl`, `hf-grpo` (GRPO on a real transformer) and `external` (a trainer that owns its loop and uses
`rollmux.phase`). Anything else is an import path "package.module:Class" under one of the
entries of the admin's runner allowlist the controller passes (`RunnerContext.
runner_packages`): a name they do not cover is refused before anything is imported (the
rule is the neutral contract's, `rollmux_contract.runners`, which the submission check
applies too). This package imports neither Django nor Ray:
runners run inside Ray actors or in-process threads. The protocols and contexts are in
`base` (the implementations import them from there, so the registry here can import the
implementations without a cycle).
"""

from __future__ import annotations

import importlib
from typing import Any

from rollmux_contract.runners import BUILTIN_RUNNERS, RUNNER_IMPORT_PATH, runner_permitted
from workers.runners.base import (
    Peer,
    PoolRunner,
    RolloutSide,
    Runner,
    RunnerContext,
    TrainerSide,
    WorkerContext,
)

__all__ = [
    "BUILTIN_RUNNERS",
    "Peer",
    "PoolRunner",
    "RolloutSide",
    "Runner",
    "RunnerContext",
    "RunnerLoadError",
    "TrainerSide",
    "WorkerContext",
    "make_runner",
    "pool_sides",
    "runner_class",
    "validate_runner_name",
]

PROTOCOL_METHODS = ("setup", "rollout", "train", "offload", "reload", "checkpoint", "restore")


class RunnerLoadError(ValueError):
    """The runner name is neither built in nor an importable class with the protocol."""


def _builtin(name: str) -> type[Any] | None:
    if name == "emulated":
        from workers.runners.emulated import EmulatedRunner

        return EmulatedRunner
    if name == "toy-rl":
        from workers.runners.toy_rl import ToyRLRunner

        return ToyRLRunner
    if name == "hf-grpo":
        from workers.runners.hf_grpo import HfGrpoRunner

        return HfGrpoRunner
    if name == "external":
        from workers.runners.external import ExternalRunner

        return ExternalRunner
    return None


def runner_class(name: str, packages: tuple[str, ...] | None = None) -> type[Any]:
    """Return the runner class for a name: a built-in or "package.module:Class".

    With `packages` (what a worker is given), an import path outside those packages is
    refused before its module is imported: a worker never imports what is not allowlisted.
    """
    builtin = _builtin(name)
    if builtin is not None:
        return builtin
    if not RUNNER_IMPORT_PATH.match(name):
        raise RunnerLoadError(
            f"runner {name!r} is not one of {', '.join(BUILTIN_RUNNERS)} "
            "nor an import path of the form package.module:Class"
        )
    module_name, _, attr = name.partition(":")
    if packages is not None and not runner_permitted(name, packages):
        allowed = ", ".join(packages) or "none"
        raise RunnerLoadError(
            f"runner {name!r} is not covered by the runner allowlist (allowed: {allowed})"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RunnerLoadError(f"runner {name!r}: cannot import {module_name!r} ({exc})") from exc
    cls = getattr(module, attr, None)
    if cls is None or not isinstance(cls, type):
        raise RunnerLoadError(f"runner {name!r}: {module_name!r} has no class {attr!r}")
    if _two_sided(cls) is None:
        missing = [m for m in PROTOCOL_METHODS if not callable(getattr(cls, m, None))]
        if missing:
            raise RunnerLoadError(f"runner {name!r} lacks the runner methods: {', '.join(missing)}")
    return cls


def validate_runner_name(name: str, packages: tuple[str, ...] | None = None) -> str | None:
    """Return an error message for a runner name that cannot be loaded, or None when it can."""
    try:
        runner_class(name, packages)
    except RunnerLoadError as exc:
        return str(exc)
    return None


def make_runner(name: str, packages: tuple[str, ...] | None = None) -> Runner:
    """Instantiate the runner for a job (not yet set up)."""
    return runner_class(name, packages)()  # type: ignore[no-any-return]


def _two_sided(cls: type[Any]) -> tuple[type[Any], type[Any]] | None:
    """Return (rollout side, trainer side) when the class is a two-sided runner.

    A subclass that overrides a single-object method of a two-sided class (as users'
    runners built on `EmulatedRunner` do) is a single-object runner: its override must run.
    """
    rollout, trainer = getattr(cls, "rollout_side", None), getattr(cls, "trainer_side", None)
    if not (isinstance(rollout, type) and isinstance(trainer, type)):
        return None
    for klass in cls.__mro__:
        if "rollout_side" in vars(klass):
            return rollout, trainer
        if any(m in vars(klass) for m in PROTOCOL_METHODS):
            return None
    return None


def pool_sides(name: str, packages: tuple[str, ...] | None = None) -> tuple[type[Any], type[Any]]:
    """Return the (rollout side, trainer side) classes for a runner name; a single-object
    runner comes wrapped in the adapter (`workers.runners.adapter`)."""
    cls = runner_class(name, packages)
    sides = _two_sided(cls)
    if sides is not None:
        return sides
    from workers.runners.adapter import single_object_sides

    return single_object_sides(cls)
