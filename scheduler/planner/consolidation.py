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
   first admission against its mean drawn solo time, so the mover must fit
   `elapsed + restart + (remaining + the join allowance) x its predicted iteration
   time in the destination` within `slo x` what its drawn solo time sums to over the
   run. The predicted iteration time is the worst-case meta-iteration in a group;
   alone (co-located) the job runs its own drawn phases (rollout at the training
   type's factor) and waits for no one's turn. [I] The reference (`solo_z`, default
   3): the solo seconds of the iterations done as measured (`JobProgress.solo_s_done`;
   unmeasured, their expectation less z standard errors) plus the remaining ones'
   expectation less z standard errors of their sum (uniform phases); co-located, the
   remaining draws are on both sides, so only their difference per iteration is
   uncertain, and a job with a tight SLO (1.002-1.02) but a long run may still
   afford a restart. With `solo_z=None` the reference is the earlier rule:
   `iterations x expected solo / (1 + solo_margin)` (a loosening margin of 3% moved
   jobs with SLO 1.001-1.004 whose restart then broke their SLO on drawn durations;
   a stricter 1% blocks every move of a job whose SLO is under 1.01). Every member of
   the destination must fit its own budget the same way at its new predicted
   iteration time, with the restart added when it shares a node with the mover (the
   mover's cold first phase holds that node). Members left behind only get faster.
   A mover that fits no destination's budget (`may_move_within_budget`: in a group its
   iteration is never under its worst-case solo time) is not placed at all.
5. At most `max_moves_per_job` moves per job (default 2).
6. With `colocated` a job alone in a disaggregated group may move onto training
   nodes of its own (the co-located strategy), and a co-located job into a group
   when a partner makes that cheaper; `plan_consolidation` names such a new group
   `<job>:colocated` provisionally (the caller gives it its real id).
7. Candidates of `plan_consolidation`: the members of the group someone left and,
   with `singletons`, every job alone in a group (co-located or not); the caller
   consults it on EVERY departure, also one that empties its group (a job alone
   leaving frees nodes and time that another lone job may use: measured, +0.01
   paper-like and +0.02 Philly-like, docs/results.md). [I] `small_groups` adds the
   members of groups of at most that size (measured: more moves, higher cost).
   A candidate no group admits (and not free to go co-located) is skipped without
   `best_move`, which would answer None: remembered across departures for a caller
   with a lasting memo (scheduler.planner.admissible; same moves, issue 25 item 4).
8. Rounds. Within a pass `now` and everyone's progress are fixed, so a candidate's
   answer in a round after the first is its answer in the round before when the move
   between them changed neither its group nor its answer's destination, its answer
   takes no node from the free pool, and neither group the move changed passes the
   candidate's first checks now (Algorithm 1 would not consider them); the candidate
   is not asked again (nor, when rule 7's filters skipped it in the round before, its
   answer then being None, are the filters). Only where a group's admission reads that
   group alone (`admissible.answers_local`: unbounded rollout pool, nothing cordoned); the same
   moves (tests/scheduler/test_consolidation_speed_equal.py).
9. Changed options only [I]. On a cluster whose pools are both unbounded and where nothing is
   cordoned, a departure frees nothing a job alone elsewhere could not have had before: what
   it changes for such a job is the group left and the groups moves and arrivals changed
   since the caller's previous pass (`since`, the state that pass planned on; groups are
   immutable, so a changed group is a new object). Rule 7's candidates are then the
   members of the group left, the jobs whose own group changed, and those one of the
   changed groups passes the first checks for (`JoinFilter.passes_any`); the others'
   options differ only by the clock, and a job alone is re-planned on its own clock anyway
   (after its ski-rental wait, `lone_wait`). `consolidation.changed_options_only`
   (default on) is the lever; without `since` (the live planner, whose pools are
   bounded) every candidate of rule 7 is asked. Measured at 2,100 live jobs (issue 25
   item 4, `bench/sim_speed.py --at-size`): consolidation 136 -> 69 s CPU, the run's cost
   $5,461,666 -> $5,455,897 (-0.1%), SLO attainment 99.86% both, 1,459 -> 1,432 moves.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from scheduler.cluster import make_node, nodes_needed
