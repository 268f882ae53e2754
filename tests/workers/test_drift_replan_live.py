"""The live drift re-plan decides on what the simulator's re-planning runs decide on.

The architecture rule: the simulator and the live planner call the same functions
(scheduler.replan). These tests check the live planner feeds them the same things:

* a job's trends are fitted on everything it ran in production, as the simulator's
  Observer fits them, across its placements (`moves._drift_learned`, `moves.drift_check`);
* a short job is planned with `young_profile` for its whole run, its own admission
  included (the snapshot and the planning pass).

No dispatcher runs: the phase records are written here and the test transaction never
commits (so nothing the planning pass asks for on commit happens).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from rollmux_web.jobs.models import DurationSource, Job
from rollmux_web.reports.whatif_selectors import whatif_preview
from rollmux_web.workflow import converters, snapshot
from rollmux_web.workflow.models import (
    EndReason,
    ExecutionGroup,
    PhaseRecord,
    PhaseState,
    Placement,
    Strategy,
)
from rollmux_web.workflow.services import moves, queue_plan
from scheduler.replan import SHORT_RUN, WINDOW, fit_trend, young_profile
from tests.workers.builders import make_job

pytestmark = pytest.mark.django_db

# 15 iterations growing steadily (+3 s and +2 s an iteration) with noise: significant
# over the 15 (t about 12 and 9), not over the last 5 alone (Student's t on 3 degrees of
# freedom needs about 9 at the trend's 0.27%). Profile seconds (time scale 1).
ROLL = [104, 98, 109, 107, 118, 111, 112, 126, 121, 129, 137, 127, 137, 132, 147]
TRAIN = [87, 96, 89, 98, 97, 105, 98, 107, 100, 109, 114, 110, 120, 111, 120]


@pytest.fixture(autouse=True)
def _drift_replan_on(settings: Any) -> None:
    """Drift re-planning on, as deployed (the tests' conftest turns it off)."""
    settings.ROLLMUX_DRIFT_REPLAN = True


def wide_job(world: Any, name: str, **fields: Any) -> Job:
    """A job declared with a wide range (80-200 s a phase): what it runs (ROLL, TRAIN)
    stays inside its worst case and its SLO, so only a trend can make its check due."""
    return make_job(  # type: ignore[no-any-return]
        world,
        name=name,
        t_roll_max_s=200.0,
        t_roll_min_s=80.0,
        t_train_max_s=200.0,
        t_train_min_s=80.0,
        time_scale=1.0,
        iterations=100,
        **fields,
    )


def record_phases(
    placement: Placement,
    first: int,
    roll: list[float],
    train: list[float],
    start: datetime,
    *,
    load_s: float = 0.0,
) -> datetime:
    """Record succeeded rollouts and trainings of iterations first.. back to back from
    `start` (each phase's wall-clock time its own plus `load_s` of the host's); return
    the end of the last."""
    t = start
    for i, (r, tr) in enumerate(zip(roll, train, strict=True)):
        for kind, seconds in (("rollout", r), ("train", tr)):
            PhaseRecord.objects.create(
                job_id=placement.job_id,
                group_id=placement.group_id,
                placement=placement,
                iteration=first + i,
                kind=kind,
                state=PhaseState.SUCCEEDED,
                queued_at=t,
                started_at=t,
                finished_at=t + timedelta(seconds=seconds + load_s),
                metrics={"load_s": load_s},
            )
            t += timedelta(seconds=seconds + load_s)
    return t


def open_placement(job: Job) -> Placement:
    return Placement.objects.get(job=job, ended_at__isnull=True)


def test_a_slow_trend_visible_only_over_the_whole_run_makes_the_check_learn(world: Any) -> None:
    # the premise: the last WINDOW phases alone show no trend, the whole run does
    assert not fit_trend(ROLL[-WINDOW:]).drifts and not fit_trend(TRAIN[-WINDOW:]).drifts
    assert fit_trend(ROLL).drifts and fit_trend(TRAIN).drifts
    job = wide_job(world, "slow-drift", slo_class=world.silver)
    assert queue_plan().placed == [job.pk]
    placement = open_placement(job)
    PhaseRecord.objects.filter(job=job).delete()  # the pass's first phase: ours instead
    # a host's load (a cold start's set-up) is not the job's time: it must not read as drift
    record_phases(placement, 0, ROLL, TRAIN, timezone.now() - timedelta(hours=2), load_s=30.0)
    Job.objects.filter(pk=job.pk).update(iterations_done=len(ROLL))
    job.refresh_from_db()

    outcome = moves.drift_check(placement_id=placement.pk, iterations_done=len(ROLL))

    assert outcome != moves.DRIFT_GONE
    job.refresh_from_db()
    # found drifting: its estimates are the learned ones, from its recent phases
    assert job.duration_source == DurationSource.LEARNED
    assert job.prior_estimates["t_roll_max_s"] == 200.0
    assert (job.t_roll_min_s, job.t_roll_max_s) == (min(ROLL[-WINDOW:]), max(ROLL[-WINDOW:]))
    assert (job.t_train_min_s, job.t_train_max_s) == (min(TRAIN[-WINDOW:]), max(TRAIN[-WINDOW:]))
    # and its outlook's trends are the whole run's
    drift = moves._drift_learned(job, placement, len(ROLL), found=True)
    assert drift is not None
    _learned, seen = drift
    assert seen.roll == fit_trend(ROLL) and seen.train == fit_trend(TRAIN)


def test_a_job_without_a_trend_is_not_found_drifting(world: Any) -> None:
    # the counterpart: the same noise around a flat level; nothing is learned
    flat_roll = [r - 3 * i for i, r in enumerate(ROLL)]
    flat_train = [t - 2 * i for i, t in enumerate(TRAIN)]
    assert not fit_trend(flat_roll).drifts and not fit_trend(flat_train).drifts
    job = wide_job(world, "flat", slo_class=world.silver)
    assert queue_plan().placed == [job.pk]
    placement = open_placement(job)
    PhaseRecord.objects.filter(job=job).delete()
    record_phases(placement, 0, flat_roll, flat_train, timezone.now() - timedelta(hours=2))
    Job.objects.filter(pk=job.pk).update(iterations_done=len(ROLL))
    job.refresh_from_db()

    assert moves.drift_check(placement_id=placement.pk, iterations_done=len(ROLL)) == (
        moves.DRIFT_NONE
    )
    job.refresh_from_db()
    assert job.duration_source != DurationSource.LEARNED


def test_a_moved_job_is_fitted_on_both_placements_latest_attempts(world: Any) -> None:
    job = wide_job(world, "moved", slo_class=world.silver)
    t = timezone.now() - timedelta(hours=3)
    # iterations 0..9 and a rollout of 10 in its first group, then moved: 10..14 in the second
    first = Placement.objects.create(
        job=job,
        group=ExecutionGroup.objects.create(),
        attempt=1,
        strategy=Strategy.DIRECT_PACKING,
        end_reason=EndReason.MOVED,
        ended_at=timezone.now() - timedelta(hours=1),
    )
    t = record_phases(first, 0, ROLL[:10], TRAIN[:10], t)
    PhaseRecord.objects.create(  # an attempt of iteration 10 run again after the move
        job=job,
        group_id=first.group_id,
        placement=first,
        iteration=10,
        kind="rollout",
        state=PhaseState.SUCCEEDED,
        queued_at=t,
        started_at=t,
        finished_at=t + timedelta(seconds=600),
    )
    second = Placement.objects.create(
        job=job, group=ExecutionGroup.objects.create(), attempt=2, strategy=Strategy.NEW_GROUP
    )
    record_phases(second, 10, ROLL[10:], TRAIN[10:], t + timedelta(seconds=900))
    Job.objects.filter(pk=job.pk).update(iterations_done=len(ROLL))
    job.refresh_from_db()

    drift = moves._drift_learned(job, second, len(ROLL))

    assert drift is not None  # drifting: its last WINDOW alone would not say so
    learned, seen = drift
    assert seen.roll == fit_trend(ROLL) and seen.train == fit_trend(TRAIN)
    # learned from the latest attempts of its last WINDOW iterations
    assert learned.t_roll_max_s == max(ROLL[-WINDOW:])


# -- (b) a short job is planned stricter for its whole run ------------------------------


def exact_job(world: Any, name: str, phase_s: float, **fields: Any) -> Job:
    """A job whose rollout and training always take `phase_s` (bronze SLO: 2.0x)."""
    return make_job(  # type: ignore[no-any-return]
        world,
        name=name,
        t_roll_max_s=phase_s,
        t_roll_min_s=phase_s,
        t_train_max_s=phase_s,
        t_train_min_s=phase_s,
        slo_class=world.bronze,
        **fields,
    )


# A short job (10 iterations, 100 s phases) runs; a newcomer with 150 s phases would slow
# it to about 1.5x its solo time beside it: within its bronze SLO (2.0), not within the
# young one (2.0 x SHRINK_MEAN = 1.22).
@pytest.mark.parametrize(
    ("done", "replan", "together"),
    [
        pytest.param(0, True, False, id="at-its-start-the-newcomer-goes-elsewhere"),
        pytest.param(WINDOW, True, False, id="after-its-first-check-still-held"),
        pytest.param(9, True, False, id="at-its-last-iteration-still-held"),
        pytest.param(0, False, True, id="drift-re-planning-off-its-own-slo"),
    ],
)
def test_a_short_job_is_planned_young_for_its_whole_run(
    world: Any, settings: Any, done: int, replan: bool, together: bool
) -> None:
    settings.ROLLMUX_DRIFT_REPLAN = replan
    short = exact_job(world, "short", 100.0, iterations=10)
    assert queue_plan().placed == [short.pk]
    Job.objects.filter(pk=short.pk).update(iterations_done=done)

    state, _progress = snapshot.planner_input()
    (member,) = [m.job for g in state.groups for m in g.members]
    held = young_profile(replace(member, slo=world.bronze.slowdown))
    assert held is not None and held.slo < world.bronze.slowdown  # a short job
    assert member.slo == (world.bronze.slowdown if together else held.slo)

    newcomer = exact_job(world, "newcomer", 150.0, iterations=50)
    assert queue_plan().placed == [newcomer.pk]
    same = open_placement(newcomer).group_id == open_placement(short).group_id
    assert same is together


def test_a_newcomer_in_the_same_pass_sees_the_short_job_young(world: Any) -> None:
    # both queued: the pass places the short job first, then the newcomer on the batch's
    # snapshot, which holds the short job as the next snapshot will
    short = exact_job(world, "short", 100.0, iterations=10)
    newcomer = exact_job(world, "newcomer", 150.0, iterations=50)
    assert queue_plan().placed == [short.pk, newcomer.pk]
    assert open_placement(newcomer).group_id != open_placement(short).group_id


@pytest.mark.parametrize(
    ("iterations", "together"),
    [
        pytest.param(10, False, id="a-short-newcomer-is-held-at-its-own-admission"),
        pytest.param(SHORT_RUN + 1, True, id="a-longer-one-joins-under-its-own-slo"),
    ],
)
def test_a_short_job_joins_a_group_only_under_its_young_slo(
    world: Any, iterations: int, together: bool
) -> None:
    # the running job sets the pace (150 s phases); the newcomer (100 s) would run at about
    # 1.5x its solo time beside it: within its bronze SLO, not within its young one
    pacer = exact_job(world, "pacer", 150.0, iterations=50)
    assert queue_plan().placed == [pacer.pk]
    newcomer = exact_job(world, "newcomer", 100.0, iterations=iterations)
    assert queue_plan().placed == [newcomer.pk]
    same = open_placement(newcomer).group_id == open_placement(pacer).group_id
    assert same is together


def test_the_page_view_of_the_cluster_keeps_the_short_jobs_own_slo(world: Any) -> None:
    # the stricter SLO is the planner's; the pages' SLO chances use the job's own
    short = exact_job(world, "short", 100.0, iterations=10)
    assert queue_plan().placed == [short.pk]
    (member,) = [m.job for g in snapshot.cluster_state().groups for m in g.members]
    assert member.slo == world.bronze.slowdown


@pytest.mark.parametrize(
    ("iterations", "replan", "together"),
    [
        pytest.param(10, True, False, id="a-short-job-is-previewed-held"),
        pytest.param(SHORT_RUN + 1, True, True, id="a-longer-one-joins"),
        pytest.param(10, False, True, id="drift-re-planning-off-it-joins"),
    ],
)
def test_the_preview_places_a_short_job_as_the_pass_would(
    world: Any, settings: Any, iterations: int, replan: bool, together: bool
) -> None:
    settings.ROLLMUX_DRIFT_REPLAN = replan
    pacer = exact_job(world, "pacer", 150.0, iterations=50)
    assert queue_plan().placed == [pacer.pk]
    data = {
        "rollout_gpus": pacer.rollout_gpus,
        "train_gpus": pacer.train_gpus,
        "t_roll_max_s": 100.0,
        "t_roll_min_s": 100.0,
        "t_train_max_s": 100.0,
        "t_train_min_s": 100.0,
        "host_mem_gb": 100.0,
        "iterations": iterations,
        "tenant": "vision",
        "runner": pacer.runner,
        "time_scale": converters.job_profile(pacer).time_scale,
    }
    preview = whatif_preview(user=world.alice, data=data, slo=world.bronze.slowdown)
    assert preview.status == "FIT"
    assert (preview.group == str(open_placement(pacer).group_id)) is together


def test_a_job_back_from_a_yield_is_planned_before_the_jobs_queued_before_it(world: Any) -> None:
    from rollmux_web.jobs.models import JobStatus
    from rollmux_web.workflow.services.departures import placement_end
    from rollmux_web.workflow.services.effects import Effects
    from rollmux_web.workflow.services.planning import queue_order

    yielder = wide_job(world, "yielder", slo_class=world.silver)
    assert queue_plan().placed == [yielder.pk]
    placement = open_placement(yielder)
    placement_end(placement, EndReason.YIELDED, timezone.now(), Effects())
    Job.objects.filter(pk=yielder.pk).update(status=JobStatus.QUEUED, iterations_done=5)
    # a job submitted before it, still waiting, and a later arrival
    earlier = wide_job(world, "earlier", slo_class=world.silver)
    Job.objects.filter(pk=earlier.pk).update(submitted_at=yielder.submitted_at - timedelta(hours=1))
    later = wide_job(world, "later", slo_class=world.silver)
    queued = Job.objects.filter(status=JobStatus.QUEUED).order_by(*queue_order())
    assert list(queued.values_list("pk", flat=True)) == [yielder.pk, earlier.pk, later.pk]
    assert queue_plan().placed[0] == yielder.pk
    # its SLO clock is its first admission: the wait counts
    _state, progress = snapshot.planner_input()
    assert progress[str(yielder.pk)].admitted_s == placement.created_at.timestamp()
    assert progress[str(yielder.pk)].moves == 1  # a yield is a re-plan: it counts


def test_a_job_back_from_a_yield_is_placed_with_what_is_left_of_its_slo_budget(
    world: Any,
) -> None:
    from rollmux_web.jobs.models import JobStatus
    from rollmux_web.workflow.converters import job_profile
    from rollmux_web.workflow.services.departures import placement_end
    from rollmux_web.workflow.services.effects import Effects

    yielder = wide_job(world, "yielder", slo_class=world.silver)
    assert queue_plan().placed == [yielder.pk]
    placement = open_placement(yielder)
    # admitted 7 hours ago (time scale 1): 50 of 100 iterations done, then it yielded
    Placement.objects.filter(pk=placement.pk).update(created_at=timezone.now() - timedelta(hours=7))
    placement_end(placement, EndReason.YIELDED, timezone.now(), Effects())
    Job.objects.filter(pk=yielder.pk).update(status=JobStatus.QUEUED, iterations_done=50)
    yielder.refresh_from_db()
    profile = job_profile(yielder)
    resumed = snapshot.resume_profile(yielder, profile, timezone.now())
    # its plan: about 280 s an iteration (the expected 140 + 140, and its sync); 100 x 280
    # x 1.5 = 42,000 s of budget, 25,200 s gone, 50 x 280 = 14,000 s still to run alone,
    # and its restart (197 s): (42,000 - 25,200 - 197) / 14,000 = 1.19 is left
    assert 1.1 < resumed.slo < 1.3, resumed.slo
    assert resumed.iterations == profile.iterations == 50  # the rest of its run
    # a job that did not yield keeps its own
    other = wide_job(world, "other", slo_class=world.silver)
    assert snapshot.resume_profile(other, job_profile(other), timezone.now()) == job_profile(other)
