"""Regenerate the results table of docs/results.md: our ratios and SLO beside the paper's.

    .venv/bin/python bench/paper_table.py [--seeds 5] [--workers 2] [--out FILE]

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
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.sim import run_simulation  # noqa: E402
from scheduler.sim.gen import generate  # noqa: E402
from scheduler.trace import default_cluster, load_cluster, load_trace  # noqa: E402

ONLINE = ["rollmux", "solo-disagg", "colocated", "random", "greedy-most-idle"]
SCENARIOS = REPO / "scheduler" / "sim" / "scenarios"
PAPER = {
    "paper": "1.84x / 1.38x, 100% SLO (Random/Greedy not run on this trace)",
    "philly": "Fig. 20: Random 1.97x, Greedy 1.66x optimal cost, SLO 60% / 62%; Weave 100%",
    "temporal-mux": "1.82x Solo-D, 1.47x veRL",
    "train-mux": "1.90x Solo-D, 1.35x veRL",
    "spatial-mux": "1.99x Solo-D, 1.43x veRL",
}


def one_run(task: tuple[str, int, str | None]) -> dict[str, Any]:
    """Run one trace (generated kind or scenario name) with one seed."""
    name, seed, cluster = task
    spec = load_cluster(cluster) if cluster else default_cluster()
    if name in ("paper", "philly"):
        jobs = generate(name, seed)
    else:
        jobs = load_trace(SCENARIOS / f"{name}.jsonl", spec)
    started = time.perf_counter()
    report = run_simulation(jobs, spec, policies=ONLINE, seed=seed)
    return {
        "trace": name,
        "seed": seed,
        "cluster": cluster or "example (41+41 nodes)",
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
        " | mean queue delay s | random/rollmux cost | greedy/rollmux cost |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for trace in ("paper", "philly"):
        group = [r for r in runs if r["trace"] == trace and "example" in r["cluster"]]
        if not group:
            continue
        for policy in ("rollmux", "solo-disagg", "colocated"):
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
                + (
                    f"| {_range([a / b for a, b in zip(rnd, rm, strict=True)])}x "
                    f"| {_range([a / b for a, b in zip(grd, rm, strict=True)])}x |"
                    if policy == "rollmux"
                    else "| | |"
                )
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
    args = parser.parse_args()
    tasks: list[tuple[str, int, str | None]] = []
    for kind in ("paper", "philly"):
        tasks += [(kind, seed, None) for seed in range(args.seeds)]
    if args.unbounded_cluster:
        for kind in ("paper", "philly"):
            tasks += [(kind, seed, args.unbounded_cluster) for seed in range(args.seeds)]
    for name in ("temporal-mux", "train-mux", "spatial-mux"):
        tasks += [(name, seed, None) for seed in range(1, args.seeds + 1)]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        runs = list(pool.map(one_run, tasks))
    for run in runs:
        slim = {
            "trace": run["trace"],
            "seed": run["seed"],
            "cluster": run["cluster"],
            "wall_s": run["wall_s"],
            "ratios": run["report"]["ratios"],
        }
        print(json.dumps(slim), file=sys.stderr)
    text = table(runs) + "\n\n" + details(runs) + "\n"
    print(text)
    print(f"({len(runs)} runs in {time.perf_counter() - started:.0f} s)")
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
