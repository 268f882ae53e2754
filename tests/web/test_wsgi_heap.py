"""The WSGI application freezes its start-up heap (rollmux_web/wsgi.py): a full garbage
collection in a web worker then scans what requests allocated, not Django's ~180k
start-up objects, while every thread of the worker waits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_loading_the_wsgi_app_freezes_the_start_up_heap_with_the_urlconf_in_it() -> None:
    script = (
        "import gc, sys, rollmux_web.wsgi;"
        "print(gc.get_freeze_count(), 'rollmux_web.jobs.api' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "rollmux_web.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    frozen, views_loaded = int(out[-2]), out[-1]
    assert views_loaded == "True"  # the URLconf's modules were imported before the freeze
    assert frozen > 50_000, frozen
