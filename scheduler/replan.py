"""Drift re-planning decisions (issue 13 item 4): forecast, project, decide. Pure functions.

The simulator (scheduler.sim.engine, at a job's iteration boundary) and the live planner
(rollmux_web.workflow.services.moves) ask the same question every `WINDOW` iterations of a
running job: will every member of its co-execution group keep its SLO to the END of its
run if nothing moves, and if not, should this job move out? The SLO is the spec's: the
mean iteration time over the whole run (finish - admission, restarts and waits included)
within slo x the mean drawn solo iteration time (trace-format.md), so

1. **Forecast** (`fit_trend`): each member's rollout and training durations are fitted
   against its iteration index on everything it has run. A trend is used only when it
   is significant (Student's t at `TREND_ALPHA`; else the mean: no drift). [I] A
   growing duration is extrapolated linearly; a shrinking one as a linear growth of its
   speed (1 / duration), which never reaches zero (a straight line would, and would call
   a job's solo time far shorter than it can get).
2. **Project** (`project`): a member's end-of-run mean iteration time is its elapsed time
   plus, over its remaining iterations, the group's steady iteration time (the SLO
   check's arithmetic, scheduler.slo: its own phases at their forecast, every other
   member's at theirs + `margin`) in a few segments of the horizon, the members that will
   have finished by then left out; its reference is the solo time it has run plus its
   forecast solo time to the end. A move's restart is added to the mover's.
3. **Decide** (`assess`): the job moves when its own projection breaks its SLO, or when
   another member's does and would hold without it (its growth is what breaks the
   other); a member that breaks on its own account is moved at its own boundary. The
   destination is chosen by admission (Algorithm 1) with `move_profile`: the job's
   forecast over its remaining run (worst case the forecast's largest phase x the
   profile's spread) and the SLO that is left of its budget after its elapsed time
   and the restart (`remaining_slo`), so the new group's check holds what its run needs.

A job too short to be re-planned in time (`SHORT_RUN` iterations: its run is over about
when a trend of it could show) is planned stricter for its whole run, its own admission
included (`young_profile`; the simulator's re-planning runs and the live planner), so it
joins no group, and no newcomer joins it, where only its shrinkage would make the
others its pace-setters.

The first version's trigger (recent mean above the worst case, or the slowdown SINCE
ADMISSION past the SLO, then admission's per-iteration check) reacted only once a miss
had mostly happened; it survives as the cheap gate `should_assess`. docs/results.md
section 9 measures both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from scheduler.config import PlannerConfig
from scheduler.meta_iteration import group_loads, steady_iteration_times
from scheduler.model import ClusterState, JobProfile, Member, PlacementResult, PlacementStatus
from scheduler.planner import remove_job
from scheduler.planner.consolidation import admit, destination_keeps_slo, restart_seconds
from scheduler.planner.objective import JobProgress
from scheduler.slo import DEFAULT_SLO_MARGIN, SLO_EPS, expected_profile
from scheduler.trend import MIN_OBSERVED, TREND_ALPHA, Trend, fit_trend

__all__ = [
    "Move",
    "Stay",
    "Yield",
    "admission_profile",
    "resolve",
    "CHECK_EVERY",
    "MAX_REPLANS",
    "WINDOW",
    "learned_profile",
    "MIN_OBSERVED",
    "SEGMENTS",
    "SHORT_RUN",
    "SHRINK_MEAN",
    "TREND_ALPHA",
    "Assessment",
    "Decision",
    "Outlook",
    "Projection",
    "Trend",
    "assess",
    "decide",
    "fit_trend",
    "group_outlooks",
    "headroom",
    "may_yield",
    "move_profile",
    "observed_outlook",
    "planned_outlook",
    "project",
    "remaining_slo",
    "should_assess",
    "trend_shape",
    "young_profile",
]

WINDOW = 5  # iterations of observations a re-plan learns from (and between two checks)
MAX_REPLANS = 3  # per job: each costs a restart
# iterations between two checks of a job: the live planner's cadence (every WINDOW-th
# boundary). Checking at every boundary (measured, docs/results.md section 9) saves a few
# short jobs and costs more moves on noise.
CHECK_EVERY = WINDOW
SEGMENTS = 3  # pieces of the remaining run the projection evaluates
# [I] a run this short (iterations) is over about when a trend of it could show (4 checks)
SHORT_RUN = 20
# [I] the strongest decreasing template's mean scale over a run: ln(2.5) / 1.5
SHRINK_MEAN = math.log(2.5) / 1.5


@dataclass(frozen=True)
class Outlook:
    """What the re-plan knows of one member: its plan, trends and SLO clock."""

    profile: JobProfile  # as planned now (its slo, sync, spread)
    roll: Trend
    train: Trend
    remaining: int  # iterations still to run
    elapsed_s: float = 0.0  # since its admission: restarts and waits included
    solo_done_s: float = 0.0  # the drawn solo time (rollout + training + sync) run so far
    done: int = 0  # iterations run
    # the trends come from observations (else from the plan: the margin on the phases,
    # as in scheduler.slo, never takes them past their planned worst case)
    observed: bool = False

    def solo_s(self, a: float, b: float) -> float:
        """Return the mean forecast solo iteration time over iterations a..b ahead."""
        return self.roll.mean(a, b) + self.train.mean(a, b) + self.profile.t_sync_s

    @property
    def drifts(self) -> bool:
        """Return True when either phase trends."""
        return self.roll.drifts or self.train.drifts

    @property
    def grows(self) -> bool:
        """Return True when either phase trends upward."""
        return self.roll.slope > 0 or self.train.slope > 0


def planned_outlook(
    profile: JobProfile, *, remaining: int, elapsed_s: float = 0.0, done: int = 0
) -> Outlook:
    """Return the outlook of a member from its plan: flat at its expected phases (their
    observed mean once it has one, `JobProfile.observed_solo_s`: scheduler.slo)."""
    planned = expected_profile(profile)
    roll, train = planned.t_roll_max_s, planned.t_train_max_s
    solo = done * (roll + train + profile.t_sync_s)
    observed = profile.observed_solo_s is not None
    return Outlook(profile, Trend(roll), Trend(train), remaining, elapsed_s, solo, done, observed)


def observed_outlook(
    profile: JobProfile,
    roll: Sequence[float],
    train: Sequence[float],
    *,
    remaining: int,
    elapsed_s: float,
    solo_done_s: float | None = None,
    done: int | None = None,
) -> Outlook:
    """Return a member's outlook from its observed phases (oldest first, one per
    iteration: all it ran, or its latest; `done` says how many it ran, default as many as
    observed); `solo_done_s` defaults to `done` x their mean solo time."""
    if not roll or len(roll) != len(train):
        raise ValueError("an outlook needs as many observed rollouts as trainings, at least one")
    done = len(roll) if done is None else done
    if solo_done_s is None:
        rolled: float = sum(roll)  # (typed: mypyc adds two untyped `sum`s as ints)
        trained: float = sum(train)
        mean = float(rolled + trained) / len(roll) + profile.t_sync_s
        solo_done_s = done * mean
    return Outlook(
        profile, fit_trend(roll), fit_trend(train), remaining, elapsed_s, solo_done_s, done, True
    )


def group_outlooks(
    members: Sequence[Member],
    progress: Mapping[str, JobProgress],
    *,
    now: float,
    trends: Mapping[str, Outlook] | None = None,
) -> dict[str, Outlook]:
    """Return every member's outlook on its SLO clock (`progress`: admission, iterations
    done, the solo time it measured when it did): the trends of `trends` where given (an
    outlook from its observations), else its plan's (`planned_outlook`)."""
    out: dict[str, Outlook] = {}
    for m in members:
        p = progress.get(m.job.id)
        done = p.iterations_done if p else 0
        o = planned_outlook(
            m.job,
            remaining=max(0, m.job.iterations - done),
            elapsed_s=now - p.admitted_s if p else 0.0,
            done=done,
        )
        seen = (trends or {}).get(m.job.id)
        if seen is not None:
            solo = done * seen.solo_s(-1.0, 0.0)  # its observed pace, if nothing measured
            o = replace(o, roll=seen.roll, train=seen.train, solo_done_s=solo, observed=True)
        if p is not None and p.solo_s_done is not None:
            o = replace(o, solo_done_s=p.solo_s_done)
        out[m.job.id] = o
    return out


