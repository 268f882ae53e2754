"""The simulator's fast paths change nothing they stand for (issue 25 item 4).

* The group runtime's phase records (`PhaseStart`, `PendingPhase`, `FinishResult`) are made
  at every phase event with their fields written at once: they must stay the frozen,
  equal and hashable dataclasses they were, defaults included.
* Consolidation's what-if placement (`best_move`) asks `place` without the SLO
  probabilities of its FIT: every decision of a run must be the one the full `place`
  makes (status, reason, placement, cost, predicted slowdowns), only the probabilities
  left out.
* A run leaves no garbage in reference cycles: the simulator pauses the cyclic collector
  (scheduler.collector), so such garbage would stay until the run ends (it did: a
  group's kept options held candidates that named the group's summary, which kept
  them, and 2,100 jobs left ~600,000 such objects, 600 MB, and a slower run).
"""

from __future__ import annotations

import dataclasses
import gc
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from scheduler.group_runtime import FinishResult, PendingPhase, PhaseStart
from scheduler.model import JobProfile, PhaseKind, PlacementResult, PlacementStatus
from scheduler.planner import consolidation
from scheduler.planner import place as full_place
from scheduler.sim.engine import simulate
from scheduler.sim.gen import generate_paper
from scheduler.sim.policies import make_policy
from scheduler.trace import load_cluster

UNBOUNDED = Path(__file__).resolve().parents[2] / "scheduler/sim/scenarios/cluster-unbounded.json"


@pytest.mark.parametrize(
    ("cls", "args", "defaults"),
    [
        (
            PhaseStart,
            ("j1", PhaseKind.ROLLOUT, 3, ("r0",), True, False),
            {"meta_iteration": 0, "first_on_pool": False},
        ),
        (PendingPhase, ("j1", PhaseKind.TRAIN, 2, ("t0", "t1")), {"meta_iteration": 0}),
        (
            FinishResult,
            ("j1", PhaseKind.TRAIN, 2, ("t0",)),
            {"done": False, "removed": False, "next_kind": None, "next_iteration": None},
        ),
    ],
)
def test_phase_records_stay_frozen_values(
    cls: Any, args: tuple[Any, ...], defaults: dict[str, Any]
) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    made = cls(*args)
    assert dataclasses.asdict(made) == dict(zip(names, args, strict=False)) | defaults
    by_name = cls(**dict(zip(names, args, strict=False)))
    assert made == by_name and hash(made) == hash(by_name)
    other = replace(made, iteration=made.iteration + 1)
    assert other != made and other.iteration == made.iteration + 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.iteration = 0
    assert repr(made).startswith(f"{cls.__name__}(job_id='j1'")


def test_best_move_places_as_the_full_place_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run on the unbounded cluster (the at-size shape, smaller): every what-if placement
    consolidation asks for is also made with the SLO probabilities and compared."""
    compared: list[PlacementStatus] = []

    def both(job: JobProfile, state: Any, **kw: Any) -> PlacementResult:
        lean_asked = kw.pop("with_slo_probability", True) is False
        full = full_place(job, state, **kw)
        if not lean_asked:
            return full
        lean = full_place(job, state, with_slo_probability=False, **kw)
        fields = ("status", "reason", "placement", "marginal_cost_per_hour")
        assert [getattr(lean, f) for f in fields] == [getattr(full, f) for f in fields]
        assert lean.predicted_slowdown == full.predicted_slowdown
        assert lean.slo_probability == {}
        if full.status is PlacementStatus.FIT:
            assert full.slo_probability  # the full place computes them
        compared.append(full.status)
        return lean

    monkeypatch.setattr(consolidation, "place", both)
    jobs = [
        replace(j, iterations=min(j.iterations, 30))
        for j in generate_paper(3, jobs=60, window_h=6.0)
    ]
    run = simulate(jobs, load_cluster(UNBOUNDED), make_policy("rollmux", seed=0), seed=0)
    assert compared.count(PlacementStatus.FIT) >= 20
    assert run.moves  # moves were made on those placements


def test_a_run_leaves_no_garbage_in_reference_cycles() -> None:
    """Everything a run drops is freed by reference counting: the collector, paused
    for the run, finds nothing to collect after it (the at-size shape, smaller)."""
    jobs = [
        replace(j, iterations=min(j.iterations, 30))
        for j in generate_paper(3, jobs=60, window_h=6.0)
    ]
    spec, policy = load_cluster(UNBOUNDED), make_policy("rollmux", seed=0)
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        run = simulate(jobs, spec, policy, seed=0)
        found = gc.collect()
    finally:
        if was_enabled:
            gc.enable()
    assert run.moves and sum(r.status == "done" for r in run.jobs.values()) == len(jobs)
    assert found == 0
