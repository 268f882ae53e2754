"""Expected remaining cost of co-execution groups (issue 14 item 2).

Algorithm 1 ranks placements by the marginal $/h they add now. That does not see
what a placement does to the group's LIFE: packing a newcomer into a group whose
cycle is longer than its own adds $0/h today but slows the newcomer (and perhaps the
others), so the group's nodes are held longer. The expected remaining cost of a
group is the dollars its nodes will still cost until the last member pinned to each
node leaves, with the phases at their expected (not worst-case) durations:

1. every member runs in lock-step, one iteration per meta-iteration (round robin),
   so the members leave in the order of their remaining iterations;
2. between two departures the group runs at the steady meta-iteration of the members
   still in it (`steady_iteration_times` on expected durations);
3. a node is paid until the last member pinned to it leaves.

Expected phase durations are the mean of the profile's range (the trace format draws
each phase uniformly in [min, max]); `JobProgress` carries what the caller knows of a
job's run (admission time, iterations done, moves so far), so the same function
serves admission (a newcomer has done nothing) and consolidation.

With a memo open (scheduler.planner.memo; the simulator's policy), `choose_by_expected_cost`
keeps each group's walk of step 1-3 (`group_remaining_cost`: ERC(G) and each stretch's
meta-iteration, per group across passes while the group and its members' remaining
iterations are the same), evaluates a join from it (`join_remaining_cost`) and first bounds
the join from below (`join_floor`): the same walk with each stretch the newcomer is part of
at the greater of the group's stretch and the newcomer's own phases, since a member added
to the round never shortens it. A candidate whose floor cannot beat the best found is
dropped unevaluated; the choice is the same (issue 25 item 4).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.costs import SECONDS_PER_HOUR
from scheduler.meta_iteration import steady_iteration_times
from scheduler.model import Group, JobProfile, Member, Pool
from scheduler.planner.algorithm1 import Choice, Request, candidates, new_group_candidate
from scheduler.planner.colocated import colocated_candidate
from scheduler.planner.index import GroupSummary
from scheduler.planner.memo import cached, cached_for, in_scope, interned, keeping
from scheduler.planner.slo_checks import (
    EPS,
    joined_worst_case,
    keyed_check_slo,
    known_slo_check,
    slo_key,
    worst_case_holds,
)

# what the drawn solo time averages to: the SLO check's expectation (re-exported)
from scheduler.slo import expected_solo_s as expected_solo_s


@dataclass(frozen=True)
class JobProgress:
    """What the planner knows of a running job: its SLO clock and its position."""

    admitted_s: float  # first admission: the job's SLO is on (finish - this) / iterations
    iterations_done: int = 0
    moves: int = 0  # consolidation moves so far
    # the summed solo durations (rollout + training + sync) of the iterations done, as
    # they ran (the SLO reference's part that is known); None: not measured
    solo_s_done: float | None = None


def expected_roll_s(job: JobProfile) -> float:
    """Return the expected rollout duration: the mean of [t_roll_min_s, t_roll_max_s]."""
    return (job.roll_min + job.t_roll_max_s) / 2.0


def expected_train_s(job: JobProfile) -> float:
    """Return the expected training duration: the mean of [t_train_min_s, t_train_max_s]."""
    return (job.train_min + job.t_train_max_s) / 2.0


def colocated_expected_s(job: JobProfile, rollout_speed_factor: float) -> float:
    """Return the job's expected iteration alone on its training nodes (co-located)."""
    return rollout_speed_factor * expected_roll_s(job) + expected_train_s(job)


class _Made:
    """What one evaluation of a group's expected cost makes once per member and reads at
    every departure it walks through (by id of the member: the caller holds them): the
    member at expected durations, and its profile's part of the memo key."""

    __slots__ = ("expected", "keys")

    def __init__(self) -> None:
        self.expected: dict[int, Member] = {}
        self.keys: dict[int, tuple[float, float, float, float | None]] = {}


def _expected(member: Member, made: _Made | None = None) -> Member:
    """Return `member` with its phases at their expected durations (`made`: those made
    already, for a caller that asks for the same members again)."""
    if made is not None and (hit := made.expected.get(id(member))) is not None:
        return hit
    job = member.job
    exp = job.with_phase_times(
        t_roll_max_s=expected_roll_s(job), t_train_max_s=expected_train_s(job)
    )
    out = Member(exp, member.rollout_nodes, member.train_nodes)
    if made is not None:
        made.expected[id(member)] = out
    return out


