"""Reads of jobs, always scoped to what the user may see (another tenant's job is a 404)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection
from django.db.models import (
    Avg,
    Count,
    F,
    FloatField,
    Max,
    Min,
    Prefetch,
    QuerySet,
    Value,
    Window,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Greatest, RowNumber
from django.http import Http404
from django.utils import timezone

from rollmux_web.accounts.access import OTHER_TENANT_JOB, tenant_visible, visible_tenant_ids
from rollmux_web.accounts.selectors import visible_tenants
from rollmux_web.epoch_sql import epoch_s
from rollmux_web.formatting import sentence_seconds
from rollmux_web.inventory.models import Cluster, GpuPrice, GpuType, Node, NodeState, PoolKind
from rollmux_web.jobs.curve import CurvePoint
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.jobs.runners import own_seconds, time_scale_of
from rollmux_web.workflow.models import (
    ArchivedJob,
    IterationMetrics,
    PhaseRecord,
    PhaseState,
    Placement,
    Strategy,
)
from rollmux_web.workflow.snapshot import CAPACITY_STATES

ORDERINGS = {
    "submitted": ("submitted_at", "id"),
    "-submitted": ("-submitted_at", "-id"),
    "name": ("name", "id"),
    "-name": ("-name", "-id"),
    # (every ordering ends on the id: a page boundary between equal keys is then the same
    # in every query, and no job shows on two pages or on none)
    "status": ("status", "-submitted_at", "-id"),
    "-status": ("-status", "-submitted_at", "-id"),
    "id": ("id",),
    "-id": ("-id",),
}
DEFAULT_ORDERING = "-submitted"


def _with_placements(qs: QuerySet[Job]) -> QuerySet[Job]:
    return qs.select_related("tenant", "submitter", "slo_class").prefetch_related(
        Prefetch(
            "placements",
            queryset=Placement.objects.order_by("-created_at", "-id").prefetch_related(
                "rollout_nodes", "train_nodes"
            ),
            to_attr="placements_newest_first",
        )
    )


def visible_jobs(*, user: Any) -> QuerySet[Job]:
    """Return every job of the tenants the user may see."""
    return Job.objects.filter(tenant__in=visible_tenants(user))


def job_list(
    *,
    user: Any,
    status: str = "",
    tenant: str = "",
    ordering: str = DEFAULT_ORDERING,
) -> QuerySet[Job]:
    """Return the user's visible jobs, filtered by status and tenant name, ordered."""
    qs = visible_jobs(user=user)
    if status:
        qs = qs.filter(status=status)
    if tenant:
        qs = qs.filter(tenant__name=tenant)
    return _with_placements(qs).order_by(*ORDERINGS.get(ordering, ORDERINGS[DEFAULT_ORDERING]))


def job_get(*, user: Any, job_id: int) -> Job:
    """Return one visible job or raise Http404 (also for another tenant's job)."""
    job = _with_placements(visible_jobs(user=user)).filter(pk=job_id).first()
    if job is None:
        raise Http404("No such job")
    return job


def placement_history(job: Job, viewer: Any = None) -> list[Placement]:
    """Return every placement of the job, newest first, with nodes (one per attempt); an
    ended one carries `end_outcome`, the outcome of its phase that did not succeed (e.g.
    "lost: node h800-0 down"), or "" when it ended normally, and `shown_reason`, its
    `move_reason` as `viewer` may read it (`preemption_text`)."""
    placements = list(
        Placement.objects.filter(job=job)
        .order_by("-created_at", "-id")
        .prefetch_related("rollout_nodes", "train_nodes")
    )
    ended = [p.pk for p in placements if p.end_reason in ("failed", "node_down")]
    outcomes = (
        dict(
            PhaseRecord.objects.filter(placement_id__in=ended, state__in=("failed", "lost"))
            .order_by("placement_id", "finished_at")
            .values_list("placement_id", "outcome")
        )  # the last failed or lost phase of each such placement
        if ended
        else {}
    )  # (no query for a job that never failed: the live page polls this every 2 s)
    for p in placements:
        p.end_outcome = outcomes.get(p.pk, "")  # type: ignore[attr-defined]
    for i, p in enumerate(placements):
        later = placements[i - 1] if i else None
        p.shown_reason = preemption_text(p, later, viewer)  # type: ignore[attr-defined]
    return placements


