"""The time scale a runner's phases run on.

The runners themselves live in `workers.runners` (above the web app); the web app knows
their names (`jobs.spec.BUILTIN_RUNNERS`) and which of them emulate a profile (their
durations are divided by the time scale).
"""

from __future__ import annotations

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


# What the emulating runners draw from when they profile a job that declared no phase
# times (profile seconds: rollout min, max, training min, max): the "configured
# distribution" of the emulation, in the range of the demo's 7B jobs. A real runner measures
# its real phases and gets zeros (unknown) with the `profile` flag.
EMULATED_PROFILE_S = (90.0, 120.0, 80.0, 100.0)