def _profile_key(member: Member, made: _Made | None) -> tuple[float, float, float, float | None]:
    """Return what the recursion reads of the member's profile at expected durations."""
    if made is not None and (hit := made.keys.get(id(member))) is not None:
        return hit
    job = member.job
    out = (expected_roll_s(job), expected_train_s(job), job.t_sync_s, job.switch_s)
    if made is not None:
        made.keys[id(member)] = out
    return out


def expected_meta_s(
    members: Sequence[Member],
    *,
    switch_overhead_s: float,
    colocated_factor: float = 1.0,
    _made: _Made | None = None,
) -> float:
    """Return the steady meta-iteration of `members` with expected phase durations.

    A co-located member (no rollout nodes: it is alone) runs its rollout on its
    training nodes at `colocated_factor` x its rollout time.
    """
    if not members:
        return 0.0
    if len(members) == 1:
        job = members[0].job
        if not members[0].rollout_nodes:
            return colocated_expected_s(job, colocated_factor)
        return expected_solo_s(job)

    def compute() -> float:
        return max(
            steady_iteration_times(
                [_expected(m, _made) for m in members], switch_overhead_s=switch_overhead_s
            )
        )

    if not keeping():
        return compute()
    # a function of what the recursion reads of each member at its expected phases (kept
    # across passes for a caller with a lasting memo, scheduler.planner.memo): its nodes,
    # each as the order in which the members first name it (the recursion reads which
    # members share a node, not its name), and its profile's part
    label: dict[str, int] = {}
    nodes: list[tuple[int, ...]] = []
    for m in members:
        nodes.append(tuple([label.setdefault(x, len(label)) for x in m.rollout_nodes]))
        nodes.append(tuple([label.setdefault(x, len(label)) for x in m.train_nodes]))
    key = (tuple(nodes), tuple([_profile_key(m, _made) for m in members]), switch_overhead_s)
    return cached("expected_meta_s", key, compute, lasting=True)


def remaining_iterations(job: JobProfile, progress: Mapping[str, JobProgress]) -> int:
    """Return the iterations `job` still has to run (all of them if it has no progress)."""
    p = progress.get(job.id)
    return max(0, job.iterations - (p.iterations_done if p else 0))


def members_remaining_cost(
    members: Sequence[Member],
    price_per_hour: Mapping[str, float],
    progress: Mapping[str, JobProgress],
    *,
    switch_overhead_s: float,
    extra_s: Mapping[str, float] | None = None,
    colocated_factor: float = 1.0,
    lone_restart_s: Callable[[JobProfile], float] | None = None,
    lone_now: bool = False,
    joining: str | None = None,
    metas: dict[int, float] | None = None,
) -> float:
    """Return the expected dollars the nodes of `members` cost until each is released.

    `extra_s` adds seconds to a member's remaining run (a move's restart): it delays
    the release of that member's nodes. See the module docstring for the model.
    With `lone_restart_s` (a job's restart time) a member the others' departures will
    leave alone in the group is valued as consolidation treats it: alone for the
    ski-rental wait, then co-located after its restart, when that is cheaper.
    `metas`: the meta-iteration of the members from the i-th on in the order they leave,
    by i, read where known and filled where asked (`group_remaining_cost`'s, kept per
    group). Without it the value is memoised within a consolidation pass
    (scheduler.planner.memo).
    """

    def compute() -> float:
        left = _departure_order(members, progress, joining)
        made = _Made()  # what the departures read of each member, made once

        def meta_s(i: int) -> float:
            if metas is not None and (known := metas.get(i)) is not None:
                return known
            value = expected_meta_s(
                [m for _, m in left[i:]],
                switch_overhead_s=switch_overhead_s,
                colocated_factor=colocated_factor,
                _made=made,
            )
            if metas is not None:
                metas[i] = value
            return value

        return _departure_walk(
            left, price_per_hour, meta_s, extra_s=extra_s, colocated_factor=colocated_factor,
            lone_restart_s=lone_restart_s, lone_now=lone_now,
        )  # fmt: skip

    if metas is not None or not in_scope(progress):
        return compute()
    key = (
        interned(members),
        switch_overhead_s,
        tuple(sorted(extra_s.items())) if extra_s else (),
        colocated_factor,
        lone_restart_s,
        lone_now,
        joining,
    )
    return cached("members_remaining_cost", key, compute, progress=progress, reads_progress=True)