from scheduler.config import PlannerConfig
from scheduler.costs import SECONDS_PER_HOUR
from scheduler.model import (
    ClusterSpec,
    ClusterState,
    Group,
    JobProfile,
    Member,
    Placement,
    PlacementResult,
    PlacementStatus,
    Pool,
    Strategy,
)
from scheduler.planner import (
    apply_placement,
    place,
    planner_index,
    remove_job,
)
from scheduler.planner.admissible import JoinFilter, answers_local
from scheduler.planner.index import GroupSummary, colocated_groups, group_position
from scheduler.planner.memo import current_lasting, evaluation_scope
from scheduler.planner.move_budget import (
    budget_ok,
    may_move_within_budget,
    mover_budget_ok,
)
from scheduler.planner.objective import (
    JobProgress,
    colocated_expected_s,
    expected_roll_s,
    expected_solo_s,
    expected_train_s,
    members_remaining_cost,
    remaining_iterations,
)

# The paper's measured restart (migration + cold start) times, seconds by model size.
RESTART_S_7B = 197.0
RESTART_S_32B = 419.0
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z])")


def model_billions(job: JobProfile) -> float:
    """Return the job's model size in billions of parameters (rule 3 of the module)."""
    return _billions(job.model, job.train_gpus)


def _billions(model: str, train_gpus: int) -> float:
    match = _SIZE.search(model)
    if match:
        return float(match.group(1))
    if train_gpus >= 32:
        return 32.0
    return 14.0 if train_gpus >= 16 else 7.0


def restart_seconds(job: JobProfile) -> float:
    """Return the job's measured restart (`JobProfile.restart_s`) once it has run, else the
    paper's restart time for its model size, linear between 7B and 32B."""
    if job.restart_s is not None:
        return job.restart_s
    return _restart_by_size(job.model, job.train_gpus)


# (what the model's restart reads of a profile; asked for every expected-cost evaluation
# whose last member is left alone, the name's regex was 2% of a run at 1,200 jobs: kept
# per (name, training GPUs), a pure function of them, bounded)
@lru_cache(maxsize=4096)
def _restart_by_size(model: str, train_gpus: int) -> float:
    size = min(32.0, max(7.0, _billions(model, train_gpus)))
    return RESTART_S_7B + (size - 7.0) * (RESTART_S_32B - RESTART_S_7B) / (32.0 - 7.0)


def restart_of(cfg: PlannerConfig) -> Callable[[JobProfile], float]:
    """Return the restart-time model of `cfg` (`Consolidation.restart_s`, default
    `restart_seconds`)."""
    return cfg.consolidation.restart_s or restart_seconds


@dataclass(frozen=True)
class Move:
    """Move `job_id` from `from_group` to `placement`: an existing group, or co-located.

    `group_id` names the destination: the placement's group, or for a co-located
    placement (a new group) the id the caller gives it (`dataclasses.replace`).
    """

    job_id: str
    from_group: str
    placement: Placement
    saving_usd: float  # expected remaining cost saved, restart included
    restart_s: float
    predicted_slowdown: dict[str, float] = field(default_factory=dict)
    group_id: str = ""

    @property
    def reason(self) -> str:
        """Say what the move does, for the job page and the audit log."""
        return (
            f"moved from group {self.from_group} to "
            + (
                f"group {self.placement.group_id}"
                if self.placement.group_id
                else "its own training nodes (co-located)"
            )
            + ": "
            f"saves ${self.saving_usd:,.2f} expected ({self.restart_s:.0f} s restart included)"
        )


def partners_keep_slo(
    target: Group,
    result: PlacementResult,
    restart_s: float,
    *,
    now: float,
    progress: Mapping[str, JobProgress],
    config: PlannerConfig | None = None,
) -> bool:
    """Return True when every member of `target`, the group a job moves into (`result`,
    Algorithm 1's FIT), keeps its SLO over its whole run (rule 4) at the slowdown the
    placement predicts for it; a member pinned to a node of the mover is delayed by its
    restart (`restart_s`) too. One rule for a consolidation move and a drift re-plan's."""
    cfg = config or PlannerConfig()
    placement = result.placement
    if placement is None:
        return False
    mover_nodes = set(placement.rollout_nodes + placement.train_nodes)
    for m in target.members:
        t_m = result.predicted_slowdown.get(m.job.id, 1.0) * m.job.t_solo_max_s
        shares = bool(mover_nodes & set(m.rollout_nodes + m.train_nodes))
        if not budget_ok(
            m.job,
            progress.get(m.job.id),
            now,
            t_m,
            remaining_iterations(m.job, progress),
            restart_s if shares else 0.0,
            cfg,
        ):
            return False
    return True


