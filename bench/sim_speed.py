"""Time the simulator on a generated paper-like trace under every policy.

    .venv/bin/python bench/sim_speed.py [--seed 0] [--kind paper] [--at-size [--size-jobs 2100] [--fingerprint] [--no-baseline]] [--interpreted]

Prints the wall time per policy (one process, one core), the phase events per
second, and the total against the 20 s target; rollmux runs with its default levers
(consolidation, expected-cost objective, co-located strategy, long-tail migration). `optimal` cannot run on a
200-job trace (it is exhaustive, at most 8 jobs), so it is timed separately on
an 8-job burst of the same generator.

`--at-size` times instead the paper's scale for its decision-latency figure (issue 25
item 4): 2,100 paper-like jobs arriving within an hour, each running at least 48 hours
solo (its iterations raised to that), on the unbounded cluster, rollmux with its shipped
levers; it prints the wall and CPU time (target: under 60 s), the consolidation's share,
the decision latency's p50/p99 (target p99 under 50 ms) and the run's outcome (cost, SLO
attainment, mean slowdown: what a lever that saves time costs shows there) and its memory
(peak RSS, before and after the run; the objects the cyclic collector tracks after it).
`--size-jobs` scales it. It then runs solo-disagg on the same trace (the same engine, one
job a group) and prints rollmux's CPU as a ratio of that baseline's, so runs on VMs of
different speeds compare (not the drift within one: the baseline runs a minute later);
`--no-baseline` skips it.
The simulator runs from the core's compiled build (`scheduler.compiled`: `make compile`,
which `make install` runs) when it matches the sources, as Python otherwise; the first line
says which. `--interpreted` runs it as Python (the same decisions, to the last bit).
`--fingerprint` also prints a hash of the run's outcome (`fingerprint`): a change that
only makes the simulator faster must leave it as it was.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import math
import os
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# the core's compiled build unless --interpreted: asked for before `scheduler` is imported
if "--interpreted" not in sys.argv[1:]:
    os.environ.setdefault("ROLLMUX_COMPILED", "1")

from scheduler import compiled  # noqa: E402
from scheduler.sim.engine import simulate  # noqa: E402
from scheduler.sim.gen import generate, generate_paper  # noqa: E402
from scheduler.sim.metrics import summarise  # noqa: E402
from scheduler.sim.milp import run_burst_optimum, trace_lower_bound  # noqa: E402
from scheduler.sim.optimal import run_optimal  # noqa: E402
from scheduler.sim.policies import make_policy  # noqa: E402
from scheduler.sim.records import RunResult  # noqa: E402
from scheduler.slo import expected_solo_s  # noqa: E402
from scheduler.trace import default_cluster, load_cluster  # noqa: E402

POLICIES = ["rollmux", "solo-disagg", "colocated", "random", "greedy-most-idle"]
TARGET_S = 20.0
AT_SIZE_TARGET_S = 60.0
AT_SIZE_P99_MS = 50.0
UNBOUNDED = REPO / "scheduler" / "sim" / "scenarios" / "cluster-unbounded.json"


def fingerprint(run: RunResult) -> str:
    """Return a hash of what a run decided and observed: every job's status, admission,
    end, group, strategy, predicted slowdown, iterations, moves and restarts, every move
    record, every node's busy seconds and allocation intervals, the admissions, the run's
    span. Floats enter as their repr, so a change in the last bit shows."""
    h = hashlib.sha256()

    def put(*fields: object) -> None:
        h.update(repr(fields).encode())
        h.update(b"\n")

    for job_id in sorted(run.jobs):
        r = run.jobs[job_id]
        put(
            job_id, r.status, r.admitted_s, r.finished_s, r.group_id, r.strategy,
            r.predicted_slowdown, r.iterations_done, r.moves, r.restart_s, r.replans,
            r.retries, r.solo_done_s, r.first_boundary_s,
        )  # fmt: skip
    for m in run.moves:
        put(m.at_s, m.job_id, m.from_group, m.to_group, m.saving_usd, m.restart_s)
    for node in sorted(run.busy_s):
        put(node, run.busy_s[node])
    for a in sorted(run.allocations):  # released together, they are listed in set order
        put(*a)
    put(sorted(run.admissions.items()), sorted((str(p), n) for p, n in run.peak_nodes.items()))
    put(run.start_s, run.end_s, run.tail_saved_s)
    return h.hexdigest()[:16]


def at_size(
    jobs_n: int, seed: int, *, show_fingerprint: bool = False, baseline: bool = True
) -> int:
    """Time rollmux on `jobs_n` paper-like jobs arriving within an hour, each at least
    48 hours long, on the unbounded cluster (the module docstring); `baseline`: then the
    solo-disagg policy on the same trace, and rollmux's CPU as a ratio of it."""
    spec = load_cluster(UNBOUNDED)
    jobs = [
        replace(j, iterations=max(j.iterations, math.ceil(48 * 3600 / expected_solo_s(j))))
        for j in generate_paper(seed, jobs=jobs_n, window_h=1.0)
    ]
    phases = 2 * sum(j.iterations for j in jobs)
    print(
        f"at size: {jobs_n:,} paper-like jobs arriving within 1 h, each >= 48 h solo, "
        f"unbounded cluster, seed {seed}: {phases:,} phase events "
        f"(1-min load average {os.getloadavg()[0]:.1f} at the start)"
    )
    policy = make_policy("rollmux", seed=seed)
    spent = {"consolidation": 0.0}
    departure = policy.on_departure

    def timed_departure(*args: object, **kwargs: object) -> object:
        t = time.process_time()
        try:
            return departure(*args, **kwargs)
        finally:
            spent["consolidation"] += time.process_time() - t

    policy.on_departure = timed_departure
    rss_before = _max_rss_mb()
    started, started_cpu = time.perf_counter(), time.process_time()
    run = simulate(jobs, spec, policy, seed=seed)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    rss, tracked = _max_rss_mb(), len(gc.get_objects())
    lat = sorted(run.decision_latency_s)
    p50 = lat[len(lat) // 2] * 1000
    p99 = lat[min(len(lat) - 1, math.ceil(0.99 * len(lat)) - 1)] * 1000
    verdict = "within" if cpu < AT_SIZE_TARGET_S else "OVER"
    print(
        f"  rollmux {elapsed:7.1f} s wall {cpu:7.1f} s CPU ({verdict} the "
        f"{AT_SIZE_TARGET_S:.0f} s target); consolidation on departures "
        f"{spent['consolidation']:.1f} s CPU; {len(run.moves)} moves; "
        f"{phases / cpu / 1000:.1f} k events/CPU-s"
    )
    print(
        f"  decision latency (wall) over {len(lat):,} arrivals: p50 {p50:.1f} ms, "
        f"p99 {p99:.1f} ms (target p99 < {AT_SIZE_P99_MS:.0f} ms); 1-min load average "
        f"{os.getloadavg()[0]:.1f} at the end"
    )
    figures = summarise(run)
    print(
        f"  outcome: cost ${figures['total_cost_usd']:,.2f}, SLO attainment "
        f"{figures['slo_attainment']:.2%} (drawn), mean slowdown {figures['mean_slowdown']:.4f}, "
        f"{figures['completed']:,} of {figures['jobs']:,} jobs done"
    )
    print(
        f"  memory: max RSS {rss:,.0f} MB ({rss_before:,.0f} MB before the run); "
        f"{tracked / 1e6:.2f} M objects tracked by the cyclic collector after it"
    )
    if show_fingerprint:
        print(f"  fingerprint {fingerprint(run)}")
    if baseline:
        # the same events through the same engine, one job a group and no planner beyond
        # first fit: the VM's speed drifts by up to a third within minutes, so a time is
        # compared across runs as a ratio to a baseline of the same run
        del run
        base_cpu = time.process_time()
        simulate(jobs, spec, make_policy("solo-disagg", seed=seed), seed=seed)
        base_cpu = time.process_time() - base_cpu
        print(
            f"  baseline: solo-disagg on the same trace {base_cpu:.1f} s CPU "
            f"({phases / base_cpu / 1000:.1f} k events/CPU-s); rollmux / baseline "
            f"{cpu / base_cpu:.2f}x CPU"
        )
    return 0


def build_line() -> str:
    """Return which build of the core this process runs."""
    if compiled.active():
        return "core: compiled (mypyc, scheduler.compiled)"
    return f"core: interpreted ({compiled.reason() or 'as asked'})"


def _max_rss_mb() -> float:
    """Return this process's peak resident memory so far, in MB (Linux: ru_maxrss in KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", default="paper", choices=["paper", "philly"])
    parser.add_argument("--at-size", action="store_true", help="time the 2,100-job case only")
    parser.add_argument("--size-jobs", type=int, default=2100)
    parser.add_argument(
        "--fingerprint", action="store_true", help="with --at-size: print the run's hash"
    )
    parser.add_argument(
        "--interpreted",
        action="store_true",
        help="run the core as Python, not its compiled build (scheduler.compiled)",
    )
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="with --at-size: skip the solo-disagg baseline run (and its ratio)",
    )
    args = parser.parse_args()
    print(build_line())
    if args.at_size:
        return at_size(
            args.size_jobs,
            args.seed,
            show_fingerprint=args.fingerprint,
            baseline=not args.no_baseline,
        )
    spec = default_cluster()
    jobs = generate(args.kind, args.seed)
    phases = 2 * sum(j.iterations for j in jobs)
    print(f"{args.kind}-like trace, seed {args.seed}: {len(jobs)} jobs, {phases:,} phase events")
    # CPU time is printed beside wall time: on a shared machine the wall clock
    # also counts other processes, the CPU time of this one does not.
    total = total_cpu = 0.0
    for name in POLICIES:
        started, started_cpu = time.perf_counter(), time.process_time()
        simulate(jobs, spec, make_policy(name, seed=args.seed), seed=args.seed)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
        total += elapsed
        total_cpu += cpu
        print(
            f"  {name:<18}{elapsed:7.2f} s wall {cpu:7.2f} s CPU "
            f"{phases / cpu / 1000:7.1f} k events/CPU-s"
        )
    verdict = "within" if total_cpu < TARGET_S else "OVER"
    print(
        f"  {'all five':<18}{total:7.2f} s wall {total_cpu:7.2f} s CPU "
        f"({verdict} the {TARGET_S:.0f} s target)"
    )
    burst = [
        replace(j, iterations=min(j.iterations, 40))
        for j in generate_paper(args.seed, jobs=8, window_h=3.0)
    ]
    started = time.perf_counter()
    _, search = run_optimal(burst, spec, seed=args.seed)
    print(
        f"  optimal on an 8-job burst: {time.perf_counter() - started:.2f} s "
        f"({search.candidates_checked} candidate groups checked, "
        f"{search.candidates_simulated} simulated)"
    )
    burst = [
        replace(j, iterations=min(j.iterations, 25))
        for j in generate_paper(args.seed, jobs=16, window_h=3.0)
    ]
    started = time.perf_counter()
    _, best = run_burst_optimum(burst, spec, seed=args.seed)
    print(
        f"  MILP optimum on a 16-job burst: {time.perf_counter() - started:.2f} s "
        f"({best.columns} columns simulated, HiGHS {best.search.search_s:.2f} s with them)"
    )
    started = time.perf_counter()
    bound = trace_lower_bound(jobs, spec, seed=args.seed)
    print(
        f"  LP lower bound of the whole trace: {time.perf_counter() - started:.2f} s "
        f"({bound.variables:,} variables, {bound.slots} slots)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