def preemption_text(placement: Placement, later: Placement | None, viewer: Any) -> str:
    """Return a placement's `move_reason` as `viewer` may read it: a preempted placement
    names the job it yielded to ("job #91 of speech") only to a viewer who may see that
    job's tenant (accounts.access, the masking rule: to others it stays "another tenant's
    job"), and says when the job resumed (`later`, its next placement)."""
    text = placement.move_reason
    if placement.end_reason != "preempted":
        return text
    other = placement.preempted_for_id
    if other is not None and viewer is not None:
        row = Job.objects.filter(pk=other).values_list("tenant_id", "tenant__name").first()
        if row is not None and tenant_visible(row[0], visible_tenant_ids(viewer)):
            text = text.replace(OTHER_TENANT_JOB, f"job #{other} of {row[1]}", 1)
    if later is not None:
        text += f"; resumed at {timezone.localtime(later.created_at):%Y-%m-%d %H:%M:%S}"
    return text


def latest_placement(job: Job) -> Placement | None:
    """Return the job's newest placement (uses the prefetch when present)."""
    cached = getattr(job, "placements_newest_first", None)
    if cached is not None:
        return cached[0] if cached else None
    return (
        Placement.objects.filter(job=job)
        .order_by("-created_at", "-id")
        .prefetch_related("rollout_nodes", "train_nodes")
        .first()
    )


def percentile(values: list[float], q: float) -> float:
    """Return the nearest-rank q-th percentile (0 < q <= 100) of non-empty values."""
    ordered = sorted(values)
    rank = max(math.ceil(q / 100.0 * len(ordered)), 1)
    return ordered[rank - 1]


@dataclass(frozen=True)
class DurationStats:
    """Measured durations of one phase kind, in wall-clock seconds and in profile seconds
    (wall-clock x the job's time scale: the unit of its spec and of the planner)."""

    count: int
    mean_s: float
    p95_s: float
    max_s: float
    time_scale: float
    min_s: float = 0.0

    @property
    def min_profile_s(self) -> float:
        return self.min_s * self.time_scale

    @property
    def mean_profile_s(self) -> float:
        return self.mean_s * self.time_scale

    @property
    def p95_profile_s(self) -> float:
        return self.p95_s * self.time_scale

    @property
    def max_profile_s(self) -> float:
        return self.max_s * self.time_scale


def duration_stats(durations: list[float], time_scale: float) -> DurationStats | None:
    """Return count, mean, p95 and max of wall-clock durations (None when there are none)."""
    if not durations:
        return None
    return DurationStats(
        count=len(durations),
        mean_s=sum(durations) / len(durations),
        p95_s=percentile(durations, 95),
        max_s=max(durations),
        time_scale=time_scale,
        min_s=min(durations),
    )


def jobs_measured(jobs: list[Job]) -> dict[int, dict[str, DurationStats]]:
    """Return per job id, per phase kind, the measured durations of its succeeded phases
    (one query for a page of jobs); sets `measured_stats` on each job for the serializer."""
    durations: dict[int, dict[str, list[float]]] = {j.pk: {} for j in jobs}
    succeeded = PhaseRecord.objects.filter(
        job__in=[j.pk for j in jobs],
        state=PhaseState.SUCCEEDED,
        started_at__isnull=False,
        finished_at__isnull=False,
    )
    if connection.vendor == "postgresql":
        # the duration as one float from the database (an API page of 50 jobs has ~5,000
        # phases: two timestamps parsed each cost more than the rest of the page); the
        # interval's exact seconds rounded once, as timedelta.total_seconds() rounds them
        seconds_sql = epoch_s(F("finished_at") - F("started_at"))
        for job_id, kind, seconds in succeeded.annotate(secs=seconds_sql).values_list(
            "job_id", "kind", "secs"
        ):
            durations[job_id].setdefault(kind, []).append(seconds)
    else:
        for job_id, kind, started, finished in succeeded.values_list(
            "job_id", "kind", "started_at", "finished_at"
        ):
            if started is not None and finished is not None:
                seconds = (finished - started).total_seconds()
                durations[job_id].setdefault(kind, []).append(seconds)
    out: dict[int, dict[str, DurationStats]] = {}
    for job in jobs:
        scale = time_scale_of(job.runner, job.time_scale)
        out[job.pk] = {
            kind: st
            for kind, d in sorted(durations[job.pk].items())
            if (st := duration_stats(d, scale)) is not None
        }
        job.measured_stats = out[job.pk]  # type: ignore[attr-defined]
    return out


