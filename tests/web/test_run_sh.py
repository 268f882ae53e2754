"""`bin/run.sh` as production starts it (ROLLMUX_EMBEDDED=false): DEBUG off unless told
otherwise, Django's deployment checks clean, and a consumer for every queue the app
routes to (issue 24 items 8 and 10). Its static files: tests/browser/test_static_files.py."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RUN_SH = ROOT / "bin" / "run.sh"
PRODUCTION = {
    "ROLLMUX_EMBEDDED": "false",
    "SECRET_KEY": "k3Jq9Zr7Wm2Xv5Tb8Ny4Lc6Pd1Hf0Gs9Ua3Ei7Ro2Qw5Zx8Cv4Bn6Ml1Tk",
    "ALLOWED_HOSTS": "rollmux.example.internal",
    "DATABASE_URL": "sqlite:////tmp/rollmux-run-sh-check.sqlite3",
}


def _check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    test_only = ("DEBUG", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")  # (make test sets the last)
    clean = {k: v for k, v in os.environ.items() if k not in test_only}
    return subprocess.run(
        [str(RUN_SH), "--check"], cwd=ROOT, env={**clean, **env}, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip


def test_production_run_sh_defaults_debug_off_and_passes_the_deploy_check() -> None:
    result = _check(PRODUCTION)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "run.sh: production, DEBUG=false" in out
    assert "System check identified no issues" in out, out


def test_production_run_sh_with_debug_asked_for_is_flagged_by_the_deploy_check() -> None:
    out = _check({**PRODUCTION, "DEBUG": "true"})
    assert "run.sh: production, DEBUG=true" in out.stdout
    assert "security.W018" in out.stdout + out.stderr  # the check really runs


def test_embedded_run_sh_keeps_the_debug_default() -> None:
    out = _check({"ROLLMUX_EMBEDDED": "", "DATABASE_URL": PRODUCTION["DATABASE_URL"]})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "run.sh: embedded, DEBUG=true" in out.stdout


def _workers() -> dict[str, list[str]]:
    """Return each Celery worker run.sh starts (its -n) and the queues of its -Q, in order."""
    text = RUN_SH.read_text().replace("\\\n", " ")
    workers = {}
    for line in text.splitlines():
        if "celery -A rollmux_web worker" not in line:
            continue
        words = shlex.split(re.sub(r"&.*$", "", line.strip()))
        name = words[words.index("-n") + 1].split("@")[0]
        workers[name] = words[words.index("-Q") + 1].split(",")
        assert {"--without-gossip", "--without-mingle"} <= set(words), line
    return workers


def test_run_sh_consumes_every_queue_phase_events_first(settings: Any) -> None:
    workers = _workers()
    consumed = {q for qs in workers.values() for q in qs}
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    assert {settings.CELERY_TASK_DEFAULT_QUEUE, settings.ROLLMUX_NOTIFY_QUEUE} | routed <= consumed
    assert workers["controller"] == settings.ROLLMUX_CONTROLLER_QUEUES
    assert workers["notify"] == [settings.ROLLMUX_NOTIFY_QUEUE]
