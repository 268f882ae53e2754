"""Start many fresh Django processes for the price of one interpreter (tests/web/test_settings.py).

Run as `python tests/web/forked_starts.py RESULTS.json` with a JSON list of starts on stdin,
each {"env": {...}, "argv": [...], "code": "..."} (a `python -c` program) or
{"env": {...}, "argv": ["manage.py", ...], "script": "/path/manage.py"}. This process imports
only libraries that read no Django settings (Django's own modules, Celery, Redis, SciPy, DRF),
checks that nothing configured the settings or imported a RollMux module, then forks one
child per start: the child takes that start's environment, argv and sys.path[0], sends its
stdout and stderr to files and runs the program as `__main__`, exiting as the interpreter
would (an uncaught exception printed by sys.excepthook, exit status 1; SystemExit's code).
So each start still runs `django.setup()` and RollMux's settings module from scratch in its
own process, without paying again for ~2 s of library imports on a busy 2-core box.
The results, in order, are {"returncode", "stdout", "stderr"}, written to RESULTS.json.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import sys
import tempfile
import time
import types
from pathlib import Path

# Imported before forking; none of them reads django.conf.settings or RollMux's variables.
PRELOAD = (
    "numpy",
    "scipy.stats",
    "redis",
    "redis.asyncio",
    "celery",
    "celery.app",
    "kombu",
    "django",
    "django.conf",
    "django.urls",
    "django.http",
    "django.utils.log",
    "django.core.mail",
    "django.core.management",
    "django.core.checks",
    "django.db.models",
    "django.views.generic",
    "django.test",
    "django.test.client",
    "rest_framework",
    "drf_spectacular",
)
TIMEOUT = 120.0


def _preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    from django.conf import settings

    # a library that touched the settings here would have read this process's environment
    assert not settings.configured, "a preloaded module configured Django's settings"
    leaked = [m for m in sys.modules if m.split(".")[0] in ("rollmux_web", "scheduler", "workers")]
    assert not leaked, f"preloading imported RollMux modules: {leaked}"


def _child(start: dict[str, object], out: int, err: int) -> None:
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.environ.clear()
    os.environ.update(start["env"])  # type: ignore[arg-type]
    argv = list(start["argv"])  # type: ignore[call-overload]
    script = start.get("script")
    if script is None:
        sys.argv = ["-c", *argv]
        sys.path[0] = ""
        source, filename = str(start["code"]), "<string>"
    else:
        sys.argv = argv
        sys.path[0] = str(Path(str(script)).resolve().parent)
        source, filename = Path(str(script)).read_text(), str(script)
    main_module = types.ModuleType("__main__")
    main_module.__dict__["__builtins__"] = builtins
    main_module.__file__ = filename if script is not None else None
    sys.modules["__main__"] = main_module
    status = 0
    try:
        exec(compile(source, filename, "exec"), main_module.__dict__)
    except SystemExit as stop:
        if stop.code is None:
            status = 0
        elif isinstance(stop.code, int):
            status = stop.code
        else:
            print(stop.code, file=sys.stderr)
            status = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status)


def main() -> None:
    starts = json.load(sys.stdin)
    _preload()
    at_once = max(1, min(4, os.cpu_count() or 1))
    results: list[dict[str, object] | None] = [None] * len(starts)
    running: dict[int, tuple[int, object, object, float]] = {}
    pending = list(enumerate(starts))
    with tempfile.TemporaryDirectory() as tmp:
        while pending or running:
            while pending and len(running) < at_once:
                index, start = pending.pop(0)
                out = open(f"{tmp}/{index}.out", "w+b")  # noqa: SIM115
                err = open(f"{tmp}/{index}.err", "w+b")  # noqa: SIM115
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(start, out.fileno(), err.fileno())
                running[pid] = (index, out, err, time.monotonic())
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                for child, (_index, _, _, began) in running.items():
                    if time.monotonic() - began > TIMEOUT:
                        os.kill(child, 9)
                time.sleep(0.01)
                continue
            index, out, err, _ = running.pop(pid)
            out.seek(0)  # type: ignore[attr-defined]
            err.seek(0)  # type: ignore[attr-defined]
            results[index] = {
                "returncode": os.waitstatus_to_exitcode(status),
                "stdout": out.read().decode(errors="replace"),  # type: ignore[attr-defined]
                "stderr": err.read().decode(errors="replace"),  # type: ignore[attr-defined]
            }
            out.close()  # type: ignore[attr-defined]
            err.close()  # type: ignore[attr-defined]
    Path(sys.argv[1]).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