def _prices(state: ClusterState, placement: Placement) -> Mapping[str, float]:
    known = planner_index(state).node_index.prices  # every node of the state's, by name
    new = [x for x in placement.new_nodes if x not in known]
    if not new:
        return known
    price = dict(known)
    for name in new:
        pool = Pool.ROLLOUT if name in placement.rollout_nodes else Pool.TRAIN
        price[name] = make_node(state.spec, pool, name).price_per_hour
    return price


def _place(
    cfg: PlannerConfig,
    job: JobProfile,
    state: ClusterState,
    progress: Mapping[str, JobProgress],
    *,
    colocated: bool,
    with_slo_probability: bool = True,
) -> PlacementResult:
    """Place `job` by Algorithm 1 with the configured admission options."""
    return place(
        job,
        state,
        policy="rollmux",
        config=cfg,
        progress=progress,
        colocated=cfg.admission.colocated and colocated,
        lone_restart_s=restart_of(cfg)
        if cfg.admission.lone_tail and cfg.admission.colocated
        else None,
        with_slo_probability=with_slo_probability,
    )


def _group_of(
    state: ClusterState, job_id: str, group_id: str | None = None
) -> tuple[Group, Member] | None:
    """Return the job's group and self in `state` (`group_id`: where it likely is, looked
    at first), or None when it is in no group."""
    index = planner_index(state)
    hinted: list[GroupSummary] = []
    if group_id is not None and (at := group_position(index, group_id)) is not None:
        hinted.append(index.summaries[at])
    # (the summaries hold their job ids as a set)
    for s in itertools.chain(hinted, index.summaries):
        if job_id in s.job_ids:
            return s.group, next(m for m in s.group.members if m.job.id == job_id)
    return None


def best_move(
    state: ClusterState,
    job_id: str,
    *,
    now: float,
    progress: Mapping[str, JobProgress],
    config: PlannerConfig | None = None,
) -> Move | None:
    """Return the move of `job_id` that saves the most, or None (module docstring)."""
    cfg = config or PlannerConfig()
    found = _group_of(state, job_id)
    if found is None:
        return None
    return _best_move(state, found, now=now, progress=progress, cfg=cfg)


