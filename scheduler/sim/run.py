"""Run several policies over one trace and build the report the CLI and web app share."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from scheduler.config import PlannerConfig
from scheduler.fairshare import PreemptionPolicy, Share, jain_index
from scheduler.model import ClusterSpec, JobProfile
from scheduler.sim.drift import job_templates
from scheduler.sim.engine import Simulation, simulate
from scheduler.sim.metrics import ratios, summarise, total_cost_usd
from scheduler.sim.milp import trace_lower_bound
from scheduler.sim.optimal import run_optimal
from scheduler.sim.policies import OPTIMAL_MAX_JOBS, make_policy, ordered
from scheduler.sim.tenancy import MODES, Tenancy, TenancyConfig

GOLD_SLO_BELOW = 1.1  # [I] jobs with an SLO this tight are gold (never preempted)


def run_simulation(
    jobs: Sequence[JobProfile],
    spec: ClusterSpec,
    *,
    policies: Sequence[str],
    seed: int,
    max_group_size: int = 5,
    progress: Callable[[float], None] | None = None,
    lower_bound: bool = True,
    config: PlannerConfig | None = None,
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
    `config` is rollmux's planner configuration (default: the shipped one) at
    `max_group_size`.
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
            cfg = (config or PlannerConfig()).with_(max_group_size=max_group_size)
            policy = make_policy(name, seed=seed, config=cfg)
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


def tenant_shares(
    jobs: Sequence[JobProfile], spec: ClusterSpec, weights: Mapping[str, float] | None = None
) -> tuple[Share, ...]:
    """Return equal nominal quotas for the trace's tenants: each pool's whole nodes dealt
    out as evenly as they go (the first tenants get one node more), no borrowing or
    lending limit, `weights` (default 1). A pool must be bounded."""
    tenants = sorted({j.tenant for j in jobs})
    out: list[Share] = []
    for gpu_type in (spec.rollout, spec.train):
        if gpu_type.nodes is None:
            raise ValueError(f"cluster: {gpu_type.name} has no node count (unbounded)")
        per, extra = divmod(gpu_type.nodes, len(tenants))
        for i, tenant in enumerate(tenants):
            nodes = per + (1 if i < extra else 0)
            weight = (weights or {}).get(tenant, 1.0)
            out.append(Share(tenant, gpu_type.name, nodes * gpu_type.gpus_per_node, weight=weight))
    return tuple(out)


def gold_jobs(jobs: Sequence[JobProfile], slo_below: float = GOLD_SLO_BELOW) -> dict[str, str]:
    """Return job id -> SLO class: [I] gold for an SLO under `slo_below`, else silver."""
    return {j.id: "gold" if j.slo < slo_below else "silver" for j in jobs}


def run_tenants(
    jobs: Sequence[JobProfile],
    spec: ClusterSpec,
    *,
    seed: int,
    modes: Sequence[str] = MODES,
    shares: Sequence[Share] | None = None,
    policy: PreemptionPolicy | None = None,
    max_group_size: int = 5,
    config: PlannerConfig | None = None,
) -> dict[str, Any]:
    """Simulate rollmux on the bounded cluster `spec` under each tenancy mode (fifo: as
    before, caps: nominal quotas as hard caps, fairshare: issue 22) and the baselines on
    the same cluster unbounded; return per mode the per-tenant table, Jain's index and
    the cost ratios, beside rollmux unbounded.

    Jain's index is over the tenants' mean stretch (a job's arrival to its end over its
    drawn solo run time): 1 when every tenant's jobs are slowed alike."""
    shares = tuple(shares) if shares is not None else tenant_shares(jobs, spec)
    unbounded = replace(
        spec, rollout=replace(spec.rollout, nodes=None), train=replace(spec.train, nodes=None)
    )
    report: dict[str, Any] = {"seed": seed, "modes": {}, "unbounded": {}}
    costs: dict[str, float] = {}
    cfg = (config or PlannerConfig()).with_(max_group_size=max_group_size)
    for name in ("rollmux", "solo-disagg", "colocated"):
        run = simulate(jobs, unbounded, make_policy(name, seed=seed, config=cfg), seed=seed)
        costs[name] = total_cost_usd(run)
    report["unbounded"] = {
        "cost_usd": costs,
        "solo-disagg/rollmux": costs["solo-disagg"] / costs["rollmux"],
        "colocated/rollmux": costs["colocated"] / costs["rollmux"],
    }
    slo_class = gold_jobs(jobs)
    for mode in modes:
        rules = TenancyConfig(
            shares=shares, mode=mode, policy=policy or PreemptionPolicy(), slo_class=slo_class
        )
        tenancy = Tenancy(rules)
        sim = Simulation(
            jobs,
            spec,
            make_policy("rollmux", seed=seed, config=cfg),
            seed=seed,
            tenancy=tenancy,
        )
        run = sim.run()
        tenants = tenancy.report(sim)
        stretch: dict[str, float] = {}
        for tenant in tenants:
            done = [
                r for r in run.jobs.values() if r.profile.tenant == tenant and r.status == "done"
            ]
            values = [
                (r.finished_s - r.profile.arrival_s) / (r.solo_iteration_s * r.profile.iterations)
                for r in done
                if r.finished_s is not None
            ]
            stretch[tenant] = sum(values) / len(values) if values else 0.0
            tenants[tenant]["stretch"] = stretch[tenant]
        cost = total_cost_usd(run)
        report["modes"][mode] = {
            "tenants": tenants,
            "jain_stretch": jain_index(stretch.values()),
            "cost_usd": cost,
            "solo-disagg/rollmux": costs["solo-disagg"] / cost,
            "colocated/rollmux": costs["colocated"] / cost,
            "preemptions": len(tenancy.preemptions),
            "preemptions_by_kind": {
                kind: sum(1 for p in tenancy.preemptions if p.kind == kind)
                for kind in ("reclaim", "fair_share", "priority")
            },
            "work_lost_s": sum(p.work_lost_s for p in tenancy.preemptions),
            "iterations_lost": sum(int(t["iterations_lost"]) for t in tenants.values()),
            "unfinished": sum(1 for r in run.jobs.values() if r.status != "done"),
        }
    return report


