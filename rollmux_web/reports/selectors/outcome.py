"""A finished job's outcome for its own page: the slowdown it achieved and what it cost.

The same figures as the SLO report's row and the cost report's lines for the job, over its
life (submission day to the day it ended; at most MAX_RANGE_DAYS, its last ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Min
from django.utils import timezone

from rollmux_web.jobs.models import Job
from rollmux_web.reports.selectors._time import MAX_RANGE_DAYS
from rollmux_web.reports.selectors.cost import cost_report
from rollmux_web.reports.selectors.cost_figures import ZERO
from rollmux_web.reports.selectors.slo import JobSlo, slo_report
from rollmux_web.workflow.access import job_get_for_user


@dataclass
class JobOutcome:
    job: Job
    start: date
    end: date
    slo: JobSlo | None  # None: no completed iteration to measure
    gpu_hours: Decimal = ZERO
    busy_cost: Decimal = ZERO
    idle_cost: Decimal = ZERO
    solo_disagg_cost: Decimal = ZERO  # what the same phases would cost on dedicated pools

    @property
    def cost(self) -> Decimal:
        return self.busy_cost + self.idle_cost

    @property
    def saving_vs_solo(self) -> Decimal:
        return self.solo_disagg_cost - self.cost


def job_outcome(*, user: Any, job_id: int, now: datetime | None = None) -> JobOutcome:
    """Return the job's achieved slowdown (the SLO report's row) and its billed cost (the
    sum of its cost report lines) over its life; another tenant's job is a 404."""
    job = job_get_for_user(user=user, job_id=job_id)
    end = (job.finished_at or now or timezone.now()).date()
    # its life: from its submission or its first placement, whichever came first (a job
    # imported or resubmitted can have placements dated before its row)
    first = job.placements.aggregate(first=Min("created_at"))["first"]
    began = min(d.date() for d in (job.submitted_at, first) if d is not None)
    start = max(min(began, end), end - timedelta(days=MAX_RANGE_DAYS - 1))
    slo = next(
        (
            j
            for j in slo_report(user=user, start=start, end=end, now=now, job_id=job.pk).jobs
            if j.job_id == job.pk
        ),
        None,
    )
    out = JobOutcome(job=job, start=start, end=end, slo=slo if slo and slo.measured else None)
    report = cost_report(user=user, start=start, end=end, now=now, with_burn_down=False)
    for ln in report.lines:
        if ln.job_id == job.pk:
            out.gpu_hours += ln.gpu_hours
            out.busy_cost += ln.busy_cost
            out.idle_cost += ln.idle_cost
            out.solo_disagg_cost += ln.solo_disagg_cost
    return out
