"""Placement policies the simulator can run, behind one small adapter interface.

- `rollmux`, `solo-disagg`, `random`, `greedy-most-idle`: the core planner's
  `place` / `apply_placement` / `remove_job` (the very functions the live
  planner calls) with that policy name, and the core's round-robin
  `GroupRuntime` inside each co-execution group.
- `colocated` (veRL-style baseline, trace-format.md): every job runs both phases
  on its own `train_gpus` GPUs of the training type, one after the other, no
  sharing. The core has no such policy, so it lives here: it takes
  `train_gpus / gpus_per_node` free training nodes, runs the rollout on them for
  the duration drawn for the rollout pool (the spec: same time as on the
  rollout type), and releases them when the job ends.
- `optimal` is built by scheduler.sim.optimal on top of `PlannedPolicy` below,
  which replays a fixed plan (job -> group, rollout sharing class).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduler.cluster import nodes_needed
from scheduler.compiled import python_class
from scheduler.config import ALGORITHM1, PlannerConfig
from scheduler.group_runtime import GroupRuntime, RawPhaseStart
from scheduler.model import (
    ClusterSpec,
    ClusterState,
    Group,
    JobProfile,
    Member,
    PhaseKind,
    Placement,
    PlacementResult,
    PlacementStatus,
    Pool,
    Strategy,
)
from scheduler.planner import apply_placement, remove_job
from scheduler.planner.consolidation import (
    Move,
    admit,
    apply_move,
    best_move,
    destination_keeps_slo,
    lone_wait_s,
    plan_consolidation,
    restart_of,
)
from scheduler.planner.memo import LastingMemo, evaluation_scope, lasting
from scheduler.planner.objective import JobProgress
from scheduler.sim.longtail import LongTailModel
from scheduler.sim.protocols import Runtime

# what a replayed fixed plan (`optimal`, the MILP's) runs inside its groups: rollmux's
# runtime (long-tail migration at the shipped threshold), no admission of its own
PLAN_RUNTIME = ALGORITHM1.with_(long_tail_threshold=PlannerConfig().runtime.long_tail_threshold)

CORE_POLICIES = ("rollmux", "solo-disagg", "random", "greedy-most-idle")
ALL_POLICIES = ("rollmux", "solo-disagg", "colocated", "random", "greedy-most-idle", "optimal")
OPTIMAL_MAX_JOBS = 8


def free_nodes(state: ClusterState, pool: Pool) -> list[str]:
    """Return the names of the nodes of `pool` that belong to no group and are not
    cordoned, in order."""
    used: set[str] = set()
    for group in state.groups:
        used.update(group.rollout_nodes)
        used.update(group.train_nodes)
    return [n.name for n in state.nodes if n.pool is pool and n.name not in used and not n.cordoned]


# --- colocated (veRL) -----------------------------------------------------------


class SoloRuntime:
    """Run one job's phases back to back on nodes it owns alone (no switches).

    For `colocated` both phases run on the job's training nodes.
    """

    def __init__(self) -> None:
        self.member: Member | None = None
        self.iterations = 0
        self.iteration = 0
        self.next_kind: PhaseKind | None = None
        self.running = False

    def admit(self, member: Member, *, iterations: int, start_iteration: int = 0) -> None:
        """Take the group's only member; its first phase is a rollout."""
        self.member = member
        self.iterations = iterations
        self.iteration = start_iteration
        self.next_kind = PhaseKind.ROLLOUT

    def remove(self, job_id: str) -> None:
        """Drop the member."""
        self.member = None
        self.next_kind = None

    def start_ready_raw(self) -> list[RawPhaseStart]:
        """Start the member's next phase if nothing is running (the fields of the core's
        `PhaseStart`, as a tuple: never a switch, cold at its first rollout)."""
        if self.member is None or self.running or self.next_kind is None:
            return []
        self.running = True
        nodes = self.member.train_nodes
        if self.next_kind is not PhaseKind.TRAIN and self.member.rollout_nodes:
            nodes = self.member.rollout_nodes
        cold = self.iteration == 0 and self.next_kind is PhaseKind.ROLLOUT
        return [(self.member.job.id, self.next_kind, self.iteration, nodes, False, cold, 0, cold)]

    def end_phase(self, job_id: str, kind: PhaseKind) -> bool:
        """End the running phase and queue the next one; True when the job is done.

        A job with weight sync on its own rollout nodes (`solo-disagg`) syncs after
        every training but the last, as in a co-execution group; `colocated` has its
        weights on the GPUs that train, so it has no sync phase.
        """
        self.running = False
        if kind is PhaseKind.TRAIN:
            if self.iteration + 1 >= self.iterations:
                self.iteration += 1
                self.next_kind = None
                return True
            member = self.member
            if member is not None and member.rollout_nodes and member.job.t_sync_s > 0:
                self.next_kind = PhaseKind.SYNC  # same iteration, on the rollout nodes
                return False
            self.iteration += 1
        elif kind is PhaseKind.SYNC:
            self.iteration += 1
        self.next_kind = kind.next
        return False


