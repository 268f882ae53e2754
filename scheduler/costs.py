"""The cost arithmetic of the trace-format spec (trace-format.md "Definitions"), pure.

The simulator's metrics (scheduler.sim.metrics) compute every cost through these
functions, and the web's cost engine and quota checks are meant to (they pass their
own numbers in: seconds, GPU counts, prices). The rules:

* a node costs its GPUs x price per GPU-hour for every second it is allocated to a
  job or a co-execution group, busy or idle (`node_cost`, `allocation_cost`,
  `run_cost`);
* that cost splits into busy (some phase runs on the node) and idle, the bubble
  (`busy_idle_split`, `idle_fraction`); inside a group each member pays the busy time
  of its own phases and the idle time is shared by the members pinned to the node,
  in proportion to how long each was a member while the node was allocated
  (`share_node_cost`);
* `solo-disagg` counterfactual: the job on dedicated rollout and training GPUs for
  its whole (solo) life, each pool idle during the other's phase
  (`solo_disagg_cost`, per iteration with its split: `solo_iteration_cost`);
* `colocated` counterfactual: the job on its own `train_gpus` GPUs of the training
  type, running both phases there one after the other (`colocated_cost`);
* cost efficiency of a policy over a baseline: baseline cost / policy cost.

Units: seconds, GPU counts, $ per GPU-hour (or per node-hour where the name says
so) in, dollars out. Every function takes floats, or `decimal.Decimal` amounts
throughout (exact money: the hour is the integer 3600, so no float enters); a
negative duration raises ValueError naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Generic, TypeVar

__all__ = [
    "SECONDS_PER_HOUR",
    "CostSplit",
    "allocation_cost",
    "allocations_cost",
    "busy_idle_split",
    "colocated_cost",
    "colocated_seconds",
    "cost_efficiency",
    "idle_fraction",
    "interval_cost",
    "node_cost",
    "run_cost",
    "share_node_cost",
    "solo_disagg_cost",
    "solo_iteration_cost",
]

# An int, so that Decimal amounts stay Decimal and float ones give exactly x / 3600.0.
SECONDS_PER_HOUR = 3600

Num = TypeVar("Num", float, Decimal)


@dataclass(frozen=True)
class CostSplit(Generic[Num]):
    """A cost and how much of it was busy (phases running) and idle (the bubble)."""

    busy_usd: Num
    idle_usd: Num

    @property
    def total_usd(self) -> Num:
        return self.busy_usd + self.idle_usd


def _non_negative(name: str, value: Num) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def node_cost(seconds: Num, price_per_node_hour: Num) -> Num:
    """Return the cost of one node at `price_per_node_hour` allocated for `seconds`."""
    _non_negative("seconds", seconds)
    return seconds / SECONDS_PER_HOUR * price_per_node_hour


def allocation_cost(seconds: Num, gpus: int, price_per_gpu_hour: Num) -> Num:
    """Return the cost of `gpus` GPUs at `price_per_gpu_hour` allocated for `seconds`."""
    _non_negative("seconds", seconds)
    return seconds / SECONDS_PER_HOUR * gpus * price_per_gpu_hour


def interval_cost(start_s: float, end_s: float, gpus: int, price_per_gpu_hour: float) -> float:
    """Return the cost of one allocation interval [start_s, end_s] of `gpus` GPUs."""
    if end_s < start_s:
        raise ValueError(f"interval ends ({end_s:g}) before it starts ({start_s:g})")
    return allocation_cost(end_s - start_s, gpus, price_per_gpu_hour)


def allocations_cost(intervals: Iterable[tuple[float, float, int, float]]) -> float:
    """Return the summed cost of (start_s, end_s, gpus, price_per_gpu_hour) allocations."""
    return sum(interval_cost(a, b, g, p) for a, b, g, p in intervals)


def run_cost(
    allocations: Iterable[tuple[str, float, float]], node_price_per_hour: Mapping[str, float]
) -> float:
    """Return the total cost of a run: its (node, start_s, end_s) allocations, each at
    its node's price per node-hour, summed in order."""
    return sum(
        (end - start) / SECONDS_PER_HOUR * node_price_per_hour[node]
        for node, start, end in allocations
    )


def idle_fraction(allocated_s: float, busy_s: float) -> float:
    """Return the bubble fraction: allocated-but-idle time / allocated time (0 if none).

    Busy time above the allocated time (a rounding artefact of the caller's sums)
    counts as fully busy.
    """
    return max(0.0, allocated_s - busy_s) / allocated_s if allocated_s > 0 else 0.0


