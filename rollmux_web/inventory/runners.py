"""Runners a job may name: the built-ins, and import paths an allowlist entry covers.

Stdlib only (the job spec, the CLI and a worker can import it without Django). The
allowlist itself is the `RunnerPackage` table (inventory.selectors.runner_allowlist);
this module holds the names and the rule, and imports nothing a rule names.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

# The runners every deployment has (workers/runners implements them; the web app keeps the
# names so that it never imports workers).
BUILTIN_RUNNERS = ("emulated", "toy-rl", "external")
# "package.module:ClassName": dotted module path, a colon, a class name
RUNNER_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
# An allowlist entry: a package or module (any class under it) or one "module:Class".
RUNNER_RULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?$")
# Packages no allowlist entry may cover: the standard library (subprocess:Popen), this
# application's own code (rollmux_web.settings) and its frameworks, whose classes are no
# runners and whose import in a job's worker is what the allowlist exists to prevent.
FORBIDDEN_RUNNER_ROOTS = frozenset(sys.stdlib_module_names) | {
    "rollmux_web",
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
    "pkg.mod:Class" exactly that class). Nothing is imported."""
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
