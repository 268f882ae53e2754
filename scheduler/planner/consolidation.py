"""Consolidation on departure: move a job to another co-execution group (issue 14 item 1).

Placement happens once, at arrival (paper section 4), so departures leave half-used
groups: a survivor keeps its group's nodes at low utilisation until a compatible
arrival fills them. Here the planner may MOVE a job (checkpoint at an iteration
boundary, restore in another group) when that lowers the expected remaining cost of
the cluster by more than the restart costs, and only when every job concerned keeps
its SLO over its whole run, restarts included.

`best_move(state, job_id, ...)` answers for one job, `plan_consolidation(state,
group_id, ...)` for the survivors of a group someone just left (best saving first,
each evaluated on the state the previous moves leave), and `apply_move` evolves the
state. All pure; the simulator and the live planner call the same three.

Rules (decisions where the issue is silent, marked [I]):

1. Candidates. The job is taken out of its group (`remove_job`) and placed again by
   Algorithm 1 (`place`, policy rollmux) as a job with its remaining iterations. A
   move to its own group or to a new isolated group is no move. [I] Only Algorithm
   1's best placement is considered, not every admissible one.
2. Saving. The expected remaining cost (scheduler.planner.objective) of the source and the
   destination group before, minus after, the restart included: the mover's
   remaining run is longer by its restart time, and so is that of every destination
   member sharing a node with it (its cold first phase holds the node).
   The move is made when the saving exceeds `min_saving_usd`.
3. Restart cost. Checkpoint, transfer and cold start of the job's state, a function
   of model size: the paper measures 197 s for 7B and 419 s for 32B; [I] linear in
   the parameter count between them, clipped to that range outside it. The size is
   read from the model name (`qwen2.5-14b-8k` -> 14); [I] without one it is inferred
   from the training GPUs (8 -> 7B, 16 -> 14B, 32 or more -> 32B), as the prototype
   configs shard those sizes.
4. SLO over the whole run. The job's SLO is on its mean iteration time from its
   first admission, so the mover must fit `elapsed + restart + (remaining + the join
   allowance) x its predicted worst-case iteration time in the destination` within
   `slo x iterations x (expected solo iteration x (1 + solo_margin))` (the
   distribution-aware reference of issue 13). Every member of the destination
   must fit its own budget the same way at its new predicted iteration time, with
   the restart added when it shares a node with the mover (the mover's cold first
   phase holds that node). Members left behind only get faster.
5. At most `max_moves_per_job` moves per job (default 2).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from scheduler.cluster import make_node
from scheduler.model import (
    ClusterState,
    Group,
    JobProfile,
    Member,
    Placement,
    PlacementStatus,
    Pool,
    Strategy,
)
from scheduler.planner import JOIN_ALLOWANCE_META_ITERATIONS, apply_placement, place, remove_job
from scheduler.planner.objective import (
    JobProgress,
    expected_solo_s,
    members_remaining_cost,
    remaining_iterations,
)

# The paper's measured restart (migration + cold start) times, seconds by model size.
RESTART_S_7B = 197.0
RESTART_S_32B = 419.0
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z])")


def model_billions(job: JobProfile) -> float:
    """Return the job's model size in billions of parameters (rule 3 of the module)."""
    match = _SIZE.search(job.model)
    if match:
        return float(match.group(1))
    if job.train_gpus >= 32:
        return 32.0
    return 14.0 if job.train_gpus >= 16 else 7.0


def restart_seconds(job: JobProfile) -> float:
    """Return the paper's restart time for the job's model size, linear between 7B and 32B."""
    size = min(32.0, max(7.0, model_billions(job)))
    return RESTART_S_7B + (size - 7.0) * (RESTART_S_32B - RESTART_S_7B) / (32.0 - 7.0)


@dataclass(frozen=True)
class ConsolidationConfig:
    """How eager consolidation is; the defaults are the issue's."""

    max_moves_per_job: int = 2
    restart_s: Callable[[JobProfile], float] = restart_seconds
    min_saving_usd: float = 0.0
    solo_margin: float = 0.03  # the distribution-aware SLO reference: expected solo x 1.03
    max_group_size: int = 5
    # [I] also try to move the members of one-member groups when someone leaves: the
    # departure may have opened the room they could not find at arrival
    singletons: bool = True


@dataclass(frozen=True)
class Move:
    """Move `job_id` from `from_group` to `placement` (an existing group)."""

    job_id: str
    from_group: str
    placement: Placement
    saving_usd: float  # expected remaining cost saved, restart included
    restart_s: float
    predicted_slowdown: dict[str, float] = field(default_factory=dict)

    @property
    def reason(self) -> str:
        """Say what the move does, for the job page and the audit log."""
        return (
            f"moved from group {self.from_group} to group {self.placement.group_id}: "
            f"saves ${self.saving_usd:,.2f} expected ({self.restart_s:.0f} s restart included)"
        )


def _budget_ok(
    job: JobProfile,
    progress: JobProgress | None,
    now: float,
    iteration_s: float,
    remaining: float,
    extra_s: float,
    margin: float,
) -> bool:
    elapsed = now - progress.admitted_s if progress else 0.0
    budget = job.slo * job.iterations * expected_solo_s(job) * (1.0 + margin)
    return elapsed + extra_s + remaining * iteration_s <= budget + 1e-9


