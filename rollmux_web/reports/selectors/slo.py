"""The SLO report: each job's measured slowdown, and attainment per tenant and SLO class."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cache
from typing import Any, NamedTuple, Protocol

from django.db import connection
from django.db.models import Exists, F, Min, OuterRef, Q

from rollmux_web.accounts.access import visible_tenant_ids
from rollmux_web.audit.models import AuditEntry
from rollmux_web.id_sql import in_ids
from rollmux_web.jobs.models import TERMINAL_STATUSES, Job, JobStatus
from rollmux_web.jobs.runners import time_scale_of
from rollmux_web.reports.selectors._sql import cursor_rows, us_fields
from rollmux_web.reports.selectors._time import day_range, us
from rollmux_web.workflow.models import (
    ArchivedJob,
    JobSloSummary,
    PhaseRecord,
    PhaseState,
    Placement,
    Strategy,
)
from rollmux_web.workflow.rollups import ran_in


@dataclass(slots=True)
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
    slo_now: float | None = None  # the class's value today, when it changed since admission
    had_sync: bool = False  # its measured iterations counted a weight sync
    profile_source: str = "declared"  # where the profile's phase times came from
    # its co-execution groups, sorted: filled by `with_groups` for the rows shown (a
    # fleet's month is ~14,800 jobs; a page shows 200 of them)
    group_ids: list[int] = field(default_factory=list)
    # What the report, its counts and its page read of each row, computed once: a fleet's
    # month is ~14,800 rows, read by the attainment, the violations, the order and the page
    # (as properties they were ~100 ms of the report's Python).
    # A cancelled or failed job has no SLO outcome: it did not run to its end.
    applicable: bool = field(init=False)
    # Whether the job completed an iteration: without one it has no slowdown (a job
    # cancelled or failed before its first training ended is still counted and listed).
    measured: bool = field(init=False)
    slowdown_vs_solo: float = field(init=False)
    slowdown_vs_profile: float = field(init=False)
    met: bool = field(init=False)
    met_vs_profile: bool = field(init=False)
    finished: bool = field(init=False)

    @property
    def solo_source(self) -> str:
        """How the solo time was obtained, in words."""
        n = self.iterations_measured
        if not n:
            return f"none: {self.status} before completing an iteration"
        return (
            f"measured: the mean of its {n} completed iteration{'s' if n != 1 else ''}' own"
            f" phases (rollout + training{' + weight sync' if self.had_sync else ''}) as they"
            " ran, waits excluded"
        )

    def __post_init__(self) -> None:
        self.applicable = self.status not in (JobStatus.CANCELLED, JobStatus.FAILED)
        self.measured = self.iterations_measured > 0
        mean = self.mean_iteration_s
        self.slowdown_vs_solo = mean / self.solo_iteration_s if self.solo_iteration_s else 0.0
        self.slowdown_vs_profile = (
            mean / self.profile_iteration_s if self.profile_iteration_s else 0.0
        )
        self.met = self.slowdown_vs_solo <= self.slo + 1e-9
        self.met_vs_profile = self.slowdown_vs_profile <= self.slo + 1e-9
        self.finished = self.status == JobStatus.COMPLETED


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
        return [j for j in self.jobs if j.applicable and not j.met]

    @property
    def overall(self) -> SloAttainment:
        return overall_of(self.attainment)

    @property
    def jobs_count(self) -> int:
        return len(self.jobs)

    @property
    def violations_count(self) -> int:
        return len(self.violations)


class SloRows(Protocol):
    """What the API's JSON reads of an SLO report: the whole one (`SloReport`) or one page
    of its jobs (`slo_paged.SloReportPage`)."""

    @property
    def start(self) -> date: ...
    @property
    def end(self) -> date: ...
    @property
    def jobs(self) -> list[JobSlo]: ...
    @property
    def attainment(self) -> list[SloAttainment]: ...
    @property
    def overall(self) -> SloAttainment: ...
    @property
    def jobs_count(self) -> int: ...
    @property
    def violations_count(self) -> int: ...


def overall_of(attainment: Iterable[SloAttainment]) -> SloAttainment:
    """Return the attainment of every tenant and SLO class together."""
    s = SloAttainment("all", "all", 0, 0, 0, 0)
    for a in attainment:
        s.finished += a.finished
        s.met += a.met
        s.met_vs_profile += a.met_vs_profile
        s.in_progress += a.in_progress
        s.ended_early += a.ended_early
    return s


def ran_in_range(
    start: date, end: date, tenant_ids: set[int] | None, *, job_id: int | None = None
) -> set[int]:
    """Return the jobs (of `tenant_ids`; None: all; only `job_id` when given) with a
    phase that ran in [start, end] (whole UTC days): one that ended on or after the range's
    start, or still runs, and started before its end.

    A job whose phases are summarised (`JobSloSummary`, all before the rollup watermark)
    or archived (`ArchivedJob`) is found on the days it ran, kept with it; only the other
    jobs' phases are looked at, per job (a month at a fleet's size is ~1.4 million phase
    records, nearly all of summarised jobs)."""
    return (
        kept_ids(start, end, tenant_ids, job_id=job_id, inside=True)
        | kept_ids(start, end, tenant_ids, job_id=job_id, inside=False)
        | unkept_ids(start, end, tenant_ids, job_id=job_id)
    )


def kept_ids(
    start: date,
    end: date,
    tenant_ids: set[int] | None,
    *,
    inside: bool,
    job_id: int | None = None,
) -> set[int]:
    """Return the jobs of `ran_in_range` found on their kept days (`JobSloSummary`,
    `ArchivedJob`): those whose days are all inside the range (`inside`), or the others
    that ran on one of its days."""
    scope: dict[str, Any] = {} if tenant_ids is None else {"job__tenant_id__in": tenant_ids}
    if job_id is not None:
        scope["job_id"] = job_id
    found: set[int] = set()
    for model in (JobSloSummary, ArchivedJob):
        near = model.objects.filter(  # type: ignore[attr-defined]
            first_day__lte=end, last_day__gte=start, **scope
        )
        # all its days inside the range: it ran in it (no need to read the days between)
        # (slo_paged.KEPT_INSIDE: the same condition in SQL)
        within = Q(first_day__gte=start, last_day__lte=end)
        if inside:
            found.update(near.filter(within).values_list("job_id", flat=True))
        else:
            found.update(
                jid
                for jid, days in near.exclude(within).values_list("job_id", "ran_days")
                if ran_in(days, start, end)
            )
    return found


def unkept_ids(
    start: date, end: date, tenant_ids: set[int] | None, *, job_id: int | None = None
) -> set[int]:
    """Return the jobs of `ran_in_range` without kept inputs: found on their phases."""
    t0, t1 = day_range(start, end)
    in_range = PhaseRecord.objects.filter(job_id=OuterRef("pk"), started_at__lt=t1).filter(
        Q(finished_at__gte=t0) | Q(finished_at__isnull=True)
    )
    others = Job.objects.filter(slo_summary__isnull=True, archive__isnull=True).filter(
        Exists(in_range)
    )
    if tenant_ids is not None:
        others = others.filter(tenant_id__in=tenant_ids)
    if job_id is not None:
        others = others.filter(pk=job_id)
    return set(others.order_by().values_list("pk", flat=True))


def ended_ids(
    start: date,
    end: date,
    tenant_ids: set[int] | None,
    *,
    job_id: int | None = None,
) -> set[int]:
    """Return the jobs cancelled or failed in [start, end]."""
    t0, t1 = day_range(start, end)
    return set(
        Job.objects.filter(
            status__in=(JobStatus.CANCELLED, JobStatus.FAILED),
            finished_at__gte=t0,
            finished_at__lt=t1,
            **({} if tenant_ids is None else {"tenant_id__in": tenant_ids}),
            **({} if job_id is None else {"pk": job_id}),
        )
        .order_by()
        .values_list("pk", flat=True)
    )


def admitted_slos(classes: dict[int, tuple[int, float]]) -> dict[int, float]:
    """Return each job's SLO as it was when the job was admitted (its first placement).

    `classes` maps a job id to (its SLO class id, the class's value today). The value at
    admission comes from the class's audited history (`slo_class.update`, before/after):
    the value before the first change made after the admission, or today's value when
    the class has not changed since.
    """
    if not classes:
        return {}
    changes: dict[str, list[tuple[datetime, Any]]] = defaultdict(list)
    for oid, at, before in (
        AuditEntry.objects.filter(
            action="slo_class.update",
            object_id__in=sorted({str(c) for c, _ in classes.values()}),
        )
        .order_by("at", "id")
        .values_list("object_id", "at", "before")
    ):
        if isinstance(before, dict) and "slowdown" in before:
            changes[oid].append((at, before["slowdown"]))
    if not changes:  # no class changed: every job has today's value (no admission times read)
        return {jid: today for jid, (_class_id, today) in classes.items()}
    admitted_at = dict(
        Placement.objects.filter(in_ids("job_id", set(classes)))
        .values("job_id")
        .annotate(first=Min("created_at"))
        .values_list("job_id", "first")
    )
    out: dict[int, float] = {}
    for jid, (class_id, today) in classes.items():
        when = admitted_at.get(jid)
        later = [v for at, v in changes.get(str(class_id), ()) if when is not None and at > when]
        out[jid] = float(later[0]) if later else today
    return out


# a job's row as the report reads it (`JobRow`): Job fields, then the kept inputs
JOB_FIELDS = (
    "id", "name", "tenant__name", "slo_class__name", "slo_class__slowdown", "slo_class_id",
    "status", "t_roll_max_s", "t_train_max_s", "runner", "time_scale",
)  # fmt: skip
KEPT_FIELDS = ("iterations_measured", "solo_us", "had_sync")
SOURCE_FIELD = "duration_source"  # added by the jobs app's profiling work


def _job_rows(
    ids: set[int],
) -> tuple[dict[int, tuple[Any, ...]], dict[int, Kept], dict[int, str]]:
    """Return the jobs' rows (JOB_FIELDS), their kept SLO inputs (an archive's over a
    summary's) and where their profiles came from, in one query (a month at a fleet's
    size is ~14,800 jobs: their spans come as epoch microseconds on PostgreSQL, not parsed
    datetimes; unordered, as the report sorts them; their groups are read for the rows
    shown only, `with_groups`)."""
    has_source = any(f.name == SOURCE_FIELD for f in Job._meta.get_fields())
    kept_cols = [f"{rel}__{f}" for rel in ("slo_summary", "archive") for f in KEPT_FIELDS]
    span_cols = {
        "s_start": "slo_summary__span_start",
        "s_end": "slo_summary__span_end",
        "a_start": "archive__span_start",
        "a_end": "archive__span_end",
    }
    as_us, exact = us_fields(**span_cols)
    # (elsewhere than PostgreSQL: the datetimes, converted here)
    spans: dict[str, Any] = as_us if exact else {k: F(c) for k, c in span_cols.items()}
    cols = [*JOB_FIELDS, *kept_cols, *spans]
    if has_source:
        cols.append(SOURCE_FIELD)
    jobs: dict[int, tuple[Any, ...]] = {}
    kept: dict[int, Kept] = {}
    sources: dict[int, str] = {}
    n = len(JOB_FIELDS)
    rows = Job.objects.filter(in_ids("id", ids)).annotate(**spans).order_by().values_list(*cols)
    for row in cursor_rows(rows):
        jid = row[0]
        jobs[jid] = row[:n]
        s_it, s_solo, s_sync, a_it, a_solo, a_sync, s0, s1, a0, a1 = row[n : n + 10]
        if a_it is not None:  # archived (its archive's inputs, as ArchivedJob's win)
            kept[jid] = Kept(a_it, a_solo, a_sync, _span_us(a0, a1, exact))
        elif s_it is not None:
            kept[jid] = Kept(s_it, s_solo, s_sync, _span_us(s0, s1, exact))
        if has_source:
            sources[jid] = row[-1]
    return jobs, kept, sources


def with_groups(jobs: Iterable[JobSlo]) -> None:
    """Fill the jobs' `group_ids` (each sorted), in one query: for the rows a page shows,
    or every job of a report the API returns."""
    by_id = {j.job_id: j for j in jobs}
    found: dict[int, set[int]] = defaultdict(set)
    for jid, gid in (
        Placement.objects.filter(in_ids("job_id", set(by_id)))
        .order_by()
        .values_list("job_id", "group_id")
    ):
        found[jid].add(gid)
    for jid, job in by_id.items():
        job.group_ids = sorted(found.get(jid, ()))


def _span_us(start: Any, end: Any, exact: bool) -> int | None:
    """A kept span's length in microseconds (from epoch microseconds, or datetimes)."""
    if start is None or end is None:
        return None
    if not exact:
        start, end = us(start), us(end)
    return int(end) - int(start)


