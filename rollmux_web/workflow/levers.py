"""The planner's configuration, live: how the live system calls the core.

The simulator's rollmux and the live planner run one configuration,
`scheduler.config.PlannerConfig` (its defaults are what ships). The live planning pass,
the what-if preview and live moves read it here: the shipped config with each field that
has a `ROLLMUX_*` variable set from its setting (`scheduler.config.OPTIONS`, read by
settings; docs/planner-configuration.md), so one planner decides alike in both.

With drift re-planning on (ROLLMUX_DRIFT_REPLAN, the default) every move's SLO budget is
hedged against a shrinking run (`PlannerConfig.drift_hedge`), as the simulator's
re-planning runs do; each reader needs it: live moves (`plan_consolidation`,
`best_move`), the planning pass (an arrival placed with partners moves co-located jobs
into its group only if their budgets hold hedged) and the what-if preview (it answers
what the planning pass would do).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from django.conf import settings

from scheduler.config import OPTIONS, PlannerConfig, config_from_env
from scheduler.model import ClusterState, JobProfile, PlacementResult

if TYPE_CHECKING:
    from scheduler.planner.objective import JobProgress


def live_config() -> PlannerConfig:
    """Return the configuration the live planner runs: the shipped one with every
    `ROLLMUX_*` planner setting applied (module docstring)."""
    return config_from_env({opt.env: getattr(settings, opt.env) for opt in OPTIONS})


def arrival_policy(config: PlannerConfig | None = None) -> PlannerConfig:
    """Return what decides an arrival in a planning pass: the live configuration (read
    once per pass)."""
    return config or live_config()


def place_job(
    profile: JobProfile,
    state: ClusterState,
    progress: Mapping[str, JobProgress] | None = None,
    *,
    policy: PlannerConfig | None = None,
    now_s: float | None = None,
    with_slo_probability: bool = True,
) -> PlacementResult:
    """Place an arriving job as the simulator's rollmux does: the core's `admit` with the
    live configuration (`policy`, default `live_config()`; `progress`: the running
    members', `snapshot.planner_input`; `now_s`: the epoch seconds of the decision, the
    clock of `JobProgress.admitted_s`).

    The co-located strategy competes on arrival only with both ROLLMUX_COLOCATED and
    ROLLMUX_COLOCATED_ON_ARRIVAL. When co-located jobs exist, the core may also name some
    to move into the newcomer's new group: moving them is live moves' work.
    `with_slo_probability=False`: a FIT's members' SLO probabilities are not computed (the
    planning pass writes none; the what-if preview shows them).
    """
    from scheduler.planner.consolidation import admit

    config = policy or live_config()
    now = time.time() if now_s is None else now_s
    result, _movers = admit(
        profile,
        state,
        config=config,
        progress=progress or {},
        now=now,
        with_slo_probability=with_slo_probability,
    )
    return result
