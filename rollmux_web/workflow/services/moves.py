"""Moves: a job leaves its co-execution group for another at an iteration boundary.

One mechanism serves two planner decisions (issue 14 item 1, issue 13 item 4):

* **Consolidation on departure.** When a member leaves a group and others remain,
  `placement_end` flags the group; the next planning pass (its step 2,
  `consolidation.consolidation_plan`, under the planner lock) asks the core's
  `plan_consolidation` which survivors to move and marks their placements
  `move_requested`. The simulator's calls, with its rules:
  expected remaining cost saved net of the restart (a function of model size), every
  SLO over the whole run, restarts included, at most ROLLMUX_MAX_MOVES_PER_JOB moves.
* **Drift re-plan.** Every `WINDOW` iterations a job's observed phases give its outlook
  (scheduler.replan: its trends fitted on everything it ran in production, as the
  simulator's); when a check is due (`should_assess`: a trend, beyond the controller's
  tolerance ROLLMUX_DRIFT_TOLERANCE of its worst case, or behind its SLO) its estimates
  are replaced by the learned ones (`learned_profile` of its last `WINDOW` iterations;
  duration_source `learned`) and every member of its group is projected to the end of its run with them
  (`assess`, the simulator's decision: each SLO over the whole run, the move's restart
  included). When the job's own projection breaks, or a partner's would hold without it,
  it is resubmitted through Algorithm 1 with the learned estimates on the cluster
  without it, and moves out.
  A job that must leave for its partners' sake (`Assessment.for_others`) and that nothing
  takes now (a full pool, or a target whose members its restart would break) **yields**
  when `scheduler.replan.may_yield` says its own SLO survives the wait, as the
  simulator's `_yield`: its placement ends (EndReason.YIELDED), its nodes stay with those
  partners, and it goes back to the queue, planned before the jobs that arrived after it
  (`planning.resuming_first`), to resume from its checkpoint at its next iteration,
  placed with what is left of its SLO budget (`snapshot.resume_profile`, the simulator's
  `_resume`). Its SLO clock keeps its first admission (`snapshot.planner_input`), so the
  wait counts.
  The check is `drift_check`, a task of its own that the controller asks for after it
  dispatched the boundary's next phases (its query, the planner's snapshot and the
  decision are not on the switch path); when it wants the move it marks the placement
  (`move_requested` drift) and the move is made, re-decided, at the next boundary.

A move happens in the controller's transaction of the mover's training end (its
checkpoint of that iteration is written before the end is reported), at
`at_iteration_boundary`:

0. only a placement marked to move does any of this (a boundary of any other job asks
   for its drift check, on commit, every WINDOW iterations, and nothing else);
1. take the planner lock for the transaction (`locks.planner_try_lock`, never waits):
   no planning pass decides on a snapshot this move makes stale; a pass in progress
   means "not now": the request stays for the next boundary;
2. re-decide on the cluster of this moment (`best_move` for a consolidation, `place`
   for a drift re-plan): the planner may no longer want it (request cleared);
3. in one savepoint: end the placement (EndReason.MOVED, with `move_reason`), which
   releases the nodes no other member uses, then persist the placement decided, as the
   planning pass does (the target group locked, its nodes re-checked, node allocations
   from now: the database refuses two open allocations of a node); a target that
   changed under us undoes both and the job stays;
4. the job is dropped from its old group's runtime before that group starts its next
   phases (the controller's phase-end decision, told how the job left), and admitted to the new one at its next iteration: its first phase there is a
   cold start that restores the checkpoint (PhaseOrder.resume_iteration), so no phase is
   lost or run twice.

A yield is made at the same boundary, under the same lock, with the same re-decision
(steps 0-2); step 3 ends the placement (EndReason.YIELDED), puts the job back in the queue
with the reason and asks for a planning pass on commit; step 4 as a move's.

The job page and the audit log say what the move did ("moved from group 4 to group 7:
saves $... expected"): group numbers and dollars, never another tenant's job.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import DurationField, ExpressionWrapper, F

from rollmux_web.audit.services import audit_record
from rollmux_web.formatting import iteration_number
from rollmux_web.jobs.models import DurationSource, Job
from rollmux_web.jobs.runners import load_seconds, time_scale_of
from rollmux_web.workflow import converters
from rollmux_web.workflow.models import (
    EndReason,
    MoveKind,
    PhaseRecord,
    PhaseState,
    Placement,
    PlanWait,
    Strategy,
)
from rollmux_web.workflow.services import preemption
from rollmux_web.workflow.services.consolidation import NOW, config, move_state
from rollmux_web.workflow.services.departures import placement_end
from rollmux_web.workflow.services.effects import Effects
from rollmux_web.workflow.services.locks import planner_try_lock
from rollmux_web.workflow.services.plan_writer import StaleSnapshot, placement_persist
from scheduler.config import PlannerConfig
from scheduler.model import (
    ClusterState,
    JobProfile,
    Member,
    PlacementResult,
    PlacementStatus,
)
from scheduler.planner import remove_job
from scheduler.planner.consolidation import (
    best_move,
    restart_seconds,
)
from scheduler.planner.objective import JobProgress
from scheduler.replan import (
    WINDOW,
    Assessment,
    Outlook,
    Stay,
    Yield,
    admission_profile,
    assess,
    group_outlooks,
    learned_profile,
    observed_outlook,
    resolve,
    should_assess,
)
from scheduler.replan import Move as ReplanMove

log = logging.getLogger(__name__)

NEW_GROUP = "a new group"  # a drift move's target before it has its id


@dataclass(frozen=True)
class _Decided:
    """A move the planner still wants, on the cluster of now."""

    kind: str
    result: PlacementResult  # FIT, with the placement to persist
    profile: JobProfile  # what the job is admitted as (remaining iterations)
    without: ClusterState  # the cluster without the job
    text: str  # the job page's and the audit's words


@dataclass(frozen=True)
class _Yield:
    """A drift re-plan's yield the planner still wants: the job leaves its nodes to the
    members it breaks and waits in the queue (scheduler.replan.may_yield)."""

    kind: str
    text: str  # the job page's and the audit's words
    restart_s: float  # its restart when it resumes
    for_others: int  # how many members it yields to


def at_iteration_boundary(
    *,
    job: Job,
    placement: Placement,
    now: datetime,
    effects: Effects,
) -> EndReason | None:
    """Move the job if the planner wants it elsewhere (module docstring); return how it
    left its group (EndReason.MOVED or YIELDED: its placement is ended), None if it stays.

    Called by the controller, under the group's lock, when a training of the job ended
    and the job goes on, before the group's runtime decides the phase end: the controller's
    decision drops a job that left (step 4). A moved job is placed exactly as a queued one,
    by the planning pass's writer (services.plan_writer).
    """
    kind = placement.move_requested
    if settings.ROLLMUX_DRIFT_REPLAN and job.iterations_done % WINDOW == 0:
        # after the dispatch (effects), in a task of its own: it reads only a placement
        # still open and not marked (a move made or requested now comes first)
        effects.drift_checks.append((placement.pk, job.iterations_done))
    if not kind:
        return None
    if kind == MoveKind.PREEMPT:  # fair share: checkpointed, it yields (services.preemption)
        return preemption.yield_now(job=job, placement=placement, now=now, effects=effects)
    learned: JobProfile | None = None
    drift = None
    if kind == MoveKind.DRIFT:
        if not settings.ROLLMUX_DRIFT_REPLAN:
            _clear_request(placement)
            return None
        drift = _drift_learned(job, placement, job.iterations_done, found=True)
    if not planner_try_lock():
        return None  # a planning pass is deciding: try again at the next boundary
    state, progress = move_state()
    if drift is not None:
        learned = _learned_member(job, state, drift[0])
        _save_learned(job, learned)
    decided = _decide(kind, job, placement, state, progress, learned, drift and drift[1])
    if decided is None:
        _clear_request(placement)
        return None
    if isinstance(decided, _Yield):
        _yield_execute(decided, job, placement, now, effects)
        return EndReason.YIELDED
    return EndReason.MOVED if _execute(decided, job, placement, now, effects) else None


def _clear_request(placement: Placement) -> None:
    """The planner no longer wants the requested move: clear the request."""
    if placement.move_requested:
        placement.move_requested = ""
        Placement.objects.filter(pk=placement.pk).update(move_requested="")


# drift_check's outcomes
DRIFT_NONE = "none"  # not drifting, or drifting and the group still holds (estimates learned)
DRIFT_MARKED = "marked"  # the placement is marked: the job moves at its next boundary
DRIFT_BUSY = "busy"  # a planning pass holds the planner's lock: ask again later
DRIFT_GONE = "gone"  # the placement ended, is marked already, or it is no production run


def drift_check(*, placement_id: int, iterations_done: int, may_wait: bool = True) -> str:
    """The drift re-plan's check of a placement at the boundary of `iterations_done`
    iterations (module docstring), off the switch path; safe to run twice.

    Its phases so far (one query, `_drift_learned`): not drifting, nothing more. Drifting: under
    the planner's lock (never waited for: DRIFT_BUSY when a pass holds it, if `may_wait`,
    else the placement is marked and its boundary checks), on the planner's snapshot, the
    job's estimates are replaced by the learned ones and, when a member's SLO no longer
    holds and Algorithm 1 places the job elsewhere (or it may yield: `_decide`), the
    placement is marked to move at its next iteration boundary, where the move is decided
    again on the cluster of then.
    """
    placement = (
        Placement.objects.select_related("job")
        .filter(pk=placement_id, ended_at__isnull=True, move_requested="")
        .exclude(strategy=Strategy.PROFILE)
        .first()
    )
    if placement is None or not settings.ROLLMUX_DRIFT_REPLAN:
        return DRIFT_GONE
    job = placement.job
    drift = _drift_learned(job, placement, iterations_done)
    if drift is None:
        return DRIFT_NONE
    learned, seen = drift
    with transaction.atomic():
        if not planner_try_lock():
            if may_wait:
                return DRIFT_BUSY
            return _mark(placement, MoveKind.DRIFT)  # its boundary looks again
        state, progress = move_state()
        member = _learned_member(job, state, learned)
        decided = _decide(MoveKind.DRIFT, job, placement, state, progress, member, seen)
        _save_learned(job, learned)  # last: the job row is locked from here to the commit
        if decided is None:
            return DRIFT_NONE
        return _mark(placement, MoveKind.DRIFT)


def _mark(placement: Placement, kind: str) -> str:
    n = Placement.objects.filter(pk=placement.pk, ended_at__isnull=True, move_requested="").update(
        move_requested=kind
    )
    if n:
        log.info("job %s: to move (%s) at its next iteration boundary", placement.job_id, kind)
    return DRIFT_MARKED if n else DRIFT_GONE


def _drift_learned(
    job: Job, placement: Placement, upto: int, *, found: bool = False
) -> tuple[JobProfile, Outlook] | None:
    """Return the job's profile learned at its check after `upto` iterations and its
    outlook when the check is due (scheduler.replan.should_assess, beyond
    ROLLMUX_DRIFT_TOLERANCE of its worst case), else None. `found`: its drift check found
    it drifting already (and its estimates may be the learned ones now): the profile and
    outlook without asking again.

    One query (the index on (job, iteration)): every rollout and training the job ran in
    production before `upto`, in all its placements but its profiling run (their
    iterations are numbered apart), one per iteration (its latest attempt), each its own
    time (wall-clock less the host's `load_seconds`) in profile seconds (x its time scale;
    a co-located rollout / the speed factor it ran at). What it is used for:

    * its trends (`observed_outlook`): fitted on ALL of them, as the simulator's Observer
      fits everything a job has run; a slow drift (+50% over 100 iterations) is never
      significant on the last WINDOW points;
    * its slowdown so far (the gate's): over all of them, as the simulator's since its
      admission (the waits and a move's restart included, the hosts' loads not);
    * its recent mean (the gate's) and its learned estimates (`learned_profile`: the
      worst and best case and the mean solo time admission plans it with from now): the
      last WINDOW iterations, what its phases are now; the whole run's range and mean
      would hold a drifting job to what it no longer is (a growing job's mean lags its
      present, its range reaches back to its start). The simulator's recent mean is the
      same window.
    """
    if not job.has_phase_times or placement.strategy == Strategy.PROFILE:
        return None
    rows = (
        PhaseRecord.objects.filter(
            job=job,
            state=PhaseState.SUCCEEDED,
            kind__in=("rollout", "train"),
            iteration__lt=upto,
            started_at__isnull=False,
            finished_at__isnull=False,
        )
        .exclude(placement__strategy=Strategy.PROFILE)
        .order_by()  # (the latest attempt is picked below: no sort)
        # the wall-clock time computed by the database: one timestamp a row to read, not two
        .annotate(wall=ExpressionWrapper(F("finished_at") - F("started_at"), DurationField()))
        .values_list("kind", "iteration", "started_at", "wall", "metrics")
    )
    scale = time_scale_of(job.runner, job.time_scale)
    # iteration -> (started, finished, the host's load, own profile seconds)
    roll: dict[int, tuple[datetime, datetime, float, float]] = {}
    train: dict[int, tuple[datetime, datetime, float, float]] = {}
    for kind, iteration, started, wall, measured in rows:
        phases = roll if kind == "rollout" else train
        if started is None or wall is None:
            continue  # (the query leaves them out)
        if iteration in phases and phases[iteration][0] >= started:
            continue  # an earlier attempt of an iteration run again
        # the host's set-up or reload is the platform's, not the job's phase time
        load = load_seconds(measured)
        own = max(0.0, wall.total_seconds() - load) * scale
        if kind == "rollout":  # co-located, it ran on the training GPUs at this factor
            own /= float((measured or {}).get("rollout_speed_factor") or 1.0)
        phases[iteration] = (started, started + wall, load, own)
    order = sorted(roll.keys() & train.keys())
    if len(order) < WINDOW:
        return None  # it has not run WINDOW iterations yet
    all_roll = [roll[i][3] for i in order]
    all_train = [train[i][3] for i in order]
    recent_roll, recent_train = all_roll[-WINDOW:], all_train[-WINDOW:]
    loads = sum(roll[i][2] + train[i][2] for i in order)
    span = max(0.0, (train[order[-1]][1] - roll[order[0]][0]).total_seconds() - loads) * scale
    profile = converters.job_profile(job)
    tolerance = 1.0 + settings.ROLLMUX_DRIFT_TOLERANCE
    planned = replace(
        profile,
        t_roll_max_s=profile.t_roll_max_s * tolerance,
        t_train_max_s=profile.t_train_max_s * tolerance,
    )
    recent = (sum(recent_roll) + sum(recent_train)) / WINDOW
    solo = sum(all_roll) + sum(all_train)
    # its trends (the SLO clock is the planner's: group_outlooks)
    seen = observed_outlook(profile, all_roll, all_train, remaining=1, elapsed_s=0.0)
    if not found and not should_assess(
        seen, planned, recent_solo_s=recent, slowdown_so_far=span / solo if solo > 0 else 1.0
    ):
        return None
    learned = learned_profile(profile, recent_roll, recent_train, remaining=job.iterations - upto)
    return learned, seen


def _save_learned(job: Job, learned: JobProfile) -> None:
    """Replace the job's estimates by the learned ones (duration_source `learned`; the
    estimates they replace kept once, in prior_estimates)."""
    if not job.prior_estimates:
        job.prior_estimates = dict(job.phase_times._asdict(), source=job.duration_source)
    job.t_roll_max_s, job.t_roll_min_s = learned.t_roll_max_s, learned.t_roll_min_s
    job.t_train_max_s, job.t_train_min_s = learned.t_train_max_s, learned.t_train_min_s
    job.duration_source = DurationSource.LEARNED
    job.save(
        update_fields=[
            "t_roll_max_s",
            "t_roll_min_s",
            "t_train_max_s",
            "t_train_min_s",
            "duration_source",
            "prior_estimates",
            "updated_at",
        ]
    )


def _learned_member(job: Job, state: ClusterState, learned: JobProfile) -> JobProfile:
    """Return the learned profile as the planner's member (its identity from the snapshot)."""
    member = next((m.job for g in state.groups for m in g.members if m.job.id == str(job.pk)), None)
    if member is None:
        return learned
    return replace(
        member,
        t_roll_max_s=learned.t_roll_max_s,
        t_roll_min_s=learned.t_roll_min_s,
        t_train_max_s=learned.t_train_max_s,
        t_train_min_s=learned.t_train_min_s,
        observed_solo_s=learned.observed_solo_s,
    )


