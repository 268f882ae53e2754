"""The core's compiled build (scheduler.compiled): it decides and observes exactly what the
interpreted core does, and a build that does not match the sources is never loaded.

The suite itself runs the core as Python (tests/conftest.py); the runs below each start a
fresh interpreter, one asking for the build (`ROLLMUX_COMPILED=1`) and one not, and compare
the runs' fingerprints (bench/sim_speed.py: every job's, move's and node's figures, floats
by their repr). `make install` builds it (`make compile`); without a build the slow test
fails, naming the command.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler import compiled

REPO = Path(__file__).resolve().parents[2]

# the runs both builds make: the at-size case (consolidation, long-tail migration, the
# co-located strategy, ski-rental waits), a Philly-like trace under every policy, and
# paper-like traces with drift re-planning and with tenants sharing a bounded cluster (fair
# share, preemption)
_CHILD = r"""
import json, math, sys
from dataclasses import replace
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[1] + "/bench")
from scheduler import compiled
from scheduler.sim.drift import job_templates
from scheduler.sim.engine import simulate
from scheduler.sim.gen import generate, generate_paper, generate_tenants
from scheduler.sim.policies import make_policy
from scheduler.sim.run import run_tenants
from scheduler.slo import expected_solo_s
from scheduler.trace import default_cluster, load_cluster
from sim_speed import UNBOUNDED, fingerprint

prints = {}
jobs = [
    replace(j, iterations=max(j.iterations, math.ceil(12 * 3600 / expected_solo_s(j))))
    for j in generate_paper(0, jobs=120, window_h=1.0)
]
run = simulate(jobs, load_cluster(UNBOUNDED), make_policy("rollmux", seed=0), seed=0)
prints["at size, 120 jobs"] = fingerprint(run)
spec = default_cluster()
for name in ("rollmux", "solo-disagg", "colocated", "random", "greedy-most-idle"):
    run = simulate(generate("philly", 2)[:80], spec, make_policy(name, seed=2), seed=2)
    prints["philly-like, " + name] = fingerprint(run)
paper = generate("paper", 1)[:60]
drift = job_templates(paper, "mixed", seed=1)
run = simulate(paper, spec, make_policy("rollmux", seed=1), seed=1, drift=drift, replan_drift=True)
prints["paper-like, drift re-planning"] = fingerprint(run)
tenants = [replace(j, iterations=min(j.iterations, 60)) for j in generate_tenants(0, jobs=12, window_h=6.0)]
few = replace(spec, rollout=replace(spec.rollout, nodes=4), train=replace(spec.train, nodes=4))
prints["tenants, bounded"] = json.dumps(run_tenants(tenants, few, seed=0), sort_keys=True, default=str)
print(json.dumps({"active": compiled.active(), "reason": compiled.reason(), "prints": prints}))
"""


def _run(compiled_build: bool) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != compiled.ENV}
    env[compiled.ENV] = "1" if compiled_build else "0"
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(REPO)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
def test_the_compiled_core_decides_exactly_as_the_interpreted_one() -> None:
    built = _run(compiled_build=True)
    assert built["active"], f"the compiled build was not loaded: {built['reason']} (make compile)"
    plain = _run(compiled_build=False)
    assert not plain["active"]
    assert built["prints"] == plain["prints"]


def _manifest(root: Path) -> dict[str, object]:
    return {
        "toolchain": compiled.toolchain(),
        "modules": list(compiled.MODULES),
        "sources": compiled.sources_digest(root),
        "files": {},
    }


def test_a_build_of_other_sources_or_another_interpreter_is_stale(tmp_path: Path) -> None:
    shutil.copytree(REPO / "scheduler", tmp_path / "scheduler")
    manifest = _manifest(tmp_path)
    assert compiled.stale_reason(manifest, tmp_path) is None
    # an edit anywhere in the package (compiled code bakes in the shapes it calls)
    model = tmp_path / "scheduler" / "model.py"
    model.write_text(model.read_text() + "\n# an edit\n")
    assert "sources changed" in (compiled.stale_reason(manifest, tmp_path) or "")
    manifest = _manifest(tmp_path)
    assert compiled.stale_reason(manifest, tmp_path) is None
    assert "built for" in (
        compiled.stale_reason({**manifest, "toolchain": "cpython-310 3.10.0"}, tmp_path) or ""
    )
    assert "another list" in (
        compiled.stale_reason({**manifest, "modules": ["scheduler.slo"]}, tmp_path) or ""
    )


def test_activation_refuses_a_missing_stale_or_late_build(tmp_path: Path) -> None:
    assert not compiled.activate(build=tmp_path / "none")
    assert "no build" in compiled.reason()
    (tmp_path / compiled.MANIFEST).write_text(json.dumps({**_manifest(REPO), "sources": "x"}))
    assert not compiled.activate(build=tmp_path)
    assert "sources changed" in compiled.reason()
    # a matching manifest, but this process already runs the core as Python: mixing the
    # two builds of one module is refused (the suite imported the engine already)
    import scheduler.sim.engine  # noqa: F401

    (tmp_path / compiled.MANIFEST).write_text(json.dumps(_manifest(REPO)))
    assert not compiled.activate(build=tmp_path)
    assert "imported before" in compiled.reason()
    assert not compiled.active()
