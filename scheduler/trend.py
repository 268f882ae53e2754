"""Drift forecasts of a job's phase durations (the re-plan's step 1, `scheduler.replan`).

Each member's rollout and training durations are fitted against their iteration index on
everything it has run. A trend is used only when it is significant (Student's t at
`TREND_ALPHA`; else the mean: no drift). A growing duration is extrapolated linearly; a
shrinking one as a linear growth of its speed (1 / duration), which never reaches zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

from scheduler.slo import SLO_EPS

__all__ = ["FLOOR", "MIN_OBSERVED", "TREND_ALPHA", "Trend", "fit_trend"]

MIN_OBSERVED = 5  # iterations observed before the observations replace the plan
# a slope counts as drift when significant at this level (two-sided; 3 standard errors
# of a normal): checked every WINDOW iterations over a long run, a looser test moves
# jobs that do not drift
TREND_ALPHA = 0.0027
# a forecast duration never falls below this share of the fitted current one (the speed
# model already slows the fall; this bounds a noisy steep fit)
FLOOR = 0.2


@dataclass(frozen=True)
class Trend:
    """A fitted duration: `level` at the next iteration (0 ahead), changing per iteration
    by `slope` (linear, growth) or with a speed (1 / duration) changing by `rate_slope`
    (shrinkage). Both zero: flat at `level`."""

    level: float
    slope: float = 0.0
    rate_slope: float = 0.0

    def at(self, ahead: float) -> float:
        """Return the forecast duration `ahead` iterations after the next one."""
        if self.slope:
            value = self.level + self.slope * ahead
        elif self.rate_slope:
            rate = 1.0 / self.level + self.rate_slope * ahead
            value = 1.0 / rate if rate > 0 else math.inf
        else:
            return self.level
        return max(value, FLOOR * self.level)

    def mean(self, a: float, b: float) -> float:
        """Return the mean forecast over iterations a..b ahead (b > a): exact for the
        linear model (but for its floor), a three-point Simpson rule for the speed model."""
        if self.slope:
            return 0.5 * (self.at(a) + self.at(b))
        if self.rate_slope:
            return (self.at(a) + 4.0 * self.at(0.5 * (a + b)) + self.at(b)) / 6.0
        return self.level

    @property
    def drifts(self) -> bool:
        """Return True when the fit found a significant trend."""
        return bool(self.slope or self.rate_slope)


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Return (slope, its standard error, the fit's value one step after x[-1]) of y on x."""
    n = len(x)
    xm, ym = float(x.mean()), float(y.mean())
    dx = x - xm
    sxx = float(dx @ dx)
    slope = float(dx @ (y - ym)) / sxx
    resid = y - (ym + slope * dx)
    se = math.sqrt(float(resid @ resid) / (n - 2) / sxx) if n > 2 else math.inf
    return slope, se, ym + slope * (float(dx[-1]) + 1.0)


@lru_cache(maxsize=512)
def _critical(dof: int, alpha: float) -> float:
    """Return Student's t two-sided critical value at `alpha` with `dof` degrees of freedom."""
    return float(stats.t.isf(alpha / 2.0, dof))


def fit_trend(durations: Sequence[float], *, alpha: float = TREND_ALPHA) -> Trend:
    """Return the trend of a job's observed phase durations (oldest first; module doc).

    Fewer than `MIN_OBSERVED` observations, or a slope not significant at `alpha`
    (Student's t on the least-squares slope): flat at their mean.
    """
    y = np.asarray(durations, dtype=float)
    if len(y) == 0:
        raise ValueError("a trend needs at least one observed duration")
    flat = Trend(float(y.mean()))
    if len(y) < MIN_OBSERVED or float(y.min()) <= 0:
        return flat
    x = np.arange(len(y), dtype=float)
    slope, se, level = _ols(x, y)
    if not abs(slope) > _critical(len(y) - 2, alpha) * se:
        return flat
    if slope > 0:
        return Trend(max(level, SLO_EPS), slope=slope)
    rate_slope, _se, rate = _ols(x, 1.0 / y)
    if rate_slope <= 0 or rate <= 0:
        return flat
    return Trend(1.0 / rate, rate_slope=rate_slope)
