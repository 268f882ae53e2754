"""Domain types of the scheduling core (paper sections 2-4).

Everything here is a frozen dataclass or an enum: the planner, the round-robin
scheduler, the simulator and the live (Django/Celery) planner all exchange these
values. Nothing in `scheduler/` imports Django, Celery, Ray or Redis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from scheduler.compiled import python_class


class Pool(StrEnum):
    """The two GPU pools of a disaggregated RL deployment."""

    ROLLOUT = "rollout"
    TRAIN = "train"


class PhaseKind(StrEnum):
    """The phases of an on-policy iteration: rollout, training, then weight sync.

    The sync phase carries the new weights from the trainers to the job's rollout
    workers; it runs on the job's ROLLOUT nodes (the receivers: trainers send from their
    offloaded copy, so the training nodes are free when training ends), before the
    job's next rollout. A job with `t_sync_s == 0` (the default) has no sync phases.
    """

    ROLLOUT = "rollout"
    TRAIN = "train"
    SYNC = "sync"

    @property
    def pool(self) -> Pool:
        """Return the pool whose nodes run this phase (sync: the rollout pool)."""
        return Pool.TRAIN if self is PhaseKind.TRAIN else Pool.ROLLOUT

    @property
    def next(self) -> PhaseKind:
        """Return the next phase kind of a job without weight sync (sync: rollout)."""
        return PhaseKind.TRAIN if self is PhaseKind.ROLLOUT else PhaseKind.ROLLOUT


class Strategy(StrEnum):
    """How Algorithm 1 admitted a job (Fig. 5 of the paper)."""

    DIRECT_PACKING = "direct_packing"
    ROLLOUT_SCALING = "rollout_scaling"
    NEW_GROUP = "new_group"
    # issue 14: both phases on the job's own training nodes, alone (veRL-style); a
    # co-located group has no rollout nodes and admits no one
    COLOCATED = "colocated"


class PlacementStatus(IntEnum):
    """Ordered outcome of a placement attempt: never < not now < yes."""

    INFEASIBLE = 0  # can never run on this cluster (e.g. memory above every node's)
    RETRY = 1  # could run, but not with the capacity free now
    FIT = 2


@dataclass(frozen=True)
class GpuType:
    """A GPU model with its price and the shape of the nodes that carry it."""

    name: str
    price_per_gpu_hour: float
    gpus_per_node: int
    host_mem_gb: float
    # pool capacity in nodes (None = unbounded): the nodes that can ever take work, cordoned
    # (drained) ones included, down ones not
    nodes: int | None = None
    nodes_down: int = 0  # nodes of the pool out of service, not in `nodes` (named in reasons)
    # A rollout phase on this GPU type takes the profile's time x this factor (profiles
    # are measured on the rollout type: 1.0 there; on the training type 1.0 is the
    # trace-format spec's co-located assumption, 1.5 a slower one)
    rollout_speed_factor: float = 1.0

    @property
    def node_price_per_hour(self) -> float:
        return self.price_per_gpu_hour * self.gpus_per_node


@dataclass(frozen=True)
class ClusterSpec:
    """The cluster spec file (trace-format.md): the two GPU types and switch overhead."""

    rollout: GpuType
    train: GpuType
    switch_overhead_s: float = 2.0

    def gpu_type(self, pool: Pool) -> GpuType:
        return self.rollout if pool is Pool.ROLLOUT else self.train


@dataclass(frozen=True)
class Node:
    """One node of a pool. `host_mem_gb` is what residency may use on it.

    A cordoned node (the inventory's "drained") keeps running the members already pinned
    to it but takes no new member: the planner never hands it out free, never packs a new
    job onto it and never shares it with a joining job. It still counts in the pool's
    capacity (the operator will bring it back up or take it down).
    """

    name: str
    pool: Pool
    gpu_type: str
    gpus: int
    host_mem_gb: float
    price_per_hour: float  # gpus x price per GPU-hour of its type
    cordoned: bool = False


_PHASE_TIMES = frozenset({"t_roll_max_s", "t_roll_min_s", "t_train_max_s", "t_train_min_s"})


@python_class  # (copied through its __dict__: with_phase_times)
@dataclass(frozen=True)
class JobProfile:
    """One RL post-training job: the fields of the trace format (v1)."""

    id: str
    arrival_s: float
    iterations: int
    rollout_gpus: int
    train_gpus: int
    t_roll_max_s: float
    t_train_max_s: float
    host_mem_gb: float
    slo: float
    t_roll_min_s: float | None = None  # None = the max
    t_train_min_s: float | None = None
    tenant: str = "default"
    model: str = ""
    priority: int = 0  # higher is planned first (live planner); the trace has none
    # The clock the job's phases run on: wall-clock seconds = profile seconds / time_scale
    # (the emulating runners speed a profile up; a real runner is 1). The planner works in
    # profile time, which is only a common clock for jobs of one time_scale, so jobs share
    # a co-execution group only with jobs of the same time_scale. Not in the trace format:
    # traces and the simulator are all 1.
    time_scale: float = 1.0
    # Weight sync per iteration, in profile seconds: the sync phase after each training
    # but the last (nothing reads the last weights), on the job's rollout nodes. Counted
    # in the iteration (T_solo) and on the rollout side of the meta-iteration.
    t_sync_s: float = 0.0
    # The job's observed mean solo iteration time (profile seconds) once it has run
    # (the live planner learns it from its phase records); None: not known yet. The
    # SLO check (scheduler.slo) uses it instead of the distribution's mean.
    observed_solo_s: float | None = None
    # A job whose durations trend (scheduler.replan.move_profile): its forecast rollout +
    # training over each of a few equal pieces of its remaining run, over their mean (so
    # the factors average 1); the SLO check follows it piece by piece (scheduler.slo).
    # None: flat.
    trend_shape: tuple[float, ...] | None = None
    # Measured once the job has run (profile seconds; None: not known, the cluster's
    # constant applies): its warm start (a phase's reload from host memory), the switch
    # overhead its phases pay after another member's on the same nodes; and its restart
    # (a cold start: workers set up, the checkpoint restored), what a move costs it.
    switch_s: float | None = None
    restart_s: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ValueError(
                f"job {self.id!r}: time_scale must be a finite number > 0, got {self.time_scale!r}"
            )
        if not (math.isfinite(self.t_sync_s) and self.t_sync_s >= 0):
            raise ValueError(
                f"job {self.id!r}: t_sync_s must be a finite number >= 0, got {self.t_sync_s!r}"
            )
        observed = self.observed_solo_s
        if observed is not None and not (math.isfinite(observed) and observed > 0):
            raise ValueError(
                f"job {self.id!r}: observed_solo_s must be a finite number > 0, got {observed!r}"
            )
        for name in ("switch_s", "restart_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(
                    f"job {self.id!r}: {name} must be a finite number >= 0, got {value!r}"
                )
        shape = self.trend_shape
        if shape is not None and not (shape and all(math.isfinite(f) and f > 0 for f in shape)):
            raise ValueError(
                f"job {self.id!r}: trend_shape must be finite factors > 0, got {shape!r}"
            )

    def with_phase_times(self, **times: float) -> JobProfile:
        """Return this profile with phase times replaced (`t_roll_max_s`, `t_roll_min_s`,
        `t_train_max_s`, `t_train_min_s`): `dataclasses.replace` without re-running
        `__post_init__`, whose checks read none of them. The planner's SLO check and
        expected cost make such copies of every member of every group they evaluate
        (issue 25 item 4)."""
        if not times.keys() <= _PHASE_TIMES:
            raise ValueError(f"not phase times: {sorted(times.keys() - _PHASE_TIMES)}")
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__)
        out.__dict__.update(times)
        return out

    def switch_overhead(self, default_s: float) -> float:
        """Return the switch overhead of this job's phases: measured, else `default_s`."""
        return default_s if self.switch_s is None else self.switch_s

    @property
    def roll_min(self) -> float:
        return self.t_roll_max_s if self.t_roll_min_s is None else self.t_roll_min_s

    @property
    def train_min(self) -> float:
        return self.t_train_max_s if self.t_train_min_s is None else self.t_train_min_s

    @property
    def t_solo_max_s(self) -> float:
        """Worst-case solo iteration time T_j^solo (weight sync included), what admission
        plans with."""
        return self.t_roll_max_s + self.t_train_max_s + self.t_sync_s

    @property
    def rollout_pool_max_s(self) -> float:
        """Return the worst-case time per iteration the job holds its rollout nodes:
        its rollout plus its weight sync."""
        return self.t_roll_max_s + self.t_sync_s

    def pool_max_s(self, pool: Pool) -> float:
        """Return the worst-case time per iteration the job holds its nodes of `pool`."""
        return self.rollout_pool_max_s if pool is Pool.ROLLOUT else self.t_train_max_s

    def phase_max_s(self, kind: PhaseKind) -> float:
        """Return the worst-case duration of one phase of `kind`."""
        if kind is PhaseKind.ROLLOUT:
            return self.t_roll_max_s
        return self.t_train_max_s if kind is PhaseKind.TRAIN else self.t_sync_s

    def gpus(self, pool: Pool) -> int:
        return self.rollout_gpus if pool is Pool.ROLLOUT else self.train_gpus


@dataclass(frozen=True)
class Member:
    """A job inside a co-execution group with the exact nodes it is pinned to (P_j)."""

    job: JobProfile
    rollout_nodes: tuple[str, ...]
    train_nodes: tuple[str, ...]

    def nodes(self, pool: Pool) -> tuple[str, ...]:
        return self.rollout_nodes if pool is Pool.ROLLOUT else self.train_nodes


@dataclass(frozen=True)
class Group:
    """A co-execution group G = (J_G, R_G, T_G, Phi_G).

    Training nodes are shared by every member; rollout nodes may differ per member.
    Groups are disjoint: a node belongs to at most one group.
    """

    id: str
    rollout_nodes: tuple[str, ...]
    train_nodes: tuple[str, ...]
    members: tuple[Member, ...] = ()

    def nodes(self, pool: Pool) -> tuple[str, ...]:
        return self.rollout_nodes if pool is Pool.ROLLOUT else self.train_nodes

    @property
    def all_nodes(self) -> tuple[str, ...]:
        return self.rollout_nodes + self.train_nodes


@dataclass(frozen=True)
class Placement:
    """Where a job goes: a group (existing, or `group_id=None` for a new one) and P_j."""

    job_id: str
    strategy: Strategy
    group_id: str | None
    rollout_nodes: tuple[str, ...]
    train_nodes: tuple[str, ...]
    new_nodes: tuple[str, ...] = ()  # nodes this placement takes from the free pool


@dataclass(frozen=True)
class PlacementResult:
    """The planner's answer for one job. Callers branch on `status`; users read `reason`."""

    status: PlacementStatus
    reason: str
    placement: Placement | None = None
    marginal_cost_per_hour: float = 0.0
    # predicted co-execution slowdown (T_meta / T_solo, worst case) per job id in
    # the resulting group, the new job included
    predicted_slowdown: dict[str, float] = field(default_factory=dict)
    # probability that each member of the resulting group meets its SLO
    # (scheduler.stochastic.slo_probabilities), the new job included
    slo_probability: dict[str, float] = field(default_factory=dict)

    @property
    def strategy(self) -> Strategy | None:
        return self.placement.strategy if self.placement else None


@dataclass(frozen=True)
class ClusterState:
    """A snapshot the planner works on: the usable nodes and the live groups.

    Nodes not in any group and not cordoned are free. Only nodes that are up or cordoned
    belong in `nodes` (a down node is out of the pool).
    """

    spec: ClusterSpec
    nodes: tuple[Node, ...]
    groups: tuple[Group, ...] = ()
    # The planner's index of this state (a scheduler.planner.index.PlannerIndex: group
    # summaries, taken and free nodes), built by `apply_placement` / `remove_job` from
    # their input's, or once by the planner for a state built by hand. It is derived
    # from `nodes` and `groups` only and records which tuples it was built for, so a
    # `dataclasses.replace` that changes either carries a stale index that is never
    # used. Not compared, not shown.
    planner_index: object | None = field(default=None, compare=False, repr=False)


# ---------------------------------------------------------------------------
# JSON-safe dicts of the domain types (the live controller's runtime snapshots)
# ---------------------------------------------------------------------------


def profile_to_dict(job: JobProfile) -> dict[str, Any]:
    """Return every field of `job` as a JSON-serialisable dict (see `profile_from_dict`).

    Unlike `scheduler.trace.job_to_dict`, which writes only the trace format's fields,
    this keeps everything (priority, time_scale, ...), for a faithful round trip.
    `dataclasses.asdict` would give the same dict (every field is a scalar or a tuple of
    floats); read field by field, it costs a tenth (a planning pass writes the runtime
    of every group it touches, each member's profile).
    """
    return {name: getattr(job, name) for name in _PROFILE_FIELDS}


_PROFILE_FIELDS = tuple(JobProfile.__dataclass_fields__)


def profile_from_dict(d: Mapping[str, Any]) -> JobProfile:
    """Rebuild a JobProfile from `profile_to_dict` output (unknown keys are ignored)."""
    fields = {k: d[k] for k in JobProfile.__dataclass_fields__ if k in d}
    if fields.get("trend_shape") is not None:  # JSON has lists
        fields["trend_shape"] = tuple(float(f) for f in fields["trend_shape"])
    return JobProfile(**fields)


def member_to_dict(m: Member) -> dict[str, Any]:
    """Return `m` as a JSON-serialisable dict."""
    return {
        "job": profile_to_dict(m.job),
        "rollout_nodes": list(m.rollout_nodes),
        "train_nodes": list(m.train_nodes),
    }


def member_from_dict(d: Mapping[str, Any]) -> Member:
    """Rebuild a Member from `member_to_dict` output."""
    return Member(
        job=profile_from_dict(d["job"]),
        rollout_nodes=tuple(str(x) for x in d["rollout_nodes"]),
        train_nodes=tuple(str(x) for x in d["train_nodes"]),
    )