def _best_move(
    state: ClusterState,
    found: tuple[Group, Member],
    *,
    now: float,
    progress: Mapping[str, JobProgress],
    cfg: PlannerConfig,
) -> Move | None:
    """`best_move` of the member `found` (its group, itself) of `state`."""
    source, member = found
    job = member.job
    job_id = job.id
    mine = progress.get(job_id)
    if mine is not None and mine.moves >= cfg.consolidation.max_moves_per_job:
        return None
    remaining = remaining_iterations(job, progress)
    if remaining < 1:
        return None
    restart = restart_of(cfg)(job)
    factor = state.spec.train.rollout_speed_factor
    may_colocate = cfg.admission.colocated and bool(member.rollout_nodes)
    if not may_move_within_budget(
        job, mine, now, remaining, restart, cfg, colocated_factor=factor if may_colocate else None
    ):
        return None  # no destination keeps its SLO (rule 4): Algorithm 1 is not asked
    # 1. Algorithm 1's best placement for the rest of the job, without it.
    without, _released = remove_job(state, job_id, group_id=source.id)
    rest = replace(job, iterations=remaining)
    # (a Move carries no SLO probabilities: the placement's are not computed)
    result = _place(
        cfg,
        rest,
        without,
        progress,
        colocated=bool(member.rollout_nodes),
        with_slo_probability=False,
    )
    placement = result.placement
    if result.status is not PlacementStatus.FIT or placement is None:
        return None
    if placement.group_id == source.id or placement.strategy is Strategy.NEW_GROUP:
        return None
    # the same group object in `state` (remove_job changed only the source); co-located: a
    # new group of its own
    at = group_position(planner_index(state), placement.group_id or "")
    target = state.groups[at] if at is not None else Group("", (), (), ())
    switch = state.spec.switch_overhead_s
    # 4. Every SLO over the whole run, restart included.
    moved = Member(job, placement.rollout_nodes, placement.train_nodes)
    if placement.strategy is Strategy.COLOCATED:  # alone: its own (expected) pace
        t_new = colocated_expected_s(job, factor)
    else:
        t_new = result.predicted_slowdown[job_id] * job.t_solo_max_s
    colocated = placement.strategy is Strategy.COLOCATED
    if not mover_budget_ok(
        job,
        mine,
        now,
        t_new,
        remaining,
        restart,
        cfg,
        colocated_factor=factor if colocated else None,
    ):
        return None
    if not partners_keep_slo(target, result, restart, now=now, progress=progress, config=cfg):
        return None
    mover_nodes = set(moved.rollout_nodes + moved.train_nodes)
    # 2. The saving in expected remaining dollars, restart included.
    price = _prices(state, placement)
    left = tuple(m for m in source.members if m.job.id != job_id)
    lone = (
        restart_of(cfg) if cfg.consolidation.lone_tail_moves and cfg.admission.colocated else None
    )
    before = members_remaining_cost(
        source.members,
        price,
        progress,
        switch_overhead_s=switch,
        colocated_factor=factor,
        lone_restart_s=lone,
    ) + members_remaining_cost(
        target.members,
        price,
        progress,
        switch_overhead_s=switch,
        colocated_factor=factor,
        lone_restart_s=lone,
    )
    # The mover's cold first phase holds the nodes it shares, so the destination
    # members pinned to them are delayed by the restart too.
    delayed = {job_id: restart} | {
        m.job.id: restart
        for m in target.members
        if mover_nodes & set(m.rollout_nodes + m.train_nodes)
    }
    after = members_remaining_cost(
        left,
        price,
        progress,
        switch_overhead_s=switch,
        colocated_factor=factor,
        lone_restart_s=lone,
        lone_now=True,  # a survivor left alone by the move is re-planned after its wait
    ) + members_remaining_cost(
        target.members + (moved,),
        price,
        progress,
        switch_overhead_s=switch,
        extra_s=delayed,
        colocated_factor=factor,
        lone_restart_s=lone,
    )
    saving = before - after
    if saving <= cfg.consolidation.min_saving_usd:
        return None
    return Move(
        job_id,
        source.id,
        placement,
        saving,
        restart,
        dict(result.predicted_slowdown),
        placement.group_id or "",
    )


def lone_wait_s(job: JobProfile, spec: ClusterSpec, *, restart_s: float) -> float | None:
    """Return how long a job alone in a disaggregated group waits for a partner before
    it is re-planned (co-located, or into a group, by `best_move`); None: never.

    [I] Ski rental: alone, the job pays its rollout nodes on top of what co-located
    would cost it per second (the "rent", at the training type's rollout speed factor);
    going co-located costs its restart on its training nodes (the "buy"). Waiting
    until the rent paid equals the buy is the classic 2-competitive rule: a partner
    arriving within it finds the job's group (and its idle training node) open, and a
    job nobody joins loses at most twice the restart.
    """
    n_roll, n_train = nodes_needed(job, spec, Pool.ROLLOUT), nodes_needed(job, spec, Pool.TRAIN)
    p_group = n_roll * spec.rollout.node_price_per_hour + n_train * spec.train.node_price_per_hour
    p_co = n_train * spec.train.node_price_per_hour
    roll, train = expected_roll_s(job), expected_train_s(job)
    factor = spec.train.rollout_speed_factor
    rent = p_group - p_co * (factor * roll + train) / max(roll + train, 1e-9)
    if rent <= 0:
        return None
    return restart_s * p_co / rent


