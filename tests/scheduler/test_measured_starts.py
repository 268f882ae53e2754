"""A job's measured warm and cold starts replace the planner's constants (issue 21 item 3).

`JobProfile.switch_s` (its measured reload) is the switch overhead its phases pay after
another member's; `JobProfile.restart_s` (its measured cold start) is what a move costs it.
Unset, the cluster's `switch_overhead_s` and the paper's restart by model size apply.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.meta_iteration import plan_meta_iteration, steady_iteration_times
from scheduler.planner.consolidation import RESTART_S_7B, restart_seconds
from tests.scheduler.builders import group, job, member

CONSTANT = 2.0


def twins(switch_s: float | None) -> list:
    a, b = job("a", 100.0, 100.0), job("b", 100.0, 100.0)
    return [member(replace(a, switch_s=switch_s)), member(replace(b, switch_s=switch_s))]


def test_without_a_measurement_the_cluster_constant_is_the_switch_overhead() -> None:
    assert twins(None)[0].job.switch_overhead(CONSTANT) == CONSTANT
    plain = steady_iteration_times([member(job("a", 100.0, 100.0)), member(job("b", 100.0, 100.0))],
                                   switch_overhead_s=CONSTANT)  # fmt: skip
    assert steady_iteration_times(twins(None), switch_overhead_s=CONSTANT) == plain


@pytest.mark.parametrize("measured", [0.03, 9.0])
def test_a_measured_reload_replaces_the_constant_in_the_meta_iteration(measured: float) -> None:
    constant = plan_meta_iteration(group(*twins(None)), switch_overhead_s=CONSTANT)
    measured_plan = plan_meta_iteration(group(*twins(measured)), switch_overhead_s=CONSTANT)
    # twins alternate on both pools: each phase switches, so each iteration pays it twice
    assert measured_plan.t_meta == pytest.approx(constant.t_meta + 2 * (measured - CONSTANT))


def test_a_measured_restart_is_what_a_move_costs() -> None:
    j = job("a", 100.0, 100.0)
    assert restart_seconds(j) == RESTART_S_7B  # the paper's, by model size (7B default)
    assert restart_seconds(replace(j, restart_s=4.5)) == 4.5


def test_a_negative_measurement_is_refused() -> None:
    with pytest.raises(ValueError, match="switch_s must be a finite number >= 0"):
        replace(job("a", 1.0, 1.0), switch_s=-1.0)
