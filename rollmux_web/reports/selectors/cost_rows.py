"""The cost engine's named rows and results (cost_fetch reads them, cost_engine sums them)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NamedTuple

from rollmux_web.reports.selectors.cost_figures import CostLine

STAGE_PROFILE = "profile"  # the job's profiling run (issue 13: billed as its own line)
STAGE_RUN = "run"  # its production run: every other placement
STAGES = (STAGE_PROFILE, STAGE_RUN)  # the order a job's lines come in


class AllocRow(NamedTuple):
    """A node allocated to a group over [start_us, end_us) (end None: still allocated)."""

    group_id: int
    node_id: int
    node_name: str
    gpus: int
    gpu_type_id: int
    start_us: int
    end_us: int | None


class MemberRow(NamedTuple):
    """A placement: the job's membership of a group over [joined_us, left_us)."""

    placement_id: int
    group_id: int
    job_id: int
    joined_us: int
    left_us: int  # now for a member still in the group


class JobRow(NamedTuple):
    job_id: int
    name: str
    tenant_id: int
    tenant: str
    rollout_gpus: int
    train_gpus: int
    # when a finished (completed, failed or cancelled) job ended, in epoch microseconds:
    # its lines are closed (cost_figures.bill_lines keeps their cents); None while it lives
    closed_us: int | None = None


class PhaseSpan(NamedTuple):
    """A phase record on its nodes over [start_us, end_us) (end None: still running)."""

    group_id: int
    job_id: int
    nodes: tuple[str, ...]
    start_us: int
    end_us: int | None
    # False: the part of a phase on nodes it handed over early (long-tail migration), busy
    # time only; its phase's other span carries the counterfactuals' time, once
    counterfactual: bool = True
    # a co-located rollout ran at the training type's rollout speed factor f: alone on
    # dedicated pools it would have taken 1 / f of its time (the solo counterfactual's)
    solo_scale: float = 1.0


@dataclass
class CostInputs:
    """Everything the accumulator reads, as the database gave it."""

    allocs: list[AllocRow]
    members: list[MemberRow]
    jobs: dict[int, JobRow]
    pinned: dict[int, set[int]]  # node id -> ids of the placements pinned to it
    type_names: dict[int, str]
    rollout_type: int | None
    train_type: int | None
    phases: Iterable[PhaseSpan]
    profile_groups: frozenset[int] = frozenset()  # groups of a profiling run (stage profile)
    # key the hours and counterfactuals by group as well (`stage` gives "run#<group>"): the
    # closed days' stored amounts (reports.cost_days) are kept per group
    by_group: bool = False

    def stage(self, group_id: int) -> str:
        stage = STAGE_PROFILE if group_id in self.profile_groups else STAGE_RUN
        return f"{stage}#{group_id}" if self.by_group else stage


@dataclass(frozen=True)
class CostWindow:
    """[lo, hi) and now in epoch microseconds; optional bucket boundaries (days)."""

    lo: int
    hi: int
    now_us: int
    buckets_us: Sequence[int] = ()


@dataclass
class CostResult:
    lines: list[CostLine] = field(default_factory=list)  # exact figures, sorted
    group_costs: dict[int, Decimal] = field(default_factory=dict)  # in cents
    group_exact: dict[int, Decimal] = field(default_factory=dict)  # the same, exact
    # (bucket, tenant, "busy" | "idle") -> exact cost (rounded as the rows are: per column)
    per_bucket_tenant: dict[tuple[int, int, str], Decimal] = field(default_factory=dict)
    # groups whose figures over a range are not the sum of their days' (cost_engine
    # `_share_nodes`: an idle split by membership weights, overlapping phases scaled down)
    dirty_groups: set[int] = field(default_factory=set)
    # groups with idle time while no member was present (split by membership weights),
    # and groups whose members' weights differ: dirty over a range holding both
    tail_groups: set[int] = field(default_factory=set)
    uneven_groups: set[int] = field(default_factory=set)
