"""Drift (issue 13 item 4, simulator side): the paper's drift templates and re-planning.

The paper's drift experiment (section 7, paper-notes.md 7.4) gives each job one of
seven templates: none; increasing 0.5x, 1.0x, 1.5x; decreasing 0.5x, 1.0x, 1.5x
("increasing 1.0x is what was observed"), and runs the Increasing, Decreasing and
Mixed settings, which sample from them. The paper does not publish the curves, so
[I]: a template scales every drawn phase duration (rollout and training: response
length drives both) of iteration i of n by a factor of the job's progress p = i / (n-1):

* increasing a:  f(p) = 1 + a p        (the last iteration is 1 + a times the first)
* decreasing a:  f(p) = 1 / (1 + a p)  (the mirror image: the last is 1 / (1 + a))
* none:          f(p) = 1

The profile (what admission plans with) is the job's start, as a one-shot profiler
measures it at submission. A simulation setting is one template for every job
("increasing-1.0", ...), or "mixed": each job draws one of the seven uniformly
(seeded by the job id, so every policy sees the same drift).

Re-planning (`simulate(..., replan_drift=True)`): every `WINDOW` iterations the
simulator asks whether a job drifts (`is_drifting`: its recent mean phase time is
above its worst case, or its measured slowdown so far is on track to break its SLO);
if so it learns the job's estimates from its last `WINDOW` observed phases
(`learned_profile`: worst case = the largest observed, range = the observed one,
observed mean solo time) and re-checks its group with them
(scheduler.slo.check_group). When an SLO no longer
holds, the job is checkpointed, removed and resubmitted through the planner with its
learned estimates, and resumes at its next iteration after the paper's restart time
(scheduler.planner.consolidation.restart_seconds), at most `MAX_REPLANS` times. The
static planner (the default) never re-plans.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from scheduler.model import JobProfile, Member
from scheduler.slo import check_group

__all__ = [
    "MAX_REPLANS",
    "SETTINGS",
    "TEMPLATES",
    "WINDOW",
    "drift_factors",
    "drifted",
    "is_drifting",
    "job_templates",
    "learned_profile",
    "still_holds",
]

TEMPLATES = (
    "none",
    "increasing-0.5",
    "increasing-1.0",
    "increasing-1.5",
    "decreasing-0.5",
    "decreasing-1.0",
    "decreasing-1.5",
)
SETTINGS = (*TEMPLATES, "mixed")
WINDOW = 5  # iterations of observations a re-plan learns from (and between two checks)
MAX_REPLANS = 3  # per job: each costs a restart


def _parse(template: str) -> tuple[str, float]:
    if template not in TEMPLATES:
        raise ValueError(f"unknown drift template {template!r}; choose from {', '.join(SETTINGS)}")
    if template == "none":
        return "none", 0.0
    direction, amount = template.split("-")
    return direction, float(amount)


def drift_factors(template: str, iterations: int) -> np.ndarray:
    """Return the duration factor of each of `iterations` iterations under `template`."""
    direction, a = _parse(template)
    p = np.arange(iterations) / max(1, iterations - 1)
    if direction == "increasing":
        return 1.0 + a * p
    if direction == "decreasing":
        return 1.0 / (1.0 + a * p)
    return np.ones(iterations)


def drifted(
    roll: Sequence[float], train: Sequence[float], template: str
) -> tuple[list[float], list[float]]:
    """Return drawn rollout and training durations with `template`'s drift applied."""
    f = drift_factors(template, len(roll))
    return (np.asarray(roll) * f).tolist(), (np.asarray(train) * f).tolist()


def job_templates(jobs: Sequence[JobProfile], setting: str, *, seed: int) -> dict[str, str]:
    """Return each job's template under a setting (a template, or "mixed")."""
    if setting not in SETTINGS:
        raise ValueError(f"unknown drift setting {setting!r}; choose from {', '.join(SETTINGS)}")
    if setting != "mixed":
        return {j.id: setting for j in jobs}
    out: dict[str, str] = {}
    for j in jobs:
        rng = np.random.default_rng([seed, zlib.crc32(f"drift:{j.id}".encode())])
        out[j.id] = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
    return out


def learned_profile(
    profile: JobProfile, roll: Sequence[float], train: Sequence[float], *, remaining: int
) -> JobProfile:
    """Return `profile` with estimates learned from observed phases, for `remaining` iterations.

    The worst case becomes the largest observed phase, the range the observed one, and
    the observed mean solo iteration time (with the sync) the SLO check's expectation.
    """
    if not roll or len(roll) != len(train):
        raise ValueError("learning needs as many observed rollouts as trainings, at least one")
    mean_solo = float(np.mean(roll) + np.mean(train)) + profile.t_sync_s
    return replace(
        profile,
        iterations=max(1, remaining),
        t_roll_max_s=float(max(roll)),
        t_roll_min_s=float(min(roll)),
        t_train_max_s=float(max(train)),
        t_train_min_s=float(min(train)),
        observed_solo_s=mean_solo,
    )


def is_drifting(
    profile: JobProfile,
    roll: Sequence[float],
    train: Sequence[float],
    *,
    mean_iteration_s: float,
    mean_solo_s: float,
) -> bool:
    """Return True when a job's observed durations have left its estimates.

    Either its recent mean phase time is above its worst case (it grew past what it
    was planned with), or its measured slowdown so far (mean iteration time under
    sharing over its mean solo time, restarts excluded) is on track to break its SLO.
    """
    recent = float(np.mean(roll) + np.mean(train))
    above = recent > profile.t_roll_max_s + profile.t_train_max_s + 1e-9
    return above or mean_iteration_s > profile.slo * mean_solo_s * (1.0 + 1e-9)


def still_holds(
    members: Sequence[Member], learned: JobProfile, *, switch_overhead_s: float
) -> bool:
    """Return True when every member's SLO holds with `learned` in place of its job."""
    updated = [replace(m, job=learned) if m.job.id == learned.id else m for m in members]
    return check_group(updated, switch_overhead_s=switch_overhead_s).ok


def templates_summary(templates: Mapping[str, str]) -> dict[str, int]:
    """Return how many jobs got each template (for reports)."""
    out = dict.fromkeys(TEMPLATES, 0)
    for t in templates.values():
        out[t] += 1
    return {t: n for t, n in out.items() if n}
