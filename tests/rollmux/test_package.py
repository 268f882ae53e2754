"""The `rollmux` phase API is its own small distribution: it builds, installs and runs a
phase in an interpreter that has no Django, Celery, Ray or Redis."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SESSION = """
import sys, threading
import rollmux
channel = rollmux.LocalChannel()
session = rollmux.PhaseSession(7, channel=channel, timeout_s=5)
channel.push(rollmux.grant_key(7), {"kind": "rollout", "iteration": 3})
with session.phase("rollout") as grant:
    grant.metrics["reward"] = 0.5
done = channel.pop(rollmux.done_key(7, "rollout", 3), 5)
assert done == {"outcome": "ok", "metrics": {"reward": 0.5}}, done
heavy = {"django", "celery", "ray", "redis"} & {m.split(".")[0] for m in sys.modules}
assert not heavy, heavy
print("ok", grant.iteration)
"""


def test_the_phase_api_installs_and_runs_without_django_celery_or_ray(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: building writes build/ next to the sources
    shutil.copytree(ROOT / "rollmux", source, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
         "--no-build-isolation", "-q", "-w", str(tmp_path)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("rollmux_phase-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = next(zf.read(n).decode() for n in names if n.endswith("METADATA"))
        zf.extractall(tmp_path / "site")
    assert {n.split("/")[0] for n in names if not n.startswith("rollmux_phase-")} == {"rollmux"}
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist")]
    assert requires == ['Requires-Dist: redis>=5; extra == "redis"'], requires
    # -S: no site-packages at all, so only the wheel's files and the standard library exist
    out = subprocess.run(
        [sys.executable, "-S", "-c", SESSION],
        env={"PYTHONPATH": str(tmp_path / "site")},
        cwd=tmp_path, check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.stdout.strip() == "ok 3"
