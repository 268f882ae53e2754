"""The planner configuration: one set of defaults, one table of variables, one reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.config import ALGORITHM1, OPTIONS, PlannerConfig, config_from_env, read_env
from scheduler.config import reference_markdown as planner_reference

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_committed_reference_is_the_generated_one() -> None:
    committed = (DOCS / "planner-configuration.md").read_text(encoding="utf-8")
    assert committed == planner_reference(), (
        "docs/planner-configuration.md is stale: "
        "python -m scheduler.config > docs/planner-configuration.md"
    )


def test_the_configuration_page_links_the_reference_instead_of_listing_planner_variables() -> None:
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert "planner-configuration.md" in page
    for opt in OPTIONS:
        assert f"| `{opt.env}`" not in page, f"{opt.env} is listed by hand"


def test_an_empty_environment_is_the_shipped_configuration() -> None:
    assert config_from_env(read_env({})) == PlannerConfig()


def test_every_row_sets_its_field() -> None:
    env = {
        "ROLLMUX_MAX_GROUP_SIZE": "3",
        "ROLLMUX_PLANNER_OBJECTIVE": "marginal",
        "ROLLMUX_PLANNER_PRUNE_SATURATED": "true",
        "ROLLMUX_COLOCATED": "no",
        "ROLLMUX_DRIFT_REPLAN": "off",
        "ROLLMUX_LONG_TAIL_THRESHOLD": "0",
    }
    cfg = config_from_env(read_env(env))
    assert cfg.admission.max_group_size == 3
    assert cfg.admission.objective == "marginal"
    assert cfg.admission.prune_saturated is True
    assert cfg.admission.colocated is False
    assert cfg.drift_hedge == 1.0  # the hedge is off with re-planning
    assert cfg.long_tail is False
    assert cfg.consolidation == PlannerConfig().consolidation  # untouched


@pytest.mark.parametrize(
    ("env", "value", "words"),
    [
        ("ROLLMUX_MAX_GROUP_SIZE", "0", "must be >= 1"),
        ("ROLLMUX_MAX_GROUP_SIZE", "two", "expected an integer"),
        ("ROLLMUX_PLANNER_OBJECTIVE", "cheapest", "use expected or marginal"),
        ("ROLLMUX_COLOCATED", "maybe", "use true or false"),
        ("ROLLMUX_LONG_TAIL_THRESHOLD", "1.5", "must be <= 1"),
        ("ROLLMUX_DRIFT_TOLERANCE", "-0.1", "must be >= 0"),
    ],
)
def test_a_bad_value_names_the_variable_and_its_bound(env: str, value: str, words: str) -> None:
    with pytest.raises(ValueError, match=env) as caught:
        read_env({env: value})
    assert words in str(caught.value)


def test_algorithm1_is_the_published_algorithm_and_differs_from_the_default_only_in_levers() -> (
    None
):
    assert ALGORITHM1.admission.objective == "marginal"
    assert ALGORITHM1.admission.prune_saturated is True
    assert ALGORITHM1.admission.colocated is False
    assert not ALGORITHM1.consolidation.enabled and not ALGORITHM1.long_tail
    assert ALGORITHM1.drift_hedge == 1.0
    # the rest is the one default
    assert ALGORITHM1.admission.max_group_size == PlannerConfig().admission.max_group_size
    assert ALGORITHM1.admission.slo_margin == PlannerConfig().admission.slo_margin


def test_with_takes_bare_and_qualified_names_and_refuses_unknown_ones() -> None:
    cfg = PlannerConfig().with_(objective="marginal", consolidation__enabled=False)
    assert cfg.admission.objective == "marginal" and not cfg.consolidation.enabled
    with pytest.raises(TypeError, match="no field 'objectiv'"):
        PlannerConfig().with_(objectiv="marginal")
    with pytest.raises(TypeError, match="enabled"):
        PlannerConfig().with_(enabled=False)  # two groups have one: say which