def _departure_order(
    members: Sequence[Member], progress: Mapping[str, JobProgress], joining: str | None
) -> list[tuple[int, Member]]:
    """Return the members with their remaining iterations in the order they leave (by
    remaining iterations, then position: the positions differ, so the members are never
    compared); `joining` names a newcomer, which has all its iterations to run."""
    left = sorted(
        [
            (
                m.job.iterations if m.job.id == joining else remaining_iterations(m.job, progress),
                i,
                m,
            )
            for i, m in enumerate(members)
        ]
    )
    return [(r, m) for r, _, m in left]


def _departure_walk(
    left: Sequence[tuple[int, Member]],
    price: Mapping[str, float],
    meta_s: Callable[[int], float],
    *,
    extra_s: Mapping[str, float] | None,
    colocated_factor: float,
    lone_restart_s: Callable[[JobProfile], float] | None,
    lone_now: bool,
) -> float:
    """Return the expected dollars of the nodes of the members `left` (in the order they
    leave, `_departure_order`) until each is released, the meta-iteration of the members
    from the i-th on being `meta_s(i)` (asked only for a stretch that runs iterations).

    Every release time grows with the `meta_s` values and nothing else read here depends
    on them (a lone member's ski-rental choice does not read the clock), so a `meta_s`
    below the true one gives a value below the true one: `choose_by_expected_cost`'s floor.
    """
    extra = extra_s or {}
    release: dict[str, float] = {}
    now = 0.0
    done_iterations = 0
    last = len(left) - 1
    # (the position of a member the others leave alone, valued by `_lone_release`; -1: none)
    lone_at = last if lone_restart_s is not None and (last > 0 or lone_now) else -1
    for i, (remaining, member) in enumerate(left):
        if i == lone_at and member.rollout_nodes and remaining > done_iterations:
            assert lone_restart_s is not None
            lone = _lone_release(
                member,
                remaining - done_iterations,
                price,
                now=now,
                extra_s=extra.get(member.job.id, 0.0),
                restart_s=lone_restart_s(member.job),
                colocated_factor=colocated_factor,
            )
            if lone is not None:
                for x, t in lone.items():
                    release[x] = max(release.get(x, 0.0), t)
                break
        if remaining > done_iterations:
            now += (remaining - done_iterations) * meta_s(i)
            done_iterations = remaining
        # (`now + 0.0` is `now`: it is never -0.0, a sum from 0.0 of products of
        # non-negative numbers)
        leave = now + extra.get(member.job.id, 0.0) if extra else now
        for x in member.rollout_nodes:
            release[x] = max(release.get(x, 0.0), leave)
        for x in member.train_nodes:
            release[x] = max(release.get(x, 0.0), leave)
    return sum(price[x] * t for x, t in release.items()) / SECONDS_PER_HOUR


def _lone_release(
    member: Member,
    iterations: int,
    price: Mapping[str, float],
    *,
    now: float,
    extra_s: float,
    restart_s: float,
    colocated_factor: float,
) -> dict[str, float] | None:
    """Return when a member left alone releases its nodes if it goes co-located after
    the ski-rental wait, or None when staying alone is as cheap."""
    job = member.job
    e, e_co = expected_solo_s(job), colocated_expected_s(job, colocated_factor)
    # (typed sums: mypyc adds two untyped `sum`s as ints, scheduler.compiled)
    p_co: float = sum(price[x] for x in member.train_nodes)
    p_group: float = p_co + sum(price[x] for x in member.rollout_nodes)
    rent = p_group - p_co * e_co / e
    if rent <= 0:
        return None
    wait = restart_s * p_co / rent
    if wait >= iterations * e:
        return None
    end = now + wait + restart_s + (iterations - wait / e) * e_co + extra_s
    stay = iterations * e * p_group
    go = wait * p_group + (end - now - wait) * p_co
    if go >= stay:
        return None
    out = {x: now + wait for x in member.rollout_nodes}
    out.update({x: end for x in member.train_nodes})
    return out


