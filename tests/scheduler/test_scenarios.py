"""The paper's three micro-benchmarks (section 7, Fig. 10) as shipped scenario files.

"Throughput at equal cost" = completed iterations per dollar of provisioning
(iterations / total cost). Every job of a scenario runs a fixed number of
iterations under every policy, so the ratio rollmux / Solo-D of this figure is
the ratio of their throughputs once both are scaled to the same $/h, and it
equals Solo-D's total cost over rollmux's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.sim import run_simulation
from scheduler.trace import default_cluster, load_trace

SCENARIOS = Path(__file__).resolve().parents[2] / "scheduler" / "sim" / "scenarios"

# (scenario, paper ratio over Solo-D, bounds we assert, rollmux admissions DP/RS/NG)
# Measured with seeds 1-5 (docs/results.md): temporal 1.89-1.91, train 1.585-1.589,
# spatial 1.939-1.949. The bounds sit about +-0.05 around that: they catch a planner
# or engine change that loses (or invents) a multiplexing opportunity, while leaving
# room for duration draws. Train Mux stays below the paper's 1.90 because the D jobs
# (450 s solo) are slowed to E's 898 s cycle; 1.59 is the ceiling for those phase
# times whatever the placement (see docs/results.md).
CASES = [
    ("temporal-mux", 1.82, (1.84, 1.96), (1, 0, 1)),
    ("train-mux", 1.90, (1.53, 1.64), (1, 1, 1)),
    ("spatial-mux", 1.99, (1.89, 2.00), (2, 0, 1)),
]


@pytest.mark.parametrize(
    ("name", "paper", "bounds", "admissions"), CASES, ids=[c[0] for c in CASES]
)
@pytest.mark.parametrize("seed", [1, 2])
def test_scenario_throughput_at_equal_cost(
    name: str,
    paper: float,
    bounds: tuple[float, float],
    admissions: tuple[int, int, int],
    seed: int,
) -> None:
    jobs = load_trace(SCENARIOS / f"{name}.jsonl")
    report = run_simulation(jobs, default_cluster(), policies=["rollmux", "solo-disagg"], seed=seed)
    ours, solo = report["policies"]["rollmux"], report["policies"]["solo-disagg"]
    assert ours["completed"] == solo["completed"] == len(jobs)
    ratio = ours["iterations_per_dollar"] / solo["iterations_per_dollar"]
    assert ratio == pytest.approx(report["ratios"]["solo-disagg/rollmux"], rel=1e-3)
    low, high = bounds
    assert low <= ratio <= high, (name, ratio, paper)
    adm = ours["admissions"]
    assert (adm["direct_packing"], adm["rollout_scaling"], adm["new_group"]) == admissions
    assert ours["slo_attainment_vs_profile"] == 1.0
