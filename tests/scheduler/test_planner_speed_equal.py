"""The planner's speed-ups decide exactly as the plain code they replace.

Each speed-up of the live planning pass's hot path (issue 14 item 6) is checked against a
plain reference written here: the free pools scanned lazily (`FreePool`), the pool's
residency count by bisection (`infeasible_reason`), and the expected-cost objective that
runs the SLO check only for a placement that would be chosen (`choose_by_expected_cost`).
The references are what the code was before; a divergence fails the comparison.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

import numpy as np
import pytest

from scheduler.cluster import empty_state
from scheduler.config import ALGORITHM1, PlannerConfig
from scheduler.model import (
    ClusterSpec,
    ClusterState,
    GpuType,
    JobProfile,
    Member,
    Node,
    PlacementStatus,
    Pool,
)
from scheduler.planner import (
    _request,
    admits_join,
    algorithm1,
    apply_placement,
    join_request,
    place,
    remove_job,
)
from scheduler.planner import objective as objective_module
from scheduler.planner.admissible import JoinFilter
from scheduler.planner.algorithm1 import Choice, FreePool, Request, candidates, new_group_candidate
from scheduler.planner.consolidation import restart_seconds
from scheduler.planner.index import GroupBounds, GroupSummary, index_nodes, planner_index
from scheduler.planner.memo import LastingMemo, lasting
from scheduler.planner.objective import (
    JobProgress,
    expected_solo_s,
    members_remaining_cost,
)
from scheduler.planner.reasons import infeasible_reason
from scheduler.planner.slo_checks import (
    EPS,
    check_slo,
    joined_worst_case,
    members_shape,
    profile_shape,
    worst_case_holds,
)
from scheduler.slo import check_group, worst_case_times
from tests.scheduler.builders import job

SPEC = ClusterSpec(
    GpuType("H20", 1.85, 8, 2048, 12), GpuType("H800", 5.28, 8, 2048, 10), switch_overhead_s=2.0
)


def reference_choose(
    req: Request,
    summaries: Sequence[GroupSummary],
    progress: Mapping[str, JobProgress],
    lone_restart_s: Callable[[JobProfile], float] | None,
) -> Choice | None:
    """The expected-cost choice as first written: the SLO check before the cost."""
    j = req.job
    life_h = j.iterations * expected_solo_s(j) / 3600.0
    new = new_group_candidate(req)
    best: Choice | None = new
    best_value = new[0].delta * life_h if new is not None else float("inf")
    price = {x: n.price_per_hour for x, n in req.nodes.items()}
    price.update(req.pools[Pool.ROLLOUT].price)
    before: dict[str, float] = {}
    switch = req.switch_overhead_s
    cost = {
        "switch_overhead_s": switch,
        "colocated_factor": req.pools[Pool.TRAIN].spec.train.rollout_speed_factor,
        "lone_restart_s": lone_restart_s,
    }
    for c in sorted(candidates(req, summaries), key=lambda c: (c.delta, c.lower_bound, c.order)):
        if c.delta * life_h >= best_value - EPS:
            break
        assert c.summary is not None
        group = c.summary.group
        slow = check_slo(
            group,
            j,
            c.rollout,
            c.train,
            switch_overhead_s=switch,
            slo_margin=req.slo_margin,
            tight_slack=req.tight_slack,
        )
        if slow is None:
            continue
        if group.id not in before:
            before[group.id] = members_remaining_cost(group.members, price, progress, **cost)
        after = members_remaining_cost(
            group.members + (Member(j, c.rollout, c.train),), price, progress, **cost
        )
        if after - before[group.id] < best_value - EPS:
            best, best_value = (c, slow), after - before[group.id]
    return best


def random_jobs(rng: random.Random, n: int) -> list[JobProfile]:
    out = []
    for i in range(n):
        roll = rng.uniform(40, 400)
        train = rng.uniform(30, 300)
        out.append(
            job(
                f"j{i}",
                roll,
                train,
                slo=rng.choice((1.1, 1.3, 1.5, 1.8, 2.0)),
                mem=rng.choice((300, 700, 1200)),
                rollout_gpus=8 * rng.choice((1, 1, 2)),
                iterations=rng.choice((5, 50, 400)),
                roll_min=roll * rng.uniform(0.5, 1.0),
                train_min=train * rng.uniform(0.5, 1.0),
            )
        )
    return out


def packed(spec: ClusterSpec, jobs: list[JobProfile]) -> ClusterState:
    """Place `jobs` one by one (expected cost, no saturation prune); those that fit stay."""
    state: ClusterState = empty_state(spec)
    for i, j in enumerate(jobs):
        res = place(j, state, objective="expected", prune_saturated=False)
        if res.status is PlacementStatus.FIT and res.placement is not None:
            state = apply_placement(state, j, res.placement, group_id=f"g{i}")
    return state


# `choose_by_expected_cost`'s arguments, as a choice function of a test is given them
ChoiceFn = Callable[
    [Request, Sequence[GroupSummary], Mapping[str, JobProgress], dict[str, Any]], Choice | None
]


def expected_choices(
    monkeypatch: pytest.MonkeyPatch,
    jobs: Sequence[JobProfile],
    *,
    lone: Callable[[JobProfile], float] | None,
    mine: ChoiceFn,
    other: ChoiceFn,
    advance: Callable[[Mapping[str, JobProgress]], dict[str, JobProgress]],
) -> list[tuple[Choice | None, Choice | None]]:
    """Place `jobs` one by one on an empty `SPEC` cluster with the expected-cost objective,
    each decision made by `mine` (the one placed) and by `other`; return the pairs. After
    each placement the jobs placed before advance (`advance`, a new mapping: a pass's
    progress is its own) and the new one starts."""
    state: ClusterState = empty_state(SPEC)
    progress: dict[str, JobProgress] = {}
    seen: list[tuple[Choice | None, Choice | None]] = []

    def both(
        req: Request,
        summaries: Sequence[GroupSummary],
        progress: Mapping[str, JobProgress],
        *,
        colocated_factor: float | None = None,
        lone_restart_s: Callable[[JobProfile], float] | None = None,
    ) -> Choice | None:
        kw: dict[str, Any] = {
            "colocated_factor": colocated_factor,
            "lone_restart_s": lone_restart_s,
        }
        chosen = mine(req, summaries, progress, kw)
        seen.append((chosen, other(req, summaries, progress, kw)))
        return chosen

    monkeypatch.setattr("scheduler.planner.choose_by_expected_cost", both)
    for j in jobs:
        res = place(
            j, state, objective="expected", progress=progress, prune_saturated=False,
            lone_restart_s=lone,
        )  # fmt: skip
        if res.status is PlacementStatus.FIT and res.placement is not None:
            state = apply_placement(state, j, res.placement, group_id=f"g{len(seen)}")
            progress = advance(progress)
            progress[j.id] = JobProgress(0.0)
    return seen


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("lone", [None, restart_seconds])
def test_the_expected_cost_choice_is_the_reference_choice(
    seed: int, lone: Callable[[JobProfile], float] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = expected_choices(
        monkeypatch,
        random_jobs(random.Random(seed), 40),
        lone=lone,
        mine=lambda req, summaries, progress, kw: objective_module.choose_by_expected_cost(
            req, summaries, progress, **kw
        ),
        other=lambda req, summaries, progress, kw: reference_choose(
            req, summaries, progress, kw["lone_restart_s"]
        ),
        advance=lambda progress: {  # the others advance
            m: replace(p, iterations_done=p.iterations_done + 1) for m, p in progress.items()
        },
    )
    assert len(seen) == 40
    for mine, ref in seen:
        assert mine == ref
    joined = [c for c, _ in (m for m, _ in seen if m is not None) if c.summary is not None]
    assert joined  # some jobs joined a group: the candidates' costs were compared
    assert any(m is None for m, _ in seen)  # and the pools ran out


def reference_fit(free: Sequence[Node], mem: float) -> list[Node]:
    return [n for n in free if n.host_mem_gb + EPS >= mem]


@pytest.mark.parametrize("seed", range(5))
def test_the_lazy_free_pool_offers_the_nodes_the_whole_list_did(seed: int) -> None:
    rng = random.Random(seed)
    spec = replace(SPEC, rollout=replace(SPEC.rollout, nodes=40))
    nodes = [
        Node(f"h20-{i}", Pool.ROLLOUT, "H20", 8, rng.choice((512.0, 1024.0, 2048.0)), 14.8)
        for i in range(40)
    ]
    for mem in (300.0, 600.0, 1024.0, 1500.0, 3000.0):
        pool = FreePool(
            spec=spec, pool=Pool.ROLLOUT, size=40, free=nodes, in_use=lambda _: False, mem=mem
        )
        want = reference_fit(nodes, mem)
        counts = [rng.randint(1, 45) for _ in range(6)]
        for count in counts:
            names = pool.take(count)
            ref = [n.name for n in want[:count]] if len(want) >= count else None
            assert names == ref
            if names is not None:
                assert pool.cost(names) == sum(n.price_per_hour for n in want[:count])
        assert pool.fit == want
        assert pool.price == {n.name: n.price_per_hour for n in want}
        for count in counts:  # asked again (each count's answer is kept): the same, unshared
            names = pool.take(count)
            assert names == ([n.name for n in want[:count]] if len(want) >= count else None)
            if names is not None:
                names.append("mutated")
                assert pool.take(count) == [n.name for n in want[:count]]


def test_the_residency_count_by_bisection_is_the_count_of_big_enough_nodes() -> None:
    rng = random.Random(7)
    spec = replace(SPEC, rollout=replace(SPEC.rollout, nodes=30))
    mems = [rng.choice((256.0, 512.0, 1024.0, 2048.0)) for _ in range(30)]
    nodes = tuple(
        Node(f"h20-{i}", Pool.ROLLOUT, "H20", 8, m, 14.8) for i, m in enumerate(mems)
    ) + tuple(Node(f"h800-{i}", Pool.TRAIN, "H800", 8, 2048.0, 42.2) for i in range(10))
    index = index_nodes(nodes)
    for need_nodes in (1, 3, 8, 20, 30):
        for mem in (200.0, 256.0, 256.0 - 1e-10, 512.0, 1000.0, 2048.0):
            j = job("x", 100, 100, mem=mem, rollout_gpus=8 * need_nodes)
            big = sum(1 for m in mems if m + EPS >= mem)
            reason = infeasible_reason(j, spec, index)
            if mem > 2048.0 + EPS or big >= need_nodes:
                assert reason is None
            else:
                assert reason is not None and f"the rollout pool has {big}" in reason


def test_a_member_at_expected_durations_is_the_replaced_profile() -> None:
    rng = random.Random(3)
    for j in random_jobs(rng, 20):
        j = replace(j, t_sync_s=rng.choice((0.0, 4.5)), observed_solo_s=rng.choice((None, 300.0)))
        m = Member(j, ("h20-0",), ("h800-0",))
        want = replace(
            m,
            job=replace(
                j,
                t_roll_max_s=objective_module.expected_roll_s(j),
                t_train_max_s=objective_module.expected_train_s(j),
            ),
        )
        made = objective_module._Made()
        assert objective_module._expected(m) == want
        assert objective_module._expected(m, made) == want
        assert objective_module._expected(m, made) is made.expected[id(m)]  # made once
        # the memo key's part of the profile: what the recursion reads of `want`
        part = (want.job.t_roll_max_s, want.job.t_train_max_s, j.t_sync_s, j.switch_s)
        assert objective_module._profile_key(m, made) == part
        assert objective_module._profile_key(m, made) is made.keys[id(m)]


def asked_groups(patch: pytest.MonkeyPatch) -> list[GroupSummary]:
    """Return the list of the groups `algorithm1.GroupOptions` is asked about from now."""
    asked: list[GroupSummary] = []

    class Counted(algorithm1.GroupOptions):
        __slots__ = ()

        def __init__(self, s: GroupSummary, req: Request, *, early: bool = False) -> None:
            asked.append(s)
            super().__init__(s, req, early=early)

    patch.setattr(algorithm1, "GroupOptions", Counted)
    return asked


def plain_bounds(patch: pytest.MonkeyPatch) -> None:
    """Make `candidates` rule joins out on the group's SLO window alone, as it first did:
    without the join allowance (`algorithm1.ruled_out`) and the switches
    (`algorithm1.switched_bound`), so the SLO check sees the joins they would drop."""
    patch.setattr(algorithm1, "ruled_out", lambda job, t, tolerance: t > tolerance)
    patch.setattr(algorithm1, "switched_bound", lambda *args: float("-inf"))


@pytest.mark.parametrize("seed", range(4))
def test_the_join_bounds_drop_only_joins_the_slo_check_refuses(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `GroupOptions` and the candidates rule a join out on lower bounds of its worst-case
    # iteration time: with the joiner's join allowance (`join_window_holds`) and with the
    # switches its shared training nodes force (`switched_bound`). Every join they drop
    # must be one the SLO check refuses, and the rest stay in their order; the vectorised
    # bounds (the same bounds over every group at once) leave the same candidates as the
    # loop, asking `GroupOptions` about fewer groups
    rng = random.Random(seed)
    big = replace(
        SPEC, rollout=replace(SPEC.rollout, nodes=60), train=replace(SPEC.train, nodes=60)
    )
    tight = [replace(j, slo=rng.choice((1.0, 1.02, 1.1, 1.5))) for j in random_jobs(rng, 20)]
    state = packed(big, tight)
    index = planner_index(state)
    by_allowance = by_switches = admitted = spared = by_floor = 0
    asked = asked_groups(monkeypatch)  # the groups `GroupOptions` is asked about
    for j in random_jobs(random.Random(seed + 200), 40):
        j = replace(j, id=f"new-{j.id}", slo=rng.choice((1.0, 1.02, 1.1, 1.5)))
        plain = _request(
            j, state, index, max_group_size=4, prune_saturated=False, adm=ALGORITHM1.admission
        )
        plain = replace(plain, bounds=None)
        with monkeypatch.context() as patch:
            plain_bounds(patch)
            every = candidates(replace(plain, pools=_pools(plain)), index.summaries)
        with monkeypatch.context() as patch:
            patch.setattr(algorithm1, "switched_bound", lambda *args: float("-inf"))
            allowed = candidates(replace(plain, pools=_pools(plain)), index.summaries)
        asked.clear()
        kept = candidates(replace(plain, pools=_pools(plain)), index.summaries)
        looped = len(asked)
        fast = replace(plain, bounds=GroupBounds.of(index.summaries), pools=_pools(plain))
        asked.clear()
        assert candidates(fast, index.summaries) == kept
        spared += looped - len(asked)
        quick = len(asked)
        with monkeypatch.context() as patch:  # (the switches' bound alone, left out)
            patch.setattr(
                algorithm1, "switched_floor", lambda req, b: np.full(b.rows.shape[1], -np.inf)
            )
            asked.clear()
            assert candidates(replace(fast, pools=_pools(plain)), index.summaries) == kept
            by_floor += len(asked) - quick
        assert [c for c in every if c in allowed] == allowed
        assert [c for c in allowed if c in kept] == kept
        for c in every:
            assert c.summary is not None
            slow = check_slo(
                c.summary.group,
                j,
                c.rollout,
                c.train,
                switch_overhead_s=plain.switch_overhead_s,
                slo_margin=plain.slo_margin,
                tight_slack=plain.tight_slack,
            )
            admitted += slow is not None
            if c not in allowed:
                by_allowance += 1
                assert slow is None
            elif c not in kept:
                by_switches += 1
                assert slow is None
    assert by_allowance and by_switches and admitted  # every side was exercised
    assert spared > 0  # the vectorised bounds (`GroupBounds`) dropped groups up front
    assert by_floor > 0  # ... the switches' among them (`switched_floor`)


@pytest.mark.parametrize("seed", range(4))
def test_the_worst_case_half_of_the_slo_check_refuses_only_what_the_check_refuses(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # choose_by_expected_cost drops a candidate on `worst_case_holds` before its costs:
    # that must refuse exactly the joins whose whole check fails on the worst case, and
    # the check given those worst-case times (`joined_worst_case`, kept per group summary)
    # must answer as it does alone (the joins the candidates' own bounds rule out first
    # are asked too: `plain_bounds`)
    plain_bounds(monkeypatch)
    rng = random.Random(seed)
    # room left on both pools: the new jobs have groups to join and nodes to scale onto
    big = replace(
        SPEC, rollout=replace(SPEC.rollout, nodes=60), train=replace(SPEC.train, nodes=60)
    )
    state = packed(big, random_jobs(rng, 15))
    index = planner_index(state)
    refused = held = admitted = 0  # (admitted: by the whole check)
    for j in random_jobs(random.Random(seed + 100), 30):
        j = replace(j, id=f"new-{j.id}")
        req = _request(
            j, state, index, max_group_size=4, prune_saturated=False, adm=ALGORITHM1.admission
        )
        for c in candidates(req, index.summaries):
            assert c.summary is not None
            members = c.summary.group.members + (Member(j, c.rollout, c.train),)
            worst = worst_case_times(members, switch_overhead_s=req.switch_overhead_s)
            group, switch, margin = c.summary.group, req.switch_overhead_s, req.slo_margin
            whole = check_slo(
                group, j, c.rollout, c.train, switch_overhead_s=switch, slo_margin=margin
            )
            given = check_slo(
                group,
                j,
                c.rollout,
                c.train,
                switch_overhead_s=switch,
                slo_margin=margin,
                worst_s=worst,
            )
            assert given == whole
            # kept on the group's summary: an alike joiner (its id, SLO and iterations are
            # not read) on another rollout node of the pool gets the same times
            assert joined_worst_case(c, members, switch_overhead_s=switch) == tuple(worst)
            alike = replace(j, id="alike", slo=j.slo + 0.3, iterations=j.iterations + 9)
            other = tuple(f"{x}-x" if x in c.new_nodes else x for x in c.rollout)
            moved = replace(c, rollout=other, new_nodes=tuple(f"{x}-x" for x in c.new_nodes))
            twin = c.summary.group.members + (Member(alike, other, c.train),)
            kept = len(c.summary.joined_worst)
            assert joined_worst_case(moved, twin, switch_overhead_s=switch) == tuple(worst)
            assert len(c.summary.joined_worst) == kept  # (the same entry answered)
            assert tuple(worst_case_times(twin, switch_overhead_s=switch)) == tuple(worst)
            admitted += whole is not None
            if worst_case_holds(members, worst):
                held += 1
            else:
                refused += 1
                assert whole is None
    assert refused and held > admitted > 0  # every side was exercised


@pytest.mark.parametrize("seed", range(4))
def test_the_vectorised_bounds_keep_every_candidate_on_a_full_rollout_pool(seed: int) -> None:
    # on a bounded rollout pool too small for the job's rollout, `candidates` drops the
    # groups whose least-loaded rollout node already breaks the bound: the candidates
    # are those of the one-by-one loop (no vectorised bounds)
    rng = random.Random(seed)
    spec = replace(
        SPEC, rollout=replace(SPEC.rollout, nodes=24), train=replace(SPEC.train, nodes=40)
    )
    state = packed(spec, random_jobs(rng, 40))
    index = planner_index(state)
    full = 0
    for j in random_jobs(random.Random(seed + 50), 40):
        j = replace(j, id=f"new-{j.id}")
        plain = _request(
            j, state, index, max_group_size=4, prune_saturated=False, adm=ALGORITHM1.admission
        )
        plain = replace(plain, bounds=None)
        fast = replace(plain, bounds=GroupBounds.of(index.summaries), pools=_pools(plain))
        assert candidates(fast, index.summaries) == candidates(plain, index.summaries)
        full += plain.pools[Pool.ROLLOUT].take(plain.n_roll) is None
    assert full  # the rollout pool ran out for some: the rollout bound was applied


def _pools(req: Request) -> dict[Pool, FreePool]:
    """Fresh free pools like `req`'s (a FreePool keeps what it was asked)."""
    return {
        p: FreePool(
            spec=f.spec, pool=p, size=f.size, free=f._free, in_use=f.in_use, mem=req.job.host_mem_gb
        )
        for p, f in req.pools.items()
    }