def should_assess(
    outlook: Outlook,
    planned: JobProfile,
    *,
    recent_solo_s: float,
    slowdown_so_far: float,
    others_drift: bool = False,
) -> bool:
    """Return True when a job's check is worth the group's projection (`assess`): its
    durations trend, or its recent mean solo time (rollout + training) is above its
    planned worst case, or its slowdown so far is past its SLO, or (when the caller knows
    the others' trends) another member's durations trend: a job that does not drift
    itself may be the one whose departure saves a drifting partner. Otherwise its group
    runs as admission planned it."""
    worst = planned.t_roll_max_s + planned.t_train_max_s
    return (
        outlook.drifts
        or others_drift
        or recent_solo_s > worst * (1.0 + SLO_EPS)
        or slowdown_so_far > planned.slo * (1.0 + SLO_EPS)
    )


def _exact(job: JobProfile, roll: float, train: float) -> JobProfile:
    roll, train = max(roll, SLO_EPS), max(train, SLO_EPS)
    return replace(
        job,
        t_roll_max_s=roll,
        t_roll_min_s=roll,
        t_train_max_s=train,
        t_train_min_s=train,
        observed_solo_s=None,
    )


def _segments(remaining: int, others: Sequence[int]) -> list[tuple[float, float]]:
    """Cut 0..remaining at the others' ends and into SEGMENTS pieces at most."""
    cuts = {0.0, float(remaining)}
    cuts.update(float(r) for r in others if 0 < r < remaining)
    step = remaining / SEGMENTS
    cuts.update(step * i for i in range(1, SEGMENTS))
    edges = sorted(cuts)
    return [(a, b) for a, b in zip(edges, edges[1:], strict=False) if b - a > 1e-9]


