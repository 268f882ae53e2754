"""Quota usage: what a refusal counts is what /quotas/ shows, from one selector (QA F8).

The GPU cap counts the GPUs *requested* by the tenant's live jobs (queued, placed,
running), as Kueue charges quota by the requests of admitted workloads; the refusal says
so, and the page shows the same figures per tenant and GPU type before anyone is refused.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.jobs.services import JobRejected, job_submit
from rollmux_web.quotas.models import Quota
from rollmux_web.quotas.selectors import month_start, quota_usage
from tests.factories import job_spec
from tests.reports.builders import make_group, phase, place

pytestmark = pytest.mark.django_db


def _phases(job: Job, *, hours: dict[str, float]) -> None:
    """Record one finished phase per kind of `hours` each, all ending now (this month)."""
    now = timezone.now()
    # wholly inside this month even in its first hours (a phase may end "later" in a test)
    end = max(now, month_start(now) + timedelta(hours=max(hours.values()) + 1))
    pl = place(make_group(created=end), job, rollout=[], train=[], joined=end)
    for kind, h in hours.items():
        phase(pl, iteration=0, kind=kind, nodes=[], start=end - timedelta(hours=h), minutes=h * 60)


@pytest.fixture
def busy(world: Any) -> dict[str, Job]:
    """vision: a queued job (8 + 8), a running one (8 + 16), a finished one with 10 h of
    training on 8 H800 GPUs and 2 h of rollout on 8 H20 GPUs this month; speech: one queued
    job (8 + 16). Then the quotas."""
    jobs = {
        "queued": job_submit(user=world.alice, spec=job_spec(name="queued"), channel="t"),
        "running": job_submit(user=world.bob, spec=job_spec(train_gpus=16), channel="t"),
        "done": job_submit(user=world.alice, spec=job_spec(name="done"), channel="t"),
        "speech": job_submit(user=world.charlie, spec=job_spec(train_gpus=16), channel="t"),
    }
    Job.objects.filter(pk=jobs["running"].pk).update(status=JobStatus.RUNNING)
    Job.objects.filter(pk=jobs["done"].pk).update(status=JobStatus.COMPLETED)
    # 10 h x 8 H800 GPUs = 80 GPU-hours ($422.40 at $5.28); 2 h x 8 H20 = 16 ($29.60 at $1.85)
    _phases(jobs["done"], hours={"train": 10, "rollout": 2})
    Quota.objects.create(
        tenant=world.vision, gpu_type=world.h800, max_gpus=32, monthly_gpu_hours=100
    )
    Quota.objects.create(tenant=world.vision, gpu_type=world.h20, monthly_budget_usd=Decimal(50))
    Quota.objects.create(tenant=world.speech, gpu_type=world.h800, max_gpus=16)
    return jobs


def _row(html: str, tenant: str, gpu_type: str) -> dict[str, str]:
    m = re.search(rf'<tr data-tenant="{tenant}" data-gpu-type="{gpu_type}">(.*?)</tr>', html, re.S)
    assert m is not None, f"no row for {tenant}/{gpu_type}"
    cells = re.findall(r'data-col="([\w-]+)">([^<]*)', m.group(1))
    return {col: value.strip() for col, value in cells}


def _refusal(world: Any, **overrides: Any) -> JobRejected:
    with pytest.raises(JobRejected) as info:
        job_submit(user=world.alice, spec=job_spec(**overrides), channel="t")
    return info.value


def test_the_selector_counts_live_requests_and_this_months_phases(world: Any, busy: Any) -> None:
    rows = {
        (u.quota.tenant.name, u.quota.gpu_type.name): u
        for u in quota_usage(tenants=[world.vision, world.speech], now=timezone.now())
    }
    h800 = rows["vision", "H800"]
    # queued 8 + running 16; the completed job and speech's job do not count
    assert (h800.pool_kinds, h800.gpus_requested, h800.gpus_left) == (("train",), 24, 8)
    assert h800.gpu_hours_text == "80.0" and h800.usd_text == "$422.40"
    h20 = rows["vision", "H20"]
    assert (h20.pool_kinds, h20.gpus_requested, h20.gpus_left) == (("rollout",), 16, None)
    assert h20.gpu_hours_text == "16.0" and h20.usd_text == "$29.60"
    assert rows["speech", "H800"].gpus_requested == 16


def test_the_tenants_given_as_rows_or_as_a_queryset_read_the_same_quotas(
    world: Any, busy: Any
) -> None:
    # A list of tenants (a submission's path) reads the quota rows in SQL; a queryset (the
    # quota page) through the ORM: the same quotas, in the same order, with the same usage.
    from rollmux_web.accounts.models import Tenant

    def view(usages: list[Any]) -> list[tuple[Any, ...]]:
        return [
            (
                u.quota.pk,
                u.quota.tenant.name,
                u.quota.gpu_type.name,
                u.quota.gpu_type.gpus_per_node,
                u.quota.gpu_type.host_mem_gb,
                u.quota.max_gpus,
                u.quota.monthly_gpu_hours,
                u.quota.monthly_budget_usd,
                u.pool_kinds,
                u.gpus_requested,
                u.gpu_hours_text,
                u.usd_text,
            )
            for u in usages
        ]

    now = timezone.now()
    rows = view(quota_usage(tenants=[world.speech, world.vision], now=now))
    orm = view(quota_usage(tenants=Tenant.objects.filter(name__in=["vision", "speech"]), now=now))
    assert rows == orm and len(rows) == 3


def test_gpu_cap_refusal_and_the_quota_page_give_the_same_numbers(
    client_as: Any, world: Any, busy: Any
) -> None:
    page = client_as("alice").get("/quotas/").content.decode()
    row = _row(page, "vision", "H800")
    assert row["requested"] == "24"
    # the page explains the column with the refusal's list of live statuses (profiling too)
    assert "profiling, queued, placed and running jobs request" in " ".join(page.split())
    err = _refusal(world, train_gpus=16)  # 24 + 16 > 32
    assert err.code == "quota_exceeded"
    assert err.message.startswith(
        "quota: vision may use at most 32 H800 GPUs at once; its live jobs (profiling, queued, placed or "
        f"running) request {row['requested']}; this job asks for 16. "
    )
    # a job asking for what the page says is left fits; the page then shows the cap full
    job_submit(user=world.alice, spec=job_spec(train_gpus=8), channel="t")
    html = client_as("alice").get("/quotas/").content.decode()
    assert _row(html, "vision", "H800")["requested"] == "32"
    assert html.count("(full)") == 1


def test_budget_refusals_and_the_quota_page_give_the_same_numbers(
    client_as: Any, world: Any, busy: Any
) -> None:
    html = client_as("alice").get("/quotas/").content.decode()
    h800, h20 = _row(html, "vision", "H800"), _row(html, "vision", "H20")
    assert (h800["gpu-hours"], h800["usd"]) == ("80.0", "$422.40")
    assert (h20["gpu-hours"], h20["usd"]) == ("16.0", "$29.60")
    # 60 iterations x 120 s x 8 H20 GPUs = 16 GPU-hours x $1.85 = $29.60; 29.60 + 29.60 > 50
    err = _refusal(world, iterations=60, rollout_gpus=8)
    assert err.code == "budget_exceeded"
    assert f"its jobs used {h20['usd']} so far (at today's price)" in err.message
    Quota.objects.filter(gpu_type=world.h20).delete()
    # 100 iterations x 100 s x 8 H800 GPUs = 22.2 GPU-hours; 80 + 22.2 > 100
    err = _refusal(world, iterations=100)
    assert f"its jobs used {h800['gpu-hours']} so far" in err.message


def test_a_researcher_sees_only_their_tenants_usage(client_as: Any, world: Any, busy: Any) -> None:
    html = client_as("charlie").get("/quotas/").content.decode()
    assert _row(html, "speech", "H800")["requested"] == "16"
    assert 'data-tenant="vision"' not in html and "vision" not in html
    assert "$422.40" not in html and "80.0" not in html
    # alice sees vision's rows, not speech's
    html = client_as("alice").get("/quotas/").content.decode()
    assert 'data-tenant="vision"' in html and 'data-tenant="speech"' not in html


def test_finance_sees_every_tenants_usage(client_as: Any, world: Any, busy: Any) -> None:
    html = client_as("finance").get("/quotas/").content.decode()
    assert _row(html, "speech", "H800")["requested"] == "16"
    assert _row(html, "vision", "H800")["requested"] == "24"


def test_the_api_gives_the_same_usage_as_the_page(
    client_as: Any, api_as: Any, world: Any, busy: Any
) -> None:
    body = api_as("alice").get("/api/v1/quotas/").json()
    rows = {(q["tenant"], q["gpu_type"]): q["usage"] for q in body["results"]}
    assert set(rows) == {("vision", "H800"), ("vision", "H20")}  # alice's tenant only
    page = client_as("alice").get("/quotas/").content.decode()
    h800 = _row(page, "vision", "H800")
    assert rows["vision", "H800"] == {
        "gpus_requested": int(h800["requested"]),
        "gpus_left": 8,
        "gpu_hours_month": 80.0,
        "usd_month": h800["usd"].lstrip("$").replace(",", ""),
    }
    assert rows["vision", "H20"]["gpus_left"] is None  # no cap on H20


def test_pools_now_reads_limits_and_prices_as_the_planner_and_prices_now_do(world: Any) -> None:
    """The one read a submission makes of the pools: the first pool of a kind sets the shape
    and memory, the capacity counts every pool of the kind (the planner's count), the price
    is the one in force (a later one is not yet)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from rollmux_web.inventory.models import Cluster, GpuPrice, Node, NodeState, PoolKind
    from rollmux_web.jobs.selectors import pool_limits, pool_prices, pools_now, prices_now
    from rollmux_web.workflow.snapshot import pool_node_counts

    now = timezone.now()
    extra = Cluster.objects.create(name="z-rollout-2", kind=PoolKind.ROLLOUT, gpu_type=world.h20)
    Node.objects.create(name="z-0", cluster=extra, gpu_type=world.h20, gpus=8, host_mem_gb=4096)
    Node.objects.create(
        name="z-1", cluster=extra, gpu_type=world.h20, gpus=8, host_mem_gb=1, state=NodeState.DOWN
    )
    Node.objects.filter(name="h800-0").update(state=NodeState.DRAINED)
    Node.objects.filter(name="h800-1").update(state=NodeState.DOWN)
    GpuPrice.objects.create(
        gpu_type=world.h800, price_per_gpu_hour=Decimal("9.99"), effective_from=now + timedelta(1)
    )
    GpuPrice.objects.create(
        gpu_type=world.h20, price_per_gpu_hour=Decimal("2.10"), effective_from=now - timedelta(1)
    )
    with CaptureQueriesContext(connection) as ctx:
        pools = pools_now(at=now)
    assert len(ctx.captured_queries) == 1
    counts = pool_node_counts()
    for kind in ("rollout", "train"):
        assert (pools[kind].limits.nodes, pools[kind].limits.nodes_down) == counts[kind]
    assert counts["rollout"] == (5, 1) and counts["train"] == (3, 1)
    # the shape and memory of the first rollout pool by name (not z-rollout-2's 4096 GB)
    assert pools["rollout"].limits.host_mem_gb == 2048.0
    prices = prices_now(gpu_type_ids={world.h20.pk, world.h800.pk}, at=now)
    assert pools["rollout"].price_per_gpu_hour == prices[world.h20.pk] == Decimal("2.10")
    assert pools["train"].price_per_gpu_hour == prices[world.h800.pk] == Decimal("5.28")
    assert pool_limits(pools)["train"].gpu_type == "H800"
    assert pool_prices(pools)["rollout"].gpu_type == world.h20  # type: ignore[union-attr]


def test_the_quota_page_flags_a_month_used_up(client_as: Any, world: Any, busy: Any) -> None:
    # (QA pass 11: a tenant past its budget read as any other row, until a submission was
    # refused; the GPU cap had its "(full)" flag already)
    def row(gpu_type: str) -> str:
        page = client_as("admin").get("/quotas/").content.decode()
        start = page.index(f'data-tenant="vision" data-gpu-type="{gpu_type}"')
        return page[start : page.index("</tr>", start)]

    # vision's H800: 80 of 100 GPU-hours; its H20: $29.60 of $50
    assert "(used up)" not in row("H800") and "(over budget)" not in row("H20")
    Quota.objects.filter(tenant=world.vision, gpu_type=world.h800).update(monthly_gpu_hours=80)
    Quota.objects.filter(tenant=world.vision, gpu_type=world.h20).update(
        monthly_budget_usd=Decimal("29.59")
    )
    assert '80.0 <span class="error">(used up)</span>' in row("H800")
    assert '$29.60 <span class="error">(over budget)</span>' in row("H20")
