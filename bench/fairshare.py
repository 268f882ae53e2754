"""Measure fair share on a bounded multi-tenant cluster (issue 22; docs/results.md section 12).

    .venv/bin/python bench/fairshare.py [--seeds 5] [--nodes 12,18] [--jobs 45] [--out FILE]

For each generator seed (scheduler.sim.gen `tenants`: 45 paper-like jobs dealt to three
tenants over 72 h, vision's all in the first 2 h) and each bounded cluster size (N H20 +
N H800 nodes, nominal quotas split equally, weight 1), rollmux runs under fifo (the
simulator as before), caps (nominal quotas as hard caps: today's live planner) and
fairshare (borrowing, fair-share order, preemption at iteration boundaries) and
"reclaim only" (fairshare without preemption among borrowers: `fair_share=False`), and
solo-disagg / colocated / rollmux on the same cluster unbounded give today's ratios.
It prints per mode and tenant the mean over seeds (Markdown) and every run as JSON on
stderr. Nothing is tuned: the preemption policy is scheduler.fairshare's default.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.fairshare import PreemptionPolicy  # noqa: E402
from scheduler.sim.gen import generate_tenants  # noqa: E402
from scheduler.sim.run import run_tenants  # noqa: E402
from scheduler.trace import default_cluster  # noqa: E402


def _mean(values: list[float]) -> str:
    return f"{np.mean(values):.2f}" if values else "-"


def table(runs: list[dict[str, Any]], nodes: int) -> str:
    """Render the mean over seeds of one cluster size."""
    first = runs[0]
    modes = list(first["modes"])
    tenants = list(first["modes"][modes[0]]["tenants"])
    unb_solo = [r["unbounded"]["solo-disagg/rollmux"] for r in runs]
    unb_colo = [r["unbounded"]["colocated/rollmux"] for r in runs]
    lines = [
        f"### {nodes} H20 + {nodes} H800 nodes ({len(runs)} seeds, means)",
        "",
        f"Unbounded (today): solo-disagg/rollmux {np.mean(unb_solo):.3f}x "
        f"({min(unb_solo):.3f}-{max(unb_solo):.3f}), colocated/rollmux "
        f"{np.mean(unb_colo):.3f}x ({min(unb_colo):.3f}-{max(unb_colo):.3f}).",
        "",
        "| mode | tenant | wait p50 / p95 h | GPU-h share (nominal 33%) | stretch "
        "| preempted / preempting | iterations lost |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode in modes:
        for tenant in tenants:
            rows = [r["modes"][mode]["tenants"][tenant] for r in runs]
            lines.append(
                f"| {mode} | {tenant} | {_mean([x['wait_p50_h'] for x in rows])} / "
                f"{_mean([x['wait_p95_h'] for x in rows])} | "
                f"{np.mean([x['gpu_share'] for x in rows]):.0%} | "
                f"{_mean([x['stretch'] for x in rows])} | "
                f"{np.mean([x['preempted'] for x in rows]):.1f} / "
                f"{np.mean([x['preempting'] for x in rows]):.1f} | "
                f"{sum(x['iterations_lost'] for x in rows)} |"
            )
    lines += [
        "",
        "| mode | Jain (stretch) | solo-disagg/rollmux | colocated/rollmux | vs unbounded "
        "| preemptions (reclaim / fair share) | unfinished jobs |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode in modes:
        ms = [r["modes"][mode] for r in runs]
        colo = [m["colocated/rollmux"] for m in ms]
        solo = [m["solo-disagg/rollmux"] for m in ms]
        delta = [
            m["colocated/rollmux"] - r["unbounded"]["colocated/rollmux"]
            for m, r in zip(ms, runs, strict=True)
        ]
        lines.append(
            f"| {mode} | {np.mean([m['jain_stretch'] for m in ms]):.3f} "
            f"({min(m['jain_stretch'] for m in ms):.3f}-{max(m['jain_stretch'] for m in ms):.3f}) | "
            f"{np.mean(solo):.3f}x | {np.mean(colo):.3f}x ({min(colo):.3f}-{max(colo):.3f}) | "
            f"{np.mean(delta):+.3f} ({min(delta):+.3f} to {max(delta):+.3f}) | "
            f"{np.mean([m['preemptions'] for m in ms]):.1f} "
            f"({np.mean([m['preemptions_by_kind']['reclaim'] for m in ms]):.1f} / "
            f"{np.mean([m['preemptions_by_kind']['fair_share'] for m in ms]):.1f}) | "
            f"{sum(m['unfinished'] for m in ms)} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--nodes", default="12,18", help="bounded pool sizes, comma-separated")
    parser.add_argument("--jobs", type=int, default=45)
    parser.add_argument("--out", help="also write the Markdown here")
    args = parser.parse_args()
    spec = default_cluster()
    parts: list[str] = []
    for nodes in (int(n) for n in args.nodes.split(",")):
        bounded = replace(
            spec, rollout=replace(spec.rollout, nodes=nodes), train=replace(spec.train, nodes=nodes)
        )
        runs = []
        for seed in range(args.seeds):
            jobs = generate_tenants(seed, jobs=args.jobs)
            report = run_tenants(jobs, bounded, seed=seed)
            # the same with reclaim only: no fair-share preemption among borrowers
            reclaim = run_tenants(
                jobs, bounded, seed=seed, modes=("fairshare",),
                policy=PreemptionPolicy(fair_share=False),
            )  # fmt: skip
            report["modes"]["reclaim only"] = reclaim["modes"]["fairshare"]
            print(json.dumps({"nodes": nodes, **report}), file=sys.stderr)
            runs.append(report)
        parts.append(table(runs, nodes))
        print(parts[-1], flush=True)
        print(flush=True)
    if args.out:
        Path(args.out).write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
