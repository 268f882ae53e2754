"""The MILP offline optimum for bursts and the LP lower bound for traces (issue 14 item 7)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from scheduler.model import JobProfile
from scheduler.sim import milp as milp_module
from scheduler.sim.engine import simulate
from scheduler.sim.gen import generate_paper, generate_philly
from scheduler.sim.metrics import total_cost_usd
from scheduler.sim.milp import burst_optimum, compatible, run_burst_optimum, trace_lower_bound
from scheduler.sim.optimal import cost_arrangements, search_optimal
from scheduler.sim.policies import make_policy
from scheduler.sim.records import draw_durations
from scheduler.trace import default_cluster

SPEC = default_cluster()


def burst(kind: str, seed: int, jobs: int) -> list[JobProfile]:
    make = generate_paper if kind == "paper" else generate_philly
    return [
        replace(j, iterations=min(j.iterations, 25)) for j in make(seed, jobs=jobs, window_h=3.0)
    ]


@pytest.mark.parametrize(("kind", "seed"), [("paper", 0), ("paper", 2), ("philly", 2)])
def test_milp_finds_the_same_optimum_as_the_dynamic_programme_on_8_jobs(
    kind: str, seed: int
) -> None:
    jobs = burst(kind, seed, 8)
    dp = search_optimal(jobs, SPEC, seed=seed)
    best = burst_optimum(jobs, SPEC, seed=seed)
    assert best.search.predicted_cost_usd == pytest.approx(dp.predicted_cost_usd, rel=1e-9)
    # the LP relaxation can only be lower (philly seed 2 has a fractional optimum below)
    assert best.lp_relaxation_usd <= best.search.predicted_cost_usd + 1e-6


def test_the_milp_plan_replays_at_its_predicted_cost_on_a_16_job_burst() -> None:
    jobs = burst("paper", 1, 16)
    run, best = run_burst_optimum(jobs, SPEC, seed=1)
    assert set(best.search.plan) == {j.id for j in jobs}
    assert total_cost_usd(run) == pytest.approx(best.search.predicted_cost_usd, rel=1e-9)
    assert best.lp_relaxation_usd <= best.search.predicted_cost_usd + 1e-6
    solo = total_cost_usd(simulate(jobs, SPEC, make_policy("solo-disagg", seed=1), seed=1))
    assert total_cost_usd(run) <= solo + 0.01  # every job alone is one of its plans


class _CostedOnce:
    """`cost_arrangements` that simulates each arrangement once per run of this module.

    The two optima of a burst share every disaggregated arrangement (the co-located plan
    space only adds each job alone co-located), and each arrangement is simulated alone
    with draws keyed by job id and seed: its cost is the same whichever optimum asks, so
    the second asks only for the arrangements the first did not have.
    """

    def __init__(self, cost_arrangements: Any) -> None:
        self.cost_arrangements = cost_arrangements
        self.costs: dict[tuple[Any, ...], float] = {}

    def __call__(
        self, runnable: Sequence[JobProfile], admissible: dict[int, Any], spec: Any, *, seed: int
    ) -> list[tuple[int, Any, float]]:
        def key(mask: int, classes: Any) -> tuple[Any, ...]:
            return (tuple(runnable), seed, mask, repr(classes))

        todo = {
            mask: new
            for mask, options in admissible.items()
            if (new := [c for c in options if key(mask, c) not in self.costs])
        }
        for mask, classes, cost in self.cost_arrangements(runnable, todo, spec, seed=seed):
            self.costs[key(mask, classes)] = cost
        return [
            (mask, classes, self.costs[key(mask, classes)])
            for mask, options in admissible.items()
            for classes in options
        ]


def burst_ratios() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Return rollmux's cost over the two optima (disaggregated plans only, and with a job
    alone co-located too) on 20 bursts; rollmux is simulated once per burst."""
    disaggregated, with_colocation = [], []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(milp_module, "cost_arrangements", _CostedOnce(cost_arrangements))
        for kind in ("paper", "philly"):
            for seed in range(5):
                for size in (12, 16):
                    jobs = burst(kind, seed, size)
                    ours = total_cost_usd(
                        simulate(jobs, SPEC, make_policy("rollmux", seed=seed), seed=seed)
                    )
                    for colocated, out in ((False, disaggregated), (True, with_colocation)):
                        run, _best = run_burst_optimum(jobs, SPEC, seed=seed, colocated=colocated)
                        out.append(ours / total_cost_usd(run))
    return tuple(disaggregated), tuple(with_colocation)


