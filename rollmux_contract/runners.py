"""Runners a job may name: the built-ins, and the import paths an allowlist entry covers.

One rule, applied twice: by the web app when a job is submitted (nothing is imported there)
and by a worker before it imports a runner's module (a worker never imports what is not
allowlisted, whatever reached it). The allowlist itself is the inventory's `RunnerPackage`
table; this module holds the names and the rule, and imports nothing a rule names.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

# The runners every deployment has (`workers.runners` implements them; the web app knows
# them by name only).
BUILTIN_RUNNERS = ("emulated", "toy-rl", "hf-grpo", "external")
# "package.module:ClassName": dotted module path (no empty part: `a..b:C` is refused), a
# colon, a class name
RUNNER_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
# An allowlist entry: a package or module (any class under it) or one "module:Class".
RUNNER_RULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?$")
# Packages no allowlist entry may cover: the standard library (subprocess:Popen), this
# application's own code (rollmux_web.settings) and its frameworks, whose classes are no
# runners and whose import in a job's worker is what the allowlist exists to prevent.
FORBIDDEN_RUNNER_ROOTS = frozenset(sys.stdlib_module_names) | {
    "rollmux_web",
    "rollmux_contract",
    "rollmux_cli",
    "workers",
    "scheduler",
    "rollmux",
    "django",
    "rest_framework",
    "celery",
    "ray",
}


def runner_permitted(name: str, allowed: Iterable[str]) -> bool:
    """Return whether a job may name this runner: a built-in, or an import path that an
    allowlist entry covers ("pkg" or "pkg.mod" covers every "pkg.mod...:Class" under it,
    "pkg.mod:Class" exactly that class), never one under a forbidden root. Nothing is
    imported."""
    if name in BUILTIN_RUNNERS:
        return True
    if not RUNNER_IMPORT_PATH.match(name):
        return False
    module = name.partition(":")[0]
    if module.split(".")[0] in FORBIDDEN_RUNNER_ROOTS:
        return False  # (even if such an entry were written to the table by hand)
    for rule in allowed:
        if ":" in rule:
            if name == rule:
                return True
        elif module == rule or module.startswith(rule + "."):
            return True
    return False


def allowlist_entry_problem(value: str) -> str | None:
    """Return why `value` cannot be an allowlist entry, or None when it can."""
    if value in BUILTIN_RUNNERS:
        return f"{value!r} is a built-in runner: it needs no entry."
    if not RUNNER_RULE.match(value) or len(value) > 200:
        return (
            "Give a package or module (acme_rl, acme_rl.runners) or one class "
            "(acme_rl.runners:GrpoRunner)."
        )
    root = value.split(":")[0].split(".")[0]
    if root in FORBIDDEN_RUNNER_ROOTS:
        return (
            f"{root!r} is the standard library or RollMux's own code, not a runner "
            "package: register the package that holds your runner classes."
        )
    return None