def apply_move(state: ClusterState, move: Move) -> ClusterState:
    """Return `state` with the job of `move` taken out of its group and placed as moved."""
    found = _group_of(state, move.job_id, move.from_group)  # (where the move found it)
    if found is None:
        raise KeyError(f"job {move.job_id!r} is in no co-execution group")
    source, member = found
    if not move.group_id:
        raise ValueError(f"the move of {move.job_id!r} to a new group needs its group_id")
    without, _released = remove_job(state, move.job_id, group_id=source.id)
    return apply_placement(without, member.job, move.placement, group_id=move.group_id)


def plan_consolidation(
    state: ClusterState,
    group_id: str,
    *,
    now: float,
    progress: Mapping[str, JobProgress],
    config: PlannerConfig | None = None,
    since: ClusterState | None = None,
) -> list[Move]:
    """Return the moves for the members of `group_id`, best saving first.

    Each move is evaluated on the state the moves before it leave, so together they
    are consistent; the caller applies them in order (`apply_move`). `since`: the state
    the caller's previous pass planned on (rule 9; None: every candidate of rule 7).
    """
    moves: list[Move] = []
    current = state
    cfg = config or PlannerConfig()
    small = max(cfg.consolidation.small_groups, 1 if cfg.consolidation.singletons else 0)
    first = {  # the candidates' groups and selves on `state` (later rounds: every job's)
        m.job.id: (g, m)
        for g in state.groups
        if g.id == group_id or len(g.members) <= small
        for m in g.members
    }
    joinable = JoinFilter(current, cfg)
    # A candidate's answer in a round after the first: the same as in the round before
    # when the move between them left its group and its answer's destination alone and
    # neither group the move changed is an option for it now (rule 8). `local` (rollout
    # pool unbounded, nothing cordoned) with an unbounded training pool too: a departure
    # frees nothing a job alone elsewhere could not have had before (rule 9).
    local = answers_local(state)
    frees_nothing = local and state.spec.gpu_type(Pool.TRAIN).nodes is None
    if since is not None and cfg.consolidation.changed_options_only and frees_nothing:
        first = _with_changed_options(first, state, since, group_id, joinable)
    candidates = set(first)
    # each candidate's group and self on `current`: a move changes only its source and
    # destination groups (the others are the same objects), so only theirs are looked up
    # again (rebuilding it over every job at every round was 6% of a departure at size)
    where = dict(first)
    answers: dict[str, Move | None] = {}
    changed: tuple[str, ...] = ()

    def answer(found: tuple[Group, Member]) -> Move | None:
        job_id = found[1].job.id
        if local and job_id in answers:
            prior = answers[job_id]
            same = prior is None or (
                prior.placement.group_id not in changed and not prior.placement.new_nodes
            )
            if same and found[0].id not in changed and not joinable.passes_any(found[1], changed):
                return prior
        # a candidate the filters skip is one `best_move` answers None for: that answer is
        # kept for the next round like best_move's own (rule 8; asking the remembered
        # filter again over every group, round after round, was most of its time at size)
        if not joinable.admits_none(found, progress, departure=current is state) and (
            joinable.may_move(*found, progress)
        ):
            mv = _best_move(current, found, now=now, progress=progress, cfg=cfg)
        else:
            mv = None
        answers[job_id] = mv
        return mv

    # The pass's evaluations (groups' expected costs, SLO checks) repeat across its
    # candidates and its rounds: memoised for the pass (scheduler.planner.memo).
    with evaluation_scope(progress):
        while candidates:
            if joinable.state is not current:
                joinable = JoinFilter(current, cfg)
            options = [
                mv
                for job_id in sorted(candidates)
                if (found := where.get(job_id)) is not None and (mv := answer(found))
            ]
            if not options:
                break
            best = max(options, key=lambda mv: (mv.saving_usd, mv.job_id))
            if not best.group_id:  # co-located: a provisional id, for the moves after it
                best = replace(best, group_id=f"{best.job_id}:colocated")
            moves.append(best)
            current = apply_move(current, best)
            candidates.discard(best.job_id)
            changed = (best.from_group, best.group_id)
            for gid in changed:
                at = group_position(planner_index(current), gid)
                if at is not None:
                    g = current.groups[at]
                    where.update((m.job.id, (g, m)) for m in g.members if m.job.id in candidates)
    return moves


