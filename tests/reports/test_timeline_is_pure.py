"""The Gantt geometry is pure: it imports no Django and no model (the review found it
importing two), and the model values it spells out stay those of the models."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from rollmux_web.inventory.models import PoolKind
from rollmux_web.reports import intervals, palette, timeline
from rollmux_web.workflow.models import PhaseState


def _imports(path: str) -> set[str]:
    tree = ast.parse(Path(path).read_text())
    return {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }


def test_the_timeline_imports_the_standard_library_and_pure_helpers_only() -> None:
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    pure = {
        "rollmux_web.formatting",
        "rollmux_web.reports.intervals",
        "rollmux_web.reports.palette",
    }
    for module in (timeline, intervals, palette):
        outside = {m for m in _imports(module.__file__) if m.split(".")[0] not in allowed}
        assert outside <= pure, (module.__name__, outside)


def test_the_values_it_spells_out_are_the_models() -> None:
    assert (timeline.ROLLOUT_POOL, timeline.TRAIN_POOL) == (PoolKind.ROLLOUT, PoolKind.TRAIN)
    assert (timeline.RUNNING, timeline.SUCCEEDED) == (PhaseState.RUNNING, PhaseState.SUCCEEDED)
    assert set(timeline.FAILED_STATES) == {PhaseState.FAILED, PhaseState.LOST}
