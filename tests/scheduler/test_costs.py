"""The core's cost arithmetic (scheduler.costs): splits, shares and exact money."""

from __future__ import annotations

from decimal import Decimal

import pytest

from scheduler.costs import (
    CostSplit,
    busy_idle_split,
    idle_fraction,
    node_cost,
    run_cost,
    share_node_cost,
    solo_disagg_cost,
    solo_iteration_cost,
)


def test_a_node_costs_its_price_for_every_allocated_second_busy_or_idle() -> None:
    # One H800 node (8 x 5.28 $/h) allocated 90 min, busy 60 of them.
    split = busy_idle_split(5400.0, 3600.0, 8 * 5.28)
    assert split.busy_usd == pytest.approx(42.24)
    assert split.idle_usd == pytest.approx(21.12)
    assert split.total_usd == pytest.approx(node_cost(5400.0, 8 * 5.28))
    assert idle_fraction(5400.0, 3600.0) == pytest.approx(1 / 3)
    assert idle_fraction(0.0, 0.0) == 0.0
    with pytest.raises(ValueError, match="busy_s"):
        busy_idle_split(10.0, -1.0, 1.0)


def test_run_cost_sums_each_allocation_at_its_nodes_price() -> None:
    allocations = [("a", 0.0, 3600.0), ("b", 1800.0, 3600.0), ("a", 7200.0, 9000.0)]
    assert run_cost(allocations, {"a": 10.0, "b": 4.0}) == pytest.approx(10 + 2 + 5)


def test_members_pay_their_busy_time_and_share_the_bubble_by_membership() -> None:
    # A node of 36 $/h allocated 1 h: A ran 20 min, B 10 min; A was a member all hour,
    # B half of it, so A carries 2/3 of the 30 idle minutes.
    shares = share_node_cost(
        allocated_s=3600.0,
        price_per_node_hour=36.0,
        busy_s={"A": 1200.0, "B": 600.0},
        member_s={"A": 3600.0, "B": 1800.0},
    )
    assert shares["A"].busy_usd == pytest.approx(12.0)
    assert shares["B"].busy_usd == pytest.approx(6.0)
    assert shares["A"].idle_usd == pytest.approx(12.0)
    assert shares["B"].idle_usd == pytest.approx(6.0)
    assert sum(s.total_usd for s in shares.values()) == pytest.approx(36.0)
    with pytest.raises(ValueError, match="exceeds"):
        share_node_cost(
            allocated_s=10.0, price_per_node_hour=1.0, busy_s={"A": 11.0}, member_s={"A": 10.0}
        )


def test_exact_money_stays_decimal() -> None:
    shares = share_node_cost(
        allocated_s=Decimal(3600),
        price_per_node_hour=Decimal("42.24"),
        busy_s={"A": Decimal(1800)},
        member_s={"A": Decimal(3600), "B": Decimal(3600)},
    )
    assert shares["A"] == CostSplit(busy_usd=Decimal("21.12"), idle_usd=Decimal("10.56"))
    assert shares["B"] == CostSplit(busy_usd=Decimal(0), idle_usd=Decimal("10.56"))


def test_a_solo_iteration_pays_the_dependency_bubble_on_both_pools() -> None:
    # 330 s rollout on 8 H20 (1.85) + 120 s training on 16 H800 (5.28).
    split = solo_iteration_cost(
        t_roll_s=330.0,
        t_train_s=120.0,
        rollout_gpus=8,
        train_gpus=16,
        rollout_price_per_gpu_hour=1.85,
        train_price_per_gpu_hour=5.28,
    )
    assert split.busy_usd == pytest.approx((330 * 8 * 1.85 + 120 * 16 * 5.28) / 3600)
    assert split.idle_usd == pytest.approx((120 * 8 * 1.85 + 330 * 16 * 5.28) / 3600)
    assert split.total_usd == pytest.approx(
        solo_disagg_cost(
            450.0,
            rollout_gpus=8,
            train_gpus=16,
            rollout_price_per_gpu_hour=1.85,
            train_price_per_gpu_hour=5.28,
        )
    )