def report_job_ids(
    start: date, end: date, tenant_ids: set[int] | None, *, job_id: int | None = None
) -> set[int]:
    """Return the jobs the report of [start, end] looks at: those that ran a phase in it
    (`ran_in_range`) and those cancelled or failed in it."""
    return ran_in_range(start, end, tenant_ids, job_id=job_id) | ended_ids(
        start, end, tenant_ids, job_id=job_id
    )


def slo_report(
    *, user: Any, start: date, end: date, now: datetime | None = None, job_id: int | None = None
) -> SloReport:
    """Return each job's measured slowdown and SLO attainment per tenant and SLO class.

    A job counts when one of its phases ran in the range, or when it was cancelled or
    failed in the range: such a job is listed and counted as "cancelled / failed" (not
    applicable to attainment, which counts finished jobs), also with no completed
    iteration (no slowdown then), so its tenant and class keep their row. Its mean iteration time
    is the span from its first rollout start to its last training end over its
    completed iterations (each iteration a rollout then a training); its solo time
    is the mean of (rollout + training + weight sync) durations as they ran; its profile time is
    t_roll_max_s + t_train_max_s, divided by the job's time scale for emulated runners.

    `job_id`: that job's row only (a job page's outcome, the missed-SLO event: the same row
    as in the whole report, without reading the range's other jobs).
    """
    ids = report_job_ids(start, end, visible_tenant_ids(user), job_id=job_id)
    # (a few runners and scales; it reads the settings)
    out = list(job_slo_rows(ids, scale_of=cache(time_scale_of)).values())
    # (ties: the newest job first; the rows come unordered from the database)
    out.sort(key=lambda j: (j.tenant, j.slo_class, -j.slowdown_vs_solo, -j.job_id))
    return SloReport(start=start, end=end, jobs=out, attainment=_attainment(out))