def _decide(
    kind: str,
    job: Job,
    placement: Placement,
    state: ClusterState,
    progress: dict[str, JobProgress],
    learned: JobProfile | None,
    seen: Outlook | None = None,
) -> _Decided | _Yield | None:
    """Return the move (or, for a drift re-plan, the yield) the planner wants now, or None
    (module docstring, step 2)."""
    job_id = str(job.pk)
    source = next((g for g in state.groups if g.id == str(placement.group_id)), None)
    mine = progress.get(job_id)
    if source is None or (mine and mine.moves >= settings.ROLLMUX_MAX_MOVES_PER_JOB):
        return None
    remaining = job.iterations - job.iterations_done
    if kind == MoveKind.DRIFT:
        if learned is None:
            return None
        # 1. gather: the members' own SLOs (one query), before anything is decided
        own = _own_slos(source.members)
        # 2. decide, pure: the verdict (scheduler.replan.assess) and the one re-plan
        # decision (scheduler.replan.resolve), the simulator's; this only applies it
        verdict, outlooks = _must_go(source.members, learned, state, progress, seen, own)
        restart = restart_seconds(learned)
        # the learned member comes from the snapshot, already held young (snapshot)
        profile = admission_profile(
            learned, run_iterations=job.iterations, remaining=remaining, young=False
        )
        outcome = drift_resolution(
            job_id=job_id,
            group_id=source.id,
            verdict=verdict,
            joining=profile,
            outlooks=outlooks,
            restart_s=restart,
            state=state,
            progress=progress,
            config=config(),
        )
        # 3. say what it does
        if isinstance(outcome, Stay):
            return None
        if isinstance(outcome, Yield):
            text = _yield_text(source.id, learned, verdict, job, restart)
            return _Yield(kind, text, restart, len(outcome.for_others))
        to = f"group {outcome.target}" if outcome.target else NEW_GROUP
        text = (
            f"moved from group {source.id} to {to}: {_drift_cause(learned)} and its group's "
            f"SLOs no longer held with them; {restart:.0f} s restart"
        )
        return _Decided(kind, outcome.result, profile, outcome.without, text)
    without, _released = remove_job(state, job_id)
    move = best_move(state, job_id, now=NOW, progress=progress, config=config())
    if move is None:
        return None
    profile = replace(
        next(m.job for m in source.members if m.job.id == job_id), iterations=remaining
    )
    price = {n.name: n.price_per_hour for n in state.nodes}
    added = sum(price.get(x, 0.0) for x in move.placement.new_nodes)
    per_hour = _freed_per_hour(state, job_id) - added
    result = PlacementResult(
        PlacementStatus.FIT, move.reason, move.placement, added, dict(move.predicted_slowdown)
    )
    text = f"{move.reason}, ${per_hour:,.2f}/h less from now"
    return _Decided(kind, result, profile, without, text)