def _with_changed_options(
    first: dict[str, tuple[Group, Member]],
    state: ClusterState,
    since: ClusterState,
    group_id: str,
    joinable: JoinFilter,
) -> dict[str, tuple[Group, Member]]:
    """Return the candidates of rule 7 whose options changed since the state `since`
    (rule 9): the members of the group left, the jobs whose own group changed, and those
    a group that changed (or is new) passes the first checks for."""
    # (a group is immutable and its id unique in a state: it changed, or is new, exactly
    # when the object was not among `since`'s, which keeps them alive)
    before = set(map(id, since.groups))
    changed = [g.id for g in state.groups if id(g) not in before]
    touched = set(changed)
    touched.add(group_id)
    return {
        job_id: found
        for job_id, found in first.items()
        if found[0].id in touched or (changed and joinable.passes_any(found[1], changed))
    }


def _colocated_by_id(state: ClusterState) -> dict[str, tuple[Group, Member]]:
    """Return every co-located job's group and self by job id: a co-located job is alone in
    its group (not every placed job's: at 2,000 live jobs that dict, made again at every
    round of an arrival's partner search, was a tenth of the arrivals' time)."""
    return {g.members[0].job.id: (g, g.members[0]) for g in state.groups if not g.rollout_nodes}


class _WithJob(Mapping[str, JobProgress]):
    """`progress` with one more job's: a view (copying every running job's progress at
    every arrival was linear in the running jobs, issue 25 item 4)."""

    __slots__ = ("_base", "_id", "_own")

    def __init__(self, base: Mapping[str, JobProgress], job_id: str, own: JobProgress) -> None:
        self._base, self._id, self._own = base, job_id, own

    def __getitem__(self, job_id: str) -> JobProgress:
        return self._own if job_id == self._id else self._base[job_id]

    def get(self, job_id: str, default: Any = None) -> Any:
        return self._own if job_id == self._id else self._base.get(job_id, default)

    def __contains__(self, job_id: object) -> bool:
        return job_id == self._id or job_id in self._base

    def __iter__(self) -> Iterator[str]:
        yield self._id
        yield from (k for k in self._base if k != self._id)

    def __len__(self) -> int:
        return len(self._base) + (self._id not in self._base)


@dataclass(frozen=True)
class ArrivalPlan:
    """Where an arriving job goes, and the co-located jobs to move in with it."""

    result: PlacementResult
    movers: tuple[Move, ...] = ()  # co-located jobs to move into the job's new group