def job_slo_rows(
    ids: set[int], *, scale_of: Callable[[str, float | None], float]
) -> dict[int, JobSlo]:
    """Return the report's rows of the jobs `ids` (those it lists: `job_slo`) by job id,
    from their kept inputs or their phases."""
    if not ids:
        return {}
    jobs, kept, sources = _job_rows(ids)
    sums = iteration_sums([j for j in jobs if j not in kept])
    admitted = admitted_slos({jid: (j[5], j[4]) for jid, j in jobs.items()})
    out: dict[int, JobSlo] = {}
    for jid, job in jobs.items():
        row = job_slo(
            job,
            kept=kept.get(jid),
            sums=sums.get(jid),
            slo=admitted.get(jid, job[4]),
            profile_source=sources.get(jid, "declared"),
            scale_of=scale_of,
        )
        if row is not None:
            out[jid] = row
    return out


def job_slo(
    job: tuple[Any, ...],
    *,
    kept: Kept | None,
    sums: IterationSums | None,
    slo: float,
    profile_source: str,
    scale_of: Callable[[str, float | None], float],
) -> JobSlo | None:
    """Return a job's row of the report from its JOB_FIELDS, its kept inputs or its
    iteration sums and its SLO at admission; None when it is not in the report (nothing
    measured yet, or still in its profiling run, which is no iteration)."""
    jid, name, tenant, cls, slo_now, _cls_id, status, rmax, tmax, runner, scale = job
    n_iters = (
        kept.iterations_measured
        if kept is not None
        else (sums.iterations if sums is not None else 0)
    )
    ended = status in (JobStatus.CANCELLED, JobStatus.FAILED)
    if not ended and (not n_iters or rmax is None or tmax is None):
        return None
    # what every row says of its job, measured or not
    who = {
        "job_id": jid,
        "job_name": name,
        "tenant": tenant,
        "slo_class": cls,
        "slo": slo,
        "status": status,
        "slo_now": slo_now if slo_now != slo else None,
        "profile_source": profile_source,
    }
    if not n_iters:
        return JobSlo(
            **who,
            iterations_measured=0,
            mean_iteration_s=0.0,
            solo_iteration_s=0.0,
            profile_iteration_s=0.0,
        )
    # an iteration's solo time is its phases as they ran: rollout, training and the
    # weight sync to the rollout nodes (none after the last training)
    solo, mean_iter, had_sync = _measured(sums, kept)
    return JobSlo(
        **who,
        iterations_measured=n_iters,
        mean_iteration_s=mean_iter,
        solo_iteration_s=solo,
        had_sync=had_sync,
        # emulated runs are sped up: compare with the profile at the same speed
        profile_iteration_s=(
            (rmax + tmax) / scale_of(runner, scale)
            if rmax is not None and tmax is not None
            else 0.0
        ),
    )


