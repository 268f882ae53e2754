"""Generate synthetic RL post-training traces shaped like the paper's two workloads.

`python -m scheduler.sim.gen --kind paper|philly --seed N --out FILE` writes a
trace in the v1 format (trace-format.md). Every parameter below is either a fact
the paper states ([S], see docs/paper-notes.md section 7.2) or a choice
we had to make because the paper does not publish it ([I]); the choice is named
so that anyone can change it. Nothing here was tuned to reproduce the paper's
cost ratios: the parameters were fixed from the paper's workload description
before any simulation was run.

Paper-like ("production trace", paper section 7.2):
  - [S] 200 jobs submitted over two weeks (336 h); arrivals uniform over that
    window (a Poisson process conditioned on the count) [I].
  - [S] Qwen family 3B-32B; [I] the four sizes 3B/7B/14B/32B equally likely.
  - [S] the trace run gave Solo-D 1:1 rollout:training GPUs; [C] the prototype
    configs give 16 GPUs to a 32B job; [I] 3B/7B get one node (8 GPUs) per pool,
    14B/32B two nodes (16 GPUs) per pool.
  - [S] maximum response length 4k-32k tokens, mean 12.1k; [I] drawn from
    {4k, 8k, 16k, 32k} with probabilities {0.30, 0.30, 0.25, 0.15} (mean 12.4k).
  - [S] phase durations range from 50 s to more than 900 s; [I] the worst-case
    training phase is base(model) x sqrt(length / 8k) with base 60/90/120/180 s
    for 3B/7B/14B/32B, clipped to [50, 900] s.
  - [S] production RL is rollout-heavy; multi-turn agentic rollouts take 3-4x
    their training phase; type D (single-turn) has T_roll ~ 2.5 T_train.
    [I] 40% of jobs are multi-turn with T_roll/T_train ~ U(3, 4); the other 60%
    are single-turn with T_roll/T_train ~ U(1, 2.5). Rollout clipped to 1500 s.
  - [I] actual phases are shorter than the worst case (admission plans with every
    response at maximum length): t_roll_min = t_roll_max x U(0.5, 0.8) (long
    tails make rollout vary most), t_train_min = t_train_max x U(0.85, 0.95).
  - [S] mean job duration 27.9 h; [I] solo duration lognormal with that mean and
    sigma 0.8, clipped to [1 h, 200 h]; iterations = duration / mean solo
    iteration (at the mid-point of [min, max]), at least 1.
  - [I] host memory per node (residency footprint): 260/420/610/900 GB for
    3B/7B/14B/32B (x U(0.9, 1.1)), so a 2 TB node holds 2-7 jobs [S: 2-5 on
    1-2 TB nodes].
  - [S] SLO ~ U(1, 2).

Philly-like ("simulation trace", paper section 7.2):
  - [S] 300 jobs over about 580 h; mean job duration 14.4 h, longest 142.9 h.
    [I] durations lognormal with mean 14.4 h and sigma 1.0 (the expected maximum
    of 300 draws is then about 150 h), clipped to [0.25 h, 142.9 h]; arrivals
    uniform over [0, 580 h - 14.4 h] so the trace spans about 580 h.
  - [S] nine profiles BL/RH/TH x S/M/L, T_roll and T_train drawn uniformly,
    "Mixed" = a uniform mix of the nine (the Fig. 20 default). [I] (Table 6 was
    not extracted) sizes S/M/L take 8/16/32 GPUs per pool, worst-case solo
    iteration U(200, 400) / U(400, 800) / U(800, 1600) s, host memory
    300/500/800 GB x U(0.9, 1.1); the rollout share of the iteration is
    U(0.4, 0.6) for BL, U(0.75, 0.85) for RH (T_roll 3-6x T_train) and
    U(0.15, 0.25) for TH; min durations as for the paper-like trace.
  - [S] SLO ~ U(1, 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from scheduler.model import JobProfile
from scheduler.trace import job_to_dict

HOUR = 3600.0

PAPER_JOBS = 200
PAPER_WINDOW_H = 14 * 24.0
PAPER_MEAN_DURATION_H = 27.9
PAPER_DURATION_SIGMA = 0.8
PAPER_MODELS: dict[str, dict[str, float]] = {
    # gpus per pool, base worst-case training phase at 8k tokens (s), host memory (GB)
    "qwen2.5-3b": {"gpus": 8, "train_base_s": 60.0, "mem_gb": 260.0},
    "qwen2.5-7b": {"gpus": 8, "train_base_s": 90.0, "mem_gb": 420.0},
    "qwen2.5-14b": {"gpus": 16, "train_base_s": 120.0, "mem_gb": 610.0},
    "qwen2.5-32b": {"gpus": 16, "train_base_s": 180.0, "mem_gb": 900.0},
}
PAPER_LENGTHS_K = (4, 8, 16, 32)
PAPER_LENGTH_P = (0.30, 0.30, 0.25, 0.15)
PAPER_MULTI_TURN_SHARE = 0.40
PAPER_SINGLE_TURN_RATIO = (1.0, 2.5)
PAPER_MULTI_TURN_RATIO = (3.0, 4.0)

PHILLY_JOBS = 300
PHILLY_SPAN_H = 580.0
PHILLY_MEAN_DURATION_H = 14.4
PHILLY_MAX_DURATION_H = 142.9
PHILLY_DURATION_SIGMA = 1.0
PHILLY_SIZES: dict[str, dict[str, float]] = {
    "S": {"gpus": 8, "iter_lo": 200.0, "iter_hi": 400.0, "mem_gb": 300.0},
    "M": {"gpus": 16, "iter_lo": 400.0, "iter_hi": 800.0, "mem_gb": 500.0},
    "L": {"gpus": 32, "iter_lo": 800.0, "iter_hi": 1600.0, "mem_gb": 800.0},
}
PHILLY_ROLL_SHARE: dict[str, tuple[float, float]] = {
    "BL": (0.40, 0.60),
    "RH": (0.75, 0.85),
    "TH": (0.15, 0.25),
}

ROLL_MIN_FRACTION = (0.5, 0.8)
TRAIN_MIN_FRACTION = (0.85, 0.95)


def _lognormal_hours(rng: np.random.Generator, mean_h: float, sigma: float) -> float:
    # E[lognormal(mu, sigma)] = exp(mu + sigma^2 / 2): choose mu so the mean is mean_h.
    mu = float(np.log(mean_h)) - sigma * sigma / 2.0
    return float(rng.lognormal(mu, sigma))


def _finish_job(
    rng: np.random.Generator,
    *,
    job_id: str,
    tenant: str,
    model: str,
    arrival_s: float,
    duration_h: float,
    gpus: int,
    t_roll_max: float,
    t_train_max: float,
    mem_gb: float,
) -> JobProfile:
    roll_min = t_roll_max * float(rng.uniform(*ROLL_MIN_FRACTION))
    train_min = t_train_max * float(rng.uniform(*TRAIN_MIN_FRACTION))
    mean_iter = (roll_min + t_roll_max) / 2.0 + (train_min + t_train_max) / 2.0
    iterations = max(1, round(duration_h * HOUR / mean_iter))
    return JobProfile(
        id=job_id,
        tenant=tenant,
        model=model,
        arrival_s=round(arrival_s, 1),
        iterations=iterations,
        rollout_gpus=gpus,
        train_gpus=gpus,
        t_roll_max_s=round(t_roll_max, 1),
        t_roll_min_s=round(roll_min, 1),
        t_train_max_s=round(t_train_max, 1),
        t_train_min_s=round(train_min, 1),
        host_mem_gb=round(mem_gb, 0),
        slo=round(float(rng.uniform(1.0, 2.0)), 3),
    )


def generate_paper(
    seed: int, *, jobs: int = PAPER_JOBS, window_h: float = PAPER_WINDOW_H
) -> list[JobProfile]:
    """Return a paper-like production trace (see the module docstring for every parameter).

    `jobs` and `window_h` (the arrival window) shrink it for tests and for the
    small traces the exhaustive `optimal` policy can handle.
    """
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0.0, window_h * HOUR, size=jobs))
    models = list(PAPER_MODELS)
    out: list[JobProfile] = []
    for index, arrival in enumerate(arrivals):
        model = models[int(rng.integers(len(models)))]
        params = PAPER_MODELS[model]
        length_k = PAPER_LENGTHS_K[int(rng.choice(len(PAPER_LENGTHS_K), p=PAPER_LENGTH_P))]
        t_train = float(np.clip(params["train_base_s"] * np.sqrt(length_k / 8.0), 50.0, 900.0))
        multi_turn = bool(rng.uniform() < PAPER_MULTI_TURN_SHARE)
        ratio_range = PAPER_MULTI_TURN_RATIO if multi_turn else PAPER_SINGLE_TURN_RATIO
        t_roll = float(np.clip(t_train * rng.uniform(*ratio_range), 50.0, 1500.0))
        duration = float(
            np.clip(_lognormal_hours(rng, PAPER_MEAN_DURATION_H, PAPER_DURATION_SIGMA), 1.0, 200.0)
        )
        out.append(
            _finish_job(
                rng,
                job_id=f"job-{index + 1:04d}",
                tenant="agent" if multi_turn else "rlvr",
                model=f"{model}-{length_k}k",
                arrival_s=float(arrival),
                duration_h=duration,
                gpus=int(params["gpus"]),
                t_roll_max=t_roll,
                t_train_max=t_train,
                mem_gb=params["mem_gb"] * float(rng.uniform(0.9, 1.1)),
            )
        )
    return out


def generate_philly(
    seed: int, *, jobs: int = PHILLY_JOBS, window_h: float = PHILLY_SPAN_H - PHILLY_MEAN_DURATION_H
) -> list[JobProfile]:
    """Return a Philly-like simulation trace with the nine BL/RH/TH x S/M/L profiles."""
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0.0, window_h * HOUR, size=jobs))
    kinds = list(PHILLY_ROLL_SHARE)
    sizes = list(PHILLY_SIZES)
    out: list[JobProfile] = []
    for index, arrival in enumerate(arrivals):
        kind = kinds[int(rng.integers(len(kinds)))]
        size = sizes[int(rng.integers(len(sizes)))]
        params = PHILLY_SIZES[size]
        t_solo = float(rng.uniform(params["iter_lo"], params["iter_hi"]))
        share = float(rng.uniform(*PHILLY_ROLL_SHARE[kind]))
        duration = float(
            np.clip(
                _lognormal_hours(rng, PHILLY_MEAN_DURATION_H, PHILLY_DURATION_SIGMA),
                0.25,
                PHILLY_MAX_DURATION_H,
            )
        )
        out.append(
            _finish_job(
                rng,
                job_id=f"job-{index + 1:04d}",
                tenant=kind.lower(),
                model=f"{kind}-{size}",
                arrival_s=float(arrival),
                duration_h=duration,
                gpus=int(params["gpus"]),
                t_roll_max=t_solo * share,
                t_train_max=t_solo * (1.0 - share),
                mem_gb=params["mem_gb"] * float(rng.uniform(0.9, 1.1)),
            )
        )
    return out


# Multi-tenant trace (issue 22): [I] three tenants of the paper-like mix on a bounded
# cluster; "vision" bursts (all its jobs within BURST_H of the start), "speech" and "nlp"
# submit steadily over the window. Jobs are the paper-like generator's, dealt round-robin.
TENANTS = ("vision", "speech", "nlp")
BURSTING = "vision"
BURST_H = 2.0
TENANTS_JOBS = 45
TENANTS_WINDOW_H = 72.0


def generate_tenants(
    seed: int, *, jobs: int = TENANTS_JOBS, window_h: float = TENANTS_WINDOW_H
) -> list[JobProfile]:
    """Return a multi-tenant trace: paper-like jobs dealt to TENANTS, BURSTING's in a burst."""
    rng = np.random.default_rng(seed + 7919)  # [I] its own stream: the jobs stay paper's
    base = generate_paper(seed, jobs=jobs, window_h=window_h)
    out: list[JobProfile] = []
    for index, job in enumerate(base):
        tenant = TENANTS[index % len(TENANTS)]
        arrival = job.arrival_s
        if tenant == BURSTING:
            arrival = round(float(rng.uniform(0.0, BURST_H * HOUR)), 1)
        out.append(replace(job, tenant=tenant, arrival_s=arrival))
    return sorted(out, key=lambda j: (j.arrival_s, j.id))


