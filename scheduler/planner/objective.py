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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.costs import SECONDS_PER_HOUR
from scheduler.meta_iteration import steady_iteration_times
from scheduler.model import JobProfile, Member, Pool
from scheduler.planner.algorithm1 import (
    EPS,
    Choice,
    Request,
    candidates,
    check_slo,
    joined_worst_case,
    known_check_slo,
    new_group_candidate,
    worst_case_holds,
)
from scheduler.planner.colocated import colocated_candidate
from scheduler.planner.index import GroupSummary
from scheduler.planner.memo import cached, in_scope, interned, keeping

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
) -> float:
    """Return the expected dollars the nodes of `members` cost until each is released.

    `extra_s` adds seconds to a member's remaining run (a move's restart): it delays
    the release of that member's nodes. See the module docstring for the model.
    With `lone_restart_s` (a job's restart time) a member the others' departures will
    leave alone in the group is valued as consolidation treats it: alone for the
    ski-rental wait, then co-located after its restart, when that is cheaper.
    Memoised within a consolidation pass (scheduler.planner.memo).
    """

    def compute() -> float:
        return _members_remaining_cost(
            members, price_per_hour, progress, switch_overhead_s=switch_overhead_s,
            extra_s=extra_s, colocated_factor=colocated_factor,
            lone_restart_s=lone_restart_s, lone_now=lone_now, joining=joining,
        )  # fmt: skip

    if not in_scope(progress):
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


def _members_remaining_cost(
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
) -> float:
    # (by remaining iterations, then position: the positions differ, so the members are
    # never compared)
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
    extra = extra_s or {}
    made = _Made()  # what the departures below read of each member, made once
    release: dict[str, float] = {}
    now = 0.0
    done_iterations = 0
    active = [m for _, _, m in left]
    for remaining, _, member in left:
        if (
            lone_restart_s is not None
            and (len(members) > 1 or lone_now)
            and len(active) == 1
            and member.rollout_nodes
            and remaining > done_iterations
        ):
            lone = _lone_release(
                member,
                remaining - done_iterations,
                price_per_hour,
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
            now += (remaining - done_iterations) * expected_meta_s(
                active,
                switch_overhead_s=switch_overhead_s,
                colocated_factor=colocated_factor,
                _made=made,
            )
            done_iterations = remaining
        leave = now + extra.get(member.job.id, 0.0)
        for x in member.rollout_nodes + member.train_nodes:
            release[x] = max(release.get(x, 0.0), leave)
        active = [m for m in active if m is not member]
    return sum(price_per_hour[x] * t for x, t in release.items()) / SECONDS_PER_HOUR


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
    p_co = sum(price[x] for x in member.train_nodes)
    p_group = p_co + sum(price[x] for x in member.rollout_nodes)
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
    search stops when it cannot beat the best found. With `colocated_factor` (the
    training type's rollout speed factor) the co-located placement competes too, at
    its nodes for its expected co-located life.
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
    cands = sorted(candidates(req, summaries), key=lambda c: (c.delta, c.lower_bound, c.order))
    for c in cands:
        if c.delta * life_h >= best_value - EPS:
            break
        assert c.summary is not None
        group = c.summary.group
        joined = group.members + (Member(job, c.rollout, c.train),)
        worst: tuple[float, ...] | None = None
        if not keeping():
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
            known, slow = known_check_slo(group, job, c.rollout, c.train, **slo_rule)
            if known and slow is None:
                continue
        if best is None and slow is None:
            # nothing admissible yet (no new group either): any admissible candidate wins,
            # so the (cheaper to fail) SLO check goes first and an inadmissible one costs
            # no expected-cost evaluation (the common case of a job that waits)
            slow = check_slo(group, job, c.rollout, c.train, worst_s=worst, **slo_rule)
            if slow is None:
                continue
        if group.id not in before:
            before[group.id] = members_remaining_cost(
                group.members,
                price,
                progress,
                switch_overhead_s=switch,
                colocated_factor=factor,
                lone_restart_s=lone_restart_s,
            )
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
            slow = check_slo(
                group,
                job,
                c.rollout,
                c.train,
                switch_overhead_s=switch,
                slo_margin=req.slo_margin,
                tight_slack=req.tight_slack,
                worst_s=worst,
            )
        if slow is not None:
            best, best_value = (c, slow), value
    return best
