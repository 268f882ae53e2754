"""Retention (issue 25): the reports give the same figures, to the cent, after old phase
records went to the archive and their daily rollups took their place.

The world is built to hit every cut the cost engine makes: a co-execution group whose
members come and go (idle time shared by the members present at each moment) and where a
job that is not archived (it ended after the cutoff) shares nodes with archived ones, a
price change in the middle of a day, phases across midnight, a long-tail hand-over, a
co-located rollout at a rollout speed factor, a profiling run, a failed phase. Durations
have random microseconds. Every report is computed before archiving and again after.
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow.parquet as pq
import pytest

from rollmux_web.inventory.models import GpuPrice, GpuType
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.reports.exports import cost_report_json
from rollmux_web.reports.selectors import cost_report, job_outcome, slo_report, slo_report_json
from rollmux_web.workflow.models import (
    ArchivedJob,
    IterationMetrics,
    PhaseRecord,
    PhaseRollup,
    PhaseState,
    Placement,
)
from rollmux_web.workflow.services import retention
from rollmux_web.workflow.usage import busy_gpu_seconds
from tests.reports.builders import allocate, make_group, make_job, place, profiled_job

T = datetime(2026, 1, 5, tzinfo=UTC)
NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)  # cutoff (90 days): 2026-01-31 12:00
H = timedelta(hours=1)
D = timedelta(days=1)
US = timedelta(microseconds=1)


def _phases(
    rng: random.Random,
    members: list[tuple[Placement, datetime, datetime]],
    start: datetime,
    end: datetime,
    *,
    roll: list[str],
    train: list[str],
    gap: tuple[float, float] = (0.0, 0.4),
    iters: dict[int, int] | None = None,
) -> list[PhaseRecord]:
    """Iterations one after another on the group's nodes, each by a member present then."""
    rows: list[PhaseRecord] = []
    iters = {} if iters is None else iters
    t, turn = start, 0
    while True:
        d_roll = timedelta(minutes=rng.uniform(8, 50), microseconds=rng.randrange(1_000_000))
        d_train = timedelta(minutes=rng.uniform(5, 30), microseconds=rng.randrange(1_000_000))
        if t + d_roll + d_train > end:
            return rows
        present = [pl for pl, a, b in members if a <= t and t + d_roll + d_train <= b]
        if present:
            pl = present[turn % len(present)]
            turn += 1
            it = iters.get(pl.pk, 0)
            iters[pl.pk] = it + 1
            for kind, nodes, a, b in (
                ("rollout", roll, t, t + d_roll),
                ("train", train, t + d_roll, t + d_roll + d_train),
            ):
                rows.append(
                    PhaseRecord(
                        job=pl.job,
                        group=pl.group,
                        placement=pl,
                        iteration=it,
                        kind=kind,
                        node_names=nodes,
                        state=PhaseState.SUCCEEDED,
                        queued_at=a,
                        started_at=a,
                        finished_at=b,
                    )
                )
            t += d_roll + d_train
        t += timedelta(hours=rng.uniform(*gap), microseconds=rng.randrange(1_000_000))


def _finish(job: Job, at: datetime, status: str = JobStatus.COMPLETED) -> None:
    Job.objects.filter(pk=job.pk).update(status=status, finished_at=at)