def _phases_s(job: JobProfile) -> float:
    """Return the job's expected rollout + training + sync: what one of its iterations
    takes at least in a group of two or more at expected durations (its phases run one
    after the other; other members and switches only delay them)."""
    return expected_roll_s(job) + expected_train_s(job) + job.t_sync_s


class GroupCost:
    """A group's expected remaining cost (`value`) and what a floor of a join reads of its
    departure walk: the members in the order they leave with their remaining iterations,
    the meta-iteration of the members from the k-th on where the walk computed it
    (`exact`), and `with_one[k]`, a lower bound of the meta-iteration of the members from
    the k-th on with one more member among them (0 past the last)."""

    __slots__ = ("exact", "group", "left", "remaining", "value", "with_one")

    def __init__(
        self,
        group: Group,
        value: float,
        left: list[tuple[int, Member]],
        exact: dict[int, float],
    ) -> None:
        self.group = group  # (kept: the memo's stamp holds its id)
        self.value = value
        self.left = left
        self.remaining = [r for r, _ in left]
        self.exact = exact
        n = len(left)
        with_one = [0.0] * (n + 1)
        for k in range(n - 1, -1, -1):
            # adding a member never shortens the meta-iteration of the others (its phases
            # join the round and only delay theirs), so the members from the k-th on with
            # one more run at least at their own meta-iteration, and at least at the one
            # of the members after the k-th; one member: its phases at least (its own
            # `expected_meta_s` may be its observed solo time, which a pair does not read)
            own = exact.get(k, 0.0) if n - k > 1 else _phases_s(left[k][1].job)
            with_one[k] = max(own, with_one[k + 1])
        self.with_one = with_one


def group_remaining_cost(
    group: Group,
    price: Mapping[str, float],
    progress: Mapping[str, JobProgress],
    *,
    switch_overhead_s: float,
    colocated_factor: float = 1.0,
    lone_restart_s: Callable[[JobProfile], float] | None = None,
) -> GroupCost:
    """Return `members_remaining_cost(group.members, ...)` with its departure walk.

    Kept per group across passes while the group, its members' remaining iterations and
    its nodes' prices are the same (`memo.cached_for`; a group nobody joined or left is
    asked about again at every departure)."""
    members = group.members
    # (the value keeps the group, so its id is not another group's while the value is kept)
    fixed = (id(group), switch_overhead_s, colocated_factor, lone_restart_s)

    def stamp() -> tuple[Any, ...]:
        return (
            tuple([remaining_iterations(m.job, progress) for m in members]),
            tuple([price[x] for m in members for x in m.rollout_nodes + m.train_nodes]),
        )

    def compute(prior: GroupCost | None) -> GroupCost:
        left = _departure_order(members, progress, None)
        exact: dict[int, float] = {}
        if prior is not None:
            # the meta-iteration of the members from the i-th on reads those members
            # alone: where the order they leave in ends as before, it is the one before
            i = len(left) - 1
            while i >= 0 and left[i][1] is prior.left[i][1]:
                if i in prior.exact:
                    exact[i] = prior.exact[i]
                i -= 1
        value = members_remaining_cost(
            members, price, progress, switch_overhead_s=switch_overhead_s,
            colocated_factor=colocated_factor, lone_restart_s=lone_restart_s, metas=exact,
        )  # fmt: skip
        return GroupCost(group, value, left, exact)

    return cached_for("group_remaining_cost", group.id, fixed, stamp, compute, progress=progress)


# (a floor below the true value by rounding only would skip a candidate whose value ties
# the best's within EPS: the floor must clear the margin by this much of itself)
FLOOR_SLACK = 1e-9


def _joined_order(cost: GroupCost, newcomer: Member) -> tuple[list[tuple[int, Member]], int]:
    """Return the group's members and `newcomer` (all its iterations to run) in the order
    they leave (`_departure_order` of the joined group) and the newcomer's position: it
    is the last member, so it leaves after every member leaving with it."""
    iterations = newcomer.job.iterations
    p = bisect_right(cost.remaining, iterations)
    return [*cost.left[:p], (iterations, newcomer), *cost.left[p:]], p


