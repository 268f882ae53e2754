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

Re-planning (`simulate(..., replan_drift=True)`, the decision in scheduler.replan, which
the live planner shares): every `WINDOW` iterations of a job the simulator fits the
trend of its drawn phases so far (`Observer`), projects every member of its group to
the end of its run (the SLO over the whole run, restarts and waits included) and
`decide`s: a job whose projection breaks, or without which a partner's would hold, is
checkpointed, removed and resubmitted through the planner with its forecast profile
(`move_profile`: the forecast's range and shape, what is left of its SLO budget), and
resumes at its next iteration after the paper's restart time
(scheduler.planner.consolidation.restart_seconds), at most `MAX_REPLANS` times, when the
group it would join keeps every SLO with its restart (consolidation's rule 4,
`partners_keep_slo`); a job whose durations trend but that stays (or that must go and
finds no such place) is planned from then with its forecast in place
(scheduler.planner.update_job), so admissions and consolidation see it. The re-planning
runs also hedge every move (`DRIFT_HEDGE`, `PlannerConfig.drift_hedge`, scheduler.config) and hold a short job
stricter for its whole run (scheduler.replan.young_profile). The live planner
writes a drifting job's estimates with `learned_profile` (its observed range). The static
planner (the default) never re-plans.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from scheduler.config import DRIFT_HEDGE
from scheduler.model import JobProfile
from scheduler.replan import (
    CHECK_EVERY,
    MAX_REPLANS,
    MIN_OBSERVED,
    WINDOW,
    Outlook,
    Trend,
    fit_trend,
    learned_profile,
    planned_outlook,
)

__all__ = [
    "CHECK_EVERY",
    "DRIFT_HEDGE",
    "MAX_REPLANS",
    "Observer",
    "SETTINGS",
    "TEMPLATES",
    "WINDOW",
    "drift_factors",
    "drifted",
    "job_templates",
    "learned_profile",
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


def templates_summary(templates: Mapping[str, str]) -> dict[str, int]:
    """Return how many jobs got each template (for reports)."""
    out = dict.fromkeys(TEMPLATES, 0)
    for t in templates.values():
        out[t] += 1
    return {t: n for t, n in out.items() if n}


class Observer:
    """The simulator's eyes for the re-plan: a running job's outlook (scheduler.replan)
    from its drawn phases, its trends fitted once per iteration count."""

    def __init__(self) -> None:
        self._trends: dict[str, tuple[int, tuple[Trend, Trend] | None]] = {}

    def outlook(
        self,
        profile: JobProfile,
        roll: Sequence[float],
        train: Sequence[float],
        *,
        done: int,
        elapsed_s: float,
        solo_done_s: float,
    ) -> Outlook:
        """Return the job's outlook after `done` iterations of its drawn `roll` / `train`:
        from its plan until it has run MIN_OBSERVED, from its observations after."""
        cached = self._trends.get(profile.id)
        if cached is None or cached[0] != done:
            seen = done >= MIN_OBSERVED
            cached = (done, (fit_trend(roll[:done]), fit_trend(train[:done])) if seen else None)
            self._trends[profile.id] = cached
        base = planned_outlook(
            profile, remaining=profile.iterations - done, elapsed_s=elapsed_s, done=done
        )
        base = replace(base, solo_done_s=solo_done_s)
        if cached[1] is None:
            return base
        return replace(base, roll=cached[1][0], train=cached[1][1], observed=True)
