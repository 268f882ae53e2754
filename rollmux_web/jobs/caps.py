"""A submission's GPU caps, checked by its commit (jobs.services._submit)."""

from __future__ import annotations

from django.db import connection

from rollmux_web.jobs.models import Job
from rollmux_web.quotas.models import Quota

GPU_CAP_EXCEEDED = "RMQ01"  # the SQLSTATE `commit_within_gpu_caps` raises


def commit_within_gpu_caps(*, caps: list[tuple[int, bool, bool]], live: tuple[str, ...]) -> None:
    """Lock the quota rows of `caps`, check them, and commit the caller's transaction, all
    in one round trip on PostgreSQL; raise DatabaseError with SQLSTATE GPU_CAP_EXCEEDED
    (the transaction then aborted, to be rolled back) when a cap is exceeded.

    `caps`: (quota id, counts rollout GPUs, counts training GPUs) of each capped quota of
    the submitting tenant, the pools of its GPU type; `live`: the statuses of live jobs.
    The caller (jobs.services, a submission) has inserted its job, so the count includes it.
    A DO block takes the row locks (FOR UPDATE, primary-key order, as every submission),
    then counts the tenant's live GPUs with a snapshot taken after the locks were granted
    (each statement of it takes its own), so it sees every job committed by a previous
    holder; COMMIT follows in the same query string. The locks are held for the server's
    work alone, the check and the commit's WAL flush, never for a client round trip: the
    tenant's other submissions queue on them for about a millisecond or two. Django's
    commit at the end of the atomic block then finds no transaction open and sends nothing
    (psycopg), and runs the on-commit hooks. Values are integers and this module's
    identifiers, formatted in (a DO block takes no parameters).
    """
    assert all(s.isidentifier() for s in live)
    rows = ", ".join(f"({int(pk)}, {bool(r)}, {bool(t)})" for pk, r, t in caps)
    ids = ", ".join(str(int(pk)) for pk in sorted(pk for pk, _, _ in caps))
    statuses = ", ".join(f"'{s}'" for s in live)
    quota_t, job_t = Quota._meta.db_table, Job._meta.db_table
    sql = f"""DO $rollmux$ BEGIN
  PERFORM 1 FROM {quota_t} WHERE id IN ({ids}) ORDER BY id FOR UPDATE;
  IF EXISTS (
    SELECT 1 FROM (VALUES {rows}) AS c(id, rollout, train) JOIN {quota_t} q ON q.id = c.id
     WHERE q.max_gpus + q.borrowing_limit < (
       SELECT COALESCE(SUM(CASE WHEN c.rollout THEN j.rollout_gpus ELSE 0 END
                         + CASE WHEN c.train THEN j.train_gpus ELSE 0 END), 0)
         FROM {job_t} j WHERE j.tenant_id = q.tenant_id AND j.status IN ({statuses})))
  THEN
    RAISE EXCEPTION 'a GPU cap is exceeded' USING ERRCODE = '{GPU_CAP_EXCEEDED}';
  END IF;
END $rollmux$; COMMIT"""
    with connection.cursor() as cur:
        cur.execute(sql)
