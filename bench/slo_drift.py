"""SLO attainment and cost of rollmux: the distribution-aware SLO check, and drift.

Part "check" (issue 13 item 3): on generated paper-like and Philly-like traces, rollmux
with the SLO check of scheduler.slo (the default) against the same code with the
paper's worst-case check alone (`PlannerConfig().with_(slo_margin=None)`), beside solo-disagg and colocated. Prints per trace the SLO attainment on drawn
durations and against the profile, and the cost ratios solo-disagg/rollmux and
colocated/rollmux under both checks.

Part "drift" (item 4): the paper's drift templates (scheduler.sim.drift) on the same
traces; per setting, rollmux's static planner against re-planning of drifting jobs
(scheduler.replan: projected end-of-run SLOs; checkpoint, resubmit with the forecast,
resume; moves hedged, `PlannerConfig.drift_hedge`), with solo-disagg under the same drift as the
cost baseline. "missed" counts the re-planning runs' misses over all seeds, "beyond" those
that no re-plan could have avoided: an ORACLE bound (scheduler.sim.metrics.replan_bound:
from its first checkpoint on the job runs alone, its partners moved away, knowing its
future) above the SLO, and "moved" those the bound misses were the job itself to move
out then (one restart more).

    .venv/bin/python bench/slo_drift.py [--part check|drift|all] [--kinds paper,philly]
                                        [--seeds 0,1,2,3,4] [--settings none,mixed,...]
                                        [--misses]

Everything is measured as it comes out; nothing here is tuned.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.config import PlannerConfig  # noqa: E402
from scheduler.model import JobProfile  # noqa: E402
from scheduler.sim.drift import SETTINGS, job_templates  # noqa: E402
from scheduler.sim.engine import simulate  # noqa: E402
from scheduler.sim.gen import generate  # noqa: E402
from scheduler.sim.metrics import (  # noqa: E402
    SLO_TOLERANCE,
    replan_bound,
    summarise,
    total_cost_usd,
)
from scheduler.sim.policies import make_policy  # noqa: E402
from scheduler.sim.records import RunResult  # noqa: E402
from scheduler.slo import DEFAULT_SLO_MARGIN  # noqa: E402
from scheduler.trace import default_cluster  # noqa: E402

SPEC = default_cluster()


def run(
    jobs: Sequence[JobProfile],
    policy: str,
    seed: int,
    config: PlannerConfig | None = None,
    **kw: object,
) -> RunResult:
    """Simulate one policy on `jobs` (rollmux with `config`, default the shipped one; the
    simulation switches its drift re-planning with `replan_drift`)."""
    policy_ = make_policy(policy, seed=seed, config=config)
    return simulate(jobs, SPEC, policy_, seed=seed, **kw)  # type: ignore[arg-type]


# the paper's worst-case SLO check alone (no distribution-aware margin)
WORST_CASE = PlannerConfig().with_(slo_margin=None)


def miss_lines(result: RunResult) -> list[str]:
    """Return one line per job that missed its SLO on drawn durations: its template,
    length, SLO, slowdown, admission strategy, moves and drift re-plans, the oracle bound."""
    out = []
    factor = SPEC.train.rollout_speed_factor
    for job_id, r in sorted(result.jobs.items()):
        slo = r.profile.slo * (1 + SLO_TOLERANCE)
        if r.mean_iteration_s is None or r.mean_iteration_s <= slo * r.solo_iteration_s:
            continue
        bound = replan_bound(r, rollout_speed_factor=factor)
        out.append(
            f"{job_id} {r.drift} n={len(r.roll)} slo={r.profile.slo:.3f} "
            f"slowdown={r.mean_iteration_s / r.solo_iteration_s:.4f} {r.strategy} "
            f"moves={r.moves} replans={r.replans} bound={bound if bound is None else round(bound, 4)}"
        )
    return out


def misses(result: RunResult) -> tuple[int, int, int]:
    """Return the finished jobs that missed their SLO on drawn durations, how many of them
    no re-plan could have saved (oracle: `replan_bound` above their SLO), and how many
    none that moves the job itself could have (the bound with its restart)."""
    missed = beyond = moved = 0
    factor = SPEC.train.rollout_speed_factor
    for r in result.jobs.values():
        slo = r.profile.slo * (1 + SLO_TOLERANCE)
        if r.mean_iteration_s is None or r.mean_iteration_s <= slo * r.solo_iteration_s:
            continue
        missed += 1
        bound = replan_bound(r, rollout_speed_factor=factor)
        beyond += bound is not None and bound > slo
        bound = replan_bound(r, rollout_speed_factor=factor, restart=True)
        moved += bound is not None and bound > slo
    return missed, beyond, moved


def check_part(kinds: Sequence[str], seeds: Sequence[int]) -> None:
    """Print the SLO check's table: ours against the paper's worst-case check alone."""
    print(f"SLO check (margin {DEFAULT_SLO_MARGIN:.0%}) against the worst-case check alone")
    print(
        f"{'trace':<10} {'SLO drawn':>18} {'SLO profile':>12} "
        f"{'solo-d/rollmux':>16} {'coloc/rollmux':>15} {'drop':>6}"
    )
    for kind in kinds:
        drops: list[float] = []
        for seed in seeds:
            jobs = generate(kind, seed)
            ours = summarise(run(jobs, "rollmux", seed))
            paper = summarise(run(jobs, "rollmux", seed, WORST_CASE))
            solo = total_cost_usd(run(jobs, "solo-disagg", seed))
            colo = total_cost_usd(run(jobs, "colocated", seed))
            r_ours, r_paper = solo / ours["total_cost_usd"], solo / paper["total_cost_usd"]
            c_ours, c_paper = colo / ours["total_cost_usd"], colo / paper["total_cost_usd"]
            drops.append(r_paper - r_ours)
            print(
                f"{kind}-{seed:<4} {paper['slo_attainment']:>7.1%} -> {ours['slo_attainment']:>6.1%} "
                f"{ours['slo_attainment_vs_profile']:>12.1%} "
                f"{r_paper:>7.3f} -> {r_ours:.3f} {c_paper:>6.3f} -> {c_ours:.3f} "
                f"{r_paper - r_ours:>6.3f}",
                flush=True,
            )
        print(f"{kind:<10} mean drop of solo-disagg/rollmux {statistics.mean(drops):.3f}")


def drift_part(
    kinds: Sequence[str], seeds: Sequence[int], settings: Sequence[str], *, show_misses: bool
) -> None:
    """Print, per drift setting, static against re-planning rollmux."""
    print("drift: rollmux static vs re-planning (SLO on drawn durations; cost over solo-disagg)")
    print(
        f"{'trace':<9} {'setting':<15} {'SLO static':>10} {'SLO replan':>10} "
        f"{'solo/static':>11} {'solo/replan':>11} {'replans':>7} {'missed':>7} {'beyond':>6}"
        f" {'moved':>5}"
    )
    for kind in kinds:
        for setting in settings:
            rows = []
            for seed in seeds:
                jobs = generate(kind, seed)
                drift = job_templates(jobs, setting, seed=seed)
                static = run(jobs, "rollmux", seed, drift=drift)
                replan = run(jobs, "rollmux", seed, drift=drift, replan_drift=True)
                solo = total_cost_usd(run(jobs, "solo-disagg", seed, drift=drift))
                rows.append(
                    (
                        summarise(static)["slo_attainment"],
                        summarise(replan)["slo_attainment"],
                        solo / total_cost_usd(static),
                        solo / total_cost_usd(replan),
                        sum(r.replans for r in replan.jobs.values()),
                        *misses(replan),
                    )
                )
                if show_misses:
                    for line in miss_lines(replan):
                        print(f"  miss {kind}-{seed} {setting}: {line}", flush=True)
            mean = [statistics.mean(col) for col in zip(*rows, strict=True)]
            total = [sum(col) for col in zip(*rows, strict=True)]
            print(
                f"{kind:<9} {setting:<15} {mean[0]:>10.1%} {mean[1]:>10.1%} "
                f"{mean[2]:>11.3f} {mean[3]:>11.3f} {mean[4]:>7.1f} {total[5]:>7} {total[6]:>6}"
                f" {total[7]:>5}",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--part", choices=["check", "drift", "all"], default="all")
    ap.add_argument("--kinds", default="paper,philly")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--misses", action="store_true", help="list every re-planning miss")
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.perf_counter()
    if args.part in ("check", "all"):
        check_part(kinds, seeds)
    if args.part in ("drift", "all"):
        drift_part(kinds, seeds, args.settings.split(","), show_misses=args.misses)
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
