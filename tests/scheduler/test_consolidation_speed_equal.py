"""Consolidation's speed-ups change no decision (issue 25 item 4).

`plan_consolidation` skips the candidates no other group could take (a vectorised pass
over the groups' summaries) and memoises the planner's evaluations for the pass and,
for a caller with a lasting memo, across passes (scheduler.planner.memo); Algorithm 1
checks its cheap bounds over many groups in one vectorised pass
(`algorithm1.Request.bounds`); an arrival asks only the co-located jobs that could join
its new group (`place_with_partners`). Here every departure and every arrival of
simulated runs is planned twice: the fast way (lasting memo open, vectorised bounds from
the first group on) and the plain way (no memo, the bounds one group at a time, every
candidate asked: the rule as the module docstring states it), and the two must be
equal move for move, savings to the last bit.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import scheduler.planner as planner
from scheduler.config import PlannerConfig
from scheduler.model import ClusterState, Group, JobProfile, Member, PlacementResult
from scheduler.planner import admissible, consolidation, memo
from scheduler.planner.consolidation import (
    Move,
    admit,
    apply_move,
    best_move,
    plan_consolidation,
)
from scheduler.planner.index import summarise
from scheduler.planner.objective import JobProgress
from scheduler.planner.slo_checks import check_slo, known_slo_check, slo_key
from scheduler.sim.engine import simulate
from scheduler.sim.gen import generate_paper, generate_philly
from scheduler.sim.policies import CorePolicy, make_policy
from scheduler.trace import default_cluster, load_cluster
from tests.scheduler.test_consolidation import Y, Z, after_y_left

UNBOUNDED = Path(__file__).resolve().parents[2] / "scheduler/sim/scenarios/cluster-unbounded.json"


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


class Plain:
    """The plain way for the block: no vectorised bounds, every co-located job asked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch

    def __enter__(self) -> None:
        self.monkeypatch.setattr(planner, "_VECTOR_GROUPS", 1 << 30)
        self.monkeypatch.setattr(admissible.JoinFilter, "may_join", lambda *a: True)
        self.monkeypatch.setattr(admissible.JoinFilter, "admits_none", lambda *a: False)

    def __exit__(self, *exc: object) -> None:
        self.monkeypatch.undo()
        # the fast way: the vectorised bounds from the first group on
        self.monkeypatch.setattr(planner, "_VECTOR_GROUPS", 0)