class StaticPlacement:
    """Policies that never move a job once placed (every policy but consolidating rollmux)."""

    long_tail: LongTailModel | None = None  # no long-tail migration

    def on_departure(
        self, state: ClusterState, group_id: str, now: float, progress: Mapping[str, JobProgress]
    ) -> Sequence[str]:
        """Name no job to move."""
        return ()

    def move(
        self,
        state: ClusterState,
        job_id: str,
        now: float,
        progress: Mapping[str, JobProgress],
        *,
        new_group_id: str | None = None,
    ) -> tuple[ClusterState, Move] | None:
        """Move nothing."""
        return None

    def arrival_movers(self) -> Sequence[str]:
        """Name no job to move on an arrival."""
        return ()

    def lone_wait_s(self, state: ClusterState, job: JobProfile) -> float | None:
        """Never re-plan a job alone."""
        return None

    def partners_keep_slo(
        self,
        without: ClusterState,
        result: PlacementResult,
        restart_s: float,
        now: float,
        progress: Mapping[str, JobProgress],
    ) -> bool:
        """Hold no destination member to its SLO over its run (these plan SLOs at most once)."""
        return True


def _remove_member(state: ClusterState, job_id: str) -> ClusterState:
    """Drop a job from its group, releasing nodes no remaining member is pinned to."""
    groups: list[Group] = []
    for group in state.groups:
        if not any(m.job.id == job_id for m in group.members):
            groups.append(group)
            continue
        members = tuple(m for m in group.members if m.job.id != job_id)
        if not members:
            continue
        roll = {n for m in members for n in m.rollout_nodes}
        train = {n for m in members for n in m.train_nodes}
        groups.append(
            replace(
                group,
                members=members,
                rollout_nodes=tuple(n for n in group.rollout_nodes if n in roll),
                train_nodes=tuple(n for n in group.train_nodes if n in train),
            )
        )
    return replace(state, groups=tuple(groups))


