"""Stochastic model of phase durations and the probability that a member meets its SLO.

The paper calls its admission "conservative stochastic planning". Here:

* `duration_model(job, ...)` models each phase's duration as a scipy.stats
  distribution: from the profile, the trace format's uniform [min, max]; from
  observed phases (two or more), a normal fitted with `scipy.stats.norm.fit`,
  truncated to positive durations. `DurationModel.quantile` gives its quantiles;
  `DurationModel.mean_solo_s` is the expected solo iteration time.
* `slo_probabilities(members, ...)` gives, for every member of a co-execution group,
  the probability that its mean iteration time under sharing stays within
  slo x its mean solo iteration time, with both means taken over the iterations it
  still has to run. It is what the submit form's preview and the group page state
  ("SLO met with p = 0.98") and what the planner attaches to a FIT
  (`PlacementResult.slo_probability`) and may require (`place(...,
  min_slo_probability=...)`).

How the probability is computed (deterministic: a fixed-seed sample unless an rng
is passed). Each member's per-iteration mean rollout and training durations over
its N remaining iterations are drawn from their sampling distribution (the phase
distribution's mean, and its variance / N: the central limit theorem, clipped to the
phase's support). For each draw the group's meta-iteration is the paper's
max(T_cycle, T_load) on those means, plus what the planner's exact worst-case
prediction adds to that closed form (switch overheads and phases that cannot hide
in the bottleneck's bubbles); the member meets its SLO in that draw when the
meta-iteration is within slo x its own drawn solo time. The probability is the
share of draws that meet it. Every draw is at most the planner's worst case, so a
member alone always has p = 1, and a short member next to a long one has a lower p
the further its own actual/max ratio sits below the long member's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from scheduler.meta_iteration import group_loads, steady_iteration_times
from scheduler.model import JobProfile, Member, PhaseKind

__all__ = [
    "DEFAULT_SAMPLES",
    "DurationModel",
    "duration_model",
    "slo_probabilities",
]

DEFAULT_SAMPLES = 1000  # a probability to about +-0.016 (one standard error at p = 0.5)
_SEED = 20251201  # the default sample's seed: the same answer on every call


@dataclass(frozen=True)
class DurationModel:
    """One job's phase durations: a scipy.stats distribution per phase, plus its sync."""

    rollout: stats.rv_continuous  # frozen distribution of one rollout's duration
    train: stats.rv_continuous  # frozen distribution of one training's duration
    t_sync_s: float
    source: str  # "profile" (uniform [min, max]) or "observed" (fitted)

    def quantile(self, kind: PhaseKind, q: float) -> float:
        """Return the q-quantile of one phase's duration (sync is exact)."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q}")
        if kind is PhaseKind.SYNC:
            return self.t_sync_s
        dist = self.rollout if kind is PhaseKind.ROLLOUT else self.train
        return float(dist.ppf(q))

    @property
    def mean_solo_s(self) -> float:
        """Return the expected solo iteration time (rollout + training + sync)."""
        return float(self.rollout.mean()) + float(self.train.mean()) + self.t_sync_s


# The width given to an exact phase (min = max): scipy's uniform needs a positive
# scale, and a nanosecond changes no figure.
_EXACT_WIDTH_S = 1e-9


def _uniform(lo: float, hi: float) -> stats.rv_continuous:
    return stats.uniform(loc=lo, scale=max(hi - lo, _EXACT_WIDTH_S))


def _fitted(samples: Sequence[float]) -> stats.rv_continuous:
    values = np.asarray(samples, dtype=float)
    if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("observed durations must be finite numbers > 0")
    loc, scale = stats.norm.fit(values)
    if scale <= 0:  # every observation equal: a point mass
        return _uniform(float(loc), float(loc))
    # A normal truncated to positive durations (a < 0 standard deviations below).
    return stats.truncnorm(a=-loc / scale, b=np.inf, loc=loc, scale=scale)


@functools.lru_cache(maxsize=4096)
def _profile_model(
    roll_min: float, roll_max: float, train_min: float, train_max: float
) -> tuple[stats.rv_continuous, stats.rv_continuous]:
    # Keyed by value (the four numbers) and thread-safe: building scipy distributions
    # is most of a probability's cost, and planning asks about the same jobs again.
    return _uniform(roll_min, roll_max), _uniform(train_min, train_max)


def duration_model(
    job: JobProfile,
    *,
    observed_rollout_s: Sequence[float] = (),
    observed_train_s: Sequence[float] = (),
) -> DurationModel:
    """Return the duration model of `job`: fitted to its observed phases where it has two
    or more of a kind, else its profile's uniform [min, max]."""
    roll, train = _profile_model(job.roll_min, job.t_roll_max_s, job.train_min, job.t_train_max_s)
    source = "profile"
    if len(observed_rollout_s) >= 2:
        roll, source = _fitted(observed_rollout_s), "observed"
    if len(observed_train_s) >= 2:
        train, source = _fitted(observed_train_s), "observed"
    return DurationModel(rollout=roll, train=train, t_sync_s=job.t_sync_s, source=source)


