"""A job's measured warm and cold starts, for the planner (issue 21 item 3).

Each phase record says where its time went (`setup_s`, `load_s`, `work_s`: the host's
split, workers/dispatch/host.py). Once a job has run:

- its switch overhead (`JobProfile.switch_s`) is its warm starts' load: the median reload
  from host memory of its warm phases (the cluster's constant `switch_overhead_s` until
  then);
- its restart (`JobProfile.restart_s`, what a move costs it) is its latest cold start:
  set-up plus load (the restore of its checkpoint when it resumed; the paper's measured
  restart by model size until then, scheduler.planner.consolidation.restart_seconds).

Both in profile seconds. Only jobs whose phases do their real work are measured: an
emulating runner's (`emulated`, `toy-rl`) phases run at a time scale, but its set-up and
loads are real wall-clock seconds that the scale would magnify into thousands of profile
seconds (a Ray worker's start-up x 200), so such a job keeps the constants, which stand for
the model it emulates. The profile is built in
`converters.job_profile`; `with_measured_starts` is the one place these values join it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, replace

from rollmux_web.id_sql import in_ids
from rollmux_web.jobs.models import Job
from rollmux_web.jobs.runners import EMULATING_RUNNERS, time_scale_of
from rollmux_web.workflow.models import PhaseRecord, PhaseState
from scheduler.model import Group, JobProfile

WARM_SAMPLES = 20  # a job's latest warm phases the median is taken over


@dataclass(frozen=True)
class MeasuredStarts:
    switch_s: float | None  # profile seconds
    restart_s: float | None


def measured_starts(job_ids: Iterable[int]) -> dict[int, MeasuredStarts]:
    """Return each job's measured warm and cold starts (jobs that ran a phase with them)."""
    # the jobs of a real runner first, by key (the phases joined to the jobs table made
    # PostgreSQL hash all ~100,000 jobs' rows: ~40 ms of the overview at a fleet's size)
    speed = {
        pk: (runner, time_scale)
        for pk, runner, time_scale in Job.objects.filter(in_ids("pk", set(job_ids)))
        .exclude(runner__in=EMULATING_RUNNERS)
        .order_by()
        .values_list("pk", "runner", "time_scale")
    }
    if not speed:
        return {}
    rows = (
        PhaseRecord.objects.filter(
            in_ids("job_id", set(speed)),
            state=PhaseState.SUCCEEDED,
            kind__in=("rollout", "train"),
            load_s__isnull=False,
            warm_start__isnull=False,
        )
        .order_by("job_id", "-started_at")
        .values_list("job_id", "warm_start", "setup_s", "load_s")
    )
    warm: dict[int, list[float]] = {}
    cold: dict[int, float] = {}
    scale: dict[int, float] = {}
    for job_id, is_warm, setup_s, load_s in rows:
        scale.setdefault(job_id, time_scale_of(*speed[job_id]))
        if load_s is None:
            continue  # (the query leaves them out)
        if is_warm:
            loads = warm.setdefault(job_id, [])
            if len(loads) < WARM_SAMPLES:
                loads.append(float(load_s))
        elif job_id not in cold:  # the latest (rows are newest first)
            cold[job_id] = float(setup_s or 0.0) + float(load_s)
    out = {}
    for job_id, k in scale.items():
        switch = statistics.median(warm[job_id]) * k if job_id in warm else None
        restart = cold[job_id] * k if job_id in cold else None
        out[job_id] = MeasuredStarts(switch, restart)
    return out


def with_measured_starts(profile: JobProfile, measured: MeasuredStarts | None) -> JobProfile:
    """Return the profile with the job's measured switch overhead and restart, if any."""
    if measured is None:
        return profile
    return replace(profile, switch_s=measured.switch_s, restart_s=measured.restart_s)


def group_with_measured_starts(group: Group, measured: dict[int, MeasuredStarts]) -> Group:
    """Return the group with each member's profile given its measured starts."""
    members = tuple(
        replace(m, job=with_measured_starts(m.job, measured.get(int(m.job.id))))
        for m in group.members
    )
    return replace(group, members=members)