def _segment_time(
    members: Sequence[Member],
    outlooks: Mapping[str, Outlook],
    job_id: str,
    a: float,
    b: float,
    switch_overhead_s: float,
    margin: float,
) -> float:
    """Return `job_id`'s steady iteration time over iterations a..b ahead: its phases at
    their mean forecast, the others' (those still running) at theirs x (1 + margin)."""
    mix: list[Member] = []
    for m in members:
        o = outlooks[m.job.id]
        if m.job.id != job_id and o.remaining <= a:
            continue  # finished by then
        roll, train = o.roll.mean(a, b), o.train.mean(a, b)
        if m.job.id != job_id:
            roll, train = roll * (1.0 + margin), train * (1.0 + margin)
            if not (o.observed or o.drifts):
                roll, train = min(roll, m.job.t_roll_max_s), min(train, m.job.t_train_max_s)
        job = _exact(m.job, roll, train)
        mix.append(replace(m, job=job))
    if len(mix) == 1:
        return mix[0].job.t_solo_max_s
    times = steady_iteration_times(mix, switch_overhead_s=switch_overhead_s)
    floor = max(max(m.job.t_solo_max_s for m in mix), max(group_loads(mix).values()))
    k = next(i for i, m in enumerate(mix) if m.job.id == job_id)
    return max(times[k], floor)


@dataclass(frozen=True)
class Projection:
    """A member's projected whole run: its total time and its solo reference."""

    total_s: float  # elapsed + remaining iterations in the group (+ a restart)
    solo_s: float  # drawn solo so far + forecast solo to the end
    iterations: int
    slo: float

    @property
    def slowdown(self) -> float:
        return self.total_s / self.solo_s if self.solo_s > 0 else math.inf

    @property
    def holds(self) -> bool:
        return self.total_s <= self.slo * self.solo_s * (1.0 + SLO_EPS)


