"""The planner's issue-14 levers, live: one place that says how the live system calls the core.

The simulator's rollmux runs with `scheduler.sim.policies.DEFAULT_LEVERS` (expected
remaining cost objective, no saturation prune, the co-located strategy allowed but not
on arrival, consolidation on departure). The live planning pass, the what-if preview and
live moves read the same levers here: each is the core's default unless its setting is
set (ROLLMUX_PLANNER_OBJECTIVE, ROLLMUX_PLANNER_PRUNE_SATURATED, ROLLMUX_COLOCATED,
ROLLMUX_COLOCATED_ON_ARRIVAL; README "Configuration"), so one planner decides alike in
both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from django.conf import settings

from scheduler.model import ClusterState, JobProfile, PlacementResult

if TYPE_CHECKING:
    from scheduler.planner.objective import JobProgress
    from scheduler.sim.policies import Levers


def live_levers() -> Levers:
    """Return the levers the live planner runs: the core's defaults, overridden by settings."""
    from scheduler.sim.policies import DEFAULT_LEVERS

    lv = DEFAULT_LEVERS
    if settings.ROLLMUX_PLANNER_OBJECTIVE is not None:
        lv = replace(lv, objective=settings.ROLLMUX_PLANNER_OBJECTIVE)
    if settings.ROLLMUX_PLANNER_PRUNE_SATURATED is not None:
        lv = replace(lv, prune_saturated=settings.ROLLMUX_PLANNER_PRUNE_SATURATED)
    if settings.ROLLMUX_COLOCATED is not None:
        lv = replace(lv, colocated=settings.ROLLMUX_COLOCATED)
    if settings.ROLLMUX_COLOCATED_ON_ARRIVAL is not None:
        lv = replace(lv, colocated_on_arrival=settings.ROLLMUX_COLOCATED_ON_ARRIVAL)
    return lv


def place_job(
    profile: JobProfile,
    state: ClusterState,
    progress: Mapping[str, JobProgress] | None = None,
    *,
    levers: Levers | None = None,
) -> PlacementResult:
    """Place an arriving job as the simulator's rollmux does (`scheduler.planner.place` with
    the live levers; `progress`: the running members', `snapshot.planner_input`).

    The co-located strategy competes on arrival only with both ROLLMUX_COLOCATED and
    ROLLMUX_COLOCATED_ON_ARRIVAL (the simulator's `colocated and colocated_on_arrival`).
    """
    from scheduler.planner import place

    lv = levers or live_levers()
    return place(
        profile,
        state,
        policy="rollmux",
        max_group_size=settings.ROLLMUX_MAX_GROUP_SIZE,
        objective=lv.objective,
        progress=progress or {},
        prune_saturated=lv.prune_saturated,
        colocated=lv.colocated and lv.colocated_on_arrival,
    )
