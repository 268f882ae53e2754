"""Regenerate the results tables of docs/results.md: our ratios and SLO beside the paper's.

    .venv/bin/python bench/paper_table.py [--seeds 5] [--workers 2] [--out FILE]
        [--rollout-speed-factor F] [--ablation] [--bursts]

`--ablation` adds the per-lever table of issue 14 (rollmux under each `PlannerConfig`
variant on the generated traces), `--bursts` the comparison with the MILP optimum on
12- and 16-job bursts, and `--rollout-speed-factor` runs everything with the training
type's rollout speed factor set (rollout on H800 takes F x its H20 time; the
colocated baseline and rollmux's co-located strategy both pay it).

For each of the paper-like and Philly-like generated traces (seeds 0..N-1) it runs
rollmux, solo-disagg, colocated, random and greedy-most-idle on the spec's example
cluster (41 H20 + 41 H800 nodes) with the simulator's seed equal to the trace's,
and the three micro-benchmark scenarios with seeds 1..N. It prints a Markdown
table (and writes it to --out) plus the per-run figures as JSON lines on stderr.
Nothing here is tuned: the generator and the planner are run as they are.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.config import ALGORITHM1 as PUBLISHED  # noqa: E402
from scheduler.config import PlannerConfig  # noqa: E402
from scheduler.model import ClusterSpec  # noqa: E402
from scheduler.sim import run_simulation  # noqa: E402
from scheduler.sim.engine import simulate  # noqa: E402
from scheduler.sim.gen import generate, generate_paper, generate_philly  # noqa: E402
from scheduler.sim.metrics import summarise, total_cost_usd  # noqa: E402
from scheduler.sim.milp import run_burst_optimum, trace_lower_bound  # noqa: E402
from scheduler.sim.policies import make_policy  # noqa: E402
from scheduler.trace import default_cluster, load_cluster, load_trace  # noqa: E402

# The levers as shipped before the second round of issue 14 (1 Dec, 13:00 UTC):
# consolidation only on a departure that leaves survivors, the movers' budget at
# expected solo / 1.01, no ski-rental wait, no lone-tail value.
BEFORE = PlannerConfig().with_(
    every_departure=False,
    budget_z=None,
    lone_wait=None,
    lone_tail=False,
    lone_tail_moves=False,
)
# The ablation of issue 14: each lever alone on Algorithm 1 as published, then the
# levers together (the default) and the default without each of them.
ABLATION: dict[str, PlannerConfig] = {
    "Algorithm 1 as published": PUBLISHED,
    "+ expected-cost objective": PUBLISHED.with_(objective="expected"),
    "+ consolidation": PUBLISHED.with_(consolidation__enabled=True),
    "+ no saturation prune": PUBLISHED.with_(prune_saturated=False),
    "+ long-tail migration": PUBLISHED.with_(long_tail_threshold=0.8),
    "+ objective + consolidation": PUBLISHED.with_(
        objective="expected", consolidation__enabled=True
    ),
    "+ objective + consolidation + co-located": PUBLISHED.with_(
        objective="expected", consolidation__enabled=True, colocated=True
    ),
    "all before 1 Dec 13:00 (the levers above)": BEFORE,
    "+ every departure": BEFORE.with_(every_departure=True),
    "+ statistical mover budget": BEFORE.with_(budget_z=3.0),
    "+ ski-rental wait of a job alone": BEFORE.with_(lone_wait=1.0),
    "+ lone-tail value (admission)": BEFORE.with_(lone_tail=True),
    "all (the default)": PlannerConfig(),
    "default - every departure": PlannerConfig().with_(every_departure=False),
    "default - statistical mover budget": PlannerConfig().with_(budget_z=None),
    "default - ski-rental wait": PlannerConfig().with_(lone_wait=None),
    "default - lone-tail value": PlannerConfig().with_(lone_tail=False, lone_tail_moves=False),
    "default - lone-tail value in moves": PlannerConfig().with_(lone_tail_moves=False),
    "default + 3 moves per job": PlannerConfig().with_(max_moves_per_job=3),
    "default - long-tail": PlannerConfig().with_(long_tail_threshold=0.0),
    "default - co-located": PlannerConfig().with_(colocated=False),
    "default - objective": PlannerConfig().with_(objective="marginal"),
    "default + saturation prune": PlannerConfig().with_(prune_saturated=True),
    "default + co-located on arrival": PlannerConfig().with_(colocated_on_arrival=True),
}


def cluster(path: str | None, factor: float) -> ClusterSpec:
    """Return the cluster spec with the training type's rollout speed factor set."""
    spec = load_cluster(path) if path else default_cluster()
    if factor == 1.0:
        return spec
    return replace(spec, train=replace(spec.train, rollout_speed_factor=factor))