def project(
    members: Sequence[Member],
    outlooks: Mapping[str, Outlook],
    job_id: str,
    *,
    switch_overhead_s: float,
    margin: float = DEFAULT_SLO_MARGIN,
    extra_s: float = 0.0,
) -> Projection:
    """Return `job_id`'s projected end of run in a group of `members` (module doc, 2)."""
    o = outlooks[job_id]
    total = o.elapsed_s + extra_s
    solo = o.solo_done_s
    others = [outlooks[m.job.id].remaining for m in members if m.job.id != job_id]
    for a, b in _segments(o.remaining, others):
        total += (b - a) * _segment_time(members, outlooks, job_id, a, b, switch_overhead_s, margin)
        solo += (b - a) * o.solo_s(a, b)
    return Projection(total, solo, o.done + o.remaining, o.profile.slo)


@dataclass(frozen=True)
class Assessment:
    """The re-plan's verdict on one job at one of its iteration boundaries."""

    move: bool
    reason: str  # in words, for the job page and the audit log
    broken: tuple[str, ...] = ()  # members projected to miss their SLO where they are
    projected: Mapping[str, Projection] | None = None
    # the members it moves for: broken, and holding without it (its growth breaks them)
    for_others: tuple[str, ...] = ()


def _culprit(
    members: Sequence[Member],
    outlooks: Mapping[str, Outlook],
    job_id: str,
    switch_overhead_s: float,
    margin: float,
    movable: Collection[str] | None,
) -> str | None:
    """Return a growing (movable) member without which `job_id`'s SLO holds, if any."""
    for m in members:
        c = m.job.id
        if c == job_id or not outlooks[c].grows or (movable is not None and c not in movable):
            continue
        rest = [x for x in members if x is not m]
        kept = project(rest, outlooks, job_id, switch_overhead_s=switch_overhead_s, margin=margin)
        if kept.holds:
            return c
    return None


def assess(
    members: Sequence[Member],
    outlooks: Mapping[str, Outlook],
    job_id: str,
    *,
    switch_overhead_s: float,
    restart_s: float,
    margin: float = DEFAULT_SLO_MARGIN,
    movable: Collection[str] | None = None,
) -> Assessment:
    """Return whether `job_id` should move out of its group of `members` (module doc, 3).

    Every member needs an outlook. A job alone, or one whose budget a move's restart
    (`restart_s`) would exhaust even alone from now (`headroom` < 1), does not move on
    its own account: the move could only cost it more; nor does a job that does not
    drift itself and that a growing member (one of `movable`, default all) alone puts
    behind: that member is the one to move, at its own check.
    """
    projected = {
        m.job.id: project(
            members, outlooks, m.job.id, switch_overhead_s=switch_overhead_s, margin=margin
        )
        for m in members
    }
    broken = tuple(j for j, p in projected.items() if not p.holds)
    if not broken:
        return Assessment(False, "every member's SLO holds to the end of its run", (), projected)
    mine = projected[job_id]
    rest = [m for m in members if m.job.id != job_id]
    culprit = None
    if job_id in broken and not outlooks[job_id].drifts:
        culprit = _culprit(members, outlooks, job_id, switch_overhead_s, margin, movable)
    if culprit is not None:
        return Assessment(
            False,
            f"behind because of a drifting member ({culprit}), which moves",
            broken,
            projected,
        )
    if job_id in broken and rest and headroom(outlooks[job_id], restart_s=restart_s) >= 1.0:
        return Assessment(
            True,
            f"projected slowdown {mine.slowdown:.3f} at the end of its run, past its SLO "
            f"{mine.slo:.3f}",
            broken,
            projected,
        )
    fixed = [
        j
        for j in broken
        if j != job_id
        and project(rest, outlooks, j, switch_overhead_s=switch_overhead_s, margin=margin).holds
    ]
    if fixed:
        return Assessment(
            True,
            f"its phases would break {len(fixed)} other member(s)' SLO by the end of their "
            "run; without it they hold",
            broken,
            projected,
            tuple(fixed),
        )
    return Assessment(False, "another member is behind on its own account", broken, projected)