class Kept(NamedTuple):
    """A job's SLO inputs as its summary (`JobSloSummary`) or archive (`ArchivedJob`) kept
    them (their fields of the same names)."""

    iterations_measured: int
    solo_us: int
    had_sync: bool
    span_us: int | None  # span_end - span_start, in microseconds


def _measured(it: IterationSums | None, summary: Kept | None) -> tuple[float, float, bool]:
    """Return (solo iteration s, mean iteration s, whether a weight sync counted), from the
    completed iterations' phases or, for an archived job, from what its archiving kept."""
    if summary is not None:
        n = summary.iterations_measured
        assert summary.span_us is not None
        solo = summary.solo_us / 1_000_000 / n
        # (integer microseconds / 10**6: what timedelta.total_seconds() computes)
        return solo, summary.span_us / 1_000_000 / n, summary.had_sync
    assert it is not None
    n = it.iterations
    mean_iter = (it.last_train_end - it.first_rollout_start).total_seconds() / n
    return it.phase_s / n, mean_iter, it.with_sync


class IterationSums(NamedTuple):
    """A job's completed iterations (a rollout and a training succeeded) over its
    placements, profiling runs excluded: what its slowdown is computed from."""

    iterations: int
    phase_s: float  # the summed durations of those iterations' phases (sync included)
    first_rollout_start: datetime
    last_train_end: datetime
    with_sync: bool


