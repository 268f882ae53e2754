"""The planner's issue-14 levers, live: one place that says how the live system calls the core.

The simulator's rollmux runs with `scheduler.sim.policies.DEFAULT_LEVERS` (expected
remaining cost objective, no saturation prune, the co-located strategy allowed but not
on arrival, consolidation on departure). The live planning pass, the what-if preview and
live moves read the same levers here: each is the core's default unless its setting is
set (ROLLMUX_PLANNER_OBJECTIVE, ROLLMUX_PLANNER_PRUNE_SATURATED, ROLLMUX_COLOCATED,
ROLLMUX_COLOCATED_ON_ARRIVAL; README "Configuration"), so one planner decides alike in
both.

With drift re-planning on (ROLLMUX_DRIFT_REPLAN, the default) they are the simulator's
re-planning levers (`scheduler.sim.policies.replanning_levers`: every move's SLO budget
hedged against a shrinking run, `Levers.drift_hedge` = scheduler.sim.drift.DRIFT_HEDGE),
as the simulator's re-planning runs use them. The hedge is a consolidation rule
(`ConsolidationConfig.drift_hedge`), and each reader needs it:

* live moves (`services.moves.config`): `plan_consolidation` and `best_move`, the
  consolidation on departure and its re-decision at the mover's boundary;
* the planning pass (`arrival_policy`): an arrival placed with partners
  (`place_with_partners`) moves co-located jobs into its group only if their budgets
  hold hedged;
* the what-if preview (`place_job`): it answers what the planning pass would do.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django.conf import settings

from scheduler.model import ClusterState, JobProfile, PlacementResult

if TYPE_CHECKING:
    from scheduler.planner.objective import JobProgress
    from scheduler.sim.policies import Levers


def live_levers() -> Levers:
    """Return the levers the live planner runs: the core's defaults, overridden by settings,
    as re-planning runs them when drift re-planning is on (module docstring)."""
    from scheduler.sim.policies import DEFAULT_LEVERS, replanning_levers

    lv = DEFAULT_LEVERS
    if settings.ROLLMUX_PLANNER_OBJECTIVE is not None:
        lv = replace(lv, objective=settings.ROLLMUX_PLANNER_OBJECTIVE)
    if settings.ROLLMUX_PLANNER_PRUNE_SATURATED is not None:
        lv = replace(lv, prune_saturated=settings.ROLLMUX_PLANNER_PRUNE_SATURATED)
    if settings.ROLLMUX_COLOCATED is not None:
        lv = replace(lv, colocated=settings.ROLLMUX_COLOCATED)
    if settings.ROLLMUX_COLOCATED_ON_ARRIVAL is not None:
        lv = replace(lv, colocated_on_arrival=settings.ROLLMUX_COLOCATED_ON_ARRIVAL)
    return replanning_levers(lv) if settings.ROLLMUX_DRIFT_REPLAN else lv


def arrival_policy(lv: Levers | None = None) -> Any:
    """Return the simulator's rollmux policy adapter with the live levers: what decides an
    arrival (`scheduler.sim.policies.make_policy`, the very object a simulated run uses)."""
    from scheduler.sim.policies import make_policy

    return make_policy(
        "rollmux",
        seed=0,
        max_group_size=settings.ROLLMUX_MAX_GROUP_SIZE,
        levers=lv or live_levers(),
    )


def place_job(
    profile: JobProfile,
    state: ClusterState,
    progress: Mapping[str, JobProgress] | None = None,
    *,
    policy: Any = None,
    now_s: float | None = None,
) -> PlacementResult:
    """Place an arriving job as the simulator's rollmux does (its policy adapter's `place`,
    `arrival_policy`; `progress`: the running members', `snapshot.planner_input`; `now_s`:
    the epoch seconds of the decision, the clock of `JobProgress.admitted_s`).

    The co-located strategy competes on arrival only with both ROLLMUX_COLOCATED and
    ROLLMUX_COLOCATED_ON_ARRIVAL (the simulator's `colocated and colocated_on_arrival`).
    When co-located jobs exist, the simulator may also name some to move into the
    newcomer's new group (`policy.arrival_movers()`): moving them is live moves' work.
    """
    policy = policy or arrival_policy()
    now = time.time() if now_s is None else now_s
    return policy.place(profile, state, progress or {}, now)  # type: ignore[no-any-return]