def _prices(state: ClusterState, placement: Placement) -> dict[str, float]:
    price = {n.name: n.price_per_hour for n in state.nodes}
    for name in placement.new_nodes:
        if name not in price:
            pool = Pool.ROLLOUT if name in placement.rollout_nodes else Pool.TRAIN
            price[name] = make_node(state.spec, pool, name).price_per_hour
    return price


def _group_of(state: ClusterState, job_id: str) -> tuple[Group, Member] | None:
    for g in state.groups:
        for m in g.members:
            if m.job.id == job_id:
                return g, m
    return None


def best_move(
    state: ClusterState,
    job_id: str,
    *,
    now: float,
    progress: Mapping[str, JobProgress],
    config: ConsolidationConfig | None = None,
) -> Move | None:
    """Return the move of `job_id` that saves the most, or None (module docstring)."""
    cfg = config or ConsolidationConfig()
    found = _group_of(state, job_id)
    if found is None:
        return None
    source, member = found
    job = member.job
    mine = progress.get(job_id)
    if mine is not None and mine.moves >= cfg.max_moves_per_job:
        return None
    remaining = remaining_iterations(job, progress)
    if remaining < 1:
        return None
    # 1. Algorithm 1's best placement for the rest of the job, without it.
    without, _released = remove_job(state, job_id)
    rest = replace(job, iterations=remaining)
    result = place(rest, without, policy="rollmux", max_group_size=cfg.max_group_size)
    placement = result.placement
    if result.status is not PlacementStatus.FIT or placement is None:
        return None
    if placement.group_id is None or placement.group_id == source.id:
        return None
    if placement.strategy is Strategy.NEW_GROUP:
        return None
    target = next(g for g in without.groups if g.id == placement.group_id)
    restart = cfg.restart_s(job)
    switch = state.spec.switch_overhead_s
    # 4. Every SLO over the whole run, restart included.
    moved = Member(job, placement.rollout_nodes, placement.train_nodes)
    t_new = result.predicted_slowdown[job_id] * job.t_solo_max_s
    if not _budget_ok(
        job,
        mine,
        now,
        t_new,
        remaining + JOIN_ALLOWANCE_META_ITERATIONS,
        restart,
        cfg.solo_margin,
    ):
        return None
    mover_nodes = set(moved.rollout_nodes + moved.train_nodes)
    for m in target.members:
        t_m = result.predicted_slowdown.get(m.job.id, 1.0) * m.job.t_solo_max_s
        shares = bool(mover_nodes & set(m.rollout_nodes + m.train_nodes))
        if not _budget_ok(
            m.job,
            progress.get(m.job.id),
            now,
            t_m,
            remaining_iterations(m.job, progress),
            restart if shares else 0.0,
            cfg.solo_margin,
        ):
            return None
    # 2. The saving in expected remaining dollars, restart included.
    price = _prices(state, placement)
    left = tuple(m for m in source.members if m.job.id != job_id)
    before = members_remaining_cost(
        source.members, price, progress, switch_overhead_s=switch
    ) + members_remaining_cost(target.members, price, progress, switch_overhead_s=switch)
    # The mover's cold first phase holds the nodes it shares, so the destination
    # members pinned to them are delayed by the restart too.
    delayed = {job_id: restart} | {
        m.job.id: restart
        for m in target.members
        if mover_nodes & set(m.rollout_nodes + m.train_nodes)
    }
    after = members_remaining_cost(
        left, price, progress, switch_overhead_s=switch
    ) + members_remaining_cost(
        target.members + (moved,), price, progress, switch_overhead_s=switch, extra_s=delayed
    )
    saving = before - after
    if saving <= cfg.min_saving_usd:
        return None
    return Move(job_id, source.id, placement, saving, restart, dict(result.predicted_slowdown))


def apply_move(state: ClusterState, move: Move) -> ClusterState:
    """Return `state` with the job of `move` taken out of its group and placed as moved."""
    found = _group_of(state, move.job_id)
    if found is None:
        raise KeyError(f"job {move.job_id!r} is in no co-execution group")
    _, member = found
    without, _released = remove_job(state, move.job_id)
    target = move.placement.group_id
    assert target is not None
    return apply_placement(without, member.job, move.placement, group_id=target)


def plan_consolidation(
    state: ClusterState,
    group_id: str,
    *,
    now: float,
    progress: Mapping[str, JobProgress],
    config: ConsolidationConfig | None = None,
) -> list[Move]:
    """Return the moves for the members of `group_id`, best saving first.

    Each move is evaluated on the state the moves before it leave, so together they
    are consistent; the caller applies them in order (`apply_move`).
    """
    moves: list[Move] = []
    current = state
    cfg = config or ConsolidationConfig()
    candidates = {
        m.job.id
        for g in state.groups
        if g.id == group_id or (cfg.singletons and len(g.members) == 1)
        for m in g.members
    }
    while candidates:
        options = [
            mv
            for job_id in sorted(candidates)
            if (mv := best_move(current, job_id, now=now, progress=progress, config=config))
        ]
        if not options:
            break
        best = max(options, key=lambda mv: (mv.saving_usd, mv.job_id))
        moves.append(best)
        current = apply_move(current, best)
        candidates.discard(best.job_id)
    return moves
