"""One re-plan decision, applied twice: the same cases through the simulator's applier
(`Simulation._resolve`, the run's policy adapter) and the live one
(`services.moves.drift_resolution`, the core's admission with the live config), at the
function level with plain inputs (no database). Both must take the decision the core's
`scheduler.replan.resolve` takes, with the same destination.

The cluster: a co-execution group g0 of a drifting job d and its partner p on one rollout
and one training node (r1, t1); `free` more of each pool. d's learned estimates are either
still small (it fits back where it is) or grown (600 s + 300 s: p's SLO breaks beside it).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rollmux_web.workflow.services.moves import drift_resolution
from scheduler.cluster import cluster_nodes
from scheduler.config import PlannerConfig
from scheduler.model import ClusterState
from scheduler.planner.objective import JobProgress
from scheduler.replan import Assessment, Move, Stay, Yield, planned_outlook
from scheduler.sim.engine import Simulation
from scheduler.sim.policies import make_policy
from tests.scheduler.builders import cluster_spec, group, job, member

RESTART = 200.0


@dataclass(frozen=True)
class Case:
    name: str
    free: int  # free nodes of each pool beside g0's
    grown: bool  # d's learned phases grew past what p's SLO allows beside it
    must_go: bool
    elapsed_s: float  # d's time since its first admission (its SLO clock)
    expected: type
    says: str  # in its reason
    target: str | None = None  # a Move's group (None: a new group)


CASES = [
    Case("its group holds: it stays", 2, True, False, 0.0, Stay, "holds"),
    Case("a free node pair: it moves to a new group", 2, True, True, 0.0, Move, "isolated"),
    Case("it still fits its own group: it stays", 0, False, True, 0.0, Stay, "own group"),
    Case("a full pool and a loose budget: it yields", 0, True, True, 0.0, Yield, "yields"),
    Case(
        "a full pool, no budget for the wait: it stays", 0, True, True, 2e5, Stay, "keeps running"
    ),
]


def inputs(case: Case) -> dict[str, object]:
    """Return the decision's inputs, gathered as each applier gathers them."""
    spec = cluster_spec(1 + case.free, 1 + case.free)
    d = job("d", 300, 100, slo=2.0, iterations=100)
    p = job("p", 300, 100, slo=2.0, iterations=40)
    roll, train = ("H20-000",), ("H800-000",)  # g0's nodes: each pool's first
    g0 = group(member(d, roll, train), member(p, roll, train), group_id="g0")
    state = ClusterState(spec=spec, nodes=cluster_nodes(spec), groups=(g0,))
    learned = (
        job("d", 600, 300, slo=2.0, iterations=80)
        if case.grown
        else job("d", 300, 100, slo=2.0, iterations=80)
    )
    outlooks = {
        "d": planned_outlook(d, remaining=80, elapsed_s=case.elapsed_s, done=20),
        "p": planned_outlook(p, remaining=20, elapsed_s=8_000.0, done=20),
    }
    progress = {
        "d": JobProgress(-case.elapsed_s, 20, 0),
        "p": JobProgress(-8_000.0, 20, 0),
    }
    verdict = Assessment(case.must_go, "case", for_others=("p",) if case.must_go else ())
    return {
        "state": state,
        "joining": learned,
        "outlooks": outlooks,
        "progress": progress,
        "verdict": verdict,
    }


def simulator_applier(case: Case) -> Stay | Move | Yield:
    """The simulator's: its policy adapter's admission, removal and destination check."""
    given = inputs(case)
    sim = Simulation([], given["state"].spec, make_policy("rollmux", seed=0), seed=0)  # type: ignore[attr-defined]
    sim.state = given["state"]  # type: ignore[assignment]
    verdict: Assessment = given["verdict"]  # type: ignore[assignment]
    if not verdict.move:  # the engine resolves only a job its decision sends out
        return Stay("its group holds")
    return sim._resolve(
        "d",
        "g0",
        for_others=verdict.for_others,
        joining=given["joining"],  # type: ignore[arg-type]
        outlooks=given["outlooks"],  # type: ignore[arg-type]
        restart_s=RESTART,
        progress=given["progress"],  # type: ignore[arg-type]
    )


def live_applier(case: Case) -> Stay | Move | Yield:
    """The live planner's: the core's admission with the live (shipped) config, clock NOW."""
    given = inputs(case)
    return drift_resolution(
        job_id="d",
        group_id="g0",
        verdict=given["verdict"],  # type: ignore[arg-type]
        joining=given["joining"],  # type: ignore[arg-type]
        outlooks=given["outlooks"],  # type: ignore[arg-type]
        restart_s=RESTART,
        state=given["state"],  # type: ignore[arg-type]
        progress=given["progress"],  # type: ignore[arg-type]
        config=PlannerConfig(),
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("applier", [simulator_applier, live_applier], ids=["simulator", "live"])
def test_both_appliers_take_the_one_decision(case: Case, applier: object) -> None:
    outcome = applier(case)  # type: ignore[operator]
    assert isinstance(outcome, case.expected), outcome
    if isinstance(outcome, Move):
        assert outcome.target == case.target
        assert outcome.result.placement is not None
        assert "H800-000" not in outcome.result.placement.train_nodes  # off g0's node
    if isinstance(outcome, Yield):
        assert outcome.for_others == ("p",) and outcome.restart_s == RESTART
    assert case.says in outcome.reason, outcome.reason