def build_world(world: Any) -> dict[str, Any]:
    rng = random.Random(25)
    h20 = GpuType.objects.get(name="H20")
    # a price change in the middle of a day with phases running across it
    GpuPrice.objects.create(
        gpu_type=h20,
        price_per_gpu_hour=Decimal("2.1037"),
        effective_from=T + D + timedelta(hours=7, minutes=13, seconds=17, microseconds=123456),
    )
    # group A: members come and go; a3 stays past the cutoff (its phases are not archived)
    a1 = make_job(world, name="a1", tenant="vision")
    a2 = make_job(world, name="a2", tenant="speech")
    a3 = make_job(world, name="a3", tenant="vision")
    ga = make_group(created=T + 20 * H, released=datetime(2026, 2, 10, 6, tzinfo=UTC))
    a_end = datetime(2026, 2, 10, 6, tzinfo=UTC)
    for node in ("h20-0", "h20-1", "h800-0"):
        allocate(ga, node, T + 20 * H, a_end)
    spans = {
        a1: (T + 20 * H, T + D + 18 * H + 417 * US),
        a2: (T + 22 * H + timedelta(seconds=30.5), T + 2 * D + 6 * H),
        a3: (T + D + 2 * H + 3 * US, a_end),
    }
    members = []
    for job, (a, b) in spans.items():
        pl = place(ga, job, rollout=["h20-0", "h20-1"], train=["h800-0"], joined=a, left=b)
        members.append((pl, a, b))
        _finish(job, b)
    counters: dict[int, int] = {}
    rows = _phases(
        rng, members, T + 20 * H, T + 4 * D, roll=["h20-0", "h20-1"], train=["h800-0"],
        iters=counters,
    )  # fmt: skip
    rows += _phases(
        rng,
        members,
        T + 4 * D,
        a_end,
        roll=["h20-0", "h20-1"],
        train=["h800-0"],
        gap=(10, 30),
        iters=counters,
    )
    # a long-tail hand-over: a1's first rollout released h20-1 early
    first = next(r for r in rows if r.job_id == a1.pk and r.kind == "rollout")
    first.metrics = {"tail_released": {"h20-1": 311.250001}}
    # a failed phase (a2's last training)
    last = [r for r in rows if r.job_id == a2.pk and r.kind == "train"][-1]
    last.state = PhaseState.FAILED
    PhaseRecord.objects.bulk_create(rows)
    # group B: a co-located job (a rollout on the training type takes 1.25 x its time)
    b1 = make_job(world, name="b1", tenant="speech")
    gb = make_group(created=T + 2 * D + 3 * H, released=T + 3 * D)
    allocate(gb, "h800-1", T + 2 * D + 3 * H, T + 3 * D)
    plb = place(
        gb,
        b1,
        rollout=[],
        train=["h800-1"],
        joined=T + 2 * D + 3 * H,
        left=T + 3 * D,
        strategy="colocated",
    )
    b_rows = _phases(
        rng, [(plb, T + 2 * D + 3 * H, T + 3 * D)], T + 2 * D + 3 * H, T + 3 * D,
        roll=["h800-1"], train=["h800-1"],
    )  # fmt: skip
    for r in b_rows:
        if r.kind == "rollout":
            r.metrics = {"rollout_speed_factor": 1.25}
    PhaseRecord.objects.bulk_create(b_rows)
    _finish(b1, T + 3 * D)
    # a profiled job: its profiling run and its production run
    p1, _prof, _prod = profiled_job(
        world,
        t0=T + 3 * D + 5 * H + 7 * US,
        name="p1",
        tenant="speech",
        roll="h20-2",
        train="h800-2",
    )
    Placement.objects.filter(job=p1, ended_at__isnull=True).update(ended_at=T + 3 * D + 7 * H)
    _finish(p1, T + 3 * D + 7 * H)
    # training metrics of a1 (archived with its phases)
    IterationMetrics.objects.bulk_create(
        IterationMetrics(
            job=a1, placement=members[0][0], iteration=i, reward_mean=0.1 * i, recorded_at=T + i * H
        )
        for i in range(3)
    )
    return {"a1": a1, "a2": a2, "a3": a3, "b1": b1, "p1": p1}


RANGES = [
    (date(2026, 1, 1), date(2026, 2, 28)),  # across the boundary
    (date(2026, 1, 1), date(2026, 1, 31)),
    (date(2026, 2, 1), date(2026, 2, 28)),
    (date(2026, 1, 6), date(2026, 1, 6)),  # the price change's day
    (date(2026, 1, 7), date(2026, 1, 8)),
]