def job_measured(*, job: Job) -> dict[str, DurationStats]:
    """Return per phase kind the measured durations of the job's succeeded phases."""
    cached = getattr(job, "measured_stats", None)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    return jobs_measured([job])[job.pk]


# Drift (issue 13 item 4): a job whose recent phases of a kind run, on average, longer than
# the worst case it was admitted on no longer has the estimates the planner trusts.
DRIFT_WINDOW = 3  # the last phases of a kind that make "recent"


@dataclass(frozen=True)
class Drift:
    """One phase kind whose recent mean left the job's worst-case estimate (profile s)."""

    kind: str
    recent_mean_s: float  # the mean of the last `window` succeeded phases, profile seconds
    worst_case_s: float  # the estimate admission planned on
    window: int

    @property
    def text(self) -> str:
        over = (self.recent_mean_s / self.worst_case_s - 1.0) * 100.0
        mean, worst = (sentence_seconds(s, ".1f") for s in (self.recent_mean_s, self.worst_case_s))
        return (
            f"{self.kind}: mean {mean} s over its last {self.window} phases, "
            f"above its worst case {worst} s (+{over:.0f}%)"
        )


# Each job's last DRIFT_WINDOW succeeded rollouts and trainings, newest first, on the index
# (job, kind, finished_at): DRIFT_WINDOW rows per job and kind read, however long its run
# (the overview asks for 200 running jobs' drift: issue 25).
_RECENT_SQL = """
SELECT j.id, k.kind, p.started_at, p.finished_at, p.metrics
FROM unnest(%s::bigint[]) AS j(id)
CROSS JOIN (VALUES ('rollout'), ('train')) AS k(kind)
CROSS JOIN LATERAL (
    SELECT p.started_at, p.finished_at, p.metrics
    FROM workflow_phaserecord p
    JOIN workflow_placement pl ON pl.id = p.placement_id
    WHERE p.job_id = j.id AND p.kind = k.kind AND p.state = %s
      AND p.started_at IS NOT NULL AND p.finished_at IS NOT NULL AND pl.strategy <> %s
    ORDER BY p.finished_at DESC
    LIMIT %s
) p
ORDER BY j.id, k.kind, p.finished_at DESC
"""


def _recent_phases(job_ids: list[int]) -> list[tuple[int, str, Any, Any, Any]]:
    """Return (job id, kind, started, finished, metrics) of each job's last DRIFT_WINDOW
    succeeded rollouts and trainings (profiling runs left out), newest first."""
    if not job_ids:
        return []
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(_RECENT_SQL, [job_ids, PhaseState.SUCCEEDED, "profile", DRIFT_WINDOW])
            return [
                (jid, kind, s, f, json.loads(m) if isinstance(m, str) else m)
                for jid, kind, s, f, m in cur.fetchall()
            ]
    return list(
        PhaseRecord.objects.filter(
            job__in=job_ids,
            kind__in=("rollout", "train"),
            state=PhaseState.SUCCEEDED,
            started_at__isnull=False,
            finished_at__isnull=False,
        )
        .exclude(placement__strategy="profile")
        .annotate(
            recent_rank=Window(
                RowNumber(), partition_by=[F("job_id"), F("kind")], order_by=F("finished_at").desc()
            )
        )
        .filter(recent_rank__lte=DRIFT_WINDOW)
        .order_by("job_id", "kind", "-finished_at")
        .values_list("job_id", "kind", "started_at", "finished_at", "metrics")
    )