GENERATORS = {"paper": generate_paper, "philly": generate_philly, "tenants": generate_tenants}


def generate(kind: str, seed: int, *, jobs: int | None = None) -> list[JobProfile]:
    """Return a trace of `kind` ("paper", "philly" or "tenants") for `seed`; `jobs` overrides
    the count."""
    if kind not in GENERATORS:
        raise ValueError(f"unknown trace kind {kind!r}; choose one of {sorted(GENERATORS)}")
    if jobs is None:
        return GENERATORS[kind](seed)
    return GENERATORS[kind](seed, jobs=jobs)


def to_jsonl(jobs: Sequence[JobProfile], *, header: str = "") -> str:
    """Render jobs as a v1 trace (JSON Lines), with an optional `#` comment header."""
    lines = [f"# {line}" for line in header.splitlines()] if header else []
    lines += [json.dumps(job_to_dict(job)) for job in jobs]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the generator's command line; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.sim.gen", description="Generate a synthetic RL job trace."
    )
    parser.add_argument("--kind", choices=sorted(GENERATORS), required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True, help="output file ('-' for stdout)")
    parser.add_argument("--jobs", type=int, default=None, help="override the number of jobs")
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be >= 1")
    jobs = generate(args.kind, args.seed, jobs=args.jobs)
    text = to_jsonl(
        jobs, header=f"generated by scheduler.sim.gen --kind {args.kind} --seed {args.seed}"
    )
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
