"""Run several policies over one trace and build the report the CLI and web app share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scheduler.model import ClusterSpec, JobProfile
from scheduler.sim.drift import job_templates
from scheduler.sim.engine import simulate
from scheduler.sim.metrics import ratios, summarise
from scheduler.sim.milp import trace_lower_bound
from scheduler.sim.optimal import run_optimal
from scheduler.sim.policies import OPTIMAL_MAX_JOBS, Levers, make_policy, ordered, replanning_levers


def run_simulation(
    jobs: Sequence[JobProfile],
    spec: ClusterSpec,
    *,
    policies: Sequence[str],
    seed: int,
    max_group_size: int = 5,
    progress: Callable[[float], None] | None = None,
    lower_bound: bool = True,
    levers: Levers | None = None,
    drift: str = "none",
    replan_drift: bool = False,
) -> dict[str, Any]:
    """Simulate `jobs` under each policy and return the `--json` report.

    The result is {"policies": {name: figures}, "ratios": {...}, "skipped":
    {name: reason}, "seed": seed, "lower_bound": {...}}; every policy's figures
    also carry `cost_over_lower_bound`, its total cost over the LP lower bound of
    the trace (scheduler.sim.milp.trace_lower_bound: how much is left). `optimal` is skipped (with its reason) on
    traces of more than 8 jobs. `progress`, if given, is called with the overall
    fraction done (0..1) as the runs advance. `drift` is a drift setting of
    scheduler.sim.drift (every online policy sees the same drift; default none) and
    `replan_drift` lets rollmux re-plan drifting jobs (the static planner otherwise).
    """
    templates = job_templates(jobs, drift, seed=seed)
    names = ordered(policies)
    unknown = [n for n in policies if n not in names]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}")
    report: dict[str, Any] = {"policies": {}, "ratios": {}, "skipped": {}, "seed": seed}
    for index, name in enumerate(names):

        def step(fraction: float, index: int = index) -> None:
            if progress is not None:
                progress(min(1.0, (index + fraction) / len(names)))

        if name == "optimal":
            if len(jobs) > OPTIMAL_MAX_JOBS:
                report["skipped"][name] = (
                    f"the exhaustive search handles at most {OPTIMAL_MAX_JOBS} jobs; "
                    f"the trace has {len(jobs)}"
                )
                step(1.0)
                continue
            run, search = run_optimal(
                jobs, spec, seed=seed, max_group_size=max_group_size, progress=step
            )
            figures = summarise(run)
            figures["search"] = {
                "candidates_checked": search.candidates_checked,
                "candidates_simulated": search.candidates_simulated,
                "search_s": round(search.search_s, 3),
            }
        else:
            replans = replan_drift and name == "rollmux"
            lv = replanning_levers(levers) if replans else levers
            policy = make_policy(name, seed=seed, max_group_size=max_group_size, levers=lv)
            run = simulate(
                jobs,
                spec,
                policy,
                seed=seed,
                progress=step,
                drift=templates,
                replan_drift=replans,
            )
            figures = summarise(run)
            if replans:
                figures["drift_replans"] = sum(r.replans for r in run.jobs.values())
        report["policies"][name] = figures
        step(1.0)
    report["ratios"] = ratios(report["policies"])
    if lower_bound and jobs:
        bound = trace_lower_bound(
            jobs, spec, seed=seed, rollout_speed_on_train=spec.train.rollout_speed_factor
        )
        report["lower_bound"] = {
            "cost_usd": round(bound.cost_usd, 2),
            "busy_cost_usd": round(bound.busy_cost_usd, 2),
            "shared_share": round(bound.shared_share, 4),
            "capacity_bound": bound.capacity_bound,
        }
        for figures in report["policies"].values():
            if bound.cost_usd > 0:
                figures["cost_over_lower_bound"] = round(
                    figures["total_cost_usd"] / bound.cost_usd, 4
                )
    return report
