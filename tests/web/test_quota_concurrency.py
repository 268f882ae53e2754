"""Concurrent submissions on PostgreSQL: the GPU cap holds, tenants without a cap take no
lock, and deadlocks are retried inside the service instead of reaching the caller."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, connections, transaction

from rollmux_web import ports
from rollmux_web.jobs.models import Job
from rollmux_web.jobs.services import JobRejected, job_submit
from rollmux_web.quotas.models import Quota
from rollmux_web.transactions import atomic_with_retry
from tests.factories import job_spec
from tests.workers.builders import NoTriggers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class _CountingTriggers(NoTriggers):
    def __init__(self) -> None:
        self.requests = 0

    def request_planning(self) -> None:
        self.requests += 1


class _NoDispatch:
    """Accepts phase orders and runs nothing (these tests are about the database locks)."""

    def dispatch(self, order: Any) -> None: ...

    def probe(self, order: Any) -> Any:
        return ports.Probe("running")

    def release(self, job_id: int, placement_id: int) -> None: ...


@pytest.fixture(autouse=True)
def _quiet_ports() -> Iterator[None]:
    with ports.override(triggers=NoTriggers(), dispatcher=_NoDispatch()):  # type: ignore[arg-type]
        yield


def _in_threads(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run fn(i) in n threads started together; return each result or exception."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001  (the test inspects it)
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_concurrent_submissions_never_pass_the_gpu_cap(world: Any) -> None:
    Quota.objects.create(tenant=world.vision, gpu_type=world.h20, max_gpus=32)  # 4 jobs of 8
    users = [world.alice, world.bob]
    results = _in_threads(
        10,
        lambda i: job_submit(user=users[i % 2], spec=job_spec(name=f"race-{i}"), channel="t"),
    )
    accepted = [r for r in results if isinstance(r, Job)]
    refused = [r for r in results if isinstance(r, JobRejected)]
    assert len(accepted) == 4 and len(refused) == 6, results
    assert {r.code for r in refused} == {"quota_exceeded"}
    assert Job.objects.filter(tenant=world.vision).count() == 4


def test_a_tenant_without_a_gpu_cap_takes_no_quota_lock(world: Any) -> None:
    # Its quota row caps only dollars: another transaction holding that row must not delay
    # a submission (before: every submission took FOR UPDATE on the tenant's quota rows).
    quota = Quota.objects.create(tenant=world.vision, gpu_type=world.h20, monthly_gpu_hours=1e6)
    with _quota_row_held(quota):
        done = _in_threads(
            1,
            lambda i: _with_lock_timeout(
                lambda: job_submit(user=world.alice, spec=job_spec(), channel="t")
            ),
        )
    assert isinstance(done[0], Job), done


@contextlib.contextmanager
def _quota_row_held(quota: Quota) -> Iterator[None]:
    """Hold FOR UPDATE on the quota row in another connection for the block."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            Quota.objects.select_for_update().get(pk=quota.pk)
            holding.set()
            release.wait(20)
        connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    try:
        yield
    finally:
        release.set()
        holder.join(20)


def _with_lock_timeout(fn: Callable[[], Any]) -> Any:
    with connection.cursor() as cur:
        cur.execute("SET lock_timeout = '3s'")  # a wait for the lock fails instead of hanging
    return fn()


def test_a_deadlock_is_retried_inside_the_service_and_both_callers_succeed(world: Any) -> None:
    # Two transactions lock the same two rows in opposite orders: PostgreSQL aborts one
    # (deadlock_detected), atomic_with_retry runs it again, and both return.
    a = Quota.objects.create(tenant=world.vision, gpu_type=world.h20, max_gpus=64)
    b = Quota.objects.create(tenant=world.vision, gpu_type=world.h800, max_gpus=64)
    first_locked = threading.Barrier(2)
    attempts = [0, 0]

    def opposite(i: int) -> str:
        order = [a.pk, b.pk] if i == 0 else [b.pk, a.pk]

        def body() -> str:
            attempts[i] += 1
            Quota.objects.select_for_update().get(pk=order[0])
            if attempts[i] == 1:
                first_locked.wait(10)
            Quota.objects.select_for_update().get(pk=order[1])
            return "ok"

        with connection.cursor() as cur:
            cur.execute("SET deadlock_timeout = '100ms'")
        return atomic_with_retry(body, what="test")

    results = _in_threads(2, opposite)
    assert results == ["ok", "ok"], results
    assert sorted(attempts) == [1, 2]  # exactly one of them was rolled back and rerun