def format_tenants(report: Mapping[str, Any]) -> str:
    """Render `run_tenants`' report as a Markdown table (one row per mode and tenant)."""
    unb = report["unbounded"]
    lines = [
        f"unbounded rollmux: solo-disagg/rollmux {unb['solo-disagg/rollmux']:.3f}x, "
        f"colocated/rollmux {unb['colocated/rollmux']:.3f}x",
        "",
        "| mode | tenant | jobs done | wait p50 / p95 h | GPU-h (share / nominal) | stretch "
        "| preempted / preempting | iterations lost |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, m in report["modes"].items():
        for tenant, t in m["tenants"].items():
            lines.append(
                f"| {mode} | {tenant} | {t['done']}/{t['jobs']} | {t['wait_p50_h']:.1f} / "
                f"{t['wait_p95_h']:.1f} | {t['gpu_h']:,.0f} ({t['gpu_share']:.0%} / "
                f"{t['nominal_share']:.0%}) | {t['stretch']:.2f} | {t['preempted']} / "
                f"{t['preempting']} | {t['iterations_lost']} |"
            )
    lines.append("")
    lines.append("| mode | Jain (stretch) | cost $ | solo-disagg/rollmux | colocated/rollmux "
                 "| preemptions (reclaim / fair share) | iterations lost | unfinished |")  # fmt: skip
    lines.append("|---|---|---|---|---|---|---|---|")
    for mode, m in report["modes"].items():
        lines.append(
            f"| {mode} | {m['jain_stretch']:.3f} | {m['cost_usd']:,.0f} | "
            f"{m['solo-disagg/rollmux']:.3f}x | {m['colocated/rollmux']:.3f}x | "
            f"{m['preemptions']} ({m['preemptions_by_kind']['reclaim']} / "
            f"{m['preemptions_by_kind']['fair_share']}) | {m['iterations_lost']} | "
            f"{m['unfinished']} |"
        )
    return "\n".join(lines)
