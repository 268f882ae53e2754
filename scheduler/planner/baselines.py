"""The paper's simulation baselines: `random` and `greedy-most-idle` (and `solo-disagg`).

A group qualifies when it is not full, runs on the job's clock, has the job's
training nodes with residency room, and enough rollout nodes with room (or free ones
to add); SLOs are ignored. `random` picks a qualifying group and its nodes with the
caller's rng; `greedy-most-idle` the group with the highest idle share
(1 - summed phase time / (nodes x max(T_cycle, T_load))), then its least-loaded
nodes. Both open a new group when no group qualifies; `solo-disagg` always does
(that is `algorithm1.new_group_candidate` alone).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.meta_iteration import steady_iteration_times
from scheduler.model import Group, JobProfile, Member, Pool, Strategy
from scheduler.planner.algorithm1 import (
    Candidate,
    Choice,
    Request,
    least_loaded,
    new_group_candidate,
)
from scheduler.planner.index import GroupSummary


@dataclass(frozen=True, kw_only=True)
class _Qualified:
    idle: float  # the group's idle share
    summary: GroupSummary
    rolls: list[str]  # its rollout nodes with room, least loaded first
    trains: list[str]  # its training nodes with room, least loaded first
    order: int


def predicted_slowdown(
    group: Group | None,
    job: JobProfile,
    rollout: tuple[str, ...],
    train: tuple[str, ...],
    *,
    switch_overhead_s: float,
) -> dict[str, float]:
    """Return every member's predicted worst-case slowdown in `group` + job (no SLO check)."""
    members = (group.members if group else ()) + (Member(job, rollout, train),)
    times = steady_iteration_times(members, switch_overhead_s=switch_overhead_s)
    return {m.job.id: t / m.job.t_solo_max_s for m, t in zip(members, times, strict=True)}


def _qualified(req: Request, summaries: Sequence[GroupSummary]) -> list[_Qualified]:
    job = req.job
    out: list[_Qualified] = []
    for order, s in enumerate(summaries):
        g = s.group
        if not g.members or len(g.members) >= req.max_group_size:
            continue
        if len(g.train_nodes) < req.n_train or s.time_scale != job.time_scale:
            continue
        trains = least_loaded(g.train_nodes, s, job, req.nodes)
        rolls = least_loaded(g.rollout_nodes, s, job, req.nodes)
        if len(trains) < req.n_train:
            continue
        short = max(0, req.n_roll - len(rolls))
        if short and req.pools[Pool.ROLLOUT].take(short) is None:
            continue
        busy = sum(s.load.values())
        t_meta = max(s.t_cycle, s.t_load)
        idle = 1.0 - busy / (len(s.load) * t_meta) if t_meta > 0 else 1.0
        out.append(_Qualified(idle=idle, summary=s, rolls=rolls, trains=trains, order=order))
    return out


def baseline_choice(
    req: Request, summaries: Sequence[GroupSummary], *, policy: str, rng: random.Random | None
) -> Choice | None:
    """Place by `policy` ("random" or "greedy-most-idle"): capacity and residency only."""
    feasible = _qualified(req, summaries)
    if not feasible:
        return new_group_candidate(req)
    if policy == "random":
        assert rng is not None
        pick = feasible[rng.randrange(len(feasible))]
        trains = rng.sample(pick.trains, req.n_train)
        rolls = rng.sample(pick.rolls, min(req.n_roll, len(pick.rolls)))
    else:
        pick = max(feasible, key=lambda f: (f.idle, -f.order))
        trains = pick.trains[: req.n_train]
        rolls = pick.rolls[: req.n_roll]
    free = req.pools[Pool.ROLLOUT]
    fresh = free.take(req.n_roll - len(rolls)) or []
    rollout = tuple(rolls) + tuple(fresh)
    cand = Candidate(
        strategy=Strategy.ROLLOUT_SCALING if fresh else Strategy.DIRECT_PACKING,
        delta=free.cost(fresh),
        new_count=len(fresh),
        lower_bound=0.0,
        order=pick.order,
        summary=pick.summary,
        rollout=rollout,
        train=tuple(trains),
        new_nodes=tuple(fresh),
    )
    slow = predicted_slowdown(
        pick.summary.group,
        req.job,
        rollout,
        tuple(trains),
        switch_overhead_s=req.switch_overhead_s,
    )
    return cand, slow
