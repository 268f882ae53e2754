"""Consolidation's speed-ups change no decision (issue 25 item 4).

`plan_consolidation` skips the candidates no other group could take (a vectorised pass
over the groups' summaries) and memoises the planner's evaluations for the pass
(scheduler.planner.memo). Here every departure of simulated runs is planned twice: by
`plan_consolidation` and by the plain rule it implements (ask `best_move` about every
candidate on the state the previous moves leave, take the best), and the two must be
equal move for move, savings to the last bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from scheduler.config import PlannerConfig
from scheduler.model import ClusterState
from scheduler.planner import memo
from scheduler.planner.consolidation import (
    Move,
    apply_move,
    best_move,
    plan_consolidation,
)
from scheduler.planner.objective import JobProgress
from scheduler.sim.engine import simulate
from scheduler.sim.gen import generate_paper, generate_philly
from scheduler.sim.policies import CorePolicy, make_policy
from scheduler.trace import default_cluster


def reference(
    state: ClusterState,
    group_id: str,
    *,
    now: float,
    progress: Mapping[str, JobProgress],
    config: PlannerConfig,
) -> list[Move]:
    """The rule of `plan_consolidation` (module docstring of consolidation), plainly."""
    small = max(config.consolidation.small_groups, 1 if config.consolidation.singletons else 0)
    candidates = {
        m.job.id
        for g in state.groups
        if g.id == group_id or len(g.members) <= small
        for m in g.members
    }
    moves: list[Move] = []
    current = state
    while candidates:
        options = [
            mv
            for job_id in sorted(candidates)
            if (mv := best_move(current, job_id, now=now, progress=progress, config=config))
        ]
        if not options:
            break
        best = max(options, key=lambda mv: (mv.saving_usd, mv.job_id))
        if not best.group_id:
            best = replace(best, group_id=f"{best.job_id}:colocated")
        moves.append(best)
        current = apply_move(current, best)
        candidates.discard(best.job_id)
    return moves


class Checked(CorePolicy):
    """rollmux, whose every departure is also planned by `reference` and compared."""

    def __init__(self, inner: CorePolicy) -> None:
        self.__dict__.update(inner.__dict__)
        self.departures = 0
        self.moves = 0

    def on_departure(
        self, state: ClusterState, group_id: str, now: float, progress: Mapping[str, JobProgress]
    ) -> Sequence[str]:
        assert self.consolidates
        fast = plan_consolidation(state, group_id, now=now, progress=progress, config=self.config)
        plain = reference(state, group_id, now=now, progress=progress, config=self.config)
        assert fast == plain
        self.departures += 1
        self.moves += len(fast)
        return [m.job_id for m in fast]


@pytest.mark.parametrize(
    "jobs",
    [
        [
            replace(j, iterations=min(j.iterations, 60))
            for j in generate_paper(0, jobs=40, window_h=6.0)
        ],
        [
            replace(j, iterations=min(j.iterations, 40))
            for j in generate_philly(1, jobs=40, window_h=6.0)
        ],
    ],
    ids=["paper", "philly"],
)
def test_plan_consolidation_equals_the_plain_rule_on_every_departure(jobs: Any) -> None:
    policy = Checked(make_policy("rollmux", seed=0))
    simulate(jobs, default_cluster(), policy, seed=0)
    assert policy.departures == len(jobs)
    assert policy.moves >= 3  # moves were made (and compared), not only empty plans


def test_the_memo_answers_only_inside_its_scope_and_for_its_progress() -> None:
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    progress: dict[str, JobProgress] = {}
    assert memo.cached("k", 1, compute) == 1
    assert memo.cached("k", 1, compute) == 2  # no scope: computed every time
    with memo.evaluation_scope(progress):
        assert memo.cached("k", 1, compute) == 3
        assert memo.cached("k", 1, compute) == 3  # memoised
        assert memo.cached("k", 2, compute) == 4
        other: dict[str, JobProgress] = {}
        # a value that reads the progress is memoised only for the scope's mapping
        assert memo.cached("p", 1, compute, progress=other, reads_progress=True) == 5
        assert memo.cached("p", 1, compute, progress=other, reads_progress=True) == 6
        assert memo.cached("p", 1, compute, progress=progress, reads_progress=True) == 7
        assert memo.cached("p", 1, compute, progress=progress, reads_progress=True) == 7
    assert memo.cached("k", 1, compute) == 8  # the scope is gone with its values
