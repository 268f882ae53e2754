"""Unit tests of the fair-share core (scheduler.fairshare, issue 22)."""

from __future__ import annotations

import math
import random

import pytest

from scheduler.fairshare import (
    PreemptionDecision,
    PreemptionPolicy,
    QueuedJob,
    QuotaStatus,
    RunningJob,
    Share,
    ShareError,
    TenantLoad,
    _freed,
    accrue,
    borrowable,
    check_shares,
    decayed_usage,
    dominant_share,
    entry_penalty,
    jain_index,
    ordinal,
    preemption_targets,
    queue_order,
    quota_check,
)

DAY = 24 * 3600.0
WEEK = 7 * DAY
CAP = {"H800": 64, "H20": 64}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"borrowing_limit": -1}, "borrowing_limit"),
        ({"lending_limit": 17}, "lending_limit"),
        ({"lending_limit": -1}, "lending_limit"),
        ({"weight": 0.0}, "weight"),
        ({"weight": -2.0}, "weight"),
        ({"weight": math.nan}, "weight"),
        ({"nominal": -8}, "nominal"),
        ({"tenant": ""}, "tenant"),
    ],
)
def test_bad_share_is_refused_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"tenant": "vision", "pool": "H800", "nominal": 16, **kwargs}
    with pytest.raises(ShareError) as err:
        Share(**args)  # type: ignore[arg-type]
    assert err.value.field == field
    assert str(err.value).startswith(field)


def test_share_on_a_gpu_type_the_cluster_lacks_is_refused() -> None:
    with pytest.raises(ShareError, match="A100") as err:
        check_shares([Share("vision", "A100", 8)], {"H20", "H800"})
    assert err.value.field == "pool"
    with pytest.raises(ShareError, match="two shares"):
        check_shares([Share("v", "H20", 8), Share("v", "H20", 4)], {"H20"})
    check_shares([Share("v", "H20", 8), Share("v", "H800", 8)], {"H20", "H800"})


def test_decayed_usage_halves_every_half_life() -> None:
    now = 10 * WEEK
    assert decayed_usage([(now, 100.0)], now, WEEK) == pytest.approx(100.0)
    assert decayed_usage([(now - WEEK, 100.0)], now, WEEK) == pytest.approx(50.0)
    assert decayed_usage([(now - 2 * WEEK, 100.0), (now, 10.0)], now, WEEK) == pytest.approx(35.0)
    assert decayed_usage([(now + 5, 7.0)], now, WEEK) == pytest.approx(7.0)  # still running
    with pytest.raises(ShareError, match="half_life_s"):
        decayed_usage([], now, 0.0)


def test_steady_holding_reads_as_that_many_gpus() -> None:
    # 8 GPUs held for 20 half-lives, sampled per hour: the share reads 8 / nominal.
    half = 3600.0 * 24
    now = 20 * half
    samples = [(t * 3600.0, 8 * 3600.0) for t in range(1, int(now / 3600) + 1)]
    usage = decayed_usage(samples, now, half)
    load = TenantLoad("nlp", {"H800": usage}, {"H800": 8})
    share = dominant_share(load, {"H800": Share("nlp", "H800", 16)}, half)
    assert share.value == pytest.approx(0.5, rel=0.02)
    assert share.pool == "H800"


def test_running_total_matches_decayed_samples() -> None:
    # 8 GPUs for 3 days then 2 for 1 day, accrued in uneven steps, against per-minute samples
    half = DAY
    steps = [(3 * DAY, 8.0), (DAY, 2.0)]
    total, now = 0.0, 0.0
    for span, gpus in steps:
        for piece in (span * 0.1, span * 0.6, span * 0.3):
            total = accrue(total, gpus, piece, half)
            now += piece
    samples = []
    t = 0.0
    for span, gpus in steps:
        for _ in range(int(span / 60)):
            t += 60.0
            samples.append((t, gpus * 60.0))
    assert total == pytest.approx(decayed_usage(samples, now, half), rel=1e-3)
    assert accrue(100.0, 0.0, DAY, DAY) == pytest.approx(50.0)


