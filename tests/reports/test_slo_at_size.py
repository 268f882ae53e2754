"""The SLO report's queries at a fleet's size (issue 25, bench/scale.py): which jobs it
takes is decided per phase, and its per-job sums are the rows' own."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from rollmux_web.jobs.models import JobStatus
from rollmux_web.reports.selectors import slo_report
from rollmux_web.reports.selectors._sql import (
    _converts,
    cursor_iter,
    cursor_rows,
    json_key_txt,
    us_fields,
)
from rollmux_web.reports.selectors._time import us
from rollmux_web.reports.selectors.slo import iteration_sums
from rollmux_web.workflow.models import PhaseRecord
from tests.reports.builders import make_group, make_job, phase, place

DAY = date(2026, 3, 10)
T0 = datetime(2026, 3, 10, tzinfo=UTC)
M = timedelta(minutes=1)


def test_a_job_is_in_the_report_only_when_one_phase_ran_in_the_range(world: Any) -> None:
    # "ran": started before the range's end and finished in it or later, the same phase.
    # A job whose phases ran only before and only after the day has none that did (a join
    # per condition would have taken it: one phase started in time, another ended after).
    around = make_job(world, name="around", status=JobStatus.COMPLETED)
    g = make_group(created=T0 - 2 * 24 * 60 * M)
    pl = place(g, around, rollout=[], train=[], joined=T0 - 2 * 24 * 60 * M)
    before = T0 - 24 * 60 * M
    phase(pl, iteration=0, kind="rollout", nodes=[], start=before, minutes=10)
    phase(pl, iteration=0, kind="train", nodes=[], start=before + 10 * M, minutes=10)
    after = T0 + 25 * 60 * M
    phase(pl, iteration=1, kind="rollout", nodes=[], start=after, minutes=10)
    phase(pl, iteration=1, kind="train", nodes=[], start=after + 10 * M, minutes=10)
    inside = make_job(world, name="inside", status=JobStatus.COMPLETED)
    g2 = make_group(created=T0)
    pl2 = place(g2, inside, rollout=[], train=[], joined=T0)
    phase(pl2, iteration=0, kind="rollout", nodes=[], start=T0 + 60 * M, minutes=10)
    phase(pl2, iteration=0, kind="train", nodes=[], start=T0 + 75 * M, minutes=5)

    report = slo_report(user=world.alice, start=DAY, end=DAY)

    assert [j.job_name for j in report.jobs] == ["inside"]

    # once their phases are rolled up and summarised, the jobs are found on the days they
    # ran (JobSloSummary), not on their phases: the same jobs, on the day and around it
    from rollmux_web.jobs.models import Job
    from rollmux_web.workflow.models import JobSloSummary
    from rollmux_web.workflow.services import rollup_days

    Job.objects.filter(pk__in=[around.pk, inside.pk]).update(finished_at=after + 30 * M)
    rows = {
        d: [j.job_name for j in slo_report(user=world.alice, start=d, end=d).jobs]
        for d in (DAY - timedelta(days=1), DAY, DAY + timedelta(days=1))
    }
    rollup_days.advance(T0 + 10 * 24 * 60 * M, max_days=100)
    assert rollup_days.summarise_jobs() == 0  # (advance summarised them)
    assert JobSloSummary.objects.filter(job_id__in=[around.pk, inside.pk]).count() == 2
    assert rows[DAY] == ["inside"]
    for d, names in rows.items():
        got = [j.job_name for j in slo_report(user=world.alice, start=d, end=d).jobs]
        assert sorted(got) == sorted(names), d


def test_iteration_sums_count_complete_iterations_and_leave_out_profiling(world: Any) -> None:
    job = make_job(world, name="sums", status=JobStatus.COMPLETED)
    profile_group = make_group(created=T0)
    profiled = place(
        profile_group, job, rollout=[], train=[], joined=T0, left=T0 + 30 * M, strategy="profile"
    )
    phase(profiled, iteration=0, kind="rollout", nodes=[], start=T0, minutes=7)
    phase(profiled, iteration=0, kind="train", nodes=[], start=T0 + 7 * M, minutes=7)
    # the run proper is attempt 2 (a job's attempts are numbered per placement)
    type(profiled).objects.filter(pk=profiled.pk).update(attempt=2)
    g = make_group(created=T0 + 60 * M)
    pl = place(g, job, rollout=[], train=[], joined=T0 + 60 * M)
    t = T0 + 60 * M
    phase(pl, iteration=0, kind="rollout", nodes=[], start=t, minutes=10)
    phase(pl, iteration=0, kind="train", nodes=[], start=t + 12 * M, minutes=5)
    phase(pl, iteration=0, kind="sync", nodes=[], start=t + 17 * M, minutes=1)
    phase(pl, iteration=1, kind="rollout", nodes=[], start=t + 20 * M, minutes=8)
    phase(pl, iteration=1, kind="train", nodes=[], start=t + 30 * M, minutes=4)
    # iteration 2 has no training yet: not a completed iteration
    phase(pl, iteration=2, kind="rollout", nodes=[], start=t + 40 * M, minutes=9)

    sums = iteration_sums([job.pk])[job.pk]

    assert sums.iterations == 2
    assert sums.phase_s == (10 + 5 + 1 + 8 + 4) * 60
    assert sums.first_rollout_start == t
    assert sums.last_train_end == t + 34 * M
    assert sums.with_sync
    assert iteration_sums([]) == {}


def test_the_overviews_last_day_for_all_tenants_is_the_cost_engines_total(world: Any) -> None:
    # read from the allocations alone (the day's phases are ~100,000 at a fleet's size):
    # the same cents as the engine's lines over every tenant, busy and idle
    from datetime import datetime as dt

    from rollmux_web.inventory.selectors import price_book
    from rollmux_web.reports.selectors import cluster_overview
    from rollmux_web.reports.selectors.cost_engine import cost_lines
    from rollmux_web.reports.selectors.cost_figures import sum_lines
    from tests.reports.builders import allocate

    now = dt.now(tz=UTC)
    g = make_group(created=now - 30 * 60 * M)
    allocate(g, "h20-0", now - 30 * 60 * M, now - 3 * 60 * M)  # partly before the day
    allocate(g, "h20-1", now - 5 * 60 * M, None)
    allocate(g, "h800-0", now - 30 * 60 * M, None)
    mine = make_job(world, name="vision-job")
    theirs = make_job(world, name="speech-job", tenant="speech", status=JobStatus.COMPLETED)
    a = place(g, mine, rollout=["h20-0", "h20-1"], train=["h800-0"], joined=now - 30 * 60 * M)
    b = place(
        g,
        theirs,
        rollout=["h20-0"],
        train=["h800-0"],
        joined=now - 30 * 60 * M,
        left=now - 4 * 60 * M,
    )
    t = now - 20 * 60 * M
    phase(a, iteration=0, kind="rollout", nodes=["h20-0"], start=t, minutes=37)
    phase(b, iteration=0, kind="rollout", nodes=["h20-0"], start=t + 40 * M, minutes=11)
    phase(a, iteration=0, kind="train", nodes=["h800-0"], start=t + 41 * M, minutes=13)
    phase(a, iteration=1, kind="rollout", nodes=["h20-1"], start=now - 60 * M, minutes=None)

    lines = cost_lines(
        tenant_ids=None, t0=now - 24 * 60 * M, t1=now, now=now, prices=price_book()
    ).lines
    engine = sum_lines(lines, key="total", label="Total").cost

    assert engine > 0
    assert cluster_overview(user=world.admin, now=now).cost_last_day == engine


def test_the_overview_lists_the_first_live_groups_and_counts_them_all(
    world: Any, client_as: Any, django_assert_max_num_queries: Any
) -> None:
    from rollmux_web.inventory.models import Node
    from rollmux_web.reports.selectors import cluster_overview
    from rollmux_web.reports.selectors.overview import OVERVIEW_GROUPS
    from tests.reports.builders import allocate

    # one live group per H20 node, the rollout node alone allocated
    extra = OVERVIEW_GROUPS + 2 - Node.objects.filter(name__startswith="h20-").count()
    Node.objects.bulk_create(
        Node(
            name=f"h20-{100 + i}", cluster=world.rollout_pool, gpu_type=world.h20, host_mem_gb=2048
        )
        for i in range(extra)
    )
    now = datetime.now(tz=UTC)
    names = list(Node.objects.filter(name__startswith="h20-").values_list("name", flat=True))
    for i, name in enumerate(names):
        g = make_group(created=now - 60 * M)
        allocate(g, name, now - 60 * M, None)
        job = make_job(world, name=f"live-{i}")
        place(g, job, rollout=[name], train=[], joined=now - 60 * M)
        phase(
            type(job).objects.get(pk=job.pk).placements.get(),
            iteration=0,
            kind="rollout",
            nodes=[name],
            start=now - 30 * M,
            minutes=10,
        )

    with django_assert_max_num_queries(40):
        o = cluster_overview(user=world.admin)
    assert o.groups_total == len(names) and len(o.groups) == OVERVIEW_GROUPS
    # $/h now is every live group's: 8 H20 GPUs at $1.85 each
    assert o.cost_per_hour_now == 8 * Decimal("1.85") * len(names)
    assert all(g.t_cycle for g in o.groups)  # the shown groups' meta-iterations
    html = client_as("admin").get("/").content.decode()
    assert f"The first {OVERVIEW_GROUPS} of {len(names)} live groups" in html


def test_cursor_rows_are_the_querysets_rows_and_converted_columns_go_through_django(
    world: Any,
) -> None:
    # the SLO report reads a fleet's month of job rows through the cursor (cursor_rows):
    # the same tuples as the queryset's where no field converts its column, and the
    # queryset's own rows where one does (a JSON column)
    job = make_job(world, name="rows", status=JobStatus.COMPLETED)
    pl = place(make_group(created=T0), job, rollout=[], train=[], joined=T0)
    phase(pl, iteration=0, kind="rollout", nodes=["r0", "r1"], start=T0, minutes=10)
    phase(pl, iteration=0, kind="train", nodes=["t0"], start=T0 + 10 * M, minutes=None)
    as_us, exact = us_fields(s_us="started_at", f_us="finished_at")
    assert exact  # (the tests run on PostgreSQL)
    plain = (
        PhaseRecord.objects.annotate(**as_us)
        .order_by("id")
        .values_list("id", "kind", "iteration", "started_at", *as_us)
    )
    assert not _converts(plain.query.get_compiler(plain.db))  # the cursor's rows are used
    rows = cursor_rows(plain)
    assert rows == list(plain)
    assert rows[0][4] == us(T0) and rows[1][5] is None
    with_json = PhaseRecord.objects.order_by("id").values_list("id", "node_names")
    assert _converts(with_json.query.get_compiler(with_json.db))
    assert cursor_rows(with_json) == list(with_json)
    assert cursor_rows(with_json)[0][1] == ["r0", "r1"]
    # streamed (the cost engine's phase spans): the same rows, in chunks, either way
    assert list(cursor_iter(plain, chunk_size=1)) == rows
    assert list(cursor_iter(with_json, chunk_size=1)) == list(with_json)


def test_a_json_keys_text_loads_to_the_fields_value(world: Any) -> None:
    # the cost engine reads two metrics as JSON text (json_key_txt), so its rows need no
    # converter: json.loads of the text is the JSONField's value, None when the key is absent
    import json

    job = make_job(world, name="metrics", status=JobStatus.COMPLETED)
    pl = place(make_group(created=T0), job, rollout=[], train=[], joined=T0)
    shapes = [
        {"tail_released": {"r0": 12.5, "r1": 30}, "rollout_speed_factor": 1.25},
        {"rollout_speed_factor": 0},
        {"tail_released": None},
        {},
    ]
    for i, metrics in enumerate(shapes):
        p = phase(pl, iteration=i, kind="rollout", nodes=["r0"], start=T0, minutes=1)
        PhaseRecord.objects.filter(pk=p.pk).update(metrics=metrics)
    qs = (
        PhaseRecord.objects.filter(job=job)
        .annotate(r=json_key_txt("tail_released"), f=json_key_txt("rollout_speed_factor"))
        .order_by("iteration")
        .values_list("r", "f", "metrics")
    )
    assert not _converts(qs.values_list("r", "f").query.get_compiler(qs.db))
    got = [
        tuple(None if t is None else json.loads(t) for t in (r, f))
        + ((m or {}).get("tail_released"), (m or {}).get("rollout_speed_factor"))
        for r, f, m in qs
    ]
    assert [g[:2] for g in got] == [g[2:] for g in got]
    assert got[0][0] == {"r0": 12.5, "r1": 30} and got[1][1] == 0 and got[3][:2] == (None, None)
