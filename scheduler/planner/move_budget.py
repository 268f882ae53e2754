"""A mover's SLO budget over its whole run (consolidation rule 4, scheduler.planner.
consolidation): whether a destination keeps it, and whether any could (a cheap test
before a placement)."""

from __future__ import annotations

import math

from scheduler.config import PlannerConfig
from scheduler.model import JobProfile
from scheduler.planner import JOIN_ALLOWANCE_META_ITERATIONS
from scheduler.planner.objective import JobProgress, colocated_expected_s, expected_solo_s

__all__ = ["budget_ok", "may_move_within_budget", "mover_budget_ok", "solo_sd_s"]


def solo_sd_s(job: JobProfile) -> float:
    """Return the standard deviation of one drawn solo iteration (uniform phases)."""
    span_r = job.t_roll_max_s - job.roll_min
    span_t = job.t_train_max_s - job.train_min
    return math.sqrt((span_r * span_r + span_t * span_t) / 12.0)


def budget_ok(
    job: JobProfile,
    progress: JobProgress | None,
    now: float,
    iteration_s: float,
    remaining: float,
    extra_s: float,
    cfg: PlannerConfig,
    *,
    allowance: float = 0.0,
    colocated_factor: float | None = None,
) -> bool:
    """Return True when the job's SLO over its whole run still holds (rule 4).

    `remaining` iterations at `iteration_s` each (plus `allowance` more), `extra_s` of
    restart, after `now - admitted` elapsed. Without `cfg.consolidation.budget_z` the reference is
    slo x iterations x expected solo / (1 + solo_margin). With it the reference is
    what the job's mean drawn solo time can be: the solo seconds of the iterations
    done as measured (`JobProgress.solo_s_done`; else their expectation less z
    standard errors) plus the remaining ones' expectation less z standard errors. A
    co-located destination (`colocated_factor` set) runs every remaining iteration
    at its own drawn phases (rollout x the factor, no sync), the very draws of the
    reference: only their difference, per iteration, is uncertain.
    """
    elapsed = now - progress.admitted_s if progress else 0.0
    if cfg.consolidation.budget_z is None:
        budget = (
            job.slo * job.iterations * expected_solo_s(job) / (1.0 + cfg.consolidation.solo_margin)
        )
        return elapsed + extra_s + (remaining + allowance) * iteration_s <= budget + 1e-9
    z, slo = cfg.consolidation.budget_z, job.slo
    e, sd = expected_solo_s(job), solo_sd_s(job)
    done = max(0, job.iterations - math.ceil(remaining))
    known = progress.solo_s_done if progress and progress.solo_s_done is not None else None
    if known is None:
        known = done * e - z * sd * math.sqrt(done)
    rest = max(0.0, remaining)
    # [I] with a drift hedge h < 1 the budget must also hold were the job's remaining run
    # (its phases, its pace, their spread) h times as long: a restart a shrinking job's
    # slack cannot absorb is not spent on it (`PlannerConfig.drift_hedge`)
    for h in (1.0, cfg.drift_hedge) if cfg.drift_hedge < 1.0 else (1.0,):
        if colocated_factor is not None:
            # per remaining iteration: f r + t - slo (r + t + sync), r and t drawn
            span_r = job.t_roll_max_s - job.roll_min
            span_t = job.t_train_max_s - job.train_min
            mean_r = (job.roll_min + job.t_roll_max_s) / 2.0
            mean_t = (job.train_min + job.t_train_max_s) / 2.0
            mean_x = h * (colocated_factor * mean_r + mean_t) - slo * (
                h * (mean_r + mean_t) + job.t_sync_s
            )
            sd_x = (
                h
                * math.sqrt(((colocated_factor - slo) * span_r) ** 2 + ((1.0 - slo) * span_t) ** 2)
                / math.sqrt(12.0)
            )
            future = rest * mean_x + z * sd_x * math.sqrt(rest) + allowance * iteration_s * h
            if elapsed + extra_s + future > slo * known + 1e-9:
                return False
            continue
        future_ref = h * (rest * e - z * sd * math.sqrt(rest))
        spent = elapsed + extra_s + h * (rest + allowance) * iteration_s
        if spent > slo * (known + future_ref) + 1e-9:
            return False
    return True


def mover_budget_ok(
    job: JobProfile,
    progress: JobProgress | None,
    now: float,
    iteration_s: float,
    remaining: float,
    restart_s: float,
    cfg: PlannerConfig,
    *,
    colocated_factor: float | None,
) -> bool:
    """Return True when the mover keeps its SLO over its whole run (rule 4) at
    `iteration_s` in its destination: co-located (`colocated_factor` set) or a group,
    where it also waits for its turn (the join allowance)."""
    return budget_ok(
        job,
        progress,
        now,
        iteration_s,
        remaining,
        restart_s,
        cfg,
        # alone it waits for no one's turn (the margin rule keeps its allowance)
        allowance=0.0
        if colocated_factor is not None and cfg.consolidation.budget_z is not None
        else JOIN_ALLOWANCE_META_ITERATIONS,
        colocated_factor=colocated_factor,
    )


def may_move_within_budget(
    job: JobProfile,
    progress: JobProgress | None,
    now: float,
    remaining: float,
    restart_s: float,
    cfg: PlannerConfig,
    *,
    colocated_factor: float | None = None,
) -> bool:
    """Return False only when no destination of the job keeps its SLO over its whole run
    (rule 4), so `best_move` answers None whatever Algorithm 1 places it: in a group its
    predicted iteration is never under its worst-case solo time (the SLO check floors it
    there), and the budget only tightens as the iteration grows (remaining + allowance
    iterations at it); co-located (`colocated_factor`: the option is open) its iteration
    is its expected co-located one. A cheap test before a placement (issue 25 item 4)."""
    if mover_budget_ok(
        job, progress, now, job.t_solo_max_s, remaining, restart_s, cfg, colocated_factor=None
    ):
        return True
    return colocated_factor is not None and mover_budget_ok(
        job,
        progress,
        now,
        colocated_expected_s(job, colocated_factor),
        remaining,
        restart_s,
        cfg,
        colocated_factor=colocated_factor,
    )
