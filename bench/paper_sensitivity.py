"""Ask what drives our solo-disagg/rollmux ratio on the paper-like trace: one change at a time.

    .venv/bin/python bench/paper_sensitivity.py [--seeds 3]

The headline generator is left as it is (docs/results.md reports it). Here each
variant changes ONE property of the generated trace or cluster, and the script
prints the cost ratios rollmux achieves, so the gap to the paper's 1.84x can be
attributed instead of tuned away:

- baseline: the generated paper-like trace on the example cluster (41 + 41 nodes)
- unbounded: the same on unbounded pools (no admission queue, nothing waits)
- slo-2: every job tolerates 2x (the top of U(1, 2)): SLO headroom
- one-size: every job takes 8 GPUs per pool (group training nodes always fit)
- templates: a single tenant's trace reuses a few configurations (the paper's
  trace is one tenant's top workloads); each job takes the profile of one of 10
  template jobs, keeping its arrival and solo duration
- exact: actual phases always take their worst case (min = max): no planning slack
- identical: every job takes the profile of the trace's first job (GPUs, phase
  times, memory, SLO), keeping its arrival and solo duration: no heterogeneity
  left, only arrivals and departures
- balanced: each job's rollout and training both take half its iteration (the
  mix is no longer rollout-heavy; iteration times and everything else unchanged)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.model import JobProfile  # noqa: E402
from scheduler.sim import run_simulation  # noqa: E402
from scheduler.sim.gen import generate_paper  # noqa: E402
from scheduler.trace import default_cluster, load_cluster  # noqa: E402

UNBOUNDED = REPO / "scheduler" / "sim" / "scenarios" / "cluster-unbounded.json"


def _mean_iter(job: JobProfile) -> float:
    return (job.roll_min + job.t_roll_max_s + job.train_min + job.t_train_max_s) / 2


def templates(jobs: list[JobProfile], seed: int) -> list[JobProfile]:
    """Give every job the profile of one of 10 template jobs, keeping its solo duration."""
    rng = np.random.default_rng(seed + 1000)
    chosen = [jobs[int(i)] for i in rng.choice(len(jobs), size=10, replace=False)]
    out = []
    for job in jobs:
        t = chosen[int(rng.integers(10))]
        hours = job.iterations * _mean_iter(job)
        out.append(
            replace(
                t,
                id=job.id,
                arrival_s=job.arrival_s,
                slo=job.slo,
                iterations=max(1, round(hours / _mean_iter(t))),
            )
        )
    return out


def balanced(job: JobProfile) -> JobProfile:
    """Split the job's worst-case and actual iteration evenly between the two phases."""
    half_max = (job.t_roll_max_s + job.t_train_max_s) / 2
    half_min = (job.roll_min + job.train_min) / 2
    return replace(
        job,
        t_roll_max_s=half_max,
        t_train_max_s=half_max,
        t_roll_min_s=half_min,
        t_train_min_s=half_min,
    )


def identical(jobs: list[JobProfile]) -> list[JobProfile]:
    """Give every job the first job's profile, keeping its arrival and solo duration."""
    t = jobs[0]
    return [
        replace(
            t,
            id=j.id,
            arrival_s=j.arrival_s,
            iterations=max(1, round(j.iterations * _mean_iter(j) / _mean_iter(t))),
        )
        for j in jobs
    ]


VARIANTS: dict[str, Callable[[list[JobProfile], int], list[JobProfile]]] = {
    "baseline": lambda jobs, seed: jobs,
    "unbounded": lambda jobs, seed: jobs,
    "slo-2": lambda jobs, seed: [replace(j, slo=2.0) for j in jobs],
    "one-size": lambda jobs, seed: [replace(j, rollout_gpus=8, train_gpus=8) for j in jobs],
    "templates": templates,
    "exact": lambda jobs, seed: [replace(j, t_roll_min_s=None, t_train_min_s=None) for j in jobs],
    "balanced": lambda jobs, seed: [balanced(j) for j in jobs],
    "identical": lambda jobs, seed: identical(jobs),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    print(
        "| variant | solo-disagg / rollmux | colocated / rollmux | rollmux admissions DP/RS/NG"
        " | rollmux bubble rollout / train | rollmux SLO (drawn) |"
    )
    print("|---|---|---|---|---|---|")
    for name in args.variants.split(","):
        solo, colo, mixes, bubbles, slo = [], [], [], [], []
        started = time.perf_counter()
        for seed in range(args.seeds):
            spec = load_cluster(UNBOUNDED) if name == "unbounded" else default_cluster()
            jobs = VARIANTS[name](generate_paper(seed), seed)
            report = run_simulation(
                jobs, spec, policies=["rollmux", "solo-disagg", "colocated"], seed=seed
            )
            solo.append(report["ratios"]["solo-disagg/rollmux"])
            colo.append(report["ratios"]["colocated/rollmux"])
            ours = report["policies"]["rollmux"]
            mixes.append(
                [ours["admissions"][k] for k in ("direct_packing", "rollout_scaling", "new_group")]
            )
            bubbles.append((ours["bubble_fraction"]["rollout"], ours["bubble_fraction"]["train"]))
            slo.append(ours["slo_attainment"])
        mix = np.sum(mixes, axis=0)
        mix_text = "/".join(f"{100 * m / mix.sum():.0f}%" for m in mix)
        print(
            f"| {name} | {np.mean(solo):.2f}x ({min(solo):.2f}-{max(solo):.2f}) "
            f"| {np.mean(colo):.2f}x | {mix_text} "
            f"| {100 * np.mean([b[0] for b in bubbles]):.0f}% / {100 * np.mean([b[1] for b in bubbles]):.0f}% "
            f"| {100 * np.mean(slo):.1f}% |",
            flush=True,
        )
        print(f"  ({name}: {time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