def test_entry_penalty_fades() -> None:
    assert entry_penalty([(0.0, 16)], 0.0, 600.0) == pytest.approx(8.0)
    assert entry_penalty([(0.0, 16)], 600.0, 600.0) == pytest.approx(4.0)


def test_weight_and_dominant_pool() -> None:
    shares = {"H800": Share("a", "H800", 16, weight=2.0), "H20": Share("a", "H20", 16)}
    load = TenantLoad("a", held_gpus={"H800": 16, "H20": 12})
    share = dominant_share(load, shares, WEEK, history_weight=0.0)
    # H800: 16 / (2 x 16) = 0.5; H20: 12 / 16 = 0.75
    assert share.pool == "H20" and share.value == pytest.approx(0.75)
    nothing = dominant_share(TenantLoad("a", held_gpus={"A": 1}), {}, WEEK)
    assert math.isinf(nothing.value)


def test_queue_orders_by_priority_then_share_then_submission() -> None:
    shares = [Share(t, "H800", 16) for t in ("vision", "speech", "nlp")]
    loads = {
        "vision": TenantLoad("vision", held_gpus={"H800": 24}),  # 120% with h=0.2 below
        "speech": TenantLoad("speech", held_gpus={"H800": 4}),
        "nlp": TenantLoad("nlp"),
    }
    jobs = [
        QueuedJob("v1", "vision", {"H800": 8}, submitted_s=1.0),
        QueuedJob("s1", "speech", {"H800": 8}, submitted_s=5.0),
        QueuedJob("n1", "nlp", {"H800": 8}, submitted_s=9.0),
        QueuedJob("v2", "vision", {"H800": 8}, priority=1, submitted_s=20.0),
        QueuedJob("n0", "nlp", {"H800": 8}, submitted_s=3.0),
    ]
    order = queue_order(jobs, loads, shares, WEEK, history_weight=0.2)
    assert [p.job_id for p in order] == ["v2", "n0", "n1", "s1", "v1"]
    assert [p.position for p in order] == [1, 2, 3, 4, 5]
    last = order[-1]
    # vision holds 24 GPUs (150% of its nominal 16): the 120% is its weighted share (usage,
    # holdings and recent admissions), which the reason must not call what it holds (QA
    # pass 13: "vision holds 150% of its share" beside a share table reading 32 of 32)
    assert last.reason == "5th in the queue; vision is at 120% of its share of H800"
    assert order[1].reason == "2nd in the queue; nlp uses nothing now"


def test_history_moves_a_tenant_back_in_the_queue() -> None:
    shares = [Share(t, "H800", 16) for t in ("a", "b")]
    loads = {"a": TenantLoad("a", usage_gpu_s={"H800": 16 * WEEK})}  # used it all last weeks
    jobs = [
        QueuedJob("a1", "a", {"H800": 8}, submitted_s=0.0),
        QueuedJob("b1", "b", {"H800": 8}, submitted_s=9.0),
    ]
    assert [p.job_id for p in queue_order(jobs, loads, shares, WEEK)] == ["b1", "a1"]


def test_ordinals() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
    ]  # fmt: skip


def test_quota_check_within_borrowing_over_limit() -> None:
    shares = [Share("a", "H800", 16, borrowing_limit=8)]
    held = {"a": {"H800": 8}}
    assert quota_check(QueuedJob("j", "a", {"H800": 8}), held, shares).status is (
        QuotaStatus.WITHIN_NOMINAL
    )
    verdict = quota_check(QueuedJob("j", "a", {"H800": 16}), held, shares)
    assert verdict.status is QuotaStatus.BORROWS and verdict.borrows == {"H800": 8}
    over = quota_check(QueuedJob("j", "a", {"H800": 24}), held, shares)
    assert over.status is QuotaStatus.OVER_LIMIT and "borrowing limit 8" in over.reason


def test_lending_limit_reserves_the_rest_of_a_nominal_quota() -> None:
    shares = [Share("a", "H800", 32, lending_limit=8), Share("b", "H800", 32)]
    held = {"b": {"H800": 32}}
    # 64 GPUs, b uses 32, a reserves 24 of its idle 32: b may borrow 8 more
    assert borrowable("b", "H800", held, shares, {"H800": 64}) == 8
    assert borrowable("a", "H800", held, shares, {"H800": 64}) == 32