def join_remaining_cost(
    cost: GroupCost,
    newcomer: Member,
    price: Mapping[str, float],
    *,
    switch_overhead_s: float,
    colocated_factor: float = 1.0,
    lone_restart_s: Callable[[JobProfile], float] | None = None,
) -> float:
    """Return `members_remaining_cost(group.members + (newcomer,), ...,
    joining=newcomer.job.id)` for the group of `cost` (`group_remaining_cost`): the same
    walk, the meta-iterations after the newcomer has left being the group's own, known."""
    walk, p = _joined_order(cost, newcomer)
    exact = cost.exact
    made = _Made()

    def meta_s(i: int) -> float:
        if i > p and (known := exact.get(i - 1)) is not None:
            return known  # the group's own members from the (i-1)-th on
        return expected_meta_s(
            [m for _, m in walk[i:]],
            switch_overhead_s=switch_overhead_s,
            colocated_factor=colocated_factor,
            _made=made,
        )

    return _departure_walk(
        walk, price, meta_s, extra_s=None, colocated_factor=colocated_factor,
        lone_restart_s=lone_restart_s, lone_now=False,
    )  # fmt: skip


def join_floor(
    cost: GroupCost,
    newcomer: Member,
    price: Mapping[str, float],
    *,
    switch_overhead_s: float,
    colocated_factor: float = 1.0,
    lone_restart_s: Callable[[JobProfile], float] | None = None,
) -> float:
    """Return a lower bound of `join_remaining_cost`: the same departure walk with each
    meta-iteration the newcomer is part of replaced by `GroupCost.with_one`'s bound
    (or its phases', when it is higher), the others being the group's own."""
    walk, p = _joined_order(cost, newcomer)
    n = len(cost.left)
    own = _phases_s(newcomer.job)
    with_one, exact = cost.with_one, cost.exact

    def meta_s(i: int) -> float:
        if i > p:  # the newcomer has left: the group's own members from the (i-1)-th on
            return exact.get(i - 1, 0.0)
        if i == n:  # the newcomer alone
            return expected_meta_s(
                [newcomer], switch_overhead_s=switch_overhead_s, colocated_factor=colocated_factor
            )
        return max(with_one[i], own)

    return _departure_walk(
        walk, price, meta_s, extra_s=None, colocated_factor=colocated_factor,
        lone_restart_s=lone_restart_s, lone_now=False,
    )  # fmt: skip


# ---------------------------------------------------------------------------
# Admission by expected remaining cost (issue 14 item 2)
# ---------------------------------------------------------------------------


