"""Summarise a simulated run with the definitions of trace-format.md.

- Cost (through scheduler.costs, the core's one cost arithmetic): every second a
  node is allocated to a job or a co-execution group costs
  its GPUs x price per GPU-hour, busy or idle; total cost is the sum.
- Average cost per hour: total cost / makespan (first arrival to last completion).
- SLO attainment: share of finished jobs whose mean iteration time under sharing
  ((completion - admission) / iterations, so waiting for a co-member's phase
  counts, waiting in the admission queue does not) is at most slo x the mean
  drawn solo iteration time; "vs profile" uses t_roll_max_s + t_train_max_s.
- Slowdown: mean iteration time / drawn solo iteration time (mean and p99).
- Bubble fraction per pool: allocated-but-idle node time / allocated node time;
  a warm-start switch counts as busy (the node is loading state, not idle).
- Decision latency: wall time of every `place` call, in ms (p50 / p99 / max).
- Queue delay: admission - arrival, averaged over admitted jobs.
- Moves: consolidation moves (scheduler.planner.consolidation), the jobs they moved and
  the hours of restarts they cost (each restart runs on the mover's new nodes).
- Iterations per dollar: completed iterations / total cost; the paper's
  micro-benchmarks compare "throughput at the same cost", which is this figure
  when every job runs a fixed number of iterations (see docs/results.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scheduler.costs import idle_fraction, run_cost
from scheduler.model import Pool
from scheduler.planner.consolidation import restart_seconds
from scheduler.sim.records import JobRecord, RunResult

HOUR = 3600.0
# Floating-point slack when comparing a measured iteration time with its SLO bound.
SLO_TOLERANCE = 1e-9


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def total_cost_usd(run: RunResult) -> float:
    """Sum node-allocation time x node price over the run (scheduler.costs.run_cost)."""
    return run_cost(run.allocations, run.node_price_per_hour)


def summarise(run: RunResult) -> dict[str, Any]:
    """Return the per-policy figures of the `--json` report for one run."""
    records = list(run.jobs.values())
    done = [r for r in records if r.status == "done"]
    cost = total_cost_usd(run)
    makespan_s = max(0.0, run.end_s - run.start_s)
    slowdowns: list[float] = []
    met = met_profile = 0
    for record in done:
        mean_iter = record.mean_iteration_s
        assert mean_iter is not None
        solo = record.solo_iteration_s
        slowdowns.append(mean_iter / solo)
        if mean_iter <= record.profile.slo * solo * (1 + SLO_TOLERANCE):
            met += 1
        if mean_iter <= record.profile.slo * record.profile.t_solo_max_s * (1 + SLO_TOLERANCE):
            met_profile += 1
    allocated = {Pool.ROLLOUT: 0.0, Pool.TRAIN: 0.0}
    for node, start, end in run.allocations:
        allocated[run.node_pool[node]] += end - start
    busy = {Pool.ROLLOUT: 0.0, Pool.TRAIN: 0.0}
    for node, seconds in run.busy_s.items():
        busy[run.node_pool[node]] += seconds
    bubble = {
        str(pool): idle_fraction(allocated[pool], busy[pool]) for pool in (Pool.ROLLOUT, Pool.TRAIN)
    }
    peak: dict[str, int] = {}
    for pool in (Pool.ROLLOUT, Pool.TRAIN):
        gpu_type = run.spec.gpu_type(pool)
        peak[gpu_type.name] = peak.get(gpu_type.name, 0) + (
            run.peak_nodes[pool] * gpu_type.gpus_per_node
        )
    latencies_ms = [s * 1000.0 for s in run.decision_latency_s]
    admitted = [r for r in records if r.admitted_s is not None]
    delays = [r.admitted_s - r.profile.arrival_s for r in admitted if r.admitted_s is not None]
    iterations_done = sum(len(r.roll) for r in done)
    return {
        "jobs": len(records),
        "completed": len(done),
        "infeasible": [
            {"id": r.profile.id, "reason": r.reason} for r in records if r.status == "infeasible"
        ],
        "never_started": [
            {"id": r.profile.id, "reason": r.reason} for r in records if r.status == "stuck"
        ],
        "total_cost_usd": round(cost, 2),
        "avg_cost_per_hour_usd": round(cost / (makespan_s / HOUR), 2) if makespan_s else 0.0,
        "makespan_h": round(makespan_s / HOUR, 3),
        "peak_gpus": peak,
        "slo_attainment": round(met / len(done), 4) if done else 0.0,
        "slo_attainment_vs_profile": round(met_profile / len(done), 4) if done else 0.0,
        "mean_slowdown": round(float(np.mean(slowdowns)), 4) if slowdowns else 0.0,
        "p99_slowdown": round(_percentile(slowdowns, 99), 4),
        "bubble_fraction": {k: round(v, 4) for k, v in bubble.items()},
        "admissions": dict(run.admissions),
        "decision_latency_ms": {
            "p50": round(_percentile(latencies_ms, 50), 3),
            "p99": round(_percentile(latencies_ms, 99), 3),
            "max": round(max(latencies_ms, default=0.0), 3),
        },
        "mean_queue_delay_s": round(float(np.mean(delays)), 1) if delays else 0.0,
        "jobs_that_waited": sum(1 for d in delays if d > 0),
        "iterations_completed": iterations_done,
        "moves": len(run.moves),
        "jobs_moved": len({m.job_id for m in run.moves}),
        "restart_h": round(sum(m.restart_s for m in run.moves) / HOUR, 3),
        "iterations_per_dollar": round(iterations_done / cost, 6) if cost else 0.0,
    }


RATIO_PAIRS = (("solo-disagg", "rollmux"), ("colocated", "rollmux"), ("rollmux", "optimal"))


def ratios(per_policy: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Return total cost of each baseline over ours (and ours over optimal) when both ran."""
    out: dict[str, float] = {}
    for num, den in RATIO_PAIRS:
        if num in per_policy and den in per_policy:
            denominator = per_policy[den]["total_cost_usd"]
            if denominator > 0:
                out[f"{num}/{den}"] = round(per_policy[num]["total_cost_usd"] / denominator, 4)
    return out


