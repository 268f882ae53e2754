"""A runner module no allowlist names: importing it leaves a marker file (the tests check
that a worker never imports it)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from workers.runners.emulated import EmulatedRunner

MARKER = Path(tempfile.gettempdir()) / "rollmux-test-forbidden-runner-imported"
MARKER.write_text("imported")


class Runner(EmulatedRunner):
    pass
