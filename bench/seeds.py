"""Run rollmux's shipped planner configuration over many seeds of the generated traces.

    nice -n 10 .venv/bin/python bench/seeds.py [--kinds paper,philly] [--seeds 0-49]
        [--workers 2] [--drift SETTING] [--per-seed] [--rows FILE] [--table-from FILE...]

For each generated kind (scheduler.sim.gen) and seed it simulates rollmux, solo-disagg and
colocated on the spec's example cluster (simulator seed = trace seed) and prints, per kind,
the distribution (mean, min, max) of the cost ratios solo-disagg/rollmux and
colocated/rollmux, and how many traces reach 100% SLO on drawn durations, naming every job
that misses. `--per-seed` also prints each trace's ratios to four decimals (the refactor
check: same figures before and after); `--drift SETTING` runs every policy under that
drift template of scheduler.sim.drift with rollmux re-planning drifting jobs.
`--rows FILE` appends each trace's figures as a JSON line as soon as it is done (kinds
interleaved, so a long run stopped early still covers every kind alike);
`--table-from FILE...` prints the table from such lines instead of simulating.
Nothing here is tuned: the generator and the planner run as they are.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.sim.drift import job_templates  # noqa: E402
from scheduler.sim.engine import simulate  # noqa: E402
from scheduler.sim.gen import generate  # noqa: E402
from scheduler.sim.metrics import SLO_TOLERANCE, summarise, total_cost_usd  # noqa: E402
from scheduler.sim.policies import make_policy  # noqa: E402
from scheduler.trace import default_cluster  # noqa: E402

SPEC = default_cluster()


def one(task: tuple[str, int, str | None]) -> dict[str, Any]:
    """Simulate the three policies on one generated trace; return its figures."""
    kind, seed, setting = task
    jobs = generate(kind, seed)
    drift = job_templates(jobs, setting, seed=seed) if setting else None
    ours = simulate(
        jobs,
        SPEC,
        make_policy("rollmux", seed=seed),
        seed=seed,
        drift=drift,
        replan_drift=bool(setting),
    )
    cost = total_cost_usd(ours)
    solo = total_cost_usd(
        simulate(jobs, SPEC, make_policy("solo-disagg", seed=seed), seed=seed, drift=drift)
    )
    colo = total_cost_usd(
        simulate(jobs, SPEC, make_policy("colocated", seed=seed), seed=seed, drift=drift)
    )
    misses = []
    for job_id, r in sorted(ours.jobs.items()):
        if r.mean_iteration_s is None:
            continue
        if r.mean_iteration_s > r.profile.slo * r.solo_iteration_s * (1 + SLO_TOLERANCE):
            misses.append(
                f"{job_id} slo={r.profile.slo:.3f} "
                f"slowdown={r.mean_iteration_s / r.solo_iteration_s:.4f} {r.strategy} "
                f"moves={r.moves}"
            )
    return {
        "kind": kind,
        "seed": seed,
        "slo": summarise(ours)["slo_attainment"],
        "solo": solo / cost,
        "colo": colo / cost,
        "misses": misses,
    }


def seeds_arg(text: str) -> list[int]:
    """Parse "0-49" or "0,1,2" into seeds."""
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--kinds", default="paper,philly")
    ap.add_argument("--seeds", default="0-49")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--drift", default=None, help="a drift setting of scheduler.sim.drift")
    ap.add_argument("--per-seed", action="store_true")
    ap.add_argument("--rows", default=None, help="append each trace's figures here (JSON)")
    ap.add_argument("--table-from", nargs="*", default=None, help="JSON row files to tabulate")
    args = ap.parse_args()
    started = time.perf_counter()
    kinds = args.kinds.split(",")
    if args.table_from is not None:
        runs = []
        for path in args.table_from:
            for line in Path(path).read_text(encoding="utf-8").splitlines():
                if line.strip():
                    runs.append(json.loads(line))
        wanted = set(seeds_arg(args.seeds))
        runs = [r for r in runs if r["kind"] in kinds and r["seed"] in wanted]
        runs.sort(key=lambda r: (kinds.index(r["kind"]), r["seed"]))
    else:
        tasks = [(k, s, args.drift) for s in seeds_arg(args.seeds) for k in kinds]
        runs = []
        with ProcessPoolExecutor(max_workers=min(2, args.workers)) as pool:
            for run in pool.map(one, tasks):
                runs.append(run)
                if args.rows:
                    with open(args.rows, "a", encoding="utf-8") as out:
                        out.write(json.dumps(run) + "\n")
        runs.sort(key=lambda r: (kinds.index(r["kind"]), r["seed"]))
    if args.per_seed:
        print("| trace | seed | SLO drawn | solo-disagg / rollmux | colocated / rollmux |")
        print("|---|---|---|---|---|")
        for r in runs:
            print(
                f"| {r['kind']} | {r['seed']} | {r['slo']:.2%} | {r['solo']:.4f} | {r['colo']:.4f} |"
            )
        print()
    title = f" under drift {args.drift} (re-planning)" if args.drift else ""
    seeds = sorted({r["seed"] for r in runs})
    print(f"rollmux, shipped configuration{title}: seeds {seeds[0]}-{seeds[-1]} ({len(seeds)})")
    print(
        "| trace | traces | at 100% SLO (drawn) | solo-disagg / rollmux mean (min-max)"
        " | colocated / rollmux mean (min-max) |"
    )
    print("|---|---|---|---|---|")
    for kind in kinds:
        rows = [r for r in runs if r["kind"] == kind]
        if not rows:
            continue
        full = sum(1 for r in rows if r["slo"] >= 1.0)
        cells = []
        for key in ("solo", "colo"):
            vals = [r[key] for r in rows]
            cells.append(f"{statistics.mean(vals):.3f} ({min(vals):.3f}-{max(vals):.3f})")
        print(f"| {kind} | {len(rows)} | {full} | {cells[0]} | {cells[1]} |")
    for r in runs:
        for miss in r["misses"]:
            print(f"  miss {r['kind']}-{r['seed']}: {miss}")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