@pytest.mark.slow
def test_rollmux_is_within_8_percent_of_the_milp_optimum_on_12_to_16_job_bursts() -> None:
    # Measured at 10:40 UTC on 1 Dec (with the distribution-aware SLO check of issue 13,
    # which the optimum is held to as well) on these 20 bursts (5 paper-like + 5
    # Philly-like seeds, 12 and 16 jobs), rollmux with its default levers: 1.004
    # (0.90-1.14) of the optimum over static disaggregated plans (the paper's plan
    # space; rollmux may beat it by moving jobs), and 1.102 (1.03-1.28) of the optimum
    # whose plans may also run a job alone co-located from its arrival, which the
    # online planner reaches only by a move at a departure (docs/results.md section 2).
    # Algorithm 1 as published: 1.082 and 1.189. The 1.08 holds against the
    # first optimum, not the second.
    disaggregated, with_colocation = burst_ratios()
    assert float(np.mean(disaggregated)) <= 1.08, disaggregated
    assert max(disaggregated) <= 1.20, disaggregated
    assert min(disaggregated) >= 0.85, disaggregated
    assert float(np.mean(with_colocation)) <= 1.12, with_colocation
    assert max(with_colocation) <= 1.30, with_colocation
    assert min(with_colocation) >= 0.98, with_colocation


def test_the_lower_bound_is_below_every_slo_respecting_policy() -> None:
    jobs = [
        replace(j, iterations=min(j.iterations, 40))
        for j in generate_paper(3, jobs=24, window_h=12.0)
    ]
    bound = trace_lower_bound(jobs, SPEC, seed=3)
    assert bound.capacity_bound
    assert bound.busy_cost_usd <= bound.cost_usd + 1e-6
    for policy in ("rollmux", "solo-disagg", "colocated"):
        run = simulate(jobs, SPEC, make_policy(policy, seed=3), seed=3)
        assert bound.cost_usd <= total_cost_usd(run), policy


def test_a_job_no_one_can_share_with_pays_its_cheapest_solo_mode_in_the_bound() -> None:
    base = generate_paper(0, jobs=1)[0]
    # SLO 1.0: the only group either can join has a cycle equal to its own solo time,
    # and their solo times differ, so they are incompatible
    a = replace(base, id="a", slo=1.0, iterations=30, t_roll_max_s=300.0, t_train_max_s=100.0)
    b = replace(a, id="b", t_roll_max_s=500.0, t_roll_min_s=400.0)
    assert not compatible(a, b, SPEC)
    bound = trace_lower_bound([a, b], SPEC, seed=0)
    expected = 0.0
    for job in (a, b):
        roll, train = draw_durations(job, 0)
        r, t = float(np.mean(roll)), float(np.mean(train))
        nodes_r = job.rollout_gpus // SPEC.rollout.gpus_per_node
        nodes_t = job.train_gpus // SPEC.train.gpus_per_node
        solo = (r + t) * (
            nodes_r * SPEC.rollout.node_price_per_hour + nodes_t * SPEC.train.node_price_per_hour
        )
        colocated = (r + t) * nodes_t * SPEC.train.node_price_per_hour
        expected += job.iterations * min(solo, colocated) / 3600
    assert bound.cost_usd == pytest.approx(expected, rel=1e-6)
    assert bound.shared_share == 0.0
    # two compatible copies share in the bound: it falls to their busy GPU-seconds
    twin = replace(a, id="a2")
    shared = trace_lower_bound([a, twin], SPEC, seed=0)
    assert shared.shared_share == pytest.approx(1.0)
    assert shared.cost_usd == pytest.approx(shared.busy_cost_usd, rel=1e-9)