class Checked(CorePolicy):
    """rollmux, whose every departure and arrival is also planned the plain way and
    compared (the module docstring)."""

    def __init__(self, inner: CorePolicy, plain: Plain) -> None:
        self.__dict__.update(inner.__dict__)
        self.plain = plain
        self.departures = 0
        self.moves = 0
        self.partners = 0

    def on_departure(
        self, state: ClusterState, group_id: str, now: float, progress: Mapping[str, JobProgress]
    ) -> Sequence[str]:
        assert self.consolidates
        with memo.lasting(self.memo):
            fast = plan_consolidation(
                state, group_id, now=now, progress=progress, config=self.config
            )
        with self.plain:
            plain = reference(state, group_id, now=now, progress=progress, config=self.config)
        assert fast == plain
        self.departures += 1
        self.moves += len(fast)
        return [m.job_id for m in fast]

    def place(
        self,
        job: JobProfile,
        state: ClusterState,
        progress: Mapping[str, JobProgress] | None = None,
        now: float = 0.0,
    ) -> PlacementResult:
        fast = super().place(job, state, progress, now)
        with self.plain:
            plain = admit(
                job, state, config=self.config, progress=progress or {}, now=now, rng=self.rng
            )
        assert (fast, tuple(self._movers)) == plain
        self.partners += len(self._movers)
        return fast


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
def test_plan_consolidation_equals_the_plain_rule_on_every_departure(
    jobs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = Plain(monkeypatch)
    monkeypatch.setattr(planner, "_VECTOR_GROUPS", 0)
    policy = Checked(make_policy("rollmux", seed=0), plain)
    simulate(jobs, default_cluster(), policy, seed=0)
    assert policy.departures == len(jobs)
    assert policy.moves >= 3  # moves were made (and compared), not only empty plans
    assert policy.memo.values  # the lasting memo answered (and was compared)


def test_arrivals_and_departures_at_size_equal_the_plain_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many jobs within hours on the unbounded cluster (the at-size benchmark's shape,
    smaller): many groups, co-located jobs an arrival pairs with, moves on departures."""
    jobs = [
        replace(j, iterations=min(j.iterations, 30))
        for j in generate_paper(3, jobs=90, window_h=6.0)
    ]
    plain = Plain(monkeypatch)
    monkeypatch.setattr(planner, "_VECTOR_GROUPS", 0)
    # a round after a departure's first reuses a candidate's answer when the move
    # between them changed neither its group, its destination nor an option of its
    # (consolidation rule 8): counted here, so the comparison covers it
    reused: list[bool] = []
    passes_any = admissible.JoinFilter.passes_any

    def counted(self: admissible.JoinFilter, *args: Any) -> bool:
        out = passes_any(self, *args)
        reused.append(not out)
        return out

    # (set by hand: the plain way's monkeypatch.undo() would take it out after one use)
    admissible.JoinFilter.passes_any = counted  # type: ignore[method-assign]
    try:
        policy = Checked(make_policy("rollmux", seed=0), plain)
        simulate(jobs, load_cluster(UNBOUNDED), policy, seed=0)
    finally:
        admissible.JoinFilter.passes_any = passes_any  # type: ignore[method-assign]
    assert policy.departures == len(jobs)
    assert policy.moves >= 3
    assert policy.partners >= 3  # arrivals moved co-located jobs in (and were compared)
    assert sum(reused) >= 3


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


def test_interned_numbers_equal_items_alike_and_others_apart() -> None:
    a, b = ("x", 1.0), ("y", 2.0)
    a_again = ("x", float("1"))  # equal to `a`, another object
    assert a_again is not a
    assert memo.interned([a, b]) is None  # no scope: nothing to number in
    with memo.evaluation_scope({}):
        first = memo.interned([a, b, a])
        assert first is not None and first[0] == first[2] != first[1]
        assert memo.interned([a_again, b]) == first[:2]  # by value, as the items' key
        assert memo.interned([b, a]) == (first[1], first[0])  # the order is kept
        assert memo.interned([("z", 3.0)]) not in ((first[0],), (first[1],))
    with memo.evaluation_scope({}):
        assert memo.interned([b]) == (0,)  # a new scope numbers afresh


def test_a_move_refused_before_placement_is_one_the_placement_would_refuse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`best_move` skips Algorithm 1 when `may_move_within_budget` says no destination
    keeps the mover's SLO: each such answer of a simulated run at the at-size shape is
    compared with the full evaluation's, which must be None too."""
    refused: list[str] = []
    real = consolidation.may_move_within_budget

    def checked(job: JobProfile, progress: JobProgress | None, now: float, *args: Any,
                **kwargs: Any) -> bool:  # fmt: skip
        out = real(job, progress, now, *args, **kwargs)
        if not out:
            monkeypatch.setattr(consolidation, "may_move_within_budget", lambda *a, **k: True)
            try:
                full = best_move(state_of[0], job.id, now=now, progress=progress_of[0],
                                 config=config_of[0])  # fmt: skip
            finally:
                monkeypatch.setattr(consolidation, "may_move_within_budget", checked)
            assert full is None
            refused.append(job.id)
        return out

    state_of: list[ClusterState] = []
    progress_of: list[Mapping[str, JobProgress]] = []
    config_of: list[PlannerConfig] = []
    best = consolidation._best_move

    def remembered(state: ClusterState, found: Any, **kwargs: Any) -> Any:
        state_of[:] = [state]
        progress_of[:] = [kwargs["progress"]]
        config_of[:] = [kwargs["cfg"]]
        return best(state, found, **kwargs)

    monkeypatch.setattr(consolidation, "_best_move", remembered)
    monkeypatch.setattr(consolidation, "may_move_within_budget", checked)
    jobs = [
        replace(j, iterations=min(j.iterations, 30))
        for j in generate_paper(3, jobs=90, window_h=6.0)
    ]
    simulate(jobs, load_cluster(UNBOUNDED), make_policy("rollmux", seed=0), seed=0)
    assert len(refused) >= 3


def test_a_kept_slo_check_is_known_with_check_slo_s_answer_and_only_then() -> None:
    """`known_slo_check` (under `slo_key`) answers as `check_slo` once the memo holds the
    group's check (an admissible join and one that breaks an SLO alike), and not before,
    nor without a memo."""
    state = after_y_left()  # g0: x alone on one rollout and one training node
    g0 = next(g for g in state.groups if g.id == "g0")
    pair = replace(g0, members=(*g0.members, replace(g0.members[0], job=replace(Y, id="y2"))))
    kw: dict[str, Any] = {"switch_overhead_s": state.spec.switch_overhead_s}
    nodes = (g0.rollout_nodes, g0.train_nodes)

    def known_check_slo(
        group: Group, job: JobProfile, *on: tuple[str, ...], **rule: Any
    ) -> tuple[bool, dict[str, float] | None]:
        members = (*group.members, Member(job, *on))
        return known_slo_check(members, slo_key(members, **rule))

    assert known_check_slo(g0, Z, *nodes, **kw) == (False, None)  # no memo open
    keep = memo.LastingMemo()
    with memo.lasting(keep):
        for group, admitted in ((g0, True), (pair, False)):
            assert known_check_slo(group, Z, *nodes, **kw) == (False, None)  # not checked yet
            answer = check_slo(group, Z, *nodes, **kw)
            assert (answer is not None) is admitted
            assert known_check_slo(group, Z, *nodes, **kw) == (True, answer)
            # the joiner's iterations are read after the memo (its join allowance)
            short = replace(Z, iterations=1)
            assert known_check_slo(group, short, *nodes, **kw) == (
                True,
                check_slo(group, short, *nodes, **kw),
            )


def test_no_join_answers_are_kept_per_summary_and_go_with_it() -> None:
    """`admissible.NoJoins` answers for the very summary it was told about (an equal one
    made again is another version of the group: not known), and holds no summary alive:
    once no state holds a group's summary, its answers are swept with it."""
    g0 = next(g for g in after_y_left().groups if g.id == "g0")
    known = admissible.NoJoins()
    s = summarise(g0)
    assert known.known(s, "shape") is None
    known.remember(s, "shape", 12)
    known.remember(s, "other", 3)
    assert (known.known(s, "shape"), known.known(s, "other")) == (12, 3)
    assert known.known(summarise(g0), "shape") is None  # equal, but not this summary
    alive = [summarise(g0) for _ in range(200)]
    for k, other in enumerate(alive):
        known.remember(other, "shape", k)
    gone = weakref.ref(s)
    del s
    assert gone() is None  # the answers did not keep it alive
    alive += [summarise(g0) for _ in range(300)]
    for k, other in enumerate(alive[200:], start=200):
        known.remember(other, "shape", k)  # the count grows past a sweep: s's entry goes
    assert len(known) == len(alive)
    assert [known.known(x, "shape") for x in alive] == list(range(len(alive)))
