"""The simulator's compiled build: the scheduling core's hot modules compiled by mypyc.

The same source, compiled to C extension modules by mypyc (the compiler of the mypy the
project type-checks with): `devtools/compile_sim.py` builds them into `.compiled/` beside
this package (`make compile`, which `make install` runs) and writes a manifest of what it
compiled from: the Python version, mypy's, and a hash of every source of the package. Nothing
in the tree is shadowed: a process uses the build only when it asks (`ROLLMUX_COMPILED=1`,
read when `scheduler` is first imported; `bench/sim_speed.py` asks by default) and only when
the manifest matches the sources as they are now, so an edited module never runs stale code.
A run decides and observes exactly what it would interpreted: `tests/scheduler/
test_compiled.py` compares the runs' fingerprints (every float to the last bit).

Standard library only; it imports none of the modules it may load compiled.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

_C = TypeVar("_C", bound=type)


def python_class(cls: _C) -> _C:
    """Mark a class whose instances the interpreter's ways reach (a `__dict__` written
    directly, a weak reference, an attribute set on an instance): mypyc compiles a class
    with a decorator of its own as a Python class (its methods compiled). Nothing at run
    time."""
    return cls


# What is compiled: the modules the simulator spends its time in (the engine, the group
# runtime, the planner, the model, the rollmux policy). Not compiled: this module and the
# packages' `__init__` (this one loads the build; a compiled package runs its body before its
# `__path__` is set, so its own submodules could not be found), the cost arithmetic (Decimal
# or float by its caller) and the simulator's reports.
MODULES: tuple[str, ...] = (
    "scheduler.cluster",
    "scheduler.collector",
    "scheduler.config",
    "scheduler.fairshare",
    "scheduler.group_runtime",
    "scheduler.meta_iteration",
    "scheduler.model",
    "scheduler.model_shape",
    "scheduler.replan",
    "scheduler.roundrobin",
    "scheduler.slo",
    "scheduler.stochastic",
    "scheduler.trace",
    "scheduler.trend",
    "scheduler.weight_sync",
    "scheduler.planner.admissible",
    "scheduler.planner.algorithm1",
    "scheduler.planner.baselines",
    "scheduler.planner.colocated",
    "scheduler.planner.consolidation",
    "scheduler.planner.index",
    "scheduler.planner.memo",
    "scheduler.planner.move_budget",
    "scheduler.planner.objective",
    "scheduler.planner.reasons",
    "scheduler.planner.slo_checks",
    "scheduler.planner.transitions",
    "scheduler.sim.allocation",
    "scheduler.sim.drift",
    "scheduler.sim.engine",
    "scheduler.sim.longtail",
    "scheduler.sim.policies",
    "scheduler.sim.records",
)

ENV = "ROLLMUX_COMPILED"
PACKAGE = Path(__file__).resolve().parent
BUILD = PACKAGE.parent / ".compiled"
MANIFEST = "manifest.json"

# why this process runs the core as Python; "" once it loads the build
_state: dict[str, str] = {"why": f"not asked ({ENV} unset)"}


def source_path(module: str, root: Path = PACKAGE.parent) -> Path:
    """Return the source file of `module` (a module, not a package)."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def sources_digest(root: Path = PACKAGE.parent) -> str:
    """Return a hash of every source of the package under `root`: compiled code bakes in
    the shapes of the modules it calls, so any edit makes a build stale."""
    h = hashlib.sha256()
    for path in sorted((root / "scheduler").rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def toolchain() -> str:
    """Return what a build is valid for: this interpreter's version and ABI."""
    return f"{sys.implementation.cache_tag} {sys.version.split()[0]}"


def stale_reason(manifest: Mapping[str, Any], root: Path = PACKAGE.parent) -> str | None:
    """Return why a build's manifest does not match the sources and interpreter of now,
    or None when it matches."""
    if manifest.get("toolchain") != toolchain():
        return f"built for {manifest.get('toolchain')}, this is {toolchain()}"
    if manifest.get("modules") != list(MODULES):
        return "built for another list of modules"
    if manifest.get("sources") != sources_digest(root):
        return "the sources changed since the build (make compile)"
    return None


class _Finder(importlib.abc.MetaPathFinder):
    """Load the compiled modules of a build from its files (nothing else)."""

    def __init__(self, files: Mapping[str, str]) -> None:
        self.files = dict(files)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, file)
        return importlib.util.spec_from_file_location(fullname, file, loader=loader)


def activate(build: Path = BUILD, root: Path = PACKAGE.parent) -> bool:
    """Load the compiled modules from now on, when the build matches the sources; return
    whether it does (`reason()` says why not). Call it before any of `MODULES` is imported
    (a compiled module and an interpreted one of the same name cannot be mixed)."""
    if not _state["why"]:
        return True
    try:
        manifest = json.loads((build / MANIFEST).read_text())
    except (OSError, ValueError):
        _state["why"] = f"no build in {build} (make compile)"
        return False
    why = stale_reason(manifest, root)
    if why is not None:
        _state["why"] = why
        return False
    loaded = sorted(m for m in MODULES if m in sys.modules)
    if loaded:
        _state["why"] = f"{loaded[0]} was imported before the build was asked for"
        return False
    files = {name: str(build / file) for name, file in manifest["files"].items()}
    if not all(Path(f).is_file() for f in files.values()):
        _state["why"] = f"the build in {build} is incomplete (make compile)"
        return False
    sys.meta_path.insert(0, _Finder(files))
    _state["why"] = ""
    return True


def activate_from_env() -> bool:
    """`activate()` when the environment asks for it (`ROLLMUX_COMPILED=1`)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value not in {"1", "true", "yes", "on"}:
        _state["why"] = f"not asked ({ENV}={value})" if value else f"not asked ({ENV} unset)"
        return False
    return activate()


def active() -> bool:
    """Return True when this process loads the compiled modules."""
    return not _state["why"]


def reason() -> str:
    """Return why the compiled modules are not in use ('' when they are)."""
    return _state["why"]