def jobs_drift(jobs: list[Job]) -> dict[int, list[Drift]]:
    """Return per job id the phase kinds that drift (one query for a page of jobs); sets
    `drift_list` on each job. The profiling run does not count (it ran at the maximum
    token length on purpose), nor does a job without estimates; a phase counts its own time,
    without the host's set-up or reload (`runners.own_seconds`, as the drift re-plan)."""
    recent: dict[tuple[int, str], list[float]] = {}
    with_times = [j for j in jobs if j.has_phase_times]
    for job_id, kind, started, finished, metrics in _recent_phases([j.pk for j in with_times]):
        got = recent.setdefault((job_id, kind), [])
        if len(got) < DRIFT_WINDOW and started is not None and finished is not None:
            got.append(own_seconds((finished - started).total_seconds(), metrics))
    out: dict[int, list[Drift]] = {}
    for job in jobs:
        drifts: list[Drift] = []
        if job.has_phase_times:
            t, scale = job.phase_times, time_scale_of(job.runner, job.time_scale)
            for kind, worst in (("rollout", t.t_roll_max_s), ("train", t.t_train_max_s)):
                d = recent.get((job.pk, kind), [])
                mean = sum(d) / len(d) * scale if len(d) >= DRIFT_WINDOW else 0.0
                # beyond the tolerance the controller's marking and the re-plan use
                # (dispatch overhead alone puts a just-profiled job's mean above its max)
                if mean > worst * (1.0 + settings.ROLLMUX_DRIFT_TOLERANCE):
                    drifts.append(Drift(kind, mean, worst, len(d)))
        out[job.pk] = drifts
        job.drift_list = drifts  # type: ignore[attr-defined]
    return out


def job_drift(*, job: Job) -> list[Drift]:
    cached = getattr(job, "drift_list", None)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    return jobs_drift([job])[job.pk]


HISTORY_RUNS = 3  # how many of the tenant's completed runs a suggestion looks at


@dataclass(frozen=True)
class DurationSuggestion:
    """Phase times the tenant's completed runs of one model and shape measured (profile s)."""

    runs: int
    model: str
    rollout_gpus: int
    train_gpus: int
    rollout: tuple[float, float]  # fastest and slowest rollout
    train: tuple[float, float]

    @property
    def text(self) -> str:
        runs = f"last {self.runs} runs" if self.runs > 1 else "the last run"
        roll, train = (
            "-".join(sentence_seconds(s, ".0f") for s in span)
            for span in (self.rollout, self.train)
        )
        return (
            f"{runs} of {self.model} on {self.rollout_gpus}+{self.train_gpus}: rollout "
            f"{roll} s, training {train} s (profile seconds)"
        )