def drift_resolution(
    *,
    job_id: str,
    group_id: str,
    verdict: Assessment,
    joining: JobProfile,
    outlooks: Mapping[str, Outlook],
    restart_s: float,
    state: ClusterState,
    progress: Mapping[str, JobProgress],
    config: PlannerConfig,
) -> Stay | ReplanMove | Yield:
    """Return the re-plan decision for a drifting job on the planner's snapshot (the core's
    `scheduler.replan.resolve`, the simulator's; admission by the core's `admit` with the
    live config, on the moves' clock NOW). Pure: no query; `_decide` applies it."""
    return resolve(
        job_id=job_id,
        group_id=group_id,
        must_go=verdict.move,
        for_others=verdict.for_others,
        joining=joining,
        outlooks=outlooks,
        restart_s=restart_s,
        state=state,
        config=config,
        progress=progress,
        now=NOW,
    )


def _drift_cause(learned: JobProfile) -> str:
    """Return why a drift re-plan acts, in words: the job's learned worst case."""
    return (
        f"its observed phases left its estimates (learned rollout {learned.t_roll_max_s:.0f} s,"
        f" training {learned.t_train_max_s:.0f} s at worst)"
    )


def _yield_text(
    group_id: str, learned: JobProfile, verdict: Assessment, job: Job, restart: float
) -> str:
    """Return the yield's words for the job page and the audit (group numbers, no job)."""
    return (
        f"yielded group {group_id}'s nodes to {len(verdict.for_others)} other member(s): "
        f"{_drift_cause(learned)} and would slow them past their SLO, and no other place "
        f"takes it now; queued first, resumes at iteration "
        f"{iteration_number(job.iterations_done)} from its "
        f"checkpoint ({restart:.0f} s restart)"
    )


