"""Consolidation on departure: step 2 of a planning pass (services.planning).

When a member leaves a group and others remain, `departures.placement_end` flags the
group; the next planning pass (under the planner lock) asks the core's
`plan_consolidation` which survivors to move and marks their placements
`move_requested`. The moves themselves are re-decided and made at each mover's next
iteration boundary (services.moves). The simulator's calls, with its rules: expected
remaining cost saved net of the restart (a function of model size), every SLO over the
whole run, restarts included, at most ROLLMUX_MAX_MOVES_PER_JOB moves.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from django.conf import settings
from django.db.models import Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from rollmux_web.workflow import levers, snapshot
from rollmux_web.workflow.models import (
    ExecutionGroup,
    MoveKind,
    PhaseRecord,
    Placement,
    Strategy,
)
from scheduler.config import PlannerConfig
from scheduler.model import ClusterState
from scheduler.planner.consolidation import plan_consolidation
from scheduler.planner.objective import JobProgress

log = logging.getLogger(__name__)

# The moves' clock: the planner's `now` is 0 and each job's admission lies its elapsed
# PROFILE seconds before it (a job emulated at 200x has run 200 s of its profile per
# wall-clock second), so every job's SLO budget is on its own clock.
NOW = 0.0


def config() -> PlannerConfig:
    """Return the live planner's configuration (workflow.levers): the consolidation rules
    and admission options the simulator's rollmux runs, ROLLMUX_* settings applied."""
    return levers.live_config()


def move_state() -> tuple[ClusterState, dict[str, JobProgress]]:
    """Return the planner's view (`snapshot.planner_input`: every member's whole run, its
    iterations done, moves and first admission) with each SLO clock in profile seconds.

    A job emulated at 200x has run 200 profile seconds per wall-clock second, and its SLO
    budget is in profile seconds: the moves' `now` is NOW and each job's admission lies its
    elapsed wall-clock seconds x its time scale before it, less its hosts' set-up and load
    (`_platform_seconds`), as the drift check's slowdown so far (services.moves): the
    emulation scales the job's phases, not this machine's worker start-up. (Magnified, a
    Ray start of 16 workers per job, 15-60 s under load, was 3,000-12,000 profile seconds
    at 200x: on Ray a partner read as behind on its own account and a mover's budget as
    spent, and the moves the inline runs made were refused.)
    """
    state, progress = snapshot.planner_input()
    wall = timezone.now().timestamp()
    scale = {m.job.id: m.job.time_scale for g in state.groups for m in g.members}
    scaled = [int(job_id) for job_id, s in scale.items() if s != 1.0]
    platform = _platform_seconds(scaled) if scaled else {}
    return state, {
        job_id: replace(
            p,
            admitted_s=NOW
            - max(0.0, wall - p.admitted_s - platform.get(job_id, 0.0)) * scale.get(job_id, 1.0)
            if p.admitted_s
            else NOW,
        )
        for job_id, p in progress.items()
    }


def _platform_seconds(job_ids: list[int]) -> dict[str, float]:
    """Return each job's hosts' set-up and load (wall-clock seconds: workers started, the
    runner built, checkpoints restored, weights reloaded) in its production phases."""
    rows = (
        PhaseRecord.objects.filter(job_id__in=job_ids)
        .exclude(placement__strategy=Strategy.PROFILE)
        .order_by()  # (no default ordering in the GROUP BY)
        .values("job_id")
        .annotate(s=Sum(Coalesce("setup_s", 0.0) + Coalesce("load_s", 0.0)))
        .values_list("job_id", "s")
    )
    return {str(job_id): float(s or 0.0) for job_id, s in rows}


def consolidation_plan() -> list[int]:
    """Mark the survivors the planner would move out of groups a member left; return them.

    Step 2 of a planning pass (it holds the planner lock): each flagged group is
    planned once (`plan_consolidation` on one snapshot) and its flag cleared; the moves
    themselves are re-decided at each mover's next iteration boundary.
    """
    due = list(ExecutionGroup.objects.filter(consolidation_due=True).values_list("pk", flat=True))
    if not due:
        return []
    ExecutionGroup.objects.filter(pk__in=due).update(consolidation_due=False)
    if not settings.ROLLMUX_CONSOLIDATION or settings.ROLLMUX_MAX_MOVES_PER_JOB < 1:
        return []
    try:
        state, progress = move_state()
    except snapshot.NoPoolConfigured:
        return []
    active = {g.id for g in state.groups}
    every = config().consolidation.every_departure
    marked: list[int] = []
    for group_id in due:
        if str(group_id) not in active and not every:
            continue  # its last member left: only the jobs alone elsewhere could move
        for move in plan_consolidation(
            state, str(group_id), now=NOW, progress=progress, config=config()
        ):
            job_id = int(move.job_id)
            n = (
                Placement.objects.filter(job_id=job_id, ended_at__isnull=True, move_requested="")
                .exclude(strategy=Strategy.PROFILE)
                .update(move_requested=MoveKind.CONSOLIDATION)
            )
            if n:
                log.info("job %s: %s (at its next iteration boundary)", job_id, move.reason)
                marked.append(job_id)
    return marked