def duration_suggestion(
    *, user: Any, tenant: str, model: str, rollout_gpus: int, train_gpus: int
) -> DurationSuggestion | None:
    """Return what the last HISTORY_RUNS completed jobs of a tenant the user may see, of the
    same model and GPU counts, measured per phase kind (None without such a run)."""
    if not model:
        return None
    jobs = list(
        visible_jobs(user=user)
        .filter(
            tenant__name=tenant,
            model=model,
            rollout_gpus=rollout_gpus,
            train_gpus=train_gpus,
            status=JobStatus.COMPLETED,
        )
        .order_by("-finished_at", "-pk")[:HISTORY_RUNS]
    )
    # each phase's own time, without the host's set-up or reload (a real runner's cold start
    # is seconds of workers created: the profile and the drift checks leave it out too)
    own: dict[int, dict[str, list[float]]] = {j.pk: {} for j in jobs}
    scale = {j.pk: time_scale_of(j.runner, j.time_scale) for j in jobs}
    succeeded = PhaseRecord.objects.filter(
        job__in=list(own),
        kind__in=("rollout", "train"),
        state=PhaseState.SUCCEEDED,
        started_at__isnull=False,
        finished_at__isnull=False,
    )
    if connection.vendor == "postgresql":
        # each job's shortest and longest own phase per kind, from the database (this runs
        # at every preview of the submit form, and a long run has thousands of phases: as
        # `runners.own_seconds`, the wall seconds as timedelta.total_seconds() rounds them)
        wall = epoch_s(F("finished_at") - F("started_at"))
        load = Coalesce(Cast(KT("metrics__load_s"), FloatField()), Value(0.0))
        own_s = Greatest(Value(0.0), wall - load, output_field=FloatField())
        for job_id, kind, lo, hi in (
            succeeded.values("job_id", "kind")
            .annotate(lo=Min(own_s), hi=Max(own_s))
            .values_list("job_id", "kind", "lo", "hi")
        ):
            own[job_id][kind] = [lo * scale[job_id], hi * scale[job_id]]
    else:
        for job_id, kind, started, finished, metrics in succeeded.values_list(
            "job_id", "kind", "started_at", "finished_at", "metrics"
        ):
            if started is not None and finished is not None:
                seconds = own_seconds((finished - started).total_seconds(), metrics)
                own[job_id].setdefault(kind, []).append(seconds * scale[job_id])
    measured = [m for m in own.values() if "rollout" in m and "train" in m]
    if not measured:
        return None
    return DurationSuggestion(
        runs=len(measured),
        model=model,
        rollout_gpus=rollout_gpus,
        train_gpus=train_gpus,
        rollout=(
            min(min(m["rollout"]) for m in measured),
            max(max(m["rollout"]) for m in measured),
        ),
        train=(min(min(m["train"]) for m in measured), max(max(m["train"]) for m in measured)),
    )


def job_archive(*, job: Job) -> ArchivedJob | None:
    """Return the job's archive record when retention moved its phases to the archive."""
    return ArchivedJob.objects.filter(job=job).first()


def job_phase_summary(*, job: Job) -> list[dict[str, Any]]:
    """Return per phase kind and stage: count by state, warm-start share and the measured
    durations of its succeeded phases (`stats`: count, mean, p95, max; wall-clock and
    profile s). The phases of the job's profiling run (placement strategy profile, at the
    maximum token length) are rows of their own (`profile` True, first), apart from its
    production run's."""
    rows: dict[tuple[bool, str], dict[str, Any]] = {}
    durations: dict[tuple[bool, str], list[float]] = {}
    for kind, state, warm, strategy, started, finished in PhaseRecord.objects.filter(
        job=job
    ).values_list(
        "kind", "state", "warm_start", "placement__strategy", "started_at", "finished_at"
    ):
        key = (strategy == Strategy.PROFILE, kind)
        row = rows.setdefault(
            key,
            {"kind": kind, "profile": key[0], "count": 0, "states": {}, "warm": 0, "cold": 0},
        )
        row["count"] += 1
        row["states"][state] = row["states"].get(state, 0) + 1
        if warm is True:
            row["warm"] += 1
        elif warm is False:
            row["cold"] += 1
        if state == PhaseState.SUCCEEDED and started is not None and finished is not None:
            durations.setdefault(key, []).append((finished - started).total_seconds())
    scale = time_scale_of(job.runner, job.time_scale)
    for key, row in rows.items():
        row["stats"] = duration_stats(durations.get(key, []), scale)
        row["states"] = sorted(row["states"].items())
    return [rows[k] for k in sorted(rows, key=lambda k: (not k[0], k[1]))]


CURVE_MAX_POINTS = 400  # above this many iterations the curve averages runs of them