def _must_go(
    members: Sequence[Member],
    learned: JobProfile,
    state: ClusterState,
    progress: dict[str, JobProgress],
    seen: Outlook | None,
    own: dict[int, float],
) -> tuple[Assessment, dict[str, Outlook]]:
    """Return whether the drifting job should leave its group (`Assessment.move`; for whom:
    `for_others`) and the members' outlooks it was decided on: every member projected to
    the end of its run (scheduler.replan.assess, the simulator's decision), the job at its
    learned estimates and observed trends (`seen`), the others at their plan, each on its
    SLO clock and against its own SLO (the snapshot holds a short newcomer to a stricter one,
    `snapshot.held_young`, for admissions; the simulator projects it with its own)."""
    mine = [
        replace(m, job=learned)
        if m.job.id == learned.id
        else replace(m, job=replace(m.job, slo=own.get(int(m.job.id), m.job.slo)))
        for m in members
    ]
    trends = {learned.id: seen} if seen is not None else None
    mine_now = progress.get(learned.id)
    if seen is not None and mine_now is not None:
        # its SLO budget on the solo time it measured (`_drift_learned`: every rollout and
        # training it ran, plus sync), as the simulator's JobProgress.solo_s_done; without
        # it group_outlooks counts every iteration done at its latest pace, which for a
        # growing job overstates its budget (more than elapsed: the wait of `may_yield`
        # looked free). Iterations done since the check at that pace.
        since = max(0, mine_now.iterations_done - seen.done) * seen.solo_s(-1.0, 0.0)
        progress = {**progress, learned.id: replace(mine_now, solo_s_done=seen.solo_done_s + since)}
    outlooks = group_outlooks(mine, progress, now=NOW, trends=trends)
    verdict = assess(
        mine,
        outlooks,
        learned.id,
        switch_overhead_s=state.spec.switch_overhead_s,
        restart_s=restart_seconds(learned),
    )
    return verdict, outlooks