def place_with_partners(
    job: JobProfile,
    state: ClusterState,
    *,
    now: float,
    progress: Mapping[str, JobProgress],
    config: PlannerConfig | None = None,
    colocated: bool = False,
    with_slo_probability: bool = True,
) -> ArrivalPlan:
    """Place an arriving job; open a group for co-located jobs to join when that pays.

    A co-located job runs alone and admits no one, so a newcomer that would pair well
    with it never meets it. When Algorithm 1 (with the co-located strategy if
    `colocated`) opens a new group for the newcomer or puts it on its own training
    nodes, the planner also tries the newcomer in a new disaggregated group with the
    co-located jobs moving into it (checkpoint at their next iteration boundary,
    restart): it does so when the moves' savings exceed what the new group costs the
    newcomer over co-location (both in expected remaining dollars, restarts
    included). `with_slo_probability=False`: the result's `slo_probability` is left empty
    (`place`'s, for a caller that reads none).
    """
    cfg = config or PlannerConfig()
    # (one scope for the two decisions on `state` when the caller keeps a lasting memo, as
    # the simulator does: a group's candidates read its expected cost again, and the second
    # decision the first's; scheduler.planner.memo. The live planner keeps none: there the
    # memo's keys cost more than they save)
    scope = evaluation_scope(progress) if current_lasting() is not None else nullcontext()
    with scope:
        first = _place(
            cfg,
            job,
            state,
            progress,
            colocated=colocated,
            with_slo_probability=with_slo_probability,
        )
        if (
            first.strategy not in (Strategy.COLOCATED, Strategy.NEW_GROUP)
            or first.placement is None
        ):
            return ArrivalPlan(first)
        if not colocated_groups(planner_index(state)):  # (no co-located job to move)
            return ArrivalPlan(first)
        alt = first
        if first.strategy is not Strategy.NEW_GROUP:
            alt = _place(
                cfg,
                job,
                state,
                progress,
                colocated=False,
                with_slo_probability=with_slo_probability,
            )
    if alt.strategy is not Strategy.NEW_GROUP or alt.placement is None:
        return ArrivalPlan(first)
    gid = f"{job.id}:new"
    trial = apply_placement(state, job, alt.placement, group_id=gid)
    mine = _WithJob(progress, job.id, JobProgress(now))
    factor = state.spec.train.rollout_speed_factor
    n = job.iterations
    extra = 0.0  # what the new group costs the newcomer over its first choice
    if first is not alt:
        extra = (
            alt.marginal_cost_per_hour * n * expected_solo_s(job)
            - first.marginal_cost_per_hour * n * colocated_expected_s(job, factor)
        ) / SECONDS_PER_HOUR
    colocated_jobs = set(_colocated_by_id(state))
    movers: list[Move] = []
    current = trial
    with evaluation_scope(mine):  # the rounds re-evaluate the same groups (memo)
        while colocated_jobs:
            # only a move into the new group counts: a job its first checks keep out of
            # that group is not asked (`JoinFilter`; a co-located job moves only by joining)
            where, joinable = _colocated_by_id(current), JoinFilter(current, cfg)
            found = [
                mv
                for job_id in sorted(colocated_jobs)
                if (at := where.get(job_id)) is not None
                and joinable.may_join(at[1], gid)
                and not joinable.admits_none(at, mine, gid)
                # (`at`: its group and self in `current`, as best_move would find them)
                and (mv := _best_move(current, at, now=now, progress=mine, cfg=cfg))
                and mv.group_id == gid
            ]
            if not found:
                break
            best = max(found, key=lambda mv: (mv.saving_usd, mv.job_id))
            movers.append(best)
            current = apply_move(current, best)
            colocated_jobs.discard(best.job_id)
    if sum(mv.saving_usd for mv in movers) <= extra + cfg.consolidation.min_saving_usd:
        return ArrivalPlan(first)
    return ArrivalPlan(alt, tuple(movers))


def admit(
    job: JobProfile,
    state: ClusterState,
    *,
    config: PlannerConfig,
    progress: Mapping[str, JobProgress],
    now: float,
    policy: str = "rollmux",
    rng: random.Random | None = None,
    with_slo_probability: bool = True,
) -> tuple[PlacementResult, tuple[str, ...]]:
    """Place an arriving job as the planner configured by `config` does (the simulator's
    rollmux and the live planning pass): with consolidation and the co-located strategy,
    `place_with_partners` (which may name co-located jobs to move into the newcomer's new
    group: returned second), else Algorithm 1 with the config's admission options. The
    co-located strategy competes on arrival only with `admission.colocated_on_arrival`.
    `with_slo_probability=False` leaves a FIT's `slo_probability` empty (`place`'s)."""
    adm = config.admission
    on_arrival = adm.colocated and adm.colocated_on_arrival
    if policy == "rollmux" and config.consolidation.enabled and adm.colocated:
        plan = place_with_partners(
            job,
            state,
            now=now,
            progress=progress,
            config=config,
            colocated=on_arrival,
            with_slo_probability=with_slo_probability,
        )
        return plan.result, tuple(m.job_id for m in plan.movers)
    result = place(
        job,
        state,
        policy=policy,
        config=config,
        rng=rng,
        progress=progress,
        colocated=on_arrival,
        with_slo_probability=with_slo_probability,
    )
    return result, ()


def destination_keeps_slo(
    without: ClusterState,
    result: PlacementResult,
    restart_s: float,
    *,
    now: float,
    progress: Mapping[str, JobProgress],
    config: PlannerConfig | None = None,
) -> bool:
    """Return True when every member of the group a re-planned job would join (`result`,
    placed on the state `without` it) keeps its SLO over its whole run, the mover's
    restart included where it shares a node (`partners_keep_slo`); a new group: True."""
    placement = result.placement
    target = next((g for g in without.groups if placement and g.id == placement.group_id), None)
    if target is None:
        return True  # a new group: no one to delay
    return partners_keep_slo(target, result, restart_s, now=now, progress=progress, config=config)
