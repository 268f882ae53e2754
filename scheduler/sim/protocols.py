"""What the discrete-event engine (`scheduler.sim.engine`) asks of the runtimes and
placement policies it drives: structural types, so the core's `GroupRuntime` and the
simulator's policies (`scheduler.sim.policies`) fit without importing the engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from scheduler.group_runtime import RawPhaseStart
from scheduler.model import (
    ClusterSpec,
    ClusterState,
    JobProfile,
    Member,
    PhaseKind,
    Placement,
    PlacementResult,
)
from scheduler.planner.consolidation import Move
from scheduler.planner.objective import JobProgress
from scheduler.sim.longtail import LongTailModel

__all__ = ["Policy", "Runtime", "SimulationError"]


class SimulationError(RuntimeError):
    """Signal a broken invariant (e.g. a node asked to run two phases at once)."""


class Runtime(Protocol):
    """The intra-group runtime the engine drives (core `GroupRuntime` and ours)."""

    def admit(self, member: Member, *, iterations: int, start_iteration: int = 0) -> Any: ...
    def remove(self, job_id: str) -> Any: ...
    def start_ready_raw(self) -> Sequence[RawPhaseStart]: ...
    def end_phase(self, job_id: str, kind: PhaseKind) -> bool: ...


class Policy(Protocol):
    """A placement policy as the engine sees it (see scheduler.sim.policies)."""

    name: str

    def place(
        self,
        job: JobProfile,
        state: ClusterState,
        progress: Mapping[str, JobProgress] | None = None,
        now: float = 0.0,
    ) -> PlacementResult: ...
    def arrival_movers(self) -> Sequence[str]: ...
    def apply(
        self, state: ClusterState, job: JobProfile, placement: Placement, group_id: str
    ) -> ClusterState: ...
    def remove(self, state: ClusterState, job_id: str) -> ClusterState: ...
    @property
    def long_tail(self) -> LongTailModel | None: ...
    def runtime(self, group_id: str, spec: ClusterSpec, *, colocated: bool = False) -> Runtime: ...
    def on_departure(
        self, state: ClusterState, group_id: str, now: float, progress: Mapping[str, JobProgress]
    ) -> Sequence[str]: ...
    def move(
        self,
        state: ClusterState,
        job_id: str,
        now: float,
        progress: Mapping[str, JobProgress],
        *,
        new_group_id: str | None = None,
    ) -> tuple[ClusterState, Move] | None: ...
    def lone_wait_s(self, state: ClusterState, job: JobProfile) -> float | None: ...
    def partners_keep_slo(
        self,
        without: ClusterState,
        result: PlacementResult,
        restart_s: float,
        now: float,
        progress: Mapping[str, JobProgress],
    ) -> bool: ...