def training_curve(*, job: Job, max_points: int = CURVE_MAX_POINTS) -> list[CurvePoint]:
    """Return the job's reward curve: reward_mean per iteration (and its std, and the
    attempt that ran it), across all its placements, in iteration order. A long job's
    iterations are averaged in runs of equal length by the database, so the page gets at
    most about `max_points` points whatever the job's length."""
    rows = IterationMetrics.objects.filter(job=job, reward_mean__isnull=False)
    span = rows.aggregate(lo=Min("iteration"), hi=Max("iteration"), n=Count("id"))
    if not span["n"]:
        return []
    if span["n"] <= max_points:
        return [
            CurvePoint(it, float(mean or 0.0), std, attempt, 1)
            for it, mean, std, attempt in rows.order_by("iteration").values_list(
                "iteration", "reward_mean", "reward_std", "placement__attempt"
            )
        ]
    step = math.ceil((span["hi"] - span["lo"] + 1) / max_points)
    buckets = (
        rows.annotate(bucket=(F("iteration") - span["lo"]) / step)
        .values("bucket")
        .annotate(
            it=Min("iteration"),
            mean=Avg("reward_mean"),
            std=Avg("reward_std"),
            attempt=Max("placement__attempt"),
            n=Count("id"),
        )
        .order_by("bucket")
    )
    return [CurvePoint(b["it"], b["mean"], b["std"], b["attempt"], b["n"]) for b in buckets]


def training_latest(*, job: Job) -> IterationMetrics | None:
    """Return the training metrics of the job's last iteration that reported any."""
    return (
        IterationMetrics.objects.filter(job=job)
        .select_related("placement")
        .order_by("-iteration")
        .first()
    )


def training_summary(*, job: Job) -> dict[str, Any] | None:
    """Return the job's training metrics in brief (None: it reported none): iterations
    recorded, the first and latest reward, the best one, and the latest iteration's row."""
    latest = training_latest(job=job)
    if latest is None:
        return None
    rows = IterationMetrics.objects.filter(job=job)
    agg = rows.aggregate(n=Count("id"), best=Max("reward_mean"))
    first = (
        rows.filter(reward_mean__isnull=False)
        .order_by("iteration")
        .values_list("iteration", "reward_mean")
        .first()
    )
    return {
        "iterations": agg["n"],
        "first_reward": None if first is None else {"iteration": first[0], "reward_mean": first[1]},
        "best_reward_mean": agg["best"],
        "latest": {
            "iteration": latest.iteration,
            "attempt": latest.placement.attempt,
            **{name: getattr(latest, name) for name in IterationMetrics.METRICS},
        },
    }


@dataclass
class RayNodeUse:
    """One inventory node a job's phases ran on under Ray: the Ray node id(s) serving it,
    the GPU ids its workers got there, and how many phases of each kind ran on it."""

    node: str
    ray_node_ids: list[str]
    gpu_ids: list[int]
    phases: dict[str, int]


@dataclass
class RayPlacement:
    """Where Ray ran a job (the phases API's ray_node_ids, gpu_ids and bytes_moved, summed
    up for the job page): per inventory node, and its weight syncs' bytes."""

    nodes: list[RayNodeUse]
    syncs: int = 0  # weight syncs with their bytes recorded
    sync_bytes_total: int = 0
    sync_bytes_last: int | None = None

    @property
    def sync_bytes_mean(self) -> float | None:
        return self.sync_bytes_total / self.syncs if self.syncs else None


def job_ray_placement(*, job: Job) -> RayPlacement | None:
    """Return where Ray ran the job's phases, or None when no phase recorded it (the
    inline dispatcher, or nothing ran yet)."""
    per_node: dict[str, tuple[set[str], set[int], dict[str, int]]] = {}
    out = RayPlacement(nodes=[])
    for kind, names, ray_ids, gpu_ids, moved in (
        PhaseRecord.objects.filter(job=job)
        .order_by("started_at", "id")
        .values_list("kind", "node_names", "ray_node_ids", "gpu_ids", "bytes_moved")
    ):
        if moved is not None:
            out.syncs += 1
            out.sync_bytes_total += moved
            out.sync_bytes_last = moved
        if not ray_ids and not gpu_ids:
            continue
        for n in names or []:
            rid, gpus = (ray_ids or {}).get(n), (gpu_ids or {}).get(n)
            if rid is None and gpus is None:
                continue
            rids, gids, kinds = per_node.setdefault(n, (set(), set(), {}))
            if rid:
                rids.add(rid)
            gids.update(int(g) for g in gpus or [])
            kinds[kind] = kinds.get(kind, 0) + 1
    if not per_node and not out.syncs:
        return None
    out.nodes = [
        RayNodeUse(node=n, ray_node_ids=sorted(r), gpu_ids=sorted(g), phases=k)
        for n, (r, g, k) in sorted(per_node.items())
    ]
    return out