@pytest.mark.parametrize("tight", [None, 0.05])
def test_the_slo_check_until_broken_answers_as_the_whole_check(tight: float | None) -> None:
    # check_slo stops the expected half at the first member that breaks its SLO: the
    # same verdict, and when it holds the same times, as the check of every member
    rng = random.Random(11)
    verdicts = set()
    for _ in range(300):
        jobs = random_jobs(rng, rng.randint(2, 5))
        jobs = [replace(j, slo=rng.choice((1.002, 1.05, 1.3, 2.0, 3.0))) for j in jobs]
        shared = ("h800-0",)
        members = [Member(j, (f"h20-{rng.randint(0, 2)}",), shared) for j in jobs]
        whole = check_group(members, switch_overhead_s=2.0, tight_slack=tight)
        early = check_group(members, switch_overhead_s=2.0, tight_slack=tight, until_broken=True)
        assert early.ok == whole.ok
        assert early.worst_s == whole.worst_s
        if whole.ok:
            assert early == whole
        else:  # the members checked before the first broken one are the same
            assert early.held == whole.held[: len(early.held)]
            assert early.expected_s == whole.expected_s[: len(early.expected_s)]
        verdicts.add((whole.ok, bool(whole.expected_s)))
    assert verdicts == {(True, True), (False, True), (False, False)}  # every branch met