def busy_idle_split(allocated_s: Num, busy_s: Num, price_per_node_hour: Num) -> CostSplit[Num]:
    """Return a node's cost over `allocated_s`, split into its busy and idle parts."""
    _non_negative("allocated_s", allocated_s)
    _non_negative("busy_s", busy_s)
    busy = min(busy_s, allocated_s)
    return CostSplit(
        busy_usd=node_cost(busy, price_per_node_hour),
        idle_usd=node_cost(allocated_s - busy, price_per_node_hour),
    )


def share_node_cost(
    *,
    allocated_s: Num,
    price_per_node_hour: Num,
    busy_s: Mapping[str, Num],
    member_s: Mapping[str, Num],
) -> dict[str, CostSplit[Num]]:
    """Return each member's share of one node's cost inside a co-execution group.

    Each member pays the busy time of its own phases on the node (`busy_s`); the
    node's idle time (allocated minus all busy time) is shared by the members pinned
    to it in proportion to how long each was a member while the node was allocated
    (`member_s`). The shares add up to the node's cost. Raises ValueError when the
    phases' busy time exceeds the allocation.
    """
    total_busy = sum(busy_s.values())
    if total_busy > allocated_s:
        raise ValueError(f"busy time {total_busy} exceeds the node's allocated time {allocated_s}")
    idle_cost = node_cost(allocated_s - total_busy, price_per_node_hour)
    weight = sum(member_s.values())
    zero = 0 * allocated_s  # a zero of the amounts' type (float or Decimal)
    out: dict[str, CostSplit[Num]] = {}
    for job in dict.fromkeys([*busy_s, *member_s]):
        busy = node_cost(busy_s.get(job, zero), price_per_node_hour)
        share = member_s.get(job, zero)
        idle = idle_cost * share / weight if weight > 0 else zero
        out[job] = CostSplit(busy_usd=busy, idle_usd=idle)
    return out


def solo_disagg_cost(
    solo_seconds: float,
    *,
    rollout_gpus: int,
    train_gpus: int,
    rollout_price_per_gpu_hour: float,
    train_price_per_gpu_hour: float,
) -> float:
    """Return the cost of a job's work on dedicated disaggregated pools (`solo-disagg`).

    `solo_seconds` is its solo run time: the sum over its iterations of rollout +
    training duration (as drawn, or the profile's max for a planning estimate). Both
    pools are held for the whole of it, idle during the other pool's phase.
    """
    return allocation_cost(solo_seconds, rollout_gpus, rollout_price_per_gpu_hour) + (
        allocation_cost(solo_seconds, train_gpus, train_price_per_gpu_hour)
    )


def solo_iteration_cost(
    *,
    t_roll_s: Num,
    t_train_s: Num,
    rollout_gpus: int,
    train_gpus: int,
    rollout_price_per_gpu_hour: Num,
    train_price_per_gpu_hour: Num,
) -> CostSplit[Num]:
    """Return one solo-disaggregated iteration's cost, split into busy and idle.

    Busy: the rollout on the rollout GPUs and the training on the training GPUs. Idle
    (the dependency bubble): the rollout GPUs through the training, and the training
    GPUs through the rollout. The total is `solo_disagg_cost` of one iteration.
    """
    return CostSplit(
        busy_usd=allocation_cost(t_roll_s, rollout_gpus, rollout_price_per_gpu_hour)
        + allocation_cost(t_train_s, train_gpus, train_price_per_gpu_hour),
        idle_usd=allocation_cost(t_train_s, rollout_gpus, rollout_price_per_gpu_hour)
        + allocation_cost(t_roll_s, train_gpus, train_price_per_gpu_hour),
    )


def colocated_seconds(
    rollout_seconds: float, train_seconds: float, *, rollout_slowdown: float = 1.0
) -> float:
    """Return the co-located run time: rollouts (scaled by `rollout_slowdown`) then trainings.

    The spec's default is that rollout on the training GPU type takes as long as
    on the rollout type (`rollout_slowdown=1.0`).
    """
    return rollout_seconds * rollout_slowdown + train_seconds


def colocated_cost(
    rollout_seconds: float,
    train_seconds: float,
    *,
    train_gpus: int,
    train_price_per_gpu_hour: float,
    rollout_slowdown: float = 1.0,
) -> float:
    """Return the cost of a job's work on its own co-located training GPUs (`colocated`)."""
    seconds = colocated_seconds(rollout_seconds, train_seconds, rollout_slowdown=rollout_slowdown)
    return allocation_cost(seconds, train_gpus, train_price_per_gpu_hour)


def cost_efficiency(baseline_cost: float, policy_cost: float) -> float:
    """Return cost efficiency of a policy over a baseline: baseline cost / policy cost."""
    if policy_cost <= 0:
        raise ValueError(f"policy cost must be > 0, got {policy_cost:g}")
    return baseline_cost / policy_cost