def current_price(gpu_type: GpuType, *, at: datetime | None = None) -> Decimal:
    """Return the price per GPU-hour in effect at `at` (now by default); 0 if none is set."""
    at = at or timezone.now()
    price = (
        GpuPrice.objects.filter(gpu_type=gpu_type, effective_from__lte=at)
        .order_by("-effective_from")
        .values_list("price_per_gpu_hour", flat=True)
        .first()
    )
    return price if price is not None else Decimal("0")


def prices_now(*, gpu_type_ids: set[int], at: datetime | None = None) -> dict[int, Decimal]:
    """Return per GPU type id the price per GPU-hour in effect at `at` (one query; a type
    without a price is absent: current_price's 0)."""
    at = at or timezone.now()
    out: dict[int, Decimal] = {}
    rows = (
        GpuPrice.objects.filter(gpu_type_id__in=gpu_type_ids, effective_from__lte=at)
        .order_by("gpu_type_id", "-effective_from")
        .values_list("gpu_type_id", "price_per_gpu_hour")
    )
    for type_id, price in rows:
        out.setdefault(type_id, price)
    return out


@dataclass(frozen=True)
class PoolPrice:
    gpu_type: GpuType
    price_per_gpu_hour: Decimal


def pool_prices(pools: dict[str, PoolNow] | None = None) -> dict[str, PoolPrice | None]:
    """Return the GPU type and current price of the rollout and training pools (from
    `pools`, a `pools_now()` read the caller already has, or one query)."""
    pools = pools_now() if pools is None else pools
    return {
        str(kind): PoolPrice(p.gpu_type, p.price_per_gpu_hour) if (p := pools.get(kind)) else None
        for kind in (PoolKind.ROLLOUT, PoolKind.TRAIN)
    }


@dataclass(frozen=True)
class SoloCost:
    """Cost of one iteration with the job alone on dedicated nodes, at worst-case durations."""

    busy_usd: float  # rollout busy on the rollout pool + training busy on the training pool
    bubble_usd: float  # what dedicated nodes cost while they wait for the other phase
    rollout_price: float
    train_price: float

    @property
    def dedicated_usd(self) -> float:
        return self.busy_usd + self.bubble_usd


def solo_cost_per_iteration(
    *, rollout_gpus: int, train_gpus: int, t_roll_max_s: float, t_train_max_s: float
) -> SoloCost:
    """Return the per-iteration solo cost (trace-format cost definition, worst-case phases)."""
    prices = pool_prices()
    rp = float(prices["rollout"].price_per_gpu_hour) if prices["rollout"] else 0.0
    tp = float(prices["train"].price_per_gpu_hour) if prices["train"] else 0.0
    busy = (t_roll_max_s * rollout_gpus * rp + t_train_max_s * train_gpus * tp) / 3600.0
    # The dependency bubble: rollout nodes idle through training and training nodes idle
    # through rollout; a dedicated (solo-disaggregated) allocation pays for both.
    bubble = (t_train_max_s * rollout_gpus * rp + t_roll_max_s * train_gpus * tp) / 3600.0
    return SoloCost(busy_usd=busy, bubble_usd=bubble, rollout_price=rp, train_price=tp)


# The live jobs: they count against their tenant's GPU caps (a profiling job too).
ACTIVE_STATUSES = (JobStatus.PROFILING, JobStatus.QUEUED, JobStatus.PLACED, JobStatus.RUNNING)