def test_a_profile_s_shape_is_every_field_but_its_iterations_in_order() -> None:
    base = replace(job("a", 100, 200), t_sync_s=3.0, switch_s=1.5, model="qwen-7b")
    names = [f.name for f in fields(base) if f.name != "iterations"]
    assert profile_shape(base) == tuple(getattr(base, f) for f in names)
    assert profile_shape(replace(base, iterations=base.iterations + 7)) == profile_shape(base)
    for name, value in (("slo", 1.7), ("t_sync_s", 4.0), ("switch_s", None), ("id", "b")):
        assert profile_shape(replace(base, **{name: value})) != profile_shape(base)
    # two members sharing a training node: the node labels, then each one's shape
    one = Member(base, ("r1",), ("t1",))
    two = Member(replace(base, id="b"), ("r2",), ("t1",))
    shape = members_shape([one, two])
    assert shape == ((0,), (1,), *profile_shape(base), (2,), (1,),
                     *profile_shape(two.job))  # fmt: skip
    renamed = [Member(one.job, ("x",), ("y",)), Member(two.job, ("z",), ("y",))]
    assert members_shape(renamed) == shape  # the nodes' names are not read


@pytest.mark.parametrize("rollout_nodes", [None, 60])
def test_one_join_request_asked_about_every_group_answers_as_a_fresh_one_each(
    rollout_nodes: int | None,
) -> None:
    # (admissible.admits_no_join asks one request about each group of the state)
    rng = random.Random(rollout_nodes or 0)
    spec = replace(SPEC, rollout=replace(SPEC.rollout, nodes=rollout_nodes))
    state = packed(spec, random_jobs(rng, 40))
    config = PlannerConfig()
    answers = []
    for j in random_jobs(random.Random(9), 12):
        j = replace(j, id=f"new-{j.id}")
        request = join_request(j, state, config=config)
        for s in planner_index(state).summaries:
            shared = admits_join(j, state, s, config=config, request=request)
            assert shared == admits_join(j, state, s, config=config)
            answers.append(shared)
    assert any(answers) and not all(answers)