ONLINE = ["rollmux", "solo-disagg", "colocated", "random", "greedy-most-idle"]
SCENARIOS = REPO / "scheduler" / "sim" / "scenarios"
PAPER = {
    "paper": "1.84x / 1.38x, 100% SLO (Random/Greedy not run on this trace)",
    "philly": "Fig. 20: Random 1.97x, Greedy 1.66x optimal cost, SLO 60% / 62%; Weave 100%",
    "temporal-mux": "1.82x Solo-D, 1.47x veRL",
    "train-mux": "1.90x Solo-D, 1.35x veRL",
    "spatial-mux": "1.99x Solo-D, 1.43x veRL",
}


def one_run(task: tuple[str, int, str | None, float]) -> dict[str, Any]:
    """Run one trace (generated kind or scenario name) with one seed."""
    name, seed, cluster_file, factor = task
    spec = cluster(cluster_file, factor)
    if name in ("paper", "philly"):
        jobs = generate(name, seed)
    else:
        jobs = load_trace(SCENARIOS / f"{name}.jsonl", spec)
    started = time.perf_counter()
    report = run_simulation(jobs, spec, policies=ONLINE, seed=seed)
    return {
        "trace": name,
        "seed": seed,
        "cluster": cluster_file or "example (41+41 nodes)",
        "wall_s": round(time.perf_counter() - started, 1),
        "report": report,
    }


LABELS = {
    "paper": "paper-like",
    "philly": "Philly-like",
    "temporal-mux": "Temporal Mux",
    "train-mux": "Train Mux",
    "spatial-mux": "Spatial Mux",
}


def _label(run: dict[str, Any]) -> str:
    name = LABELS[run["trace"]]
    return name if "example" in run["cluster"] else f"{name}, cluster {Path(run['cluster']).name}"


def _range(values: list[float], fmt: str = "{:.2f}") -> str:
    mean = float(np.mean(values))
    if len(values) == 1 or max(values) - min(values) < 0.005:
        return fmt.format(mean)
    return f"{fmt.format(mean)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def _pct(values: list[float]) -> str:
    return _range([v * 100 for v in values], "{:.0f}") + "%"


