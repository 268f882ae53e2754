"""Drift (issue 13 item 4): the paper's templates in the simulator, and re-planning."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from scheduler.replan import observed_outlook, should_assess
from scheduler.sim.__main__ import main as cli_main
from scheduler.sim.drift import (
    SETTINGS,
    TEMPLATES,
    drift_factors,
    job_templates,
    learned_profile,
)
from scheduler.sim.engine import simulate
from scheduler.sim.gen import generate_paper, to_jsonl
from scheduler.sim.metrics import summarise
from scheduler.sim.policies import make_policy
from scheduler.trace import default_cluster
from tests.scheduler.builders import cluster_spec, job


def test_templates_scale_the_phases_with_the_jobs_progress() -> None:
    assert drift_factors("none", 5).tolist() == [1.0] * 5
    up = drift_factors("increasing-1.0", 5)
    assert up[0] == 1.0 and up[-1] == pytest.approx(2.0) and np.all(np.diff(up) > 0)
    down = drift_factors("decreasing-1.0", 5)
    assert down[0] == 1.0 and down[-1] == pytest.approx(0.5) and np.all(np.diff(down) < 0)
    assert drift_factors("increasing-1.5", 3)[-1] == pytest.approx(2.5)
    with pytest.raises(ValueError, match="unknown drift template"):
        drift_factors("sideways-2.0", 3)


def test_the_mixed_setting_draws_every_template_the_same_way_each_time() -> None:
    jobs = [job(f"j{i}", 100, 50) for i in range(140)]
    mixed = job_templates(jobs, "mixed", seed=3)
    assert mixed == job_templates(jobs, "mixed", seed=3)
    assert set(mixed.values()) == set(TEMPLATES)
    assert set(job_templates(jobs, "decreasing-0.5", seed=3).values()) == {"decreasing-0.5"}
    assert "mixed" in SETTINGS
    with pytest.raises(ValueError, match="unknown drift setting"):
        job_templates(jobs, "wild", seed=0)


def test_estimates_are_learned_from_the_observed_phases() -> None:
    base = job("A", 100, 50, roll_min=80, train_min=40)
    learned = learned_profile(base, [150, 170, 160], [60, 70, 65], remaining=40)
    assert (learned.t_roll_min_s, learned.t_roll_max_s) == (150, 170)
    assert (learned.t_train_min_s, learned.t_train_max_s) == (60, 70)
    assert learned.observed_solo_s == pytest.approx(160 + 65)
    assert learned.iterations == 40
    # Above its worst case: worth a check; within it, steady and on time: not.
    seen = observed_outlook(base, [150, 170], [60, 70], remaining=40, elapsed_s=0.0)
    assert should_assess(seen, base, recent_solo_s=225, slowdown_so_far=1.0)
    calm = observed_outlook(base, [90, 95], [45, 45], remaining=40, elapsed_s=0.0)
    assert not should_assess(calm, base, recent_solo_s=137.5, slowdown_so_far=1.0)
    # Within its estimates but slowed past its SLO (1.5 x 140 = 210 < 230): worth a check.
    assert should_assess(calm, base, recent_solo_s=137.5, slowdown_so_far=230 / 140)
    # A partner that drifts: worth a check (the caller that knows it says so)
    assert should_assess(calm, base, recent_solo_s=137.5, slowdown_so_far=1.0, others_drift=True)


def test_replanning_moves_a_drifting_job_out_so_its_partner_keeps_its_slo() -> None:
    # A sets the cycle (400 s) and B hides in its bubbles; A's phases then grow to 2.5x
    # over its life, and B, still paced by A, is slowed far past its 1.5 x 290 s window.
    a = job("A", 300, 100, slo=2.0, iterations=120)
    b = job("B", 90, 200, slo=1.5, iterations=120)
    spec = default_cluster()
    drift = {"A": "increasing-1.5", "B": "none"}
    static = simulate([a, b], spec, make_policy("rollmux", seed=1), seed=1, drift=drift)
    assert static.jobs["A"].group_id == static.jobs["B"].group_id  # packed together
    ratio = static.jobs["B"].mean_iteration_s / static.jobs["B"].solo_iteration_s  # type: ignore[operator]
    assert ratio > 1.5
    moved = simulate(
        [a, b], spec, make_policy("rollmux", seed=1), seed=1, drift=drift, replan_drift=True
    )
    assert moved.jobs["A"].replans >= 1 and moved.jobs["B"].replans == 0
    assert moved.jobs["A"].group_id != moved.jobs["B"].group_id
    assert summarise(moved)["slo_attainment"] == 1.0  # B keeps its SLO; A too, moved
    assert summarise(static)["slo_attainment"] == 0.5
    # Without drift the re-planning run is the static one.
    plain = simulate([a, b], spec, make_policy("rollmux", seed=1), seed=1)
    again = simulate([a, b], spec, make_policy("rollmux", seed=1), seed=1, replan_drift=True)
    assert summarise(plain)["total_cost_usd"] == summarise(again)["total_cost_usd"]


def test_a_growing_job_that_finds_no_place_waits_for_the_partner_it_breaks() -> None:
    # As above, on a cluster of ONE training node: A, growing, cannot move anywhere. With
    # the slack of its 2.0 SLO it leaves the node to B (checkpointed, queued first) and
    # resumes when B is done, so both keep their SLOs; without re-planning B misses.
    a = job("A", 300, 100, slo=2.0, iterations=120)
    b = replace(job("B", 90, 200, slo=1.5, iterations=120), arrival_s=1.0)
    spec = cluster_spec(roll_nodes=2, train_nodes=1)
    drift = {"A": "increasing-1.5", "B": "none"}
    static = simulate([a, b], spec, make_policy("rollmux", seed=1), seed=1, drift=drift)
    assert static.jobs["A"].group_id == static.jobs["B"].group_id  # packed on the one node
    assert summarise(static)["slo_attainment"] == 0.5
    run = simulate(
        [a, b],
        spec,
        make_policy("rollmux", seed=1),
        seed=1,
        drift=drift,
        replan_drift=True,
        record_phases=True,
    )
    assert run.jobs["A"].replans == 1 and run.jobs["B"].replans == 0
    assert summarise(run)["slo_attainment"] == 1.0
    # A's iterations after its wait start once B is done, and none is lost or run twice
    b_done = run.jobs["B"].finished_s
    a_rolls = sorted(
        p.iteration for p in run.phases if p.job_id == "A" and p.kind.value == "rollout"
    )
    assert a_rolls == list(range(120))
    resumed = min(p.start_s for p in run.phases if p.job_id == "A" and p.restart_s > 0)
    assert b_done is not None and resumed >= b_done


def test_the_command_line_runs_a_drift_setting_with_re_planning(tmp_path: Path) -> None:
    jobs = [
        replace(j, iterations=min(j.iterations, 30))
        for j in generate_paper(2, jobs=5, window_h=1.0)
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text(to_jsonl(jobs))
    out = tmp_path / "r.json"
    args = ["--trace", str(trace), "--policy", "rollmux,solo-disagg", "--seed", "2"]
    code = cli_main([*args, "--drift", "increasing-1.5", "--drift-replan", "--json", str(out)])
    report = json.loads(out.read_text())
    assert code == 0 and "drift_replans" in report["policies"]["rollmux"]
    assert "drift_replans" not in report["policies"]["solo-disagg"]
    with pytest.raises(SystemExit):
        cli_main([*args, "--drift", "sideways"], out=io.StringIO())