def test_the_first_checks_of_a_few_groups_are_those_of_every_group_there() -> None:
    # (JoinFilter.passes_any reads the columns of the groups asked about alone)
    state = packed(SPEC, random_jobs(random.Random(3), 40))
    joinable = JoinFilter(state, PlannerConfig())
    ids = [g.id for g in state.groups]
    rng = random.Random(4)
    seen = set()
    for j in random_jobs(random.Random(5), 20):
        every = joinable._fits(j)
        for _ in range(10):
            at = sorted(rng.sample(range(len(ids)), rng.randint(1, 3)))
            assert list(joinable._fits(j, at)) == list(every[at])
            member = Member(j, ("r",), ("t",))
            asked = [ids[k] for k in at] + ["gone"]
            assert joinable.passes_any(member, asked) == bool(every[at].any())
            seen.add(bool(every[at].any()))
        # (may_join reads one group's first checks alone)
        member = Member(j, ("r",), ("t",))
        assert [joinable.may_join(member, g) for g in ids] == list(every)
        assert not joinable.may_join(member, "gone")
    assert seen == {True, False}


@pytest.mark.parametrize("seed", range(4))
def test_the_vectorised_first_steps_leave_the_candidates_of_the_loop(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `candidates` drops up front, in one vectorised pass, the groups `GroupOptions`'
    # first step (members, size, training nodes, rollout nodes, saturation) and its room
    # (`GroupBounds.train_mem` against the largest training node) would refuse: the same
    # candidates as the loop over every group, asking `GroupOptions` about fewer; a
    # training node cordoned or with less host memory only makes room scarcer
    rng = random.Random(seed)
    big = replace(
        SPEC, rollout=replace(SPEC.rollout, nodes=80), train=replace(SPEC.train, nodes=80)
    )
    jobs = [
        replace(j, train_gpus=8 * rng.choice((1, 1, 2, 3)), slo=rng.choice((1.5, 2.0, 3.0)))
        for j in random_jobs(rng, 40)
    ]
    state = packed(big, jobs)
    small = {x for g in state.groups for x in g.train_nodes[:1] if rng.random() < 0.3}
    nodes = tuple(replace(n, host_mem_gb=1500.0) if n.name in small else n for n in state.nodes)
    state = replace(state, nodes=nodes, planner_index=None)
    index = planner_index(state)
    asked = asked_groups(monkeypatch)
    spared = by_room = fit = 0
    for prune in (False, True):
        for j in random_jobs(random.Random(seed + 300), 30):
            j = replace(j, id=f"new-{j.id}", train_gpus=8 * rng.choice((1, 2, 3, 5)))
            plain = _request(
                j, state, index, max_group_size=3, prune_saturated=prune, adm=ALGORITHM1.admission
            )
            loop = replace(plain, bounds=None, pools=_pools(plain))
            asked.clear()
            kept = candidates(loop, index.summaries)
            looped = len(asked)
            fast = replace(plain, bounds=GroupBounds.of(index.summaries), pools=_pools(plain))
            asked.clear()
            assert candidates(fast, index.summaries) == kept
            spared += looped - len(asked)
            quick = len(asked)
            roomless = replace(fast, train_mem_max=None, pools=_pools(plain))
            asked.clear()
            assert candidates(roomless, index.summaries) == kept
            by_room += len(asked) - quick
            fit += len(kept)
    assert spared > 0 and by_room > 0 and fit > 0


def test_the_join_filters_columns_are_every_groups_first_checks() -> None:
    # JoinFilter reads its columns from the index's GroupBounds (carried by the
    # transitions): the same numbers as each summary's row (`_row`), on a state built
    # by placements and removals
    rng = random.Random(4)
    state = packed(SPEC, random_jobs(rng, 40))
    for j in [m.job for g in state.groups for m in g.members][1::4]:
        state, _ = remove_job(state, j.id)
    oks = []
    for config in (
        PlannerConfig(),
        PlannerConfig().with_(
            admission__prune_saturated=not PlannerConfig().admission.prune_saturated
        ),
        PlannerConfig().with_(admission__max_group_size=2),
    ):
        joinable = JoinFilter(state, config)
        rows = [joinable._row(s) for s in planner_index(state).summaries]
        columns = joinable._columns()
        for i, name in enumerate(("ok", "n_train", "t_cycle", "tolerance", "min_train", "scale")):
            assert np.array_equal(columns[name], [r[i] for r in rows], equal_nan=True), name
        oks += [r[0] for r in rows]
    assert not all(oks) and any(oks)
    assert any(s.t_load >= s.t_cycle for s in planner_index(state).summaries)  # saturated


@pytest.mark.parametrize("seed", range(3))
def test_the_options_kept_on_a_summary_give_the_candidates_of_the_loop(seed: int) -> None:
    # with a memo open, what a group offers a joiner but for its iterations is kept on the
    # group's summary (`kept_options`): the same candidates as the options made for the
    # decision alone (`early`: stopped at the first bound its iterations fail), for the
    # same profile at other iterations (the join allowance's bounds read them), and on a
    # later state whose nodes of the group changed (a cordon, less host memory: the kept
    # options are found again)
    rng = random.Random(seed)
    big = replace(
        SPEC, rollout=replace(SPEC.rollout, nodes=80), train=replace(SPEC.train, nodes=80)
    )
    state = packed(big, [replace(j, slo=rng.choice((1.1, 1.5, 2.0))) for j in random_jobs(rng, 40)])
    memo = LastingMemo()
    differ = kept_used = 0
    for round_ in range(5):
        if round_ == 3:  # the first group closes (the later ones a place earlier): its
            # nodes back in the free pools, new rollout nodes for the scalings
            for m in state.groups[0].members:
                state, _ = remove_job(state, m.job.id)
        elif round_ == 4:  # a new group (the others keep their places) takes free nodes
            lone = replace(random_jobs(rng, 1)[0], id="lone", rollout_gpus=16)
            res = place(lone, state, policy="solo-disagg")
            assert res.placement is not None
            state = apply_placement(state, lone, res.placement, group_id="lone")
        elif round_:  # the same groups (summaries), some of their nodes changed
            names = {x for g in state.groups for x in g.all_nodes if rng.random() < 0.2}
            nodes = tuple(
                replace(n, cordoned=round_ == 1, host_mem_gb=900.0) if n.name in names else n
                for n in state.nodes
            )
            state = replace(state, nodes=nodes)
        index = planner_index(state)
        for profile in random_jobs(random.Random(seed + 50), 12):
            for iterations in (1, 400, 2, 30, 4):
                j = replace(profile, id=f"new-{profile.id}", iterations=iterations, slo=1.3)
                req = _request(
                    j, state, index, max_group_size=4, prune_saturated=False,
                    adm=ALGORITHM1.admission,
                )  # fmt: skip
                loop = candidates(replace(req, pools=_pools(req)), index.summaries)
                with lasting(memo):
                    kept = candidates(replace(req, pools=_pools(req)), index.summaries)
                assert kept == loop
                kept_used += sum(len(s.joiner_options) for s in index.summaries) > 0
                differ += len(loop)
    assert differ > 0 and kept_used > 0