def _snapshot(world: Any, jobs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for start, end in RANGES:
        for who in ("finance", "alice"):
            report = cost_report(user=world.user(who), start=start, end=end, now=NOW)
            out[("cost", who, start, end)] = cost_report_json(report)
            out[("exact", who, start, end)] = [
                (ln.job_id, ln.gpu_type, ln.stage, ln.exact.busy_cost, ln.exact.idle_cost)
                for ln in report.lines
            ]
        slo = slo_report(user=world.finance, start=start, end=end, now=NOW)
        out[("slo", start, end)] = slo_report_json(slo)
    for name, job in jobs.items():
        o = job_outcome(user=world.finance, job_id=job.pk, now=NOW)
        slo = None if o.slo is None else (o.slo.mean_iteration_s, o.slo.solo_iteration_s)
        out[("outcome", name)] = (o.start, o.end, o.busy_cost, o.idle_cost, o.gpu_hours, slo)
    tenants = [world.vision.pk, world.speech.pk]
    for start, end in ((T - 4 * D, T + 27 * D), (T - 4 * D, datetime(2026, 3, 1, tzinfo=UTC))):
        out[("usage", start)] = busy_gpu_seconds(tenant_ids=tenants, start=start, end=end)
    return out


def _close(a: Any, b: Any, path: str = "") -> None:
    """Equal, except exact Decimals (within 1e-18 $: a different order of additions) and
    floats (1e-9 relative: seconds summed as integers vs. as floats)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, Decimal) and a.as_tuple().exponent < -6:
        assert abs(a - b) < Decimal("1e-18"), (path, a, b)
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-9), path
    else:
        assert a == b, (path, a, b)


@pytest.mark.django_db
def test_reports_across_the_retention_boundary_equal_the_reports_before_archiving(
    world: Any, settings: Any, tmp_path: Any
) -> None:
    settings.ROLLMUX_ARCHIVE_URI = str(tmp_path / "archive")
    jobs = build_world(world)
    before = _snapshot(world, jobs)
    raw = PhaseRecord.objects.count()
    archived_ids = {jobs[n].pk for n in ("a1", "a2", "b1", "p1")}
    archived_phases = PhaseRecord.objects.filter(job_id__in=archived_ids).count()

    settings.ROLLMUX_ARCHIVE_BATCH_PHASES = 20  # several batches
    batches = retention.eligible_batches(NOW, max_batches=100)
    assert len(batches) > 1 and {j for b in batches for j in b} == archived_ids
    for ids in batches:
        retention.archive_jobs(ids, now=NOW)

    # the archived jobs' rows are gone, a3's (ended after the cutoff) are still there
    assert not PhaseRecord.objects.filter(job_id__in=archived_ids).exists()
    assert PhaseRecord.objects.count() == raw - archived_phases > 0
    assert set(ArchivedJob.objects.values_list("job_id", flat=True)) == archived_ids
    assert PhaseRollup.objects.exists() and not IterationMetrics.objects.exists()
    # ... and in the archive, partitioned by month, every row once
    files = sorted((tmp_path / "archive" / "phase_records").rglob("*.parquet"))
    assert files and all(f.parent.name.startswith("month=2026-") for f in files)
    assert {f.parent.parent.name for f in files} == {
        f"tenant={world.vision.pk}",
        f"tenant={world.speech.pk}",
    }
    ids = [i for f in files for i in pq.read_table(f).column("id").to_pylist()]
    assert len(ids) == len(set(ids)) == archived_phases
    metrics = list((tmp_path / "archive" / "iteration_metrics").rglob("*.parquet"))
    assert sum(pq.read_table(f).num_rows for f in metrics) == 3

    after = _snapshot(world, jobs)
    assert after.keys() == before.keys()
    for key in before:
        _close(before[key], after[key], str(key))
    # the figures compared are not empty: the range across the boundary bills every job
    lines = before[("cost", "finance", date(2026, 1, 1), date(2026, 2, 28))]["lines"]
    assert {ln["job"] for ln in lines} >= {"a1", "a2", "a3", "b1", "p1"}


@pytest.mark.django_db
def test_a_batch_that_fails_to_write_deletes_nothing(
    world: Any, settings: Any, tmp_path: Any
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    settings.ROLLMUX_ARCHIVE_URI = str(blocker / "archive")
    jobs = build_world(world)
    raw = PhaseRecord.objects.count()
    with pytest.raises(OSError):
        retention.archive_jobs([jobs["a1"].pk], now=NOW)
    assert PhaseRecord.objects.count() == raw
    assert not ArchivedJob.objects.exists() and not PhaseRollup.objects.exists()
    assert IterationMetrics.objects.count() == 3


@pytest.mark.django_db
def test_a_batch_run_twice_archives_once(world: Any, settings: Any, tmp_path: Any) -> None:
    settings.ROLLMUX_ARCHIVE_URI = str(tmp_path / "archive")
    jobs = build_world(world)
    first = retention.archive_jobs([jobs["a1"].pk, jobs["a3"].pk], now=NOW)
    assert first.jobs == [jobs["a1"].pk]  # a3 ended after the cutoff: not archived
    rollups = PhaseRollup.objects.count()
    files = sorted((tmp_path / "archive").rglob("*"))
    assert {f.suffix for f in files if f.is_file()} == {".parquet"}  # no temporary file left
    again = retention.archive_jobs([jobs["a1"].pk], now=NOW)
    assert again.jobs == [] and PhaseRollup.objects.count() == rollups
    assert sorted((tmp_path / "archive").rglob("*")) == files


@pytest.mark.django_db
def test_rollups_and_audit_entries_go_after_their_own_retention(
    world: Any, settings: Any, tmp_path: Any
) -> None:
    from rollmux_web.audit.models import AuditEntry

    settings.ROLLMUX_ARCHIVE_URI = str(tmp_path / "archive")
    jobs = build_world(world)
    retention.archive_jobs([jobs["a1"].pk], now=NOW)
    n = PhaseRollup.objects.count()
    assert retention.purge_rollups(NOW) == 0  # 24 months: kept
    assert retention.purge_rollups(NOW + 800 * D) == n
    AuditEntry.objects.create(action="test.old", object_type="t", object_id="1")
    AuditEntry.objects.update(at=NOW - 1000 * D)
    assert retention.purge_audit(NOW) == 0  # 0: the audit log is kept for good
    settings.ROLLMUX_AUDIT_RETENTION_DAYS = 800
    old = AuditEntry.objects.count()
    assert old and retention.purge_audit(NOW) == old
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_the_beat_sweep_and_the_command_archive_what_is_due(
    world: Any, settings: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    from django.core.management import call_command
    from django.utils import timezone

    from rollmux_web.celery import app
    from rollmux_web.workflow import tasks

    settings.ROLLMUX_ARCHIVE_URI = str(tmp_path / "archive")
    # the Celery app read its settings once: eager on the app itself (restored after)
    monkeypatch.setitem(app.conf, "task_always_eager", True)
    monkeypatch.setitem(app.conf, "task_eager_propagates", True)
    settings.ROLLMUX_ARCHIVE_BATCH_PHASES = 20
    jobs = build_world(world)
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    out = tasks.retention_sweep()
    assert out["batches"] >= 2  # queued (eagerly run) a batch at a time
    done = set(ArchivedJob.objects.values_list("job_id", flat=True))
    assert done and done <= {jobs[n].pk for n in ("a1", "a2", "b1", "p1")}
    call_command("archive_phases")  # the rest, in the foreground
    assert set(ArchivedJob.objects.values_list("job_id", flat=True)) == {
        jobs[n].pk for n in ("a1", "a2", "b1", "p1")
    }
    assert PhaseRecord.objects.filter(job=jobs["a3"]).exists()