def _own_slos(members: Sequence[Member]) -> dict[int, float]:
    """Return the members' own SLOs by job id (the snapshot holds a short one stricter)."""
    return dict(
        Job.objects.filter(pk__in=[int(m.job.id) for m in members]).values_list(
            "pk", "slo_class__slowdown"
        )
    )


def _freed_per_hour(state: ClusterState, job_id: str) -> float:
    """Return the $/h of the nodes the job's departure releases (only it used them)."""
    price = {n.name: n.price_per_hour for n in state.nodes}
    without, _ = remove_job(state, job_id)
    before = {x for g in state.groups for x in g.rollout_nodes + g.train_nodes}
    after = {x for g in without.groups for x in g.rollout_nodes + g.train_nodes}
    return sum(price.get(x, 0.0) for x in before - after)


def _execute(
    decided: _Decided,
    job: Job,
    placement: Placement,
    now: datetime,
    effects: Effects,
) -> bool:
    """Make the move (module docstring, step 3; the controller's decision takes step 4);
    False if the target went stale."""
    moved = Effects()
    try:
        with transaction.atomic():  # a savepoint: a stale target undoes the whole move
            placement.move_requested = ""
            placement.move_reason = decided.text[:500]
            placement.save(update_fields=["move_requested", "move_reason"])
            placement_end(placement, EndReason.MOVED, now, moved)
            placement_persist(job, decided.profile, decided.result, decided.without, now, moved)
    except StaleSnapshot:
        log.info("job %s: its move's target changed meanwhile; trying again later", job.pk)
        placement.move_reason = ""
        placement.ended_at = None
        placement.end_reason = ""
        return False
    target = (
        Placement.objects.filter(job=job, ended_at__isnull=True).values_list("group_id", flat=True)
    ).first()
    if target is not None and NEW_GROUP in decided.text:  # its id is known now
        decided = replace(decided, text=decided.text.replace(NEW_GROUP, f"new group {target}"))
        Placement.objects.filter(pk=placement.pk).update(move_reason=decided.text[:500])
        placement.move_reason = decided.text[:500]
    job.reason = decided.text[:500]
    job.save(update_fields=["reason", "updated_at"])
    _audit_move(job, decided, placement, target)
    effects.orders += moved.orders
    effects.releases += moved.releases
    effects.kills += moved.kills
    effects.replan = True
    effects.group_released = effects.group_released or moved.group_released
    return True


