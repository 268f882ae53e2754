"""The SLO report: each job's measured slowdown, and attainment per tenant and SLO class."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.db.models import Q

from rollmux_web.accounts.access import visible_tenant_ids
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job, JobStatus
from rollmux_web.jobs.runners import time_scale_of
from rollmux_web.reports.selectors._time import MAX_RANGE_DAYS, day_range
from rollmux_web.workflow.models import PhaseRecord, PhaseState, Placement


@dataclass
class JobSlo:
    job_id: int
    job_name: str
    tenant: str
    slo_class: str
    slo: float
    status: str
    iterations_measured: int
    mean_iteration_s: float
    solo_iteration_s: float
    profile_iteration_s: float
    group_ids: list[int]

    @property
    def slowdown_vs_solo(self) -> float:
        return self.mean_iteration_s / self.solo_iteration_s if self.solo_iteration_s else 0.0

    @property
    def slowdown_vs_profile(self) -> float:
        return self.mean_iteration_s / self.profile_iteration_s if self.profile_iteration_s else 0.0

    @property
    def met(self) -> bool:
        return self.slowdown_vs_solo <= self.slo + 1e-9

    @property
    def met_vs_profile(self) -> bool:
        return self.slowdown_vs_profile <= self.slo + 1e-9

    @property
    def finished(self) -> bool:
        return self.status == JobStatus.COMPLETED


@dataclass
class SloAttainment:
    tenant: str
    slo_class: str
    finished: int
    met: int
    met_vs_profile: int
    in_progress: int
    ended_early: int = 0  # cancelled or failed: no attainment either way

    @property
    def attainment(self) -> float | None:
        return self.met / self.finished if self.finished else None

    @property
    def attainment_vs_profile(self) -> float | None:
        return self.met_vs_profile / self.finished if self.finished else None


@dataclass
class SloReport:
    start: date
    end: date
    jobs: list[JobSlo]
    attainment: list[SloAttainment]

    @property
    def violations(self) -> list[JobSlo]:
        return [j for j in self.jobs if not j.met]

    @property
    def overall(self) -> SloAttainment:
        s = SloAttainment("all", "all", 0, 0, 0, 0)
        for a in self.attainment:
            s.finished += a.finished
            s.met += a.met
            s.met_vs_profile += a.met_vs_profile
            s.in_progress += a.in_progress
            s.ended_early += a.ended_early
        return s


def slo_report(*, user: Any, start: date, end: date, now: datetime | None = None) -> SloReport:
    """Return each job's measured slowdown and SLO attainment per tenant and SLO class.

    A job counts when one of its phases ran in the range. Its mean iteration time
    is the span from its first rollout start to its last training end over its
    completed iterations (each iteration a rollout then a training); its solo time
    is the mean of (rollout + training + weight sync) durations as they ran; its profile time is
    t_roll_max_s + t_train_max_s, divided by the job's time scale for emulated runners.
    """
    t0, t1 = day_range(start, end)
    tenant_ids = visible_tenant_ids(user)
    job_qs = Job.objects.filter(
        phases__started_at__lt=t1, phases__started_at__gte=t0 - timedelta(days=MAX_RANGE_DAYS)
    )
    job_qs = job_qs.filter(
        Q(phases__finished_at__gte=t0) | Q(phases__finished_at__isnull=True)
    ).distinct()
    if tenant_ids is not None:
        job_qs = job_qs.filter(tenant_id__in=tenant_ids)
    jobs = {
        j[0]: j
        for j in job_qs.values_list(
            "id",
            "name",
            "tenant__name",
            "slo_class__name",
            "slo_class__slowdown",
            "status",
            "t_roll_max_s",
            "t_train_max_s",
            "runner",
            "time_scale",
        )
    }
    phases: dict[int, dict[tuple[int, int], dict[str, tuple[datetime, datetime]]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for jid, pl, it, kind, s, f in PhaseRecord.objects.filter(
        job_id__in=list(jobs),
        state=PhaseState.SUCCEEDED,
        started_at__isnull=False,
        finished_at__isnull=False,
    ).values_list("job_id", "placement_id", "iteration", "kind", "started_at", "finished_at"):
        if s is not None and f is not None:
            phases[jid][(pl, it)][kind] = (s, f)
    groups: dict[int, set[int]] = defaultdict(set)
    for jid, gid in Placement.objects.filter(job_id__in=list(jobs)).values_list(
        "job_id", "group_id"
    ):
        groups[jid].add(gid)
    out: list[JobSlo] = []
    for jid, (_, name, tenant, cls, slo, status, rmax, tmax, runner, scale) in jobs.items():
        iters = [p for p in phases[jid].values() if "rollout" in p and "train" in p]
        if not iters:
            continue
        # an iteration's solo time is its phases as they ran: rollout, training and the
        # weight sync to the rollout nodes (none after the last training)
        solo = sum(sum((f - s).total_seconds() for s, f in p.values()) for p in iters) / len(iters)
        span_start = min(p["rollout"][0] for p in iters)
        span_end = max(p["train"][1] for p in iters)
        mean_iter = (span_end - span_start).total_seconds() / len(iters)
        out.append(
            JobSlo(
                job_id=jid,
                job_name=name,
                tenant=tenant,
                slo_class=cls,
                slo=slo,
                status=status,
                iterations_measured=len(iters),
                mean_iteration_s=mean_iter,
                solo_iteration_s=solo,
                # emulated runs are sped up: compare with the profile at the same speed
                profile_iteration_s=(rmax + tmax) / time_scale_of(runner, scale),
                group_ids=sorted(groups.get(jid, ())),
            )
        )
    out.sort(key=lambda j: (j.tenant, j.slo_class, -j.slowdown_vs_solo))
    buckets: dict[tuple[str, str], SloAttainment] = {}
    for j in out:
        a = buckets.setdefault(
            (j.tenant, j.slo_class), SloAttainment(j.tenant, j.slo_class, 0, 0, 0, 0)
        )
        if j.finished:
            a.finished += 1
            a.met += int(j.met)
            a.met_vs_profile += int(j.met_vs_profile)
        elif j.status in TERMINAL_STATUSES:
            a.ended_early += 1
        else:
            a.in_progress += 1
    return SloReport(
        start=start, end=end, jobs=out, attainment=[buckets[k] for k in sorted(buckets)]
    )


def slo_report_json(report: SloReport) -> dict[str, Any]:
    def att(a: SloAttainment) -> dict[str, Any]:
        return {
            "tenant": a.tenant,
            "slo_class": a.slo_class,
            "finished": a.finished,
            "met": a.met,
            "attainment": a.attainment,
            "attainment_vs_profile": a.attainment_vs_profile,
            "in_progress": a.in_progress,
            "cancelled_or_failed": a.ended_early,
        }

    return {
        "start": report.start.isoformat(),
        "end": report.end.isoformat(),
        "overall": att(report.overall),
        "attainment": [att(a) for a in report.attainment],
        "jobs": [
            {
                "job_id": j.job_id,
                "job": j.job_name,
                "tenant": j.tenant,
                "slo_class": j.slo_class,
                "slo": j.slo,
                "status": j.status,
                "iterations_measured": j.iterations_measured,
                "mean_iteration_s": round(j.mean_iteration_s, 3),
                "solo_iteration_s": round(j.solo_iteration_s, 3),
                "profile_iteration_s": round(j.profile_iteration_s, 3),
                "slowdown_vs_solo": round(j.slowdown_vs_solo, 4),
                "slowdown_vs_profile": round(j.slowdown_vs_profile, 4),
                "met": j.met,
                "groups": j.group_ids,
            }
            for j in report.jobs
        ],
    }