# Per (placement, iteration), then per job, in the database: a month at a fleet's size is
# ~1.4 million phase records, which the report must not fetch (bench/scale.py).
_SUMS_SQL = """
SELECT job_id, COUNT(*), SUM(phase_s), MIN(r0), MAX(t1), BOOL_OR(has_sync)
FROM (
    SELECT p.job_id,
           SUM(EXTRACT(EPOCH FROM p.finished_at - p.started_at)) AS phase_s,
           MIN(p.started_at) FILTER (WHERE p.kind = 'rollout') AS r0,
           MAX(p.finished_at) FILTER (WHERE p.kind = 'train') AS t1,
           BOOL_OR(p.kind = 'sync') AS has_sync,
           BOOL_OR(p.kind = 'rollout') AND BOOL_OR(p.kind = 'train') AS complete
    FROM workflow_phaserecord p
    JOIN workflow_placement pl ON pl.id = p.placement_id
    WHERE p.job_id = ANY(%s) AND p.state = %s AND pl.strategy <> %s
      AND p.started_at IS NOT NULL AND p.finished_at IS NOT NULL
    GROUP BY p.job_id, p.placement_id, p.iteration
) it
WHERE complete
GROUP BY job_id
"""


def iteration_sums(job_ids: list[int]) -> dict[int, IterationSums]:
    """Return per job with a completed iteration its IterationSums (summed in SQL on
    PostgreSQL; elsewhere from the rows)."""
    if not job_ids:
        return {}
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(_SUMS_SQL, [job_ids, PhaseState.SUCCEEDED, Strategy.PROFILE])
            return {
                jid: IterationSums(n, float(total), r0, t1, bool(sync))
                for jid, n, total, r0, t1, sync in cur.fetchall()
            }
    out: dict[int, IterationSums] = {}
    for jid, per_iteration in _iteration_phases(job_ids).items():
        iters = [p for p in per_iteration.values() if "rollout" in p and "train" in p]
        if iters:
            out[jid] = IterationSums(
                len(iters),
                sum(sum((f - s).total_seconds() for s, f in p.values()) for p in iters),
                min(p["rollout"][0] for p in iters),
                max(p["train"][1] for p in iters),
                any("sync" in p for p in iters),
            )
    return out


