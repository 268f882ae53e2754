"""One page of the SLO report's jobs, ordered, counted and paged in SQL (issue 25: < 500 ms).

`slo.slo_report` builds a row per job of the range in Python (a month at a fleet's size is
~14,800 jobs) to count the attainment, list the violations and order the page; the page
shows 200 jobs and 200 violations. Here PostgreSQL computes the slowdowns and outcomes of
the jobs whose inputs are kept (`JobSloSummary`, `ArchivedJob`: nearly all of a closed
month) with the same float8 operations as `JobSlo` (so the same values, bit for bit), takes
the other jobs' (live or recent, summed from their phases: `iteration_sums`) as Python
computed them, then counts per tenant and SLO class, orders every job as the report does
and keeps the two pages' ids. Python builds `JobSlo` rows for those ids only, through the
same `slo.job_slo` as the whole report: every figure shown is the whole report's
(tests/reports/test_slo_paged.py compares every page, the counts and the attainment).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection

from rollmux_web.accounts.access import visible_tenant_ids
from rollmux_web.accounts.models import Tenant
from rollmux_web.audit.models import AuditEntry
from rollmux_web.epoch_sql import MICROS
from rollmux_web.id_sql import id_array, in_ids
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.jobs.runners import EMULATING_RUNNERS, time_scale_of
from rollmux_web.quotas.models import SloClass
from rollmux_web.reports.selectors._time import day_range
from rollmux_web.reports.selectors.slo import (
    JobSlo,
    SloAttainment,
    admitted_slos,
    ended_ids,
    job_slo_rows,
    kept_ids,
    overall_of,
    slo_report,
    unkept_ids,
)
from rollmux_web.workflow.models import ArchivedJob, JobSloSummary

ENDED = [JobStatus.CANCELLED.value, JobStatus.FAILED.value]  # no outcome: not applicable
COMPLETED = JobStatus.COMPLETED.value


@dataclass
class SloReportPage:
    """The SLO report's figures with one page of its jobs and one of its violations (in
    the report's order: tenant, SLO class, slowdown vs solo descending, newest first)."""

    start: date
    end: date
    attainment: list[SloAttainment]
    jobs: list[JobSlo]  # the page's
    violations: list[JobSlo]  # the violations' page's
    jobs_count: int
    violations_count: int

    @property
    def overall(self) -> SloAttainment:
        return overall_of(self.attainment)


def _span(table: str) -> str:
    return f"{MICROS % {'expressions': f'{table}.span_end'}} - " + (
        MICROS % {"expressions": f"{table}.span_start"}
    )


