"""Command line: `python -m scheduler.sim --trace FILE [--cluster FILE] --policy P[,P...]|all --seed N [--json OUT] [--drift SETTING [--drift-replan]]`.

`--tenants fifo,caps,fairshare [--weights T=W,...]` instead runs rollmux on the bounded
cluster once per tenancy mode (scheduler.sim.tenancy: as before, nominal quotas as hard
caps, fair share with borrowing and preemption) and prints the per-tenant table.

Prints one row per policy; `--json` also writes the full report. A malformed
trace or cluster file stops with exit code 2 and a message naming the line and
the field, before anything is simulated.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from scheduler.sim.drift import SETTINGS
from scheduler.sim.metrics import same_jobs
from scheduler.sim.policies import parse_policies
from scheduler.sim.run import format_tenants, run_simulation, run_tenants, tenant_shares
from scheduler.sim.tenancy import MODES
from scheduler.trace import TraceError, default_cluster, load_cluster, load_trace

EXIT_BAD_INPUT = 2


def format_table(report: dict[str, Any]) -> str:
    """Render the report as a fixed-width table, one row per policy."""
    header = (
        f"{'policy':<17}{'done':>9}{'cost $':>12}{'$/h':>9}{'span h':>8}{'peak GPUs':>16}"
        f"{'SLO':>7}{'SLO/prof':>9}{'slow':>6}{'p99':>6}{'bubble R/T':>12}"
        f"{'DP/RS/NG':>13}{'lat p50/p99 ms':>16}{'wait s':>9}"
    )
    lines = [header, "-" * len(header)]
    for name, p in report["policies"].items():
        peak = "+".join(f"{n}{t}" for t, n in p["peak_gpus"].items())
        adm = p["admissions"]
        adm_text = (
            f"{adm.get('direct_packing', 0)}/{adm.get('rollout_scaling', 0)}/"
            f"{adm.get('new_group', 0)}"
        )
        lat = p["decision_latency_ms"]
        lines.append(
            f"{name:<17}{p['completed']:>4}/{p['jobs']:<4}{p['total_cost_usd']:>12,.0f}"
            f"{p['avg_cost_per_hour_usd']:>9,.0f}{p['makespan_h']:>8.1f}{peak:>16}"
            f"{p['slo_attainment']:>7.1%}{p['slo_attainment_vs_profile']:>9.1%}"
            f"{p['mean_slowdown']:>6.2f}{p['p99_slowdown']:>6.2f}"
            f"{p['bubble_fraction']['rollout']:>6.1%}/{p['bubble_fraction']['train']:<5.1%}"
            f"{adm_text:>13}{lat['p50']:>8.2f}/{lat['p99']:<7.2f}{p['mean_queue_delay_s']:>9.0f}"
        )
    for name, reason in report.get("skipped", {}).items():
        lines.append(f"{name:<17}skipped: {reason}")
    for name, p in report["policies"].items():
        for job in p.get("infeasible", []):
            lines.append(f"{name}: job {job['id']} is infeasible: {job['reason']}")
        for job in p.get("never_started", []):
            lines.append(f"{name}: job {job['id']} never started: {job['reason']}")
    if report["ratios"]:
        lines.append("")
        lines.append(
            "cost ratios: " + ", ".join(f"{k} = {v:.3f}x" for k, v in report["ratios"].items())
        )
        if not same_jobs(report["policies"]):
            done = ", ".join(
                f"{name} {p['completed']}/{p['jobs']}" for name, p in report["policies"].items()
            )
            lines.append(
                f"note: the policies finished different sets of jobs ({done}): their costs "
                "and these ratios cover different work"
            )
    return "\n".join(lines)


def parse_weights(text: str) -> dict[str, float]:
    """Parse TENANT=W[,TENANT=W...] into weights (each a finite number > 0)."""
    out: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        tenant, sep, value = item.partition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = float("nan")
        if not sep or not tenant or not weight > 0 or weight == float("inf"):
            raise ValueError(f"{item!r}: expected TENANT=WEIGHT with a weight > 0")
        out[tenant] = weight
    return out


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the simulator's command line; return the exit code."""
    stdout = out or sys.stdout
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.sim", description="Simulate RL jobs under RollMux and baselines."
    )
    parser.add_argument("--trace", required=True, help="trace file (JSON Lines, trace-format v1)")
    parser.add_argument(
        "--cluster", help="cluster spec (JSON); default: the spec's example cluster"
    )
    parser.add_argument("--policy", help="NAME[,NAME...] or all (required without --tenants)")
    parser.add_argument(
        "--tenants",
        help="MODE[,MODE...] of fifo, caps, fairshare: the multi-tenant report on a bounded "
        "cluster (equal nominal quotas per tenant of the trace)",
    )
    parser.add_argument(
        "--weights", default="", help="fair-share weights TENANT=W[,TENANT=W...] (default 1)"
    )
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--json", dest="json_out", help="also write the report as JSON here")
    parser.add_argument("--max-group-size", type=int, default=5)
    parser.add_argument(
        "--drift",
        default="none",
        choices=SETTINGS,
        help="drift setting (the paper's templates, or mixed): every job's phases drift",
    )
    parser.add_argument(
        "--drift-replan",
        action="store_true",
        help="rollmux re-plans drifting jobs (default: the static planner)",
    )
    args = parser.parse_args(argv)
    modes: list[str] = []
    weights: dict[str, float] = {}
    policies: list[str] = []
    if args.tenants:
        modes = [m.strip() for m in args.tenants.split(",") if m.strip()]
        bad = [m for m in modes if m not in MODES]
        if bad or not modes:
            print(f"error: --tenants: choose from {', '.join(MODES)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        try:
            weights = parse_weights(args.weights)
        except ValueError as exc:
            print(f"error: --weights: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    elif not args.policy:
        print("error: --policy is required (or --tenants)", file=sys.stderr)
        return EXIT_BAD_INPUT
    else:
        try:
            policies = parse_policies(args.policy)
        except ValueError as exc:
            print(f"error: --policy: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.max_group_size < 1:
        print("error: --max-group-size must be >= 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        spec = load_cluster(args.cluster) if args.cluster else default_cluster()
    except TraceError as exc:
        print(f"error: cluster {args.cluster}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"error: cannot read cluster {args.cluster}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        jobs = load_trace(args.trace, spec)
    except TraceError as exc:
        print(f"error: trace {args.trace}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"error: cannot read trace {args.trace}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if modes:
        if spec.rollout.nodes is None or spec.train.nodes is None:
            print("error: --tenants needs a bounded cluster (node counts)", file=sys.stderr)
            return EXIT_BAD_INPUT
        shares = tenant_shares(jobs, spec, weights)
        tenants_report = run_tenants(
            jobs, spec, seed=args.seed, modes=modes, shares=shares,
            max_group_size=args.max_group_size,
        )  # fmt: skip
        print(
            f"trace {args.trace}: {len(jobs)} jobs, seed {args.seed}, cluster "
            f"{spec.rollout.name} x {spec.rollout.nodes} + {spec.train.name} x "
            f"{spec.train.nodes} nodes; nominal quotas: "
            + ", ".join(f"{s.tenant} {s.nominal} {s.pool} (w {s.weight:g})" for s in shares),
            file=stdout,
        )
        print(format_tenants(tenants_report), file=stdout)
        if args.json_out:
            Path(args.json_out).write_text(
                json.dumps(tenants_report, indent=2) + "\n", encoding="utf-8"
            )
        return 0
    report = run_simulation(
        jobs,
        spec,
        policies=policies,
        seed=args.seed,
        max_group_size=args.max_group_size,
        drift=args.drift,
        replan_drift=args.drift_replan,
    )
    print(
        f"trace {args.trace}: {len(jobs)} jobs, seed {args.seed}, cluster "
        f"{spec.rollout.name} x {spec.rollout.nodes} + {spec.train.name} x {spec.train.nodes} nodes",
        file=stdout,
    )
    print(format_table(report), file=stdout)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
