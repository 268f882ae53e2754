"""Intra-group scheduling (paper section 3), kept importable under its old name.

The round-robin meta-iteration lives in two modules:

* `scheduler.meta_iteration`: the arithmetic Algorithm 1 plans with
  (`plan_meta_iteration`, `steady_iteration_times`, T_cycle / T_load / T_meta);
* `scheduler.group_runtime`: the `GroupRuntime` state machine the simulator and the
  live controller drive.

New code imports from those; this module re-exports their public names for the web
app's existing imports.
"""

from __future__ import annotations

from scheduler.group_runtime import FinishResult, GroupRuntime, PendingPhase, PhaseStart
from scheduler.meta_iteration import (
    MetaIteration,
    group_loads,
    max_cycle_mean,
    periodic_meta_length,
    plan_meta_iteration,
    round_matrix,
    steady_iteration_times,
)

__all__ = [
    "FinishResult",
    "GroupRuntime",
    "MetaIteration",
    "PendingPhase",
    "PhaseStart",
    "group_loads",
    "max_cycle_mean",
    "periodic_meta_length",
    "plan_meta_iteration",
    "round_matrix",
    "steady_iteration_times",
]