@functools.lru_cache(maxsize=8192)
def _moments(dist: stats.rv_continuous) -> tuple[float, float, float, float]:
    lo, hi = dist.support()
    return float(dist.mean()), float(dist.var()), float(lo), float(hi)


# (mean, variance, lower end, upper end) of one phase's duration distribution
Moments = tuple[float, float, float, float]


def _uniform_moments(lo: float, hi: float) -> Moments:
    # scipy.stats.uniform(lo, hi - lo).mean() and .var(), without building the
    # distribution (most of a planning call's cost; tests check they agree)
    return (lo + hi) / 2.0, (hi - lo) ** 2 / 12.0, lo, hi


def _job_moments(job: JobProfile, model: DurationModel | None) -> tuple[Moments, Moments, float]:
    if model is None:
        return (
            _uniform_moments(job.roll_min, job.t_roll_max_s),
            _uniform_moments(job.train_min, job.t_train_max_s),
            job.t_sync_s,
        )
    return _moments(model.rollout), _moments(model.train), model.t_sync_s


def _mean_draws(moments: Moments, n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """Draw `size` means of `n` phase durations (CLT), clipped to the phase's support."""
    mean, var, lo, hi = moments
    if not var > _EXACT_WIDTH_S**2:
        return np.full(size, mean)
    draws = rng.normal(loc=mean, scale=math.sqrt(var / n), size=size)
    clipped: np.ndarray = np.clip(draws, max(lo, 0.0), hi)
    return clipped


def slo_probabilities(
    members: Sequence[Member],
    *,
    switch_overhead_s: float,
    models: Mapping[str, DurationModel] | None = None,
    remaining_iterations: Mapping[str, int] | None = None,
    samples: int = DEFAULT_SAMPLES,
    rng: np.random.Generator | None = None,
) -> dict[str, float]:
    """Return, per member id, the probability that the member meets its SLO in the group.

    `members` is the co-execution group (the joining job included, for a preview);
    `models` the members' duration models (default: each profile's); remaining
    iterations default to `JobProfile.iterations` (the live path passes what is
    left). See the module docstring for the model. Deterministic unless `rng` is
    given.
    """
    if not members:
        return {}
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    rng = rng if rng is not None else np.random.default_rng(_SEED)
    models = models or {}
    remaining = remaining_iterations or {}
    jobs = [m.job for m in members]
    # The planner's exact worst-case meta-iteration and its closed-form part: the
    # difference (switch overheads, unhideable phases) is kept in every draw.
    worst = max(steady_iteration_times(members, switch_overhead_s=switch_overhead_s))
    loads = group_loads(members)
    closed = max(max(j.t_solo_max_s for j in jobs), max(loads.values()))
    extra = max(0.0, worst - closed)
    roll = np.empty((len(jobs), samples))
    train = np.empty((len(jobs), samples))
    for i, j in enumerate(jobs):
        n = max(1, remaining.get(j.id, j.iterations))
        roll_m, train_m, sync = _job_moments(j, models.get(j.id))
        roll[i] = _mean_draws(roll_m, n, samples, rng) + sync
        train[i] = _mean_draws(train_m, n, samples, rng)
    solo = roll + train
    t_cycle = solo.max(axis=0)
    node_load: dict[str, np.ndarray] = {}
    for i, m in enumerate(members):
        for x in m.rollout_nodes:
            node_load[x] = node_load.get(x, 0.0) + roll[i]
        for x in m.train_nodes:
            node_load[x] = node_load.get(x, 0.0) + train[i]
    t_load = np.max(np.vstack(list(node_load.values())), axis=0)
    t_meta = np.maximum(t_cycle, t_load) + extra
    out: dict[str, float] = {}
    for i, j in enumerate(jobs):
        met = t_meta <= j.slo * solo[i] * (1.0 + 1e-9)
        out[j.id] = float(np.mean(met))
    return out