def table(runs: list[dict[str, Any]]) -> str:
    """Render the Markdown results table from the runs."""
    lines = [
        "| trace (runs) | solo-disagg / rollmux | colocated / rollmux | rollmux SLO (drawn / profile)"
        " | random SLO (profile) | greedy SLO (profile) | rollmux admissions DP/RS/NG | paper |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names: list[str] = []
    for run in runs:
        if _label(run) not in names:
            names.append(_label(run))
    for key in names:
        group = [r for r in runs if _label(r) == key]
        pol = [r["report"]["policies"] for r in group]
        rat = [r["report"]["ratios"] for r in group]
        adm = [p["rollmux"]["admissions"] for p in pol]
        total = sum(sum(a.values()) for a in adm) or 1
        mix = "/".join(
            f"{100 * sum(a[k] for a in adm) / total:.0f}%"
            for k in ("direct_packing", "rollout_scaling", "new_group")
        )
        lines.append(
            f"| {key} ({len(group)}) "
            f"| {_range([r['solo-disagg/rollmux'] for r in rat])}x "
            f"| {_range([r['colocated/rollmux'] for r in rat])}x "
            f"| {_pct([p['rollmux']['slo_attainment'] for p in pol])} / "
            f"{_pct([p['rollmux']['slo_attainment_vs_profile'] for p in pol])} "
            f"| {_pct([p['random']['slo_attainment_vs_profile'] for p in pol])} "
            f"| {_pct([p['greedy-most-idle']['slo_attainment_vs_profile'] for p in pol])} "
            f"| {mix} | {PAPER[group[0]['trace']]} |"
        )
    return "\n".join(lines)


def details(runs: list[dict[str, Any]]) -> str:
    """Render a second table: cost/h, peaks, bubbles, waits for the generated traces."""
    lines = [
        "| trace | policy | avg $/h | peak GPUs | bubble rollout / train | mean slowdown (p99)"
        " | mean queue delay s | cost / lower bound | random/rollmux cost | greedy/rollmux cost |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for trace in ("paper", "philly"):
        group = [r for r in runs if r["trace"] == trace and "example" in r["cluster"]]
        if not group:
            continue
        for policy in ("rollmux", "solo-disagg", "colocated", "random", "greedy-most-idle"):
            figs = [r["report"]["policies"][policy] for r in group]
            peak = {
                t: round(float(np.mean([f["peak_gpus"][t] for f in figs])))
                for t in figs[0]["peak_gpus"]
            }
            rm = [r["report"]["policies"]["rollmux"]["total_cost_usd"] for r in group]
            rnd = [r["report"]["policies"]["random"]["total_cost_usd"] for r in group]
            grd = [r["report"]["policies"]["greedy-most-idle"]["total_cost_usd"] for r in group]
            lines.append(
                f"| {LABELS[trace]} | {policy} | {np.mean([f['avg_cost_per_hour_usd'] for f in figs]):,.0f} "
                f"| {' + '.join(f'{v} {t}' for t, v in peak.items())} "
                f"| {_pct([f['bubble_fraction']['rollout'] for f in figs])} / "
                f"{_pct([f['bubble_fraction']['train'] for f in figs])} "
                f"| {np.mean([f['mean_slowdown'] for f in figs]):.2f} "
                f"({np.mean([f['p99_slowdown'] for f in figs]):.2f}) "
                f"| {np.mean([f['mean_queue_delay_s'] for f in figs]):,.0f} "
                f"| {_range([f['cost_over_lower_bound'] for f in figs])}x "
                + (
                    f"| {_range([a / b for a, b in zip(rnd, rm, strict=True)])}x "
                    f"| {_range([a / b for a, b in zip(grd, rm, strict=True)])}x |"
                    if policy == "rollmux"
                    else "| | |"
                )
            )
    return "\n".join(lines)


@cache
def baselines(kind: str, seed: int, factor: float) -> tuple[dict[str, float], float]:
    """Return solo-disagg's and colocated's costs and the LP lower bound of one trace
    (the same for every lever variant: computed once per worker)."""
    spec = cluster(None, factor)
    jobs = generate(kind, seed)
    base = {
        name: total_cost_usd(simulate(jobs, spec, make_policy(name, seed=seed), seed=seed))
        for name in ("solo-disagg", "colocated")
    }
    bound = trace_lower_bound(
        jobs, spec, seed=seed, rollout_speed_on_train=spec.train.rollout_speed_factor
    ).cost_usd
    return base, bound


def ablation_run(task: tuple[str, int, str, float]) -> dict[str, Any]:
    """Run rollmux under one lever variant on one generated trace (and the baselines)."""
    kind, seed, variant, factor = task
    spec = cluster(None, factor)
    jobs = generate(kind, seed)
    started = time.process_time()
    run = simulate(
        jobs, spec, make_policy("rollmux", seed=seed, config=ABLATION[variant]), seed=seed
    )
    cpu = time.process_time() - started
    figures = summarise(run)
    base, bound = baselines(kind, seed, factor)
    return {
        "trace": kind,
        "seed": seed,
        "variant": variant,
        "cost": figures["total_cost_usd"],
        "solo": base["solo-disagg"],
        "colocated": base["colocated"],
        "bound": bound,
        "slo": figures["slo_attainment"],
        "slo_profile": figures["slo_attainment_vs_profile"],
        "moves": figures["moves"],
        "admissions": figures["admissions"],
        "cpu_s": cpu,
    }


def ablation_table(runs: list[dict[str, Any]], factor: float) -> str:
    """Render the per-lever table (means over the seeds, min-max in brackets)."""
    lines = [
        f"rollout speed factor on the training type: {factor:g}",
        "",
        "| rollmux variant | paper-like: Solo-D / x | co-located / x | SLO drawn (min) "
        "| cost / LB | Philly-like: Solo-D / x | co-located / x | SLO drawn (min) "
        "| cost / LB | moves per trace | admissions DP/RS/NG/CO |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for variant in ABLATION:
        cells = []
        moves = []
        adm: dict[str, int] = {}
        for kind in ("paper", "philly"):
            rs = [r for r in runs if r["variant"] == variant and r["trace"] == kind]
            if not rs:
                cells.append("| | | |")
                continue
            cells.append(
                f"{_range([r['solo'] / r['cost'] for r in rs])}x "
                f"| {_range([r['colocated'] / r['cost'] for r in rs])}x "
                f"| {np.mean([r['slo'] for r in rs]) * 100:.1f}% "
                f"({min(r['slo'] for r in rs) * 100:.1f}%) "
                f"| {_range([r['cost'] / r['bound'] for r in rs])}x"
            )
            moves += [r["moves"] for r in rs]
            for r in rs:
                for key, value in r["admissions"].items():
                    adm[key] = adm.get(key, 0) + value
        total = sum(adm.values()) or 1
        mix = "/".join(
            f"{100 * adm.get(k, 0) / total:.0f}%"
            for k in ("direct_packing", "rollout_scaling", "new_group", "colocated")
        )
        lines.append(f"| {variant} | {cells[0]} | {cells[1]} | {np.mean(moves):.0f} | {mix} |")
    return "\n".join(lines)


def burst_run(task: tuple[str, int, int]) -> dict[str, Any]:
    """Compare rollmux (as published and with its levers) with the MILP optimum on a burst."""
    kind, seed, size = task
    spec = default_cluster()
    make = generate_paper if kind == "paper" else generate_philly
    jobs = [
        replace(j, iterations=min(j.iterations, 25)) for j in make(seed, jobs=size, window_h=3.0)
    ]
    out: dict[str, Any] = {"trace": kind, "seed": seed, "size": size}
    for colocated in (False, True):
        run, best = run_burst_optimum(jobs, spec, seed=seed, colocated=colocated)
        out[f"optimum_{colocated}"] = total_cost_usd(run)
        out[f"lp_{colocated}"] = best.lp_relaxation_usd
        out[f"milp_s_{colocated}"] = best.search.search_s
    for name, levers in (
        ("published", PUBLISHED),
        ("before", BEFORE),
        ("rollmux", PlannerConfig()),
    ):
        policy = make_policy("rollmux", seed=seed, config=levers)
        out[name] = total_cost_usd(simulate(jobs, spec, policy, seed=seed))
    return out


def burst_table(runs: list[dict[str, Any]]) -> str:
    """Render the MILP comparison: cost over the optimum, mean (min-max) per burst size."""
    lines = [
        "| bursts (runs) | rollmux / optimum (disaggregated plans) | rollmux / optimum "
        "(plans may co-locate) | Algorithm 1 as published / the same two | "
        "the levers before 13:00 / the same two | all bursts together, the same two | "
        "LP relaxation / MILP | MILP solve s (max) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for size in sorted({r["size"] for r in runs}):
        rs = [r for r in runs if r["size"] == size]
        lines.append(
            f"| {size} jobs ({len(rs)}) "
            f"| {_range([r['rollmux'] / r['optimum_False'] for r in rs], '{:.3f}')}x "
            f"| {_range([r['rollmux'] / r['optimum_True'] for r in rs], '{:.3f}')}x "
            f"| {np.mean([r['published'] / r['optimum_False'] for r in rs]):.3f}x / "
            f"{np.mean([r['published'] / r['optimum_True'] for r in rs]):.3f}x "
            f"| {np.mean([r['before'] / r['optimum_False'] for r in rs]):.3f}x / "
            f"{np.mean([r['before'] / r['optimum_True'] for r in rs]):.3f}x "
            f"| {np.mean([r['rollmux'] / r['optimum_False'] for r in runs]):.3f}x / "
            f"{np.mean([r['rollmux'] / r['optimum_True'] for r in runs]):.3f}x "
            f"| {np.mean([r['lp_True'] / r['optimum_True'] for r in rs]):.4f} "
            f"| {max(r['milp_s_True'] for r in rs):.2f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", help="write the Markdown tables here too")
    parser.add_argument(
        "--unbounded-cluster",
        help="also run the generated traces on this cluster file (e.g. unbounded pools)",
    )
    parser.add_argument("--rollout-speed-factor", type=float, default=1.0)
    parser.add_argument("--ablation", action="store_true", help="also the per-lever table")
    parser.add_argument("--bursts", action="store_true", help="also the MILP comparison")
    args = parser.parse_args()
    factor = args.rollout_speed_factor
    tasks: list[tuple[str, int, str | None, float]] = []
    for kind in ("paper", "philly"):
        tasks += [(kind, seed, None, factor) for seed in range(args.seeds)]
    if args.unbounded_cluster:
        for kind in ("paper", "philly"):
            tasks += [(kind, seed, args.unbounded_cluster, factor) for seed in range(args.seeds)]
    for name in ("temporal-mux", "train-mux", "spatial-mux"):
        tasks += [(name, seed, None, factor) for seed in range(1, args.seeds + 1)]
    started = time.perf_counter()
    extra: list[str] = []
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        runs = list(pool.map(one_run, tasks))
        if args.ablation:
            lever_tasks = [
                (kind, seed, variant, factor)
                for variant in ABLATION
                for kind in ("paper", "philly")
                for seed in range(args.seeds)
            ]
            extra.append(ablation_table(list(pool.map(ablation_run, lever_tasks)), factor))
        if args.bursts:
            burst_tasks = [
                (kind, seed, size)
                for size in (12, 16)
                for kind in ("paper", "philly")
                for seed in range(args.seeds)
            ]
            extra.append(burst_table(list(pool.map(burst_run, burst_tasks))))
    for run in runs:
        slim = {
            "trace": run["trace"],
            "seed": run["seed"],
            "cluster": run["cluster"],
            "wall_s": run["wall_s"],
            "ratios": run["report"]["ratios"],
        }
        print(json.dumps(slim), file=sys.stderr)
    text = "\n\n".join([table(runs), details(runs), *extra]) + "\n"
    print(text)
    print(f"({len(runs)} runs in {time.perf_counter() - started:.0f} s)")
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
