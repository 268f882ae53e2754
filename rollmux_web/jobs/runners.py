"""The time scale a runner's phases run on.

The runners themselves live in `workers.runners` (above the web app); the web app knows
their names (`jobs.spec.BUILTIN_RUNNERS`) and which of them emulate a profile (their
durations are divided by the time scale).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

EMULATING_RUNNERS = ("emulated", "toy-rl")  # runners whose durations are scaled by time_scale


def time_scale_of(runner: str, time_scale: float | None) -> float:
    """Return the speed-up applied to a job's profile durations.

    The job's own `time_scale` when set; otherwise the settings default for the emulating
    runners and 1 for real ones (a user's runner takes the time it takes).
    """
    if time_scale:
        return float(time_scale)
    if runner not in EMULATING_RUNNERS:
        return 1.0
    return float(settings.ROLLMUX_TIME_SCALE)


def load_seconds(metrics: Mapping[str, Any] | None) -> float:
    """Return the host's set-up or reload time a phase report carries (`load_s`: its workers
    created and the checkpoint restored on a cold start, the weights reloaded on a warm
    one): the platform's time inside the phase, not the job's."""
    return float((metrics or {}).get("load_s", 0.0))


def own_seconds(wall_s: float, metrics: Mapping[str, Any] | None) -> float:
    """Return a phase's own wall-clock seconds: its time less the host's `load_seconds`
    (what the drift checks compare with the job's estimates)."""
    return max(0.0, wall_s - load_seconds(metrics))


# What the emulating runners draw from when they profile a job that declared no phase
# times (profile seconds: rollout min, max, training min, max): the "configured
# distribution" of the emulation, in the range of the demo's 7B jobs. A real runner measures
# its real phases and gets zeros (unknown) with the `profile` flag.
EMULATED_PROFILE_S = (90.0, 120.0, 80.0, 100.0)