class ColocatedPolicy(StaticPlacement):
    """veRL-style colocation: each job alone on its own training-type nodes."""

    name = "colocated"

    def place(
        self,
        job: JobProfile,
        state: ClusterState,
        progress: Mapping[str, JobProgress] | None = None,
        now: float = 0.0,
    ) -> PlacementResult:
        """Take `train_gpus` worth of free training nodes, or say why not."""
        spec = state.spec
        need = nodes_needed(job, spec, Pool.TRAIN)
        node_mem = spec.train.host_mem_gb
        if job.host_mem_gb > node_mem:
            return PlacementResult(
                PlacementStatus.INFEASIBLE,
                f"needs {job.host_mem_gb:g} GB host memory per node; "
                f"{spec.train.name} nodes have {node_mem:g} GB",
            )
        capacity = sum(1 for n in state.nodes if n.pool is Pool.TRAIN)
        if need > capacity:
            return PlacementResult(
                PlacementStatus.INFEASIBLE,
                f"needs {need} {spec.train.name} nodes; the training pool has {capacity}",
            )
        free = free_nodes(state, Pool.TRAIN)
        if len(free) < need:
            return PlacementResult(
                PlacementStatus.RETRY,
                f"needs {need} free {spec.train.name} nodes; {len(free)} free now",
            )
        nodes = tuple(free[:need])
        return PlacementResult(
            PlacementStatus.FIT,
            f"colocated on {need} {spec.train.name} node(s)",
            Placement(job.id, Strategy.COLOCATED, None, (), nodes, nodes),
            marginal_cost_per_hour=need * spec.train.node_price_per_hour,
            predicted_slowdown={job.id: 1.0},
        )

    def apply(
        self, state: ClusterState, job: JobProfile, placement: Placement, group_id: str
    ) -> ClusterState:
        """Add a one-member group holding only training nodes."""
        member = Member(job=job, rollout_nodes=(), train_nodes=placement.train_nodes)
        group = Group(group_id, (), placement.train_nodes, (member,))
        return replace(state, groups=state.groups + (group,))

    def remove(self, state: ClusterState, job_id: str) -> ClusterState:
        """Drop the job's group and release its nodes."""
        return _remove_member(state, job_id)

    def runtime(self, group_id: str, spec: ClusterSpec, *, colocated: bool = False) -> Runtime:
        """Return a runtime that runs the job's phases back to back."""
        return SoloRuntime()


# --- the core planner's policies ---------------------------------------------------