# 1. the kept jobs' inputs (an archive's over a summary's, as `_job_rows`), their SLO at
#    admission (today's class value unless Python found it changed since: `adm`) and their
#    profile at their speed (`time_scale_of`);
# 2. their slowdowns and outcomes, as `JobSlo.__post_init__` computes them (float8 is
#    Python's float: the same divisions in the same order), the rows the report leaves out
#    dropped (`job_slo`: not ended and nothing measured or no profile), with the other
#    jobs' rows as Python computed them (`live`);
# 3. every row's place in the report's order and in the violations' (COLLATE "C": Python's
#    order of strings, by code point), and the counts per tenant and SLO class.
_SQL = """
WITH adm AS (
    SELECT * FROM unnest(%(adm_ids)s::bigint[], %(adm_slo)s::float8[]) AS a(job_id, slo)
), found AS (
    SELECT job_id FROM {summaries} WHERE {inside}
    UNION SELECT job_id FROM {archives} WHERE {inside}
    UNION SELECT id FROM {jobs}
          WHERE status = ANY(%(ended)s::text[]) AND finished_at >= %(t0)s AND finished_at < %(t1)s
    UNION SELECT unnest(%(partial)s::bigint[])
), kept AS (
    SELECT j.id, t.name AS tenant, c.name AS cls, j.status,
           COALESCE(adm.slo, c.slowdown) AS slo,
           CASE WHEN a.job_id IS NOT NULL THEN a.iterations_measured
                ELSE s.iterations_measured END AS n,
           CASE WHEN a.job_id IS NOT NULL THEN a.solo_us ELSE s.solo_us END AS solo_us,
           CASE WHEN a.job_id IS NOT NULL THEN {span_a} ELSE {span_s} END AS span_us,
           j.t_roll_max_s IS NOT NULL AND j.t_train_max_s IS NOT NULL AS profiled,
           (j.t_roll_max_s + j.t_train_max_s) / CASE
               WHEN j.time_scale <> 0 THEN j.time_scale
               WHEN j.runner = ANY(%(emulating)s::text[]) THEN %(default_scale)s::float8
               ELSE 1.0::float8 END AS profile_s
    FROM found f
    JOIN {jobs} j ON j.id = f.job_id
    JOIN {tenants} t ON t.id = j.tenant_id
    JOIN {classes} c ON c.id = j.slo_class_id
    LEFT JOIN {summaries} s ON s.job_id = j.id
    LEFT JOIN {archives} a ON a.job_id = j.id
    LEFT JOIN adm ON adm.job_id = j.id
    WHERE (s.job_id IS NOT NULL OR a.job_id IS NOT NULL)
      AND (%(every_tenant)s OR j.tenant_id = ANY(%(tenants)s::bigint[]))
      -- (one summarised since Python read it without: its row is Python's, once)
      AND NOT j.id = ANY(%(unkept)s::bigint[])
), measured AS (  -- (none for a job ended before a completed iteration: 0.0)
    SELECT id, tenant, cls, status, slo,
           CASE WHEN n > 0 THEN span_us::float8 / 1000000::float8 / n::float8
                ELSE 0.0::float8 END AS mean_s,
           CASE WHEN n > 0 THEN solo_us::float8 / 1000000::float8 / n::float8
                ELSE 0.0::float8 END AS solo_s,
           CASE WHEN n > 0 AND profiled THEN profile_s ELSE 0.0::float8 END AS profile_s
    FROM kept
    WHERE status = ANY(%(ended)s::text[]) OR (n > 0 AND profiled)
), slowdowns AS (
    SELECT id, tenant, cls, status, slo,
           CASE WHEN solo_s <> 0 THEN mean_s / solo_s ELSE 0.0::float8 END AS vs_solo,
           CASE WHEN profile_s <> 0 THEN mean_s / profile_s ELSE 0.0::float8 END AS vs_profile
    FROM measured
), report_rows AS MATERIALIZED (
    SELECT id, tenant, cls, status, vs_solo,
           vs_solo <= slo + %(eps)s::float8 AS met,
           vs_profile <= slo + %(eps)s::float8 AS met_vs_profile
    FROM slowdowns
    UNION ALL
    SELECT * FROM unnest(
        %(live_ids)s::bigint[], %(live_tenant)s::text[], %(live_cls)s::text[],
        %(live_status)s::text[], %(live_vs_solo)s::float8[], %(live_met)s::boolean[],
        %(live_met_vs_profile)s::boolean[]
    )
), placed AS (  -- (a violation's place: the violations up to it, in the same order)
    SELECT id, row_number() OVER w AS pos,
           CASE WHEN violation THEN SUM(violation::int) OVER w END AS vpos
    FROM (
        SELECT *, NOT met AND NOT status = ANY(%(ended)s::text[]) AS violation
        FROM report_rows
    ) r
    WINDOW w AS (
        ORDER BY tenant COLLATE "C", cls COLLATE "C", vs_solo DESC, id DESC
        ROWS UNBOUNDED PRECEDING
    )
)
SELECT id, pos, vpos, NULL, NULL, 0, 0, 0, 0, 0, 0
FROM placed
WHERE (pos > %(p0)s AND pos <= %(p1)s) OR (vpos > %(v0)s AND vpos <= %(v1)s)
UNION ALL
SELECT NULL, NULL, NULL, tenant, cls,
       COUNT(*) FILTER (WHERE status = %(completed)s),
       COUNT(*) FILTER (WHERE status = %(completed)s AND met),
       COUNT(*) FILTER (WHERE status = %(completed)s AND met_vs_profile),
       COUNT(*) FILTER (WHERE status <> %(completed)s AND NOT status = ANY(%(ended)s::text[])),
       COUNT(*) FILTER (WHERE status = ANY(%(ended)s::text[])),
       COUNT(*) FILTER (WHERE NOT met AND NOT status = ANY(%(ended)s::text[]))
FROM report_rows GROUP BY tenant, cls
"""


# a kept job whose days are all in the range (slo.kept_ids(inside=True)'s condition)
KEPT_INSIDE = (
    "first_day <= %(end)s AND last_day >= %(start)s"
    " AND first_day >= %(start)s AND last_day <= %(end)s"
)


@cache
def _sql() -> str:
    return _SQL.format(
        span_a=_span("a"),
        span_s=_span("s"),
        jobs=Job._meta.db_table,
        tenants=Tenant._meta.db_table,
        classes=SloClass._meta.db_table,
        summaries=JobSloSummary._meta.db_table,
        archives=ArchivedJob._meta.db_table,
        inside=KEPT_INSIDE,
    )