def headroom(outlook: Outlook, *, restart_s: float) -> float:
    """Return the slowdown the job may still take over its remaining iterations: what is
    left of slo x its projected solo time after its elapsed time and a restart, over its
    forecast remaining solo time (below 1: not even a run alone from now keeps its SLO)."""
    rest = outlook.remaining
    future = rest * outlook.solo_s(0.0, float(rest)) if rest > 0 else 0.0
    if future <= 0:
        return outlook.profile.slo
    budget = outlook.profile.slo * (outlook.solo_done_s + future) - outlook.elapsed_s - restart_s
    return budget / future


def remaining_slo(outlook: Outlook, *, restart_s: float) -> float:
    """Return `headroom` held to [1, the job's SLO]: the SLO a moving job is admitted with."""
    return min(outlook.profile.slo, max(1.0, headroom(outlook, restart_s=restart_s)))


def move_profile(outlook: Outlook, base: JobProfile, *, restart_s: float) -> JobProfile:
    """Return the profile a moving job is admitted with (module doc, 3).

    Its phases over the remaining run: the forecast's mean as the observed solo time, and
    the forecast's largest (smallest) phase x `base`'s spread as the worst (best) case;
    its SLO what is left of its budget (`remaining_slo`); a job that trends carries the
    forecast's shape (`trend_shape`), which the SLO check follows piece by piece (at the
    mean alone it hides the end of a shrinking run, or the start of a growing one,
    where the partners set the pace: docs/results.md section 9, the tight-SLO misses). `base` is the profile the job
    was submitted with (its spread: max / mean of each phase).
    """
    rest = float(max(1, outlook.remaining))
    ends = (0.0, rest)
    rolls = [outlook.roll.at(x) for x in ends]
    trains = [outlook.train.at(x) for x in ends]
    r_mean = (base.roll_min + base.t_roll_max_s) / 2.0
    t_mean = (base.train_min + base.t_train_max_s) / 2.0
    r_hi, r_lo = base.t_roll_max_s / r_mean, base.roll_min / r_mean
    t_hi, t_lo = base.t_train_max_s / t_mean, base.train_min / t_mean
    return replace(
        outlook.profile,
        t_roll_max_s=max(rolls) * r_hi,
        t_roll_min_s=min(rolls) * r_lo,
        t_train_max_s=max(trains) * t_hi,
        t_train_min_s=min(trains) * t_lo,
        observed_solo_s=outlook.solo_s(0.0, rest),
        slo=remaining_slo(outlook, restart_s=restart_s),
        trend_shape=trend_shape(outlook, rest) if outlook.drifts else None,
    )


def trend_shape(outlook: Outlook, rest: float) -> tuple[float, ...]:
    """Return a trending job's forecast rollout + training over `SEGMENTS` equal pieces of
    its `rest` remaining iterations, over their mean (`JobProfile.trend_shape`)."""
    step = rest / SEGMENTS
    phases = [
        outlook.roll.mean(i * step, (i + 1) * step) + outlook.train.mean(i * step, (i + 1) * step)
        for i in range(SEGMENTS)
    ]
    mean = sum(phases) / len(phases)
    return tuple(p / mean for p in phases)


@dataclass(frozen=True)
class Decision:
    """What the re-plan does at a job's check (`decide`)."""

    move: bool  # resubmit it through admission with `profile` (checkpoint, restart)
    profile: JobProfile | None = None  # what it is planned as from now; None: unchanged
    restart_s: float = 0.0  # the move's restart
    reason: str = ""
    # a move for the sake of these members (Assessment.for_others): where nothing takes
    # the job now it may wait in the queue for them instead (`may_yield`)
    for_others: tuple[str, ...] = ()