@python_class  # (bench/sim_speed.py times its on_departure in place)
class CorePolicy:
    """Adapter over the core planner (`scheduler.planner`) and `GroupRuntime`.

    Its one knob is the planner configuration (`scheduler.config.PlannerConfig`): an
    arrival is placed by the core's `admit` (the live planner's call), and with
    consolidation enabled (rollmux only) a departure asks the core's `plan_consolidation`
    which survivors to move, and the engine re-plans each at its next iteration boundary
    with `best_move` / `apply_move`: the live planner's calls.
    """

    def __init__(self, name: str, *, seed: int, config: PlannerConfig | None = None) -> None:
        self.name = name
        self.config = ALGORITHM1 if config is None else config
        threshold = self.config.runtime.long_tail_threshold
        self.long_tail = (
            LongTailModel(threshold=threshold) if name == "rollmux" and threshold > 0 else None
        )
        self._movers: list[str] = []
        # the state its previous consolidation pass planned on (consolidation rule 9)
        self._last_pass: ClusterState | None = None
        # random and greedy-most-idle draw from this; seeded so runs reproduce.
        self.rng = random.Random(seed)
        # the planner's evaluations that read neither progress nor the clock, kept across
        # its decisions (scheduler.planner.memo): the run asks about the same groups again
        self.memo = LastingMemo()
        self._lone_waits: dict[
            str, tuple[JobProfile, ClusterSpec, PlannerConfig, float | None]
        ] = {}

    @property
    def consolidates(self) -> bool:
        """Return True when departures consolidate (rollmux with consolidation enabled)."""
        return self.name == "rollmux" and self.config.consolidation.enabled

    def use_drift_replan(self, on: bool) -> None:
        """Run with drift re-planning on or off (the simulation's `replan_drift`): the
        movers' hedge is in force only while it is on (`PlannerConfig.drift_hedge`)."""
        self.config = self.config.with_(replan__enabled=on)

    def place(
        self,
        job: JobProfile,
        state: ClusterState,
        progress: Mapping[str, JobProgress] | None = None,
        now: float = 0.0,
    ) -> PlacementResult:
        """Place an arrival with the core's `admit` (the live planner's call); it may also
        name co-located jobs to move into the newcomer's new group (`arrival_movers`)."""
        with lasting(self.memo):
            result, movers = admit(
                job,
                state,
                config=self.config,
                progress={} if progress is None else progress,
                now=now,
                policy=self.name,
                rng=self.rng,
            )
        self._movers = list(movers)
        return result

    def apply(
        self, state: ClusterState, job: JobProfile, placement: Placement, group_id: str
    ) -> ClusterState:
        """Apply the placement with the core's `apply_placement`."""
        return apply_placement(state, job, placement, group_id=group_id)

    def remove(self, state: ClusterState, job_id: str) -> ClusterState:
        """Remove the job with the core's `remove_job` (it releases unused nodes)."""
        new_state, _released = remove_job(state, job_id)
        return new_state

    def runtime(self, group_id: str, spec: ClusterSpec, *, colocated: bool = False) -> Runtime:
        """Return the core's round-robin runtime for a new co-execution group.

        `solo-disagg` never puts a second member in a group, and a one-member
        round robin is "rollout, then training, on its own nodes": SoloRuntime
        gives the identical schedule (tests/scheduler/test_sim.py checks it) at a
        fraction of the cost, which keeps a 200-job trace fast to simulate.
        """
        if self.name == "solo-disagg" or colocated:
            # a co-located group has one member, whose rollouts run on its training nodes
            return SoloRuntime()
        return GroupRuntime(group_id, switch_overhead_s=spec.switch_overhead_s)

    def arrival_movers(self) -> Sequence[str]:
        """Return the co-located jobs the last `place` moves into the newcomer's group."""
        return tuple(self._movers)

    def lone_wait_s(self, state: ClusterState, job: JobProfile) -> float | None:
        """Return how long a job alone in a disaggregated group waits for a partner
        before it is re-planned (`lone_wait_s` of the core), or None: never."""
        cfg = self.config
        factor = cfg.consolidation.lone_wait
        if not self.consolidates or not cfg.admission.colocated or factor is None:
            return None
        hit = self._lone_waits.get(job.id)  # asked at every boundary of a lone job
        if hit is not None and hit[0] is job and hit[1] is state.spec and hit[2] is cfg:
            return hit[3]
        wait = lone_wait_s(job, state.spec, restart_s=restart_of(cfg)(job))
        out = None if wait is None else wait * factor
        self._lone_waits[job.id] = (job, state.spec, cfg, out)
        return out

    def on_departure(
        self, state: ClusterState, group_id: str, now: float, progress: Mapping[str, JobProgress]
    ) -> Sequence[str]:
        """Return the survivors of `group_id` the core would move now."""
        if not self.consolidates:
            return ()
        every = self.config.consolidation.every_departure
        if not every and not any(g.id == group_id for g in state.groups):
            return ()  # the group left with its last member: nobody survived it
        with lasting(self.memo):
            moves = plan_consolidation(
                state, group_id, now=now, progress=progress, config=self.config,
                since=self._last_pass,
            )  # fmt: skip
        self._last_pass = state
        return [m.job_id for m in moves]

    def move(
        self,
        state: ClusterState,
        job_id: str,
        now: float,
        progress: Mapping[str, JobProgress],
        *,
        new_group_id: str | None = None,
    ) -> tuple[ClusterState, Move] | None:
        """Re-plan `job_id`'s move on the state of now; return the new state and the move.

        A move into a new (co-located) group is named `new_group_id`; without one such
        a move is returned with the state unchanged, so the engine can name it.
        """
        if not self.consolidates:
            return None
        # (a scope for the move's one decision: its candidates in one group read that
        # group's expected cost again, scheduler.planner.memo)
        with lasting(self.memo), evaluation_scope(progress):
            found = best_move(state, job_id, now=now, progress=progress, config=self.config)
        if found is None:
            return None
        if found.placement.group_id is None and new_group_id is None:
            return state, found
        found = replace(found, group_id=found.placement.group_id or new_group_id or "")
        return apply_move(state, found), found

    def partners_keep_slo(
        self,
        without: ClusterState,
        result: PlacementResult,
        restart_s: float,
        now: float,
        progress: Mapping[str, JobProgress],
    ) -> bool:
        """Return True when every member of the group a re-planned job moves into (`result`,
        on the state `without` it) keeps its SLO over its whole run, the mover's restart
        included where it shares a node (consolidation's rule 4, `destination_keeps_slo`)."""
        with lasting(self.memo):
            return destination_keeps_slo(
                without, result, restart_s, now=now, progress=progress, config=self.config
            )