def _yield_execute(
    decided: _Yield,
    job: Job,
    placement: Placement,
    now: datetime,
    effects: Effects,
) -> None:
    """Make the yield (module docstring): end the placement (YIELDED; its nodes stay with the
    members that use them; the controller's decision drops the job from its group's runtime
    before the group starts its next phases), and put it back in the queue to resume at its next iteration (the
    placement it gets restores the checkpoint written before this boundary, as a move's
    and a resubmitted job's). The planning pass placing it is asked for on commit
    (placement_end: effects.replan); it plans the job first (`planning.resuming_first`)."""
    placement.move_requested = ""
    placement.move_reason = decided.text[:500]
    placement.save(update_fields=["move_requested", "move_reason"])
    placement_end(placement, EndReason.YIELDED, now, effects)
    job.status = job.requeue_status
    job.reason = decided.text[:500]
    job.save(update_fields=["status", "reason", "updated_at"])
    PlanWait.objects.filter(job=job).delete()  # planned by the next pass whatever it waited on
    _audit(
        "job.yield",
        job,
        placement,
        {
            "group": None,
            "kind": decided.kind,
            "reason": decided.text,
            "yields_to": decided.for_others,
            "iterations_done": job.iterations_done,
            "restart_s": round(decided.restart_s, 1),
        },
    )
    log.info("job %s: %s", job.pk, decided.text)
    effects.replan = True


def _audit(action: str, job: Job, placement: Placement, after: dict[str, Any]) -> None:
    """Record a move or a yield of `job` out of `placement` in the audit log."""
    audit_record(
        actor=None,
        action=action,
        obj=job,
        tenant=job.tenant.name,
        before={"group": placement.group_id, "placement": placement.pk},
        after=after,
    )


def _audit_move(job: Job, decided: _Decided, placement: Placement, target: Any) -> None:
    slowdown = decided.result.predicted_slowdown.get(str(job.pk), 1.0)
    _audit(
        "job.move",
        job,
        placement,
        {
            "group": target,
            "kind": decided.kind,
            "reason": decided.text,
            "strategy": decided.result.placement.strategy.value if decided.result.placement else "",
            "predicted_slowdown": round(slowdown, 4),
            "iterations_done": job.iterations_done,
            "marginal_cost_per_hour": str(
                Decimal(str(round(decided.result.marginal_cost_per_hour, 4)))
            ),
        },
    )
