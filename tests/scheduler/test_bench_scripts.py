"""The simulator's bench scripts still load against the scheduler they measure.

They run by hand, so nothing else imports them: `bench/paper_table.py` built its ablation
table at import with a configuration field the planner's configuration no longer had (a
TypeError on every run) and no test noticed. Loading each one runs its module-level
configurations; what it measures is not run here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
# the scripts that import the scheduler only (the others set Django up or start Ray)
SCRIPTS = [
    "fairshare",
    "long_tail",
    "paper_sensitivity",
    "paper_table",
    "planner_latency",
    "seeds",
    "sim_speed",
    "slo_drift",
]


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_simulator_bench_script_loads_and_has_a_main(name: str) -> None:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(module.main)
