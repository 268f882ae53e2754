"""Colours shared by the charts: one hue per job (two shades per phase kind), one per policy."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

PALETTE_HUES = (212, 28, 140, 280, 355, 48, 175, 320, 95, 250)


class JobShades(NamedTuple):
    """One job's hue in three shades: rollout light, weight sync middle, training dark."""

    rollout: str
    sync: str
    train: str

    def of(self, kind: str) -> str:
        """Return the shade of a phase kind ("rollout", "sync" or "train")."""
        return self.rollout if kind == "rollout" else self.sync if kind == "sync" else self.train


UNKNOWN_JOB = JobShades("#ccc", "#999", "#666")

POLICY_COLOURS = {
    "rollmux": "#2f5bea",
    "solo-disagg": "#98a2b3",
    "colocated": "#f79009",
    "random": "#7a5af8",
    "greedy-most-idle": "#12b76a",
    "optimal": "#101828",
}


def job_colours(job_ids: Iterable[int]) -> dict[int, JobShades]:
    """Return the shades of one hue per job (rollout light, sync middle, training dark)."""
    out = {}
    for i, jid in enumerate(sorted(set(job_ids))):
        hue = PALETTE_HUES[i % len(PALETTE_HUES)]
        out[jid] = JobShades(f"hsl({hue},70%,74%)", f"hsl({hue},66%,55%)", f"hsl({hue},62%,36%)")
    return out


def policy_colour(name: str) -> str:
    """Return the colour a policy has in every what-if chart."""
    return POLICY_COLOURS.get(name, "#667085")