# -- preemption ------------------------------------------------------------------------
SHARES = [Share(t, "H800", 32) for t in ("vision", "speech", "nlp")]
CAP96 = {"H800": 96}
NOW = 10 * 3600.0
POLICY = PreemptionPolicy(min_run_s=1800.0, grace_s=600.0)


def run(jid: str, tenant: str, gpus: int, **kw: object) -> RunningJob:
    args: dict[str, object] = {"started_s": 0.0, "frees": {"H800": gpus}, **kw}
    return RunningJob(jid, tenant, {"H800": gpus}, **args)  # type: ignore[arg-type]


def targets(job: QueuedJob, running: list[RunningJob], free: int = 0, **kw: object) -> object:
    return preemption_targets(
        job, running, SHARES, free={"H800": free}, need=job.gpus, capacity=CAP96,
        now_s=NOW, policy=kw.pop("policy", POLICY), **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_within_nominal_job_reclaims_from_the_borrower() -> None:
    running = [
        run("v1", "vision", 32, since_checkpoint_s=500.0),
        run("v2", "vision", 16, since_checkpoint_s=100.0),
        run("v3", "vision", 16, since_checkpoint_s=10.0),
        run("s1", "speech", 32),
    ]
    plan = targets(QueuedJob("n1", "nlp", {"H800": 16}), running)
    assert plan.decision is PreemptionDecision.PREEMPT  # type: ignore[attr-defined]
    # each frees the 16 it needs: least work since checkpoint wins; speech is within nominal
    assert plan.victims == ("v3",)  # type: ignore[attr-defined]
    assert plan.kind == "reclaim"  # type: ignore[attr-defined]


def test_fits_when_free_and_no_victims_within_nominal() -> None:
    running = [run("v1", "vision", 32), run("s1", "speech", 32)]
    assert targets(QueuedJob("n1", "nlp", {"H800": 16}), running, free=32).decision is (  # type: ignore[attr-defined]
        PreemptionDecision.FITS
    )
    blocked = targets(QueuedJob("n1", "nlp", {"H800": 16}), running)
    assert blocked.decision is PreemptionDecision.BLOCKED  # type: ignore[attr-defined]


def test_victims_ranked_by_whole_nodes_freed() -> None:
    # v_small shares its nodes with its group mate: evicting it alone frees nothing
    running = [
        run("v_small", "vision", 16, frees={"H800": 0}, group="g1", since_checkpoint_s=0.0),
        run("v_mate", "vision", 16, frees={"H800": 0}, group="g1", since_checkpoint_s=0.0),
        run("v_big", "vision", 32, since_checkpoint_s=500.0),
        run("s1", "speech", 32),
    ]
    plan = targets(QueuedJob("n1", "nlp", {"H800": 16}), running, group_frees={"g1": {"H800": 32}})
    assert plan.victims == ("v_big",)  # type: ignore[attr-defined]


def test_group_nodes_free_only_when_every_member_leaves() -> None:
    running = [
        run("v_a", "vision", 24, frees={"H800": 0}, group="g1"),
        run("v_b", "vision", 24, frees={"H800": 0}, group="g1"),
        run("v_gold", "vision", 32, slo_class="gold"),
    ]
    plan = targets(QueuedJob("n1", "nlp", {"H800": 32}), running, group_frees={"g1": {"H800": 48}})
    assert set(plan.victims) == {"v_a", "v_b"}  # type: ignore[attr-defined]


def test_reclaim_evicts_both_members_of_a_packed_pair_rather_than_one_of_each() -> None:
    # vision borrows 16 of H800 (48 held, nominal 32) as three co-execution groups of two
    # packed jobs; a group's node frees only when both leave. The least work since a
    # checkpoint ranked one member of g1 and one of g2 first, which spent the 16 vision
    # may give back and freed no node: the job within its nominal quota was blocked
    # (QA pass 13, seen live). Evicting both members of one group frees a node and leaves
    # vision at its nominal quota.
    running = [
        run("v1", "vision", 8, frees={"H800": 0}, group="g1", since_checkpoint_s=1.0),
        run("v2", "vision", 8, frees={"H800": 0}, group="g1", since_checkpoint_s=4.0),
        run("v3", "vision", 8, frees={"H800": 0}, group="g2", since_checkpoint_s=2.0),
        run("v4", "vision", 8, frees={"H800": 0}, group="g2", since_checkpoint_s=5.0),
        run("v5", "vision", 8, frees={"H800": 0}, group="g3", since_checkpoint_s=6.0),
        run("v6", "vision", 8, frees={"H800": 0}, group="g3", since_checkpoint_s=7.0),
        run("s1", "speech", 24),
    ]
    shares = [Share("vision", "H800", 32), Share("speech", "H800", 32)]
    plan = preemption_targets(
        QueuedJob("s2", "speech", {"H800": 8}),
        running,
        shares,
        free={"H800": 0},
        need={"H800": 8},
        capacity={"H800": 72},
        now_s=NOW,
        policy=POLICY,
        group_frees={g: {"H800": 8} for g in ("g1", "g2", "g3")},
    )
    assert plan.decision is PreemptionDecision.PREEMPT, plan.reason
    assert set(plan.victims) == {"v1", "v2"}
    assert plan.kind == "reclaim"


def test_a_borrower_is_never_pushed_below_its_nominal_quota() -> None:
    # vision borrows 16: evicting one member of g1 stops its borrowing, so the group's
    # nodes (freed only with both members) cannot be had
    running = [
        run("v_a", "vision", 24, frees={"H800": 0}, group="g1"),
        run("v_b", "vision", 24, frees={"H800": 0}, group="g1"),
        run("s1", "speech", 32),
    ]
    plan = targets(QueuedJob("n1", "nlp", {"H800": 32}), running, group_frees={"g1": {"H800": 48}})
    assert plan.decision is PreemptionDecision.BLOCKED  # type: ignore[attr-defined]


def test_gold_young_and_within_nominal_jobs_are_never_victims() -> None:
    running = [
        run("v_gold", "vision", 32, slo_class="gold"),
        run("v_young", "vision", 32, started_s=NOW - 60.0),
        run("s1", "speech", 32),
    ]
    plan = targets(QueuedJob("n1", "nlp", {"H800": 16}), running)
    assert plan.decision is PreemptionDecision.BLOCKED  # type: ignore[attr-defined]
    gold_ok = PreemptionPolicy(preemptible={"gold": True}, min_run_s=1800.0)
    plan = targets(QueuedJob("n1", "nlp", {"H800": 16}), running, policy=gold_ok)
    assert plan.victims == ("v_gold",)  # type: ignore[attr-defined]


def test_grace_waits_for_a_departure_that_frees_the_same_capacity() -> None:
    running = [
        run("v1", "vision", 32),
        run("v2", "vision", 32),
        run("s1", "speech", 32, ends_s=NOW + 300),
    ]
    job = QueuedJob("n1", "nlp", {"H800": 16}, blocked_since_s=NOW - 100.0)
    plan = targets(job, running)
    assert plan.decision is PreemptionDecision.WAIT  # type: ignore[attr-defined]
    assert "1 job of another tenant" in plan.reason  # type: ignore[attr-defined]
    late = QueuedJob("n1", "nlp", {"H800": 16}, blocked_since_s=NOW - 700.0)
    assert targets(late, running).decision is PreemptionDecision.PREEMPT  # type: ignore[attr-defined]
    far = [run("v1", "vision", 64), run("s1", "speech", 32, ends_s=NOW + 3600)]
    assert targets(job, far).decision is PreemptionDecision.PREEMPT  # type: ignore[attr-defined]


def test_grace_reason_names_only_the_job_s_own_tenant_s_jobs() -> None:
    # the reason is the queued job's (its page, the queue, the API): another tenant's job
    # is counted, never named by its id (accounts.access's masking rule)
    running = [
        run("v1", "vision", 32, ends_s=NOW + 200),
        run("n7", "nlp", 16, ends_s=NOW + 300),
        run("s1", "speech", 32, ends_s=NOW + 300),
        run("s2", "speech", 16, ends_s=NOW + 400),
    ]
    job = QueuedJob("n1", "nlp", {"H800": 96}, blocked_since_s=NOW - 100.0)
    plan = targets(job, running, policy=PreemptionPolicy(min_run_s=1800.0, grace_s=600.0))
    assert plan.decision is PreemptionDecision.WAIT  # type: ignore[attr-defined]
    reason = plan.reason  # type: ignore[attr-defined]
    assert "n7 and 3 jobs of other tenants to finish" in reason
    assert not any(x in reason for x in ("v1", "s1", "s2", "vision", "speech"))


def test_lower_priority_job_of_the_same_tenant_yields() -> None:
    running = [
        run("n_low", "nlp", 32, priority=0),
        run("v1", "vision", 32),
        run("s1", "speech", 32),
    ]
    plan = targets(QueuedJob("n_hi", "nlp", {"H800": 32}, priority=5), running)
    assert plan.victims == ("n_low",) and plan.kind == "priority"  # type: ignore[attr-defined]
    same = targets(QueuedJob("n_eq", "nlp", {"H800": 32}), running)
    assert same.decision is PreemptionDecision.BLOCKED  # type: ignore[attr-defined]


def test_borrower_may_take_from_a_bigger_borrower_only_down_to_equal_shares() -> None:
    # vision borrows 32 (share 32/96), speech borrows 0 and wants 16 beyond nominal
    running = [
        run("v1", "vision", 32),
        run("v2", "vision", 16),
        run("v3", "vision", 16),
        run("s1", "speech", 32),
    ]
    plan = targets(QueuedJob("s2", "speech", {"H800": 16}), running)
    assert plan.decision is PreemptionDecision.PREEMPT and plan.kind == "fair_share"  # type: ignore[attr-defined]
    # after: speech borrows 16, vision 16: equal, allowed (<=); one more is not
    running2 = [r for r in running if r.id != plan.victims[0]] + [run("s2", "speech", 16)]  # type: ignore[attr-defined]
    again = targets(QueuedJob("s3", "speech", {"H800": 16}), running2)
    assert again.decision is PreemptionDecision.BLOCKED  # type: ignore[attr-defined]


def test_reclaim_only_policy_refuses_fair_share_preemption() -> None:
    running = [
        run("v1", "vision", 32),
        run("v2", "vision", 16),
        run("v3", "vision", 16),
        run("s1", "speech", 32),
    ]
    reclaim_only = PreemptionPolicy(min_run_s=1800.0, grace_s=600.0, fair_share=False)
    plan = targets(QueuedJob("s2", "speech", {"H800": 16}), running, policy=reclaim_only)
    assert plan.decision is PreemptionDecision.BLOCKED  # type: ignore[attr-defined]
    within = targets(QueuedJob("n1", "nlp", {"H800": 16}), running, policy=reclaim_only)
    assert within.kind == "reclaim"  # type: ignore[attr-defined]


def test_jain_index() -> None:
    assert jain_index([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([]) == 1.0


def test_what_evicting_victims_frees_counts_a_group_s_shared_nodes_once_all_leave() -> None:
    # (_freed answers in one pass over the running jobs: checked against the rule as
    # written, every group's members looked up, on random groups and victim sets)
    rng = random.Random(7)
    for _ in range(300):
        running = [
            RunningJob(
                id=f"j{i}",
                tenant="t",
                gpus={"H800": 8},
                frees={"H800": rng.choice((0, 8))},
                started_s=0.0,
                group=rng.choice((None, "g1", "g2", "g3")),
            )
            for i in range(rng.randint(1, 8))
        ]
        victims = rng.sample(running, rng.randint(0, len(running)))
        group_frees = {g: {"H800": 8 * k} for k, g in enumerate(("g1", "g2", "g3"), 1)}
        chosen = {v.id for v in victims}
        expected: dict[str, int] = {}
        for v in victims:
            expected["H800"] = expected.get("H800", 0) + v.frees["H800"]
        for gid in {v.group for v in victims if v.group is not None}:
            if all(r.id in chosen for r in running if r.group == gid):
                expected["H800"] = expected.get("H800", 0) + group_frees[gid]["H800"]
        assert _freed(victims, running, group_frees) == expected