def decide(
    members: Sequence[Member],
    outlooks: Mapping[str, Outlook],
    job_id: str,
    base: JobProfile,
    *,
    recent_solo_s: float,
    slowdown_so_far: float,
    switch_overhead_s: float,
    movable: Collection[str] | None = None,
    others_drift: bool = False,
) -> Decision:
    """Return the re-plan's decision for `job_id` at one of its checks (module doc).

    `base` is the job as submitted (its SLO, its spread); `outlooks` cover every member.
    Not worth a check (`should_assess`): nothing. Staying: a job whose durations trend is
    planned from now with its forecast (`move_profile` without a restart), so admission
    and consolidation see what it has become. Moving: the profile it is resubmitted with.
    """
    mine = outlooks[job_id]
    planned = next(m.job for m in members if m.job.id == job_id)
    if not should_assess(
        mine,
        replace(planned, slo=base.slo),
        recent_solo_s=recent_solo_s,
        slowdown_so_far=slowdown_so_far,
        others_drift=others_drift,
    ):
        return Decision(False)
    restart = restart_seconds(base)
    verdict = assess(
        members,
        outlooks,
        job_id,
        switch_overhead_s=switch_overhead_s,
        restart_s=restart,
        movable=movable,
    )
    if not verdict.move:
        learned = move_profile(mine, base, restart_s=0.0) if mine.drifts else None
        return Decision(False, learned, reason=verdict.reason)
    return Decision(
        True,
        move_profile(mine, base, restart_s=restart),
        restart,
        verdict.reason,
        verdict.for_others,
    )


def may_yield(
    outlooks: Mapping[str, Outlook], job_id: str, for_others: Sequence[str], *, restart_s: float
) -> bool:
    """Return True when a job that must leave its group for `for_others`' sake, and that
    nothing takes now (a full pool), may leave its nodes to them and wait in the queue
    (checkpointed; resubmitted first when capacity frees) without risking its own SLO:
    even after waiting as long as the longest of their remaining runs alone ([I] by then
    their nodes are free) and its restart, a run alone from then keeps it (`headroom`)."""
    if not for_others:
        return False
    wait = max(
        outlooks[j].remaining * outlooks[j].solo_s(0.0, float(max(1, outlooks[j].remaining)))
        for j in for_others
    )
    late = replace(outlooks[job_id], elapsed_s=outlooks[job_id].elapsed_s + wait)
    return headroom(late, restart_s=restart_s) >= 1.0


def young_profile(job: JobProfile, *, run_iterations: int | None = None) -> JobProfile | None:
    """Return how a job too short to be re-planned in time (at most `SHORT_RUN`
    iterations) is planned, for its whole run and at its own admission: its SLO held as
    if its run shrank to `SHRINK_MEAN` of its profile, so that it joins a group, and a
    newcomer joins its group, only if it would keep its SLO even then (the misses of
    docs/results.md section 9: short jobs that joined a group, or that a newcomer
    joined, before any trend of theirs could show, and whose run was over before a
    re-plan could help). None: not that short. `run_iterations`: the job's whole run, when
    `job` counts only what is left of it (a resubmitted or resumed job's profile)."""
    if (job.iterations if run_iterations is None else run_iterations) > SHORT_RUN:
        return None
    return replace(job, slo=max(1.0, job.slo * SHRINK_MEAN))


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


# --- the one re-plan decision and the one admission profile ---------------------------


def admission_profile(
    profile: JobProfile,
    *,
    run_iterations: int,
    young: bool,
    remaining: int | None = None,
    budget: Outlook | None = None,
    restart_s: float = 0.0,
) -> JobProfile:
    """Return the profile a job is admitted, or re-admitted, with (the simulator's arrivals,
    re-plans and resumes, and the live planning pass and moves alike):

    1. back from a yield (`budget`: its outlook now, on its SLO clock), its SLO is what is
       left of its budget after its `restart_s` (`remaining_slo`);
    2. with drift re-planning on (`young`), a job of at most `SHORT_RUN` iterations in its
       whole run (`run_iterations`) is held to `young_profile`;
    3. for what is left of its run (`remaining` iterations; None: as it is).

    `profile` carries its estimates: submitted, learned (`learned_profile`) or forecast
    (`move_profile`)."""
    out = profile
    if budget is not None:
        out = replace(out, slo=remaining_slo(budget, restart_s=restart_s))
    if young:
        out = young_profile(out, run_iterations=run_iterations) or out
    if remaining is not None:
        out = replace(out, iterations=remaining)
    return out


