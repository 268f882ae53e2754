"""Cost definitions of the trace-format spec (docs/spec/trace-format.md), as numbers.

The simulator and the web reports both compute cost through these helpers so their
figures agree:

* a node costs its GPUs x price per GPU-hour for every second it is allocated to a
  job or a co-execution group, busy or idle;
* `solo-disagg` counterfactual: the job on dedicated rollout and training GPUs for
  its whole (solo) life;
* `colocated` counterfactual: the job on its own `train_gpus` GPUs of the training
  type, running both phases there one after the other.

Everything is seconds, GPU counts and $/GPU-hour in, dollars out.
"""

from __future__ import annotations

from collections.abc import Iterable

SECONDS_PER_HOUR = 3600.0


def allocation_cost(seconds: float, gpus: int, price_per_gpu_hour: float) -> float:
    """Return the cost of `gpus` GPUs at `price_per_gpu_hour` allocated for `seconds`."""
    if seconds < 0:
        raise ValueError(f"seconds must be >= 0, got {seconds:g}")
    return seconds / SECONDS_PER_HOUR * gpus * price_per_gpu_hour


def interval_cost(start_s: float, end_s: float, gpus: int, price_per_gpu_hour: float) -> float:
    """Return the cost of one allocation interval [start_s, end_s] of `gpus` GPUs."""
    if end_s < start_s:
        raise ValueError(f"interval ends ({end_s:g}) before it starts ({start_s:g})")
    return allocation_cost(end_s - start_s, gpus, price_per_gpu_hour)


def allocations_cost(intervals: Iterable[tuple[float, float, int, float]]) -> float:
    """Return the summed cost of (start_s, end_s, gpus, price_per_gpu_hour) allocations."""
    return sum(interval_cost(a, b, g, p) for a, b, g, p in intervals)


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