def test_concurrent_submissions_and_planning_passes_never_surface_a_deadlock(world: Any) -> None:
    from rollmux_web.workflow.services import queue_plan

    def work(i: int) -> Any:
        if i == 0:
            return [queue_plan() for _ in range(4)]
        user = world.alice if i % 2 else world.charlie
        return [
            job_submit(user=user, spec=job_spec(name=f"mix-{i}-{k}"), channel="t") for k in range(6)
        ]

    results = _in_threads(5, work)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    assert Job.objects.filter(name__startswith="mix-").count() == 24


def test_a_submission_waits_for_the_quota_lock_only_after_its_inserts(world: Any) -> None:
    # The lock on the tenant's capped quota rows is taken last, in the query string that
    # counts the live GPUs, checks the cap and commits, so the tenant's other submissions
    # queue on it for the server's work only (before: from the lock through the count, the
    # job's and the audit entry's inserts, each a round trip, to the commit).
    quota = Quota.objects.create(tenant=world.vision, gpu_type=world.h20, max_gpus=800)
    result: list[Any] = []
    submitter = threading.Thread(
        target=lambda: result.extend(
            _in_threads(1, lambda i: job_submit(user=world.alice, spec=job_spec(), channel="t"))
        )
    )
    with _quota_row_held(quota):
        submitter.start()
        waiting = _waiting_on_quota_lock()
    submitter.join(20)
    assert waiting is not None, "the submission never waited for the quota lock"
    pid, query, relations = waiting
    # the lock, the count, the check and the commit: one query
    assert "FOR UPDATE" in query and "SUM(" in query and query.endswith("COMMIT"), query
    assert {"jobs_job", "audit_auditentry"} <= relations  # inserted before the lock
    assert isinstance(result[0], Job), result


def _waiting_on_quota_lock() -> tuple[int, str, set[str]] | None:
    """Return (pid, query, tables it holds RowExclusiveLock on) of the backend waiting on a
    lock with a query on quotas_quota, within 10 s, or None."""
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT pid, query FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE %s AND datname = current_database()",
                ["%quotas_quota%FOR UPDATE%"],
            )
            row = cur.fetchone()
            if row is not None:
                cur.execute(
                    "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
                    " WHERE l.pid = %s AND l.mode = 'RowExclusiveLock' AND l.granted",
                    [row[0]],
                )
                return int(row[0]), str(row[1]), {r[0] for r in cur.fetchall()}
        time.sleep(0.05)
    return None


def test_the_commit_checks_the_gpu_cap_and_a_refusal_still_names_the_numbers(world: Any) -> None:
    from django.test.utils import CaptureQueriesContext

    from rollmux_web.audit.models import AuditEntry

    Quota.objects.create(tenant=world.vision, gpu_type=world.h20, max_gpus=16)  # 2 x 8 rollout
    planning = _CountingTriggers()
    with CaptureQueriesContext(connection) as ctx, ports.override(triggers=planning):  # type: ignore[arg-type]
        job_submit(user=world.alice, spec=job_spec(name="first"), channel="t")
    assert planning.requests == 1  # the on-commit hooks ran after the commit in the check
    # (Django lists BEGIN and COMMIT too; psycopg sends no COMMIT after the one in the check)
    sql = [q["sql"] for q in ctx.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
    locking = [s for s in sql if "FOR UPDATE" in s]
    assert len(locking) == 1 and locking[0].endswith("COMMIT"), sql  # one round trip
    # the pools, SLO class, tenant, job, audit entry, quotas, then the check with the commit
    assert len(sql) <= 7 and sql[-1] is locking[0], "\n".join(s.strip()[:70] for s in sql)
    assert not any(s.startswith("SELECT") and "SUM(" in s for s in sql), [
        s for s in sql if "SUM(" in s
    ]
    with ports.override(triggers=planning):  # type: ignore[arg-type]
        job_submit(user=world.bob, spec=job_spec(name="second"), channel="t")
        with pytest.raises(JobRejected) as refused:
            job_submit(user=world.alice, spec=job_spec(name="third"), channel="t")
    assert planning.requests == 2  # not for the refused one
    # the commit refused it; the submission ran again with the check in Python for the message
    assert refused.value.code == "quota_exceeded"
    assert refused.value.message.startswith(
        "quota: vision may use at most 16 H20 GPUs at once; its live jobs (profiling, queued, "
        "placed or running) request 16; this job asks for 8. "
    )
    assert list(Job.objects.order_by("pk").values_list("name", flat=True)) == ["first", "second"]
    assert AuditEntry.objects.filter(action="job.submit").count() == 2