def slo_report_page(
    *, user: Any, start: date, end: date, page: int, vpage: int | None, page_size: int
) -> SloReportPage:
    """Return the SLO report of [start, end] with the page `page` of its jobs and the page
    `vpage` of its violations (`page_size` each; a page past the last is empty; `vpage`
    None: no violation rows, their count only): the same figures and rows as
    `slo_report`'s, computed in SQL on PostgreSQL (elsewhere: the whole report, paged)."""
    p0 = (page - 1) * page_size
    # (no violations' page: an empty range of positions)
    v0, v1 = (0, 0) if vpage is None else ((vpage - 1) * page_size, vpage * page_size)
    if connection.vendor != "postgresql":
        whole = slo_report(user=user, start=start, end=end)
        violations = whole.violations
        return SloReportPage(
            start=start,
            end=end,
            attainment=whole.attainment,
            jobs=whole.jobs[p0 : p0 + page_size],
            violations=violations[v0:v1],
            jobs_count=len(whole.jobs),
            violations_count=len(violations),
        )
    # 1. the jobs without kept inputs (found on their phases, or ended in the range) and
    #    their rows; of the kept ones, those found on their days in SQL, but for the few
    #    with days on both sides of the range (their days read here, `slo.kept_ids`)
    tenant_ids = visible_tenant_ids(user)
    t0, t1 = day_range(start, end)
    scale_of = cache(time_scale_of)
    ended = ended_ids(start, end, tenant_ids)
    # (looked up by key: an anti-join would hash every job's summary)
    ended_kept: set[int] = set()
    for model in (JobSloSummary, ArchivedJob):
        kept_of = model.objects.filter(in_ids("job_id", ended))  # type: ignore[attr-defined]
        ended_kept.update(kept_of.values_list("job_id", flat=True))
    live_ids = unkept_ids(start, end, tenant_ids) | (ended - ended_kept)
    live = job_slo_rows(live_ids, scale_of=scale_of)
    partial = kept_ids(start, end, tenant_ids, inside=False)
    # 2. the kept jobs whose class changed: their SLO at admission, found in Python
    changed = [
        int(c)
        for c in AuditEntry.objects.filter(action="slo_class.update")
        .order_by()
        .values_list("object_id", flat=True)
        .distinct()
        if c.isdigit()
    ]
    adm: dict[int, float] = {}
    if changed:
        kept = kept_ids(start, end, tenant_ids, inside=True) | partial | ended
        adm = admitted_slos(
            {
                jid: (cls_id, slo_now)
                for jid, cls_id, slo_now in Job.objects.filter(
                    in_ids("id", kept - live_ids),
                    slo_class_id__in=changed,
                )
                .order_by()
                .values_list("pk", "slo_class_id", "slo_class__slowdown")
            }
        )
    # 3. the counts and the pages' ids in SQL
    rows = list(live.values())
    params: dict[str, Any] = {
        "start": start,
        "end": end,
        "t0": t0,
        "t1": t1,
        "partial": id_array(partial),
        "unkept": id_array(live_ids),
        "every_tenant": tenant_ids is None,
        "tenants": id_array(tenant_ids or set()),
        "adm_ids": list(adm),
        "adm_slo": list(adm.values()),
        "emulating": list(EMULATING_RUNNERS),
        "default_scale": float(settings.ROLLMUX_TIME_SCALE),
        "ended": ENDED,
        "completed": COMPLETED,
        "eps": 1e-9,  # JobSlo's tolerance
        "live_ids": [j.job_id for j in rows],
        "live_tenant": [j.tenant for j in rows],
        "live_cls": [j.slo_class for j in rows],
        "live_status": [j.status for j in rows],
        "live_vs_solo": [j.slowdown_vs_solo for j in rows],
        "live_met": [j.met for j in rows],
        "live_met_vs_profile": [j.met_vs_profile for j in rows],
        "p0": p0,
        "p1": p0 + page_size,
        "v0": v0,
        "v1": v1,
    }
    with connection.cursor() as cur:
        cur.execute(_sql(), params)
        out = cur.fetchall()
    on_page: dict[int, int] = {}
    on_vpage: dict[int, int] = {}
    attainment: list[SloAttainment] = []
    violations_count = 0
    for jid, pos, vpos, tenant, cls, finished, met, met_vs_profile, running, ended, bad in out:
        if jid is None:
            attainment.append(
                SloAttainment(tenant, cls, finished, met, met_vs_profile, running, ended)
            )
            violations_count += bad
            continue
        if p0 < pos <= p0 + page_size:
            on_page[jid] = pos
        if vpos is not None and v0 < vpos <= v1:
            on_vpage[jid] = vpos
    attainment.sort(key=lambda a: (a.tenant, a.slo_class))
    # 4. the pages' rows, built as the whole report builds them
    shown = live | job_slo_rows((on_page.keys() | on_vpage.keys()) - live_ids, scale_of=scale_of)
    return SloReportPage(
        start=start,
        end=end,
        attainment=attainment,
        jobs=[shown[jid] for jid in sorted(on_page, key=on_page.__getitem__)],
        violations=[shown[jid] for jid in sorted(on_vpage, key=on_vpage.__getitem__)],
        jobs_count=sum(a.finished + a.in_progress + a.ended_early for a in attainment),
        violations_count=violations_count,
    )