def left_out(
    figures: dict[str, Any], keys: tuple[str, ...] = ("infeasible", "never_started")
) -> list[str]:
    """Return the trace ids of the jobs a policy could not place (infeasible) or never
    started (or those of `keys` alone), from its figures (`summarise`: records with an `id`,
    or bare ids)."""
    return [
        str(j.get("id", j)) if isinstance(j, dict) else str(j)
        for key in keys
        for j in figures.get(key) or []
    ]


def same_jobs(per_policy: dict[str, dict[str, Any]]) -> bool:
    """Return True when every policy finished the same jobs (the same count, the same ones
    left out): only then do their costs, and the cost ratios, cover the same work."""
    counts = {p.get("completed") for p in per_policy.values()}
    return len(counts) <= 1 and len({frozenset(left_out(p)) for p in per_policy.values()}) <= 1


def replan_bound(
    record: JobRecord, *, rollout_speed_factor: float = 1.0, restart: bool = False
) -> float | None:
    """Return the smallest slowdown ANY re-plan could have given a finished job (an oracle
    bound, for reports): from its first checkpoint (the end of its first iteration, as
    it ran: no observation of it exists before) it runs alone to the end at its drawn
    phases (the faster of its own rollout nodes and its training nodes at
    `rollout_speed_factor`, no sync), its partners moved away, or with `restart` itself
    moved out, paying one restart. Above the job's SLO: no re-planning of its admitted
    placement, even one knowing every future duration, keeps the SLO. None: it has not
    run an iteration."""
    if record.first_boundary_s is None or record.admitted_s is None or not record.roll:
        return None
    f = min(1.0, rollout_speed_factor)
    rest = sum(r * f + t for r, t in zip(record.roll[1:], record.train[1:], strict=True))
    total = record.first_boundary_s - record.admitted_s + rest
    if restart:
        total += restart_seconds(record.profile)
    return total / (len(record.roll) * record.solo_iteration_s)