# --- a fixed plan (used by `optimal`) ----------------------------------------------


# The rollout class of a job the plan runs co-located (alone on its training nodes).
COLOCATED_CLASS = "colocated"


@dataclass(frozen=True)
class PlanEntry:
    """Where a planned job goes: a group key and a rollout sharing class in it
    (`COLOCATED_CLASS`: alone, both phases on its training nodes)."""

    group: str
    rollout_class: str


def pick_class_nodes(mates: Sequence[Member], need: int) -> list[str]:
    """Pick up to `need` of a rollout class's nodes for a new member, least loaded first.

    The load of a node is the summed worst-case rollout time of the class-mates
    pinned to it, so two small jobs joining a large job's class land on different
    nodes (the paper's Spatial Mux). Ties keep the class's node order.
    """
    load: dict[str, float] = {}
    for mate in mates:
        for node in mate.rollout_nodes:
            load[node] = load.get(node, 0.0) + mate.job.t_roll_max_s
    ordered_nodes = sorted(load, key=lambda node: (load[node], list(load).index(node)))
    return ordered_nodes[:need]


class PlannedPolicy(StaticPlacement):
    """Replay a fixed plan: job -> (group, rollout class), nodes taken on arrival.

    Members of one rollout class share the same rollout nodes (as many as the
    largest of them needs); every member of a group shares the group's training
    nodes. Nodes are taken from the free pool when first needed and released when
    no member is pinned to them any more, like the core's `remove_job`.
    """

    name = "optimal"

    def __init__(self, plan: Mapping[str, PlanEntry], *, runtime_policy: CorePolicy) -> None:
        self.plan = dict(plan)
        self.core = runtime_policy
        self.long_tail = runtime_policy.long_tail  # the runtime rollmux runs, tail included
        self.group_ids: dict[str, str] = {}  # plan group key -> live group id

    def _live_group(self, state: ClusterState, key: str) -> Group | None:
        group_id = self.group_ids.get(key)
        if group_id is None:
            return None
        for group in state.groups:
            if group.id == group_id:
                return group
        return None

    def place(
        self,
        job: JobProfile,
        state: ClusterState,
        progress: Mapping[str, JobProgress] | None = None,
        now: float = 0.0,
    ) -> PlacementResult:
        """Build the planned placement against the nodes live now."""
        spec = state.spec
        entry = self.plan[job.id]
        if entry.rollout_class == COLOCATED_CLASS:
            free = free_nodes(state, Pool.TRAIN)[: nodes_needed(job, spec, Pool.TRAIN)]
            if len(free) < nodes_needed(job, spec, Pool.TRAIN):
                return PlacementResult(PlacementStatus.RETRY, "not enough free nodes for the plan")
            return PlacementResult(
                PlacementStatus.FIT,
                "planned by the offline optimum (co-located)",
                Placement(job.id, Strategy.COLOCATED, None, (), tuple(free), tuple(free)),
                marginal_cost_per_hour=sum(n.price_per_hour for n in state.nodes if n.name in free),
            )
        group = self._live_group(state, entry.group)
        roll_need = nodes_needed(job, spec, Pool.ROLLOUT)
        train_need = nodes_needed(job, spec, Pool.TRAIN)
        free_roll = free_nodes(state, Pool.ROLLOUT)
        free_train = free_nodes(state, Pool.TRAIN)
        roll: list[str] = []
        train: list[str] = []
        if group is not None:
            train = list(group.train_nodes[:train_need])
            mates = [
                m for m in group.members if self.plan[m.job.id].rollout_class == entry.rollout_class
            ]
            roll = pick_class_nodes(mates, roll_need)
        new_roll = free_roll[: roll_need - len(roll)]
        new_train = free_train[: train_need - len(train)]
        if len(new_roll) < roll_need - len(roll) or len(new_train) < train_need - len(train):
            return PlacementResult(PlacementStatus.RETRY, "not enough free nodes for the plan")
        strategy = Strategy.NEW_GROUP
        if group is not None:
            strategy = Strategy.ROLLOUT_SCALING if new_roll else Strategy.DIRECT_PACKING
        new = tuple(new_roll + new_train)
        price = sum(n.price_per_hour for n in state.nodes if n.name in set(new))
        return PlacementResult(
            PlacementStatus.FIT,
            "planned by the offline optimum",
            Placement(
                job.id,
                strategy,
                group.id if group is not None else None,
                tuple(roll + new_roll),
                tuple(train + new_train),
                new,
            ),
            marginal_cost_per_hour=price,
        )

    def apply(
        self, state: ClusterState, job: JobProfile, placement: Placement, group_id: str
    ) -> ClusterState:
        """Add the job (and any new nodes) to its planned group."""
        member = Member(job, placement.rollout_nodes, placement.train_nodes)
        self.group_ids[self.plan[job.id].group] = group_id
        groups = list(state.groups)
        for index, group in enumerate(groups):
            if group.id == group_id:
                roll = group.rollout_nodes + tuple(
                    n for n in placement.rollout_nodes if n not in group.rollout_nodes
                )
                train = group.train_nodes + tuple(
                    n for n in placement.train_nodes if n not in group.train_nodes
                )
                groups[index] = Group(group_id, roll, train, group.members + (member,))
                return replace(state, groups=tuple(groups))
        groups.append(Group(group_id, placement.rollout_nodes, placement.train_nodes, (member,)))
        return replace(state, groups=tuple(groups))

    def remove(self, state: ClusterState, job_id: str) -> ClusterState:
        """Drop the job; release the nodes no remaining member is pinned to."""
        return _remove_member(state, job_id)

    def runtime(self, group_id: str, spec: ClusterSpec, *, colocated: bool = False) -> Runtime:
        """Use the core's round-robin runtime, as `rollmux` does."""
        return self.core.runtime(group_id, spec, colocated=colocated)