def choose_by_expected_cost(
    req: Request,
    summaries: Sequence[GroupSummary],
    progress: Mapping[str, JobProgress],
    *,
    colocated_factor: float | None = None,
    lone_restart_s: Callable[[JobProfile], float] | None = None,
) -> Choice | None:
    """Return the admissible placement that adds the least expected remaining cost.

    The candidates are Algorithm 1's (direct packing, rollout scaling, a new group)
    with its SLO check; only the ranking differs: each is scored by
    ERC(G + j) - ERC(G) instead of the marginal $/h now (a new group: the job's nodes
    for its expected solo life). Adding a member never shortens anyone's life nor
    frees a node, so a candidate adds at least its new nodes held for the job's
    expected solo life: candidates are tried in that lower bound's order and the
    search stops when it cannot beat the best found. With a memo open, a candidate whose
    floor (`join_floor`, tighter: the group's own stretches too) cannot beat it is
    skipped as well (module docstring). With `colocated_factor` (the training type's
    rollout speed factor) the co-located placement competes too, at its nodes for its
    expected co-located life.
    """
    job = req.job
    life_h = job.iterations * expected_solo_s(job) / SECONDS_PER_HOUR
    new = new_group_candidate(req)
    best: Choice | None = new
    best_value = new[0].delta * life_h if new is not None else float("inf")
    if colocated_factor is not None:
        alone = colocated_candidate(req, colocated_factor)
        if alone is not None:
            co_life_h = (
                job.iterations * colocated_expected_s(job, colocated_factor) / SECONDS_PER_HOUR
            )
            if alone[0].delta * co_life_h < best_value - EPS:
                best, best_value = alone, alone[0].delta * co_life_h
    # every node's price, and the rollout names the pool minted (an unbounded pool)
    nodes_price = req.node_prices
    if nodes_price is None:
        nodes_price = {x: n.price_per_hour for x, n in req.nodes.items()}
    minted = req.pools[Pool.ROLLOUT].minted_price
    price: Mapping[str, float] = {**nodes_price, **minted} if minted else nodes_price
    factor = req.pools[Pool.TRAIN].spec.train.rollout_speed_factor
    before: dict[str, float] = {}
    switch = req.switch_overhead_s
    # (the SLO rule both SLO-check calls below apply)
    slo_rule: dict[str, Any] = {
        "switch_overhead_s": switch,
        "slo_margin": req.slo_margin,
        "tight_slack": req.tight_slack,
    }
    # With a memo open, each group's own cost and departure walk is kept (across passes
    # for a lasting memo: `group_remaining_cost`) and a candidate whose floor
    # (`join_floor`) cannot beat the best found is dropped before its evaluation.
    keep = keeping()
    cost: dict[str, Any] = {
        "switch_overhead_s": switch,
        "colocated_factor": factor,
        "lone_restart_s": lone_restart_s,
    }
    cands = sorted(candidates(req, summaries), key=lambda c: (c.delta, c.lower_bound, c.order))
    # each group's own cost, asked once per decision (a group offers several candidates;
    # the same arguments, the same value)
    owns: dict[str, GroupCost] = {}
    for c in cands:
        if c.delta * life_h >= best_value - EPS:
            break
        assert c.summary is not None
        group = c.summary.group
        newcomer = Member(job, c.rollout, c.train)
        joined = group.members + (newcomer,)
        own: GroupCost | None = None
        if keep:
            own = owns.get(group.id)
            if own is None:
                own = owns[group.id] = group_remaining_cost(group, price, progress, **cost)
            if best is not None:
                floor = join_floor(own, newcomer, price, **cost)
                if floor - own.value >= best_value - EPS + FLOOR_SLACK * max(1.0, abs(floor)):
                    continue  # its value could not beat the best's either
        worst: tuple[float, ...] | None = None
        key: tuple[Any, ...] | None = None  # the SLO check's memo key, built once
        if not keep:
            # the worst-case half of the SLO check first: one recursion, and most joins
            # that pass the cheap bounds fail it (an inadmissible candidate then costs no
            # expected-cost evaluation); with a memo open the whole check is kept
            # (check_slo's key) and the order below is the cheaper one
            worst = joined_worst_case(c, joined, switch_overhead_s=switch)
            if not worst_case_holds(joined, worst):
                continue
        slow: dict[str, float] | None = None
        if worst is None:
            # the SLO check kept from an earlier decision: an inadmissible candidate costs
            # no expected-cost evaluation (it could not be chosen either way)
            key = slo_key(joined, **slo_rule)
            known, slow = known_slo_check(joined, key)
            if known and slow is None:
                continue
        if best is None and slow is None:
            # nothing admissible yet (no new group either): any admissible candidate wins,
            # so the (cheaper to fail) SLO check goes first and an inadmissible one costs
            # no expected-cost evaluation (the common case of a job that waits)
            slow = keyed_check_slo(joined, key, worst_s=worst, **slo_rule)
            if slow is None:
                continue
        if own is not None:
            before[group.id] = own.value
        elif group.id not in before:
            before[group.id] = members_remaining_cost(
                group.members,
                price,
                progress,
                switch_overhead_s=switch,
                colocated_factor=factor,
                lone_restart_s=lone_restart_s,
            )
        if own is not None:
            after = join_remaining_cost(own, newcomer, price, **cost)
        else:
            after = members_remaining_cost(
                joined,
                price,
                progress,
                switch_overhead_s=switch,
                colocated_factor=factor,
                lone_restart_s=lone_restart_s,
                joining=job.id,
            )
        value = after - before[group.id]
        if value >= best_value - EPS:
            continue  # not better, admissible or not: the (dearer) SLO check is not needed
        if slow is None:
            slow = keyed_check_slo(joined, key, worst_s=worst, **slo_rule)
        if slow is not None:
            best, best_value = (c, slow), value
    return best
