"""Inter-group planner: Algorithm 1 of the paper (section 4) and the baselines.

`place(job, state)` answers FIT (with a Placement), RETRY (not with the capacity
free now) or INFEASIBLE (never on this cluster), each with a human reason.
`apply_placement` and `remove_job` evolve a ClusterState; all three are pure and
safe to call from several threads (they share no mutable state).

Where the paper's words live:

* `algorithm1`: Algorithm 1 line by line: direct packing, rollout scaling and a new
  group as named candidate generators, the SLO check, the choice;
* `baselines`: the `random` and `greedy-most-idle` simulation baselines;
* `reasons`: the INFEASIBLE and RETRY sentences (and the pool capacity one);
* `index`: the per-state index (group summaries, free nodes) that travels with the
  ClusterState, built incrementally by
* `transitions`: `apply_placement`, `remove_job` and `update_job` (new estimates in place);
* `memo` and `admissible`: the evaluations a consolidation pass repeats, memoised for the
  pass and (for a caller that owns a `LastingMemo`, the simulator's policy) across passes,
  and which groups admit a job at all, remembered across departures;
* `scheduler.cluster`: node naming, `nodes_needed`, `empty_state`.

Decisions where the paper is silent (see also the module functions):

* Training nodes. A group's training nodes run every member's training (paper
  section 2). A job that needs FEWER training nodes than the group has is pinned to
  the least-loaded ones with residency room; a job that needs MORE than the group
  has is not a candidate for that group (the paper only scales the rollout pool),
  so it goes to another group or a new one.
* Direct packing candidates: every existing member's rollout-node set of the right
  size, plus the job's count of the group's least-loaded rollout nodes with room.
  Rollout scaling candidates: m = 1..N_R new free rollout nodes plus the N_R - m
  least-loaded group rollout nodes with room. All share the group's training nodes.
* Choice: least marginal $/h; ties prefer direct packing, then fewer new nodes,
  then the lower predicted slowdown of the new job, then the earlier group.
  Candidates are evaluated in that order with a lower bound on the slowdown
  (max(T_cycle, T_load) / T_solo), so most are pruned without simulating.
* Unbounded pools (`GpuType.nodes is None`): when the state has no free node that
  fits, the planner names fresh nodes (`scheduler.cluster.node_name`) in `Placement.new_nodes`;
  `apply_placement` adds them to the state. Bounded pools use only `state.nodes`
  (build them with `cluster_nodes`).
* Baselines (`random`, `greedy-most-idle`): a group qualifies when it is not full,
  has the job's training nodes with residency room, and enough rollout nodes with
  room (or free ones to add); SLOs are ignored. `random` picks a group and nodes with
  the caller's rng; `greedy-most-idle` the group with the highest idle share
  (1 - summed phase time / (nodes x max(T_cycle, T_load))), then its least-loaded
  nodes. Both open a new group when no group qualifies. `solo-disagg` always opens one.
* Helpers beyond the contract: `POLICIES`; `scheduler.cluster.empty_state(spec)` /
  `cluster_nodes(spec)` build the nodes of bounded pools.
* SLO check (scheduler.slo.check_group): the paper's, on the steady-state worst-case
  iteration time of every member against its worst-case solo time, and the
  distribution-aware one, on expected durations (the others' + 3%) against the member's
  own expected solo time (issue 13: 100% attainment on drawn durations).
* Join wait: in addition the NEW job must absorb the wait for its turn in
  the meta-iteration in progress, JOIN_ALLOWANCE_META_ITERATIONS x T_meta spread over
  its iterations (negligible for long jobs, decisive for a job of 2 iterations).
* Clocks (`JobProfile.time_scale`): phase times are profile seconds, and a job's
  runner takes profile / time_scale wall-clock seconds. Round-robin in one group is
  only what the planner predicts when every member runs on the same clock, so a job
  joins (direct packing or rollout scaling, for every policy) only a group whose
  members all have its time_scale (exactly: scales are set, not computed); a real job
  (1) never shares with one emulated at 200x. Traces and the simulator are all 1.
* Residency: the summed host_mem_gb of the members pinned to a node plus the job's
  must not exceed the node's host_mem_gb (equality fits).
* Cordoned (drained) nodes: their members keep running, but no new member is pinned to
  one: they are never free, never a direct-packing or rollout-scaling target, and a
  joining job shares only the group's training nodes that are not cordoned (a group whose
  training nodes are all cordoned admits no one). They still count in the pool's
  capacity, so a job that fits only with them waits (RETRY, the reason says how many are
  drained); a job larger than the capacity (`GpuType.nodes`: up and cordoned nodes, down
  ones not) is INFEASIBLE.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import replace

from scheduler.cluster import nodes_needed
from scheduler.config import ALGORITHM1, Admission, PlannerConfig
from scheduler.model import (
    ClusterState,
    JobProfile,
    Member,
    Placement,
    PlacementResult,
    PlacementStatus,
    Pool,
    Strategy,
)
from scheduler.planner.algorithm1 import (
    Candidate,
    Choice,
    FreePool,
    Request,
    candidates,
    choose,
    new_group_candidate,
)
from scheduler.planner.baselines import baseline_choice
from scheduler.planner.colocated import colocated_candidate
from scheduler.planner.index import (
    GroupSummary,
    PlannerIndex,
    build_index,
    group_bounds,
    planner_index,
)
from scheduler.planner.memo import cached
from scheduler.planner.objective import JobProgress, choose_by_expected_cost
from scheduler.planner.reasons import infeasible_reason, pool_capacity, retry_reason
from scheduler.planner.slo_checks import EPS, JOIN_ALLOWANCE_META_ITERATIONS, check_slo
from scheduler.planner.transitions import apply_placement, remove_job, update_job
from scheduler.stochastic import slo_probabilities

__all__ = [
    "JOIN_ALLOWANCE_META_ITERATIONS",
    "OBJECTIVES",
    "POLICIES",
    "PlannerIndex",
    "admits_join",
    "join_request",
    "apply_placement",
    "build_index",
    "place",
    "planner_index",
    "pool_capacity",
    "remove_job",
    "update_job",
]

POLICIES = ("rollmux", "solo-disagg", "random", "greedy-most-idle")
# From this many groups on, Algorithm 1's cheap bounds are checked in one vectorised pass
# (`algorithm1.Request.bounds`) before the loop over the groups.
_VECTOR_GROUPS = 64
OBJECTIVES = ("marginal", "expected")


def place(
    job: JobProfile,
    state: ClusterState,
    *,
    policy: str = "rollmux",
    config: PlannerConfig | None = None,
    rng: random.Random | None = None,
    progress: Mapping[str, JobProgress] | None = None,
    max_group_size: int | None = None,
    objective: str | None = None,
    prune_saturated: bool | None = None,
    colocated: bool | None = None,
    lone_restart_s: Callable[[JobProfile], float] | None = None,
    with_slo_probability: bool = True,
) -> PlacementResult:
    """Place `job` on `state` with `policy`; see the module docstring for the rules.

    `config` holds the admission options (`config.admission`, scheduler.config); without
    one, Algorithm 1 as the paper publishes it (`scheduler.config.ALGORITHM1`). The
    keywords `max_group_size`, `objective`, `prune_saturated` and `colocated` override
    the config's field of that name (None: the config's).

    rollmux's levers (issue 14): `objective` ranks the admissible placements by the
    marginal $/h they add (`"marginal"`, the paper's) or by the expected remaining
    cost they add (`"expected"`, scheduler.planner.objective, which reads the running
    jobs' `progress`); `prune_saturated=False` drops line 4's skip of saturated
    groups and leaves the SLO check alone to decide; `colocated=True` lets the job
    run alone on its training nodes when that is cheapest under its SLO
    (scheduler.planner.colocated, at the training type's rollout speed factor).

    `slo_margin` is the distribution-aware SLO check's margin (scheduler.slo); None
    checks SLOs on worst-case solo times alone (the paper's check). A FIT carries the
    probability that each member of the resulting group meets its SLO
    (scheduler.stochastic); `min_slo_probability` makes `rollmux` refuse a placement
    that gives a member less. `with_slo_probability=False` leaves a FIT's
    `slo_probability` empty, for a caller that reads none (consolidation's `best_move`
    weighs placements it may never make: computing them was ~15% of its time).

    `lone_restart_s` (a job's restart time; objective "expected") values a member that
    the others' departures will leave alone in its group as consolidation treats it:
    alone for the ski-rental wait, then co-located (scheduler.planner.objective).

    1. validate the arguments and the job against the cluster (INFEASIBLE: never);
    2. read the state's index and the free nodes with room for the job;
    3. choose by the policy (Algorithm 1 for `rollmux`);
    4. RETRY with what is missing when nothing fits now, else FIT with the placement.
    """
    adm = (config or ALGORITHM1).admission
    max_group_size = adm.max_group_size if max_group_size is None else max_group_size
    objective = adm.objective if objective is None else objective
    prune_saturated = adm.prune_saturated if prune_saturated is None else prune_saturated
    colocated = adm.colocated if colocated is None else colocated
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    if policy == "random" and rng is None:
        raise ValueError("policy 'random' needs an rng (the core never uses global random)")
    if max_group_size < 1:
        raise ValueError(f"max_group_size must be >= 1, got {max_group_size}")
    if objective not in OBJECTIVES:
        raise ValueError(
            f"unknown objective {objective!r}; expected one of {', '.join(OBJECTIVES)}"
        )
    spec = state.spec
    index = planner_index(state)
    nodes = index.node_index
    reason = infeasible_reason(job, spec, nodes)
    if reason is not None:
        return PlacementResult(PlacementStatus.INFEASIBLE, reason)
    if job.id in index.job_ids:
        raise ValueError(f"job {job.id!r} is already placed in a co-execution group")
    req = _request(
        job, state, index, max_group_size=max_group_size, prune_saturated=prune_saturated, adm=adm
    )
    best: Choice | None
    if policy == "solo-disagg":
        best = new_group_candidate(req)
    elif policy == "rollmux" and objective == "expected":
        factor = spec.train.rollout_speed_factor if colocated else None
        best = choose_by_expected_cost(
            req,
            index.summaries,
            {} if progress is None else progress,  # (not `or`: a truth test walks the jobs)
            colocated_factor=factor,
            lone_restart_s=lone_restart_s,
        )
    elif policy == "rollmux":
        best = choose(req, index.summaries)
        if colocated:
            alone = colocated_candidate(req, spec.train.rollout_speed_factor)
            if alone is not None and (best is None or alone[0].delta < best[0].delta - EPS):
                best = alone
    else:
        best = baseline_choice(req, index.summaries, policy=policy, rng=rng)
    if best is None:
        return PlacementResult(PlacementStatus.RETRY, retry_reason(job, spec, req.pools, nodes))
    return _fit(job, *best, switch_overhead_s=spec.switch_overhead_s, chances=with_slo_probability)


def _request(
    job: JobProfile,
    state: ClusterState,
    index: PlannerIndex,
    *,
    max_group_size: int,
    prune_saturated: bool,
    adm: Admission,
) -> Request:
    """Return what every step of a decision for `job` on `state` reads (its free pools)."""
    spec = state.spec
    nodes = index.node_index
    taken = index.taken

    def in_use(name: str) -> bool:
        return name in nodes.nodes or name in taken

    pools = {
        pool: FreePool(
            spec=spec,
            pool=pool,
            size=len(nodes.by_pool[pool]),
            free=index.free[pool],
            in_use=in_use,
            mem=job.host_mem_gb,
        )
        for pool in (Pool.ROLLOUT, Pool.TRAIN)
    }
    return Request(
        job=job,
        n_roll=nodes_needed(job, spec, Pool.ROLLOUT),
        n_train=nodes_needed(job, spec, Pool.TRAIN),
        nodes=nodes.nodes,
        pools=pools,
        switch_overhead_s=spec.switch_overhead_s,
        max_group_size=max_group_size,
        prune_saturated=prune_saturated,
        slo_margin=adm.slo_margin,
        tight_slack=adm.tight_slack,
        min_slo_probability=adm.min_slo_probability,
        node_prices=nodes.prices,
        # the vectorised cheap bounds pay off only over many groups
        bounds=group_bounds(index) if len(index.summaries) >= _VECTOR_GROUPS else None,
        train_mem_max=nodes.biggest_mem[Pool.TRAIN],
    )


def join_request(job: JobProfile, state: ClusterState, *, config: PlannerConfig) -> Request:
    """Return what `admits_join` reads of a decision for `job` on `state`, for a caller
    that asks it about several groups of the state (its free pools' answers are a
    function of the count asked alone, whichever group asks)."""
    adm = config.admission
    req = _request(
        job,
        state,
        planner_index(state),
        max_group_size=adm.max_group_size,
        prune_saturated=adm.prune_saturated,
        adm=adm,
    )
    return replace(req, bounds=None)  # one group at a time: checked as it is


def admits_join(
    job: JobProfile,
    state: ClusterState,
    summary: GroupSummary,
    *,
    config: PlannerConfig,
    request: Request | None = None,
) -> bool:
    """Return True when Algorithm 1 has an admissible placement of `job` in the group of
    `summary` (one of `state`'s): a direct packing or rollout scaling candidate (line 5)
    that passes the SLO check (line 7). Whatever the objective ranks, `place` joins no
    group this returns False for. The job may be placed already (elsewhere). `request`:
    `join_request` of the same job, state and config, when the caller has it."""
    req = join_request(job, state, config=config) if request is None else request
    return any(
        check_slo(
            summary.group,
            job,
            c.rollout,
            c.train,
            switch_overhead_s=req.switch_overhead_s,
            slo_margin=req.slo_margin,
            tight_slack=req.tight_slack,
        )
        is not None
        for c in candidates(req, (summary,))
    )


def _fit(
    job: JobProfile,
    cand: Candidate,
    slowdown: dict[str, float],
    *,
    switch_overhead_s: float,
    chances: bool = True,
) -> PlacementResult:
    """Return the FIT result of a chosen candidate, with its reason in words (and, with
    `chances`, its members' SLO probabilities)."""
    group = cand.summary.group if cand.summary else None
    chance: dict[str, float]
    if not chances:
        chance = {}
    elif group is None:
        chance = {job.id: 1.0}  # alone: its iteration is its solo iteration
    else:
        members = group.members + (Member(job, cand.rollout, cand.train),)
        # (memoised within a consolidation pass, scheduler.planner.memo; a copy: the
        # result's mapping is its own)
        chance = dict(
            cached(
                "slo_probabilities",
                (members, switch_overhead_s),
                lambda: slo_probabilities(members, switch_overhead_s=switch_overhead_s),
            )
        )
    placement = Placement(
        job_id=job.id,
        strategy=cand.strategy,
        group_id=group.id if group else None,
        rollout_nodes=cand.rollout,
        train_nodes=cand.train,
        new_nodes=cand.new_nodes,
    )
    where = f"group {group.id}" if group else "a new co-execution group"
    text = {
        Strategy.DIRECT_PACKING: f"direct packing into {where}",
        Strategy.ROLLOUT_SCALING: f"rollout scaling of {where} (+{cand.new_count} rollout nodes)",
        Strategy.NEW_GROUP: f"isolated in {where}",
        Strategy.COLOCATED: f"co-located alone on {len(cand.train)} training node(s)",
    }[cand.strategy]
    return PlacementResult(
        PlacementStatus.FIT,
        f"{text}: +${cand.delta:.2f}/h, predicted slowdown {slowdown[job.id]:.2f}x",
        placement,
        cand.delta,
        slowdown,
        chance,
    )