class PoolLimits(NamedTuple):
    """What a submission is checked against, per pool kind."""

    gpu_type: str
    gpus_per_node: int
    host_mem_gb: float  # the largest node's host memory
    nodes: int  # capacity: nodes up or drained (what the planner counts; down ones not)
    nodes_down: int


@dataclass(frozen=True)
class PoolNow:
    """A pool kind as a submission sees it now: its GPU type, limits and price."""

    gpu_type: GpuType
    limits: PoolLimits
    price_per_gpu_hour: Decimal  # in force now (0 if none is set)


def _pools_sql() -> str:
    cluster, node = Cluster._meta.db_table, Node._meta.db_table
    gpu_type, price = GpuType._meta.db_table, GpuPrice._meta.db_table
    return f"""
        SELECT c.kind, t.id, t.name, t.gpus_per_node, t.host_mem_gb,
               (SELECT max(n.host_mem_gb) FROM {node} n WHERE n.cluster_id = c.id),
               (SELECT count(*) FROM {node} n WHERE n.cluster_id = c.id AND n.state IN (%s, %s)),
               (SELECT count(*) FROM {node} n WHERE n.cluster_id = c.id AND n.state = %s),
               (SELECT p.price_per_gpu_hour FROM {price} p
                 WHERE p.gpu_type_id = c.gpu_type_id AND p.effective_from <= %s
                 ORDER BY p.effective_from DESC LIMIT 1)
          FROM {cluster} c JOIN {gpu_type} t ON t.id = c.gpu_type_id
         ORDER BY c.kind, c.name
    """


def pools_now(*, at: datetime | None = None) -> dict[str, PoolNow]:
    """Return each pool kind's GPU type, limits and current price, in one query.

    The first pool of each kind (the model's ordering: by name) sets the shape, the largest
    of its nodes' host memory the memory limit (a pool without nodes: its GPU type's); the
    capacity counts the nodes up or drained of every pool of the kind, as the live planner
    does (workflow.snapshot.pool_node_counts), so a job refused here is one the planner
    would call INFEASIBLE; the price is the one in force at `at` (jobs.selectors.prices_now).
    A submission reads this once, for its field checks and its quota check alike.

    In SQL, not the ORM: it is on every submission's path, and building the equivalent
    queryset (a grouped join with filtered counts and a price subquery) cost ten times the
    query itself (tests/web/test_quota_usage.py checks it against the ORM selectors).
    """
    at = at or timezone.now()
    up, drained = CAPACITY_STATES
    with connection.cursor() as cur:
        cur.execute(_pools_sql(), [up, drained, NodeState.DOWN, at])
        rows = cur.fetchall()
    out: dict[str, PoolNow] = {}
    counts: dict[str, list[int]] = {}
    for kind, type_id, name, per_node, type_mem, max_mem, capacity, down, price in rows:
        n = counts.setdefault(kind, [0, 0])
        n[0] += capacity
        n[1] += down
        if kind not in out:
            gt = GpuType(id=type_id, name=name, gpus_per_node=per_node, host_mem_gb=type_mem)
            gt._state.adding, gt._state.db = False, connection.alias  # as the ORM loads it
            mem = float(max_mem if max_mem is not None else type_mem)
            limits = PoolLimits(name, per_node, mem, 0, 0)
            out[kind] = PoolNow(gt, limits, price if price is not None else Decimal("0"))
    for kind, pool in out.items():
        nodes, down = counts[kind]
        out[kind] = PoolNow(
            pool.gpu_type,
            pool.limits._replace(nodes=nodes, nodes_down=down),
            pool.price_per_gpu_hour,
        )
    return out


def pool_limits(pools: dict[str, PoolNow] | None = None) -> dict[str, PoolLimits]:
    """Return the limits of each pool kind (from `pools`, or one query: `pools_now`)."""
    pools = pools_now() if pools is None else pools
    return {kind: p.limits for kind, p in pools.items()}