def make_policy(name: str, *, seed: int, config: PlannerConfig | None = None) -> Any:
    """Return the adapter for a named online policy (not `optimal`).

    `config` is rollmux's planner configuration (default: the shipped `PlannerConfig()`);
    the other core policies run Algorithm 1's admission options (`ALGORITHM1`: no levers)
    at the config's group size, `colocated` needs none.
    """
    cfg = PlannerConfig() if config is None else config
    if name == "colocated":
        return ColocatedPolicy()
    if name == "rollmux":
        return CorePolicy(name, seed=seed, config=cfg)
    if name in CORE_POLICIES:
        size = cfg.admission.max_group_size
        return CorePolicy(name, seed=seed, config=ALGORITHM1.with_(max_group_size=size))
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(ALL_POLICIES)}")


def parse_policies(text: str) -> list[str]:
    """Parse `--policy NAME[,NAME...]|all` into a list of known policy names."""
    if text.strip() == "all":
        return list(ALL_POLICIES)
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise ValueError("no policy given")
    for name in names:
        if name not in ALL_POLICIES:
            raise ValueError(f"unknown policy {name!r}; choose from {', '.join(ALL_POLICIES)}")
    return list(dict.fromkeys(names))


def ordered(names: Sequence[str]) -> list[str]:
    """Return the names in the canonical report order."""
    return [n for n in ALL_POLICIES if n in names]