def _iteration_phases(
    job_ids: list[int],
) -> dict[int, dict[tuple[int, int], dict[str, tuple[datetime, datetime]]]]:
    """Return per job, per (placement, iteration), each succeeded phase's (start, end),
    profiling runs excluded (they are no iteration of the job's run)."""
    phases: dict[int, dict[tuple[int, int], dict[str, tuple[datetime, datetime]]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for jid, pl, it, kind, s, f in (
        PhaseRecord.objects.filter(
            job_id__in=job_ids,
            state=PhaseState.SUCCEEDED,
            started_at__isnull=False,
            finished_at__isnull=False,
        )
        .exclude(placement__strategy=Strategy.PROFILE)
        .values_list("job_id", "placement_id", "iteration", "kind", "started_at", "finished_at")
    ):
        if s is not None and f is not None:
            phases[jid][(pl, it)][kind] = (s, f)
    return phases


def _attainment(jobs: list[JobSlo]) -> list[SloAttainment]:
    """Return SLO attainment per (tenant, SLO class), in that order."""
    buckets: dict[tuple[str, str], SloAttainment] = {}
    for j in jobs:
        a = buckets.setdefault(
            (j.tenant, j.slo_class), SloAttainment(j.tenant, j.slo_class, 0, 0, 0, 0)
        )
        if j.finished:
            a.finished += 1
            a.met += int(j.met)
            a.met_vs_profile += int(j.met_vs_profile)
        elif not j.applicable or j.status in TERMINAL_STATUSES:
            a.ended_early += 1
        else:
            a.in_progress += 1
    return [buckets[k] for k in sorted(buckets)]


def slo_report_json(report: SloRows) -> dict[str, Any]:
    """Return the report as the API's JSON: its jobs (a page's: `slo_paged`) with their
    groups, how many jobs the range has and how many missed their SLO."""
    with_groups(report.jobs)

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
        "jobs_count": report.jobs_count,
        "violations_count": report.violations_count,
        "overall": att(report.overall),
        "attainment": [att(a) for a in report.attainment],
        "jobs": [
            {
                "job_id": j.job_id,
                "job": j.job_name,
                "tenant": j.tenant,
                "slo_class": j.slo_class,
                "slo": j.slo,
                "slo_now": j.slo_now,
                "solo_source": j.solo_source,
                "profile_source": j.profile_source,
                "status": j.status,
                "iterations_measured": j.iterations_measured,
                # (no completed iteration: nothing measured, null rather than 0)
                "mean_iteration_s": round(j.mean_iteration_s, 3) if j.measured else None,
                "solo_iteration_s": round(j.solo_iteration_s, 3) if j.measured else None,
                "profile_iteration_s": round(j.profile_iteration_s, 3)
                if j.profile_iteration_s
                else None,
                "slowdown_vs_solo": round(j.slowdown_vs_solo, 4) if j.measured else None,
                "slowdown_vs_profile": round(j.slowdown_vs_profile, 4) if j.measured else None,
                "met": j.met if j.applicable else None,
                "groups": j.group_ids,
            }
            for j in report.jobs
        ],
    }
