"""The planner's ROLLMUX_* settings come from one table (scheduler.config.OPTIONS)."""

from __future__ import annotations

from typing import Any

from rollmux_web.workflow import levers
from scheduler.config import OPTIONS, PlannerConfig


def test_every_row_of_the_table_is_a_setting_and_unset_is_the_shipped_config(
    settings: Any,
) -> None:
    for opt in OPTIONS:
        assert hasattr(settings, opt.env), f"settings does not read {opt.env}"
    # tests/conftest.py switches moves off for the suite; as shipped they are on
    settings.ROLLMUX_CONSOLIDATION = settings.ROLLMUX_DRIFT_REPLAN = True
    assert levers.live_config() == PlannerConfig()


def test_a_setting_reaches_the_live_config(settings: Any) -> None:
    settings.ROLLMUX_PLANNER_OBJECTIVE = "marginal"
    settings.ROLLMUX_MAX_MOVES_PER_JOB = 0
    settings.ROLLMUX_DRIFT_REPLAN = False
    cfg = levers.live_config()
    assert cfg.admission.objective == "marginal"
    assert cfg.consolidation.max_moves_per_job == 0
    assert cfg.drift_hedge == 1.0
