"""The simulator's multi-tenant option (scheduler.sim.tenancy, issue 22 item 6)."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.fairshare import PreemptionPolicy
from scheduler.model import ClusterSpec, JobProfile
from scheduler.sim.__main__ import main as cli_main
from scheduler.sim.engine import Simulation, simulate
from scheduler.sim.gen import BURST_H, BURSTING, TENANTS, generate_tenants, to_jsonl
from scheduler.sim.metrics import total_cost_usd
from scheduler.sim.policies import make_policy
from scheduler.sim.run import gold_jobs, run_tenants, tenant_shares
from scheduler.sim.tenancy import Tenancy, TenancyConfig
from scheduler.trace import default_cluster


def bounded(nodes: int) -> ClusterSpec:
    spec = default_cluster()
    return replace(
        spec, rollout=replace(spec.rollout, nodes=nodes), train=replace(spec.train, nodes=nodes)
    )


def trace(seed: int = 0) -> list[JobProfile]:
    """12 jobs of 3 tenants within 6 h, at most 60 iterations each: under a second a run."""
    return [
        replace(j, iterations=min(j.iterations, 60))
        for j in generate_tenants(seed, jobs=12, window_h=6.0)
    ]


def run_mode(
    mode: str, jobs: list[JobProfile], spec: ClusterSpec, seed: int = 0
) -> tuple[Simulation, Tenancy]:
    tenancy = Tenancy(
        TenancyConfig(tenant_shares(jobs, spec), mode=mode, slo_class=gold_jobs(jobs))
    )
    sim = Simulation(jobs, spec, make_policy("rollmux", seed=seed), seed=seed, tenancy=tenancy)
    sim.run()
    return sim, tenancy


def test_tenants_trace_has_three_tenants_and_one_burst() -> None:
    jobs = generate_tenants(3, jobs=30)
    assert {j.tenant for j in jobs} == set(TENANTS)
    burst = [j.arrival_s for j in jobs if j.tenant == BURSTING]
    steady = [j.arrival_s for j in jobs if j.tenant != BURSTING]
    assert max(burst) <= BURST_H * 3600.0 < max(steady)


def test_fair_share_reclaims_at_iteration_boundaries_and_loses_nothing() -> None:
    # seed 0 on 4 + 4 nodes: measured 4 reclaims (a tenant that borrowed while the others
    # were idle yields to a job within its nominal quota); every job ends, none repeats
    # an iteration
    jobs = trace(0)
    sim, tenancy = run_mode("fairshare", jobs, bounded(4))
    assert tenancy.preemptions
    assert all(r.status == "done" for r in sim.jobs.values())
    for job in jobs:
        assert tenancy.train_ends[job.id] == job.iterations  # no iteration ran twice
    gold = gold_jobs(jobs)
    for p in tenancy.preemptions:
        assert p.work_lost_s == 0.0  # yielded right at its boundary (its checkpoint)
        assert gold[p.victim] != "gold"
        assert p.victim_tenant != p.preemptor_tenant or p.kind == "priority"
        record = sim.jobs[p.victim]
        assert "preempted at iteration" in record.reason or record.status == "done"
        # the preemptor ran: it was placed after the preemption
        assert sim.jobs[p.preemptor].admitted_s is not None
    reclaims = [p for p in tenancy.preemptions if p.kind == "reclaim"]
    assert reclaims and all(p.victim_tenant != p.preemptor_tenant for p in reclaims)


def test_fifo_tenancy_changes_nothing() -> None:
    jobs = trace(1)
    spec = bounded(4)
    plain = simulate(jobs, spec, make_policy("rollmux", seed=1), seed=1)
    sim, tenancy = run_mode("fifo", jobs, spec, seed=1)
    assert not tenancy.preemptions
    hooked = sum((end - start) * sim.node_price[n] / 3600.0 for n, start, end in sim.allocations)
    assert total_cost_usd(plain) == pytest.approx(hooked)
    assert [(r.admitted_s, r.finished_s) for r in plain.jobs.values()] == [
        (r.admitted_s, r.finished_s) for r in sim.jobs.values()
    ]


def test_caps_hold_every_tenant_within_its_nominal_quota() -> None:
    jobs = trace(2)
    spec = bounded(6)
    _sim, tenancy = run_mode("caps", jobs, spec, seed=2)
    nominal = {(s.tenant, s.pool): s.nominal for s in tenancy.config.shares}
    assert tenancy.peak_held
    for tenant, pools in tenancy.peak_held.items():
        for pool, peak in pools.items():
            assert peak <= nominal[(tenant, pool)]
    assert not tenancy.preemptions


def test_gold_jobs_are_never_preempted_even_when_borrowing() -> None:
    jobs = trace(0)
    everyone_gold = {j.id: "gold" for j in jobs}
    tenancy = Tenancy(TenancyConfig(tenant_shares(jobs, bounded(4)), slo_class=everyone_gold))
    sim = Simulation(jobs, bounded(4), make_policy("rollmux", seed=0), seed=0, tenancy=tenancy)
    sim.run()
    assert not tenancy.preemptions
    assert all(r.status == "done" for r in sim.jobs.values())


def test_run_tenants_reports_each_tenant_and_cost_ratios() -> None:
    jobs = trace(0)
    report = run_tenants(
        jobs, bounded(4), seed=0, modes=("fifo", "fairshare"),
        policy=PreemptionPolicy(min_run_s=1800.0, grace_s=600.0),
    )  # fmt: skip
    fair = report["modes"]["fairshare"]
    assert set(fair["tenants"]) == set(TENANTS)
    assert fair["iterations_lost"] == 0 and fair["unfinished"] == 0
    assert 1.0 / 3.0 <= fair["jain_stretch"] <= 1.0
    assert fair["colocated/rollmux"] > 0
    # GPU-hours shares of the tenants add up to the whole
    assert sum(t["gpu_share"] for t in fair["tenants"].values()) == pytest.approx(1.0)


def test_cli_prints_the_tenant_table(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(to_jsonl(trace(0)), encoding="utf-8")
    cluster = tmp_path / "c.json"
    cluster.write_text(
        '{"rollout_gpu_type": "H20", "train_gpu_type": "H800", "gpu_types": {'
        '"H20": {"price_per_gpu_hour": 1.85, "gpus_per_node": 8, "host_mem_gb": 2048, "nodes": 4},'
        '"H800": {"price_per_gpu_hour": 5.28, "gpus_per_node": 8, "host_mem_gb": 2048, "nodes": 4}}}',
        encoding="utf-8",
    )
    out = io.StringIO()
    code = cli_main(
        ["--trace", str(path), "--cluster", str(cluster), "--tenants", "fifo,fairshare",
         "--weights", "nlp=2", "--seed", "0"], out=out,
    )  # fmt: skip
    assert code == 0
    text = out.getvalue()
    assert "| fairshare | vision |" in text and "(w 2)" in text
    assert cli_main(["--trace", str(path), "--tenants", "lottery", "--seed", "0"]) == 2
    assert cli_main(
        ["--trace", str(path), "--cluster", str(cluster), "--tenants", "fairshare",
         "--weights", "nlp=0", "--seed", "0"]
    ) == 2  # fmt: skip