@dataclass(frozen=True)
class Stay:
    """The job keeps running where it is."""

    reason: str


@dataclass(frozen=True)
class Move:
    """The job moves out: checkpoint at its boundary, `result` placed on `without` (the
    cluster without it), restart there."""

    result: PlacementResult  # FIT, with the placement
    without: ClusterState
    restart_s: float
    reason: str

    @property
    def target(self) -> str | None:
        """Return the group it joins, or None: a new group."""
        assert self.result.placement is not None
        return self.result.placement.group_id


@dataclass(frozen=True)
class Yield:
    """The job leaves its nodes to the members it breaks and waits in the queue, first,
    to resume at its next iteration after its restart (`may_yield`)."""

    restart_s: float
    for_others: tuple[str, ...]
    reason: str


Resolution = Stay | Move | Yield


def resolve(
    *,
    job_id: str,
    group_id: str,
    must_go: bool,
    for_others: Sequence[str],
    joining: JobProfile,
    outlooks: Mapping[str, Outlook],
    restart_s: float,
    state: ClusterState,
    config: PlannerConfig,
    progress: Mapping[str, JobProgress],
    now: float,
    place: Callable[[JobProfile, ClusterState], PlacementResult] | None = None,
    remove: Callable[[ClusterState, str], ClusterState] | None = None,
    keeps_partners: Callable[[ClusterState, PlacementResult], bool] | None = None,
) -> Stay | Move | Yield:
    """Return what a drift re-plan does with `job_id` of `group_id` at a check whose
    verdict (`assess` / `decide`) is `must_go` (for `for_others`' sake, or its own).
    Pure: the simulator (`Simulation._drift_replan`) and the live planner
    (`services.moves`) gather the inputs, call this, and apply what it returns.

    1. its group holds (`must_go` false): Stay;
    2. resubmit `joining` (`admission_profile`: its remaining run) through admission on the
       cluster without it (`place`, default the core's `admit` with `config`);
    3. a FIT whose destination's members would break with its restart is no FIT
       (`keeps_partners`, default `destination_keeps_slo`);
    4. nothing takes it: Yield when it must go for others and its own SLO survives the
       wait (`may_yield`), else Stay where it is;
    5. admission puts it back in its own group: Stay; else Move.

    `place`, `remove` and `keeps_partners` default to the core's; a caller passes its own
    (the simulator's policy adapter) only where it runs another policy.
    """
    if not must_go:
        return Stay("every member's SLO holds to the end of its run")
    without = remove_job(state, job_id)[0] if remove is None else remove(state, job_id)
    if place is None:
        result = admit(joining, without, config=config, progress=progress, now=now)[0]
    else:
        result = place(joining, without)
    fits = result.status is PlacementStatus.FIT and result.placement is not None
    why = f"nothing takes it now ({result.reason})"
    if fits:
        if keeps_partners is None:
            kept = destination_keeps_slo(
                without, result, restart_s, now=now, progress=progress, config=config
            )
        else:
            kept = keeps_partners(without, result)
        if not kept:
            fits = False
            why = "its restart would break a member of the group that would take it"
    if not fits:
        if may_yield(outlooks, job_id, for_others, restart_s=restart_s):
            return Yield(restart_s, tuple(for_others), f"{why}; yields to {len(for_others)}")
        return Stay(f"{why}; it keeps running where it is")
    assert result.placement is not None
    if result.placement.group_id == group_id:
        return Stay("admission places it back in its own group")
    return Move(result, without, restart_s, result.reason)
