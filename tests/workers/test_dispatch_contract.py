"""The dispatch contract's messages survive a rolling upgrade (QA: a newer worker's
report with a field the controller did not know failed every report of the phase)."""

from __future__ import annotations

import logging

import pytest

from workers.dispatch.base import PhaseOrder, PhaseReport


def _order() -> PhaseOrder:
    return PhaseOrder(
        phase_id=7, job_id=3, placement_id=5, kind="rollout", iteration=2,
        nodes=("h20-1",), pinned_nodes=("h20-1", "h800-1"), runner="emulated",
        context={"job_id": 3}, rollout_nodes=("h20-1",), train_nodes=("h800-1",),
        node_gpus={"h20-1": 2},
    )  # fmt: skip


def test_messages_round_trip() -> None:
    order = _order()
    assert PhaseOrder.from_dict(order.to_dict()) == order
    report = PhaseReport(7, "ok", 1.0, 2.0, True, {"reward": 0.5}, released={"h20-1": 1.5})
    assert PhaseReport.from_dict(report.to_dict()) == report


def test_a_newer_peer_s_unknown_fields_are_dropped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = {**PhaseReport(7, "ok", 1.0, 2.0).to_dict(), "shards_moved": 4}
    with caplog.at_level(logging.WARNING, logger="workers.dispatch.base"):
        report = PhaseReport.from_dict(data)
    assert report.ok and report.finished_at == 2.0
    assert "shards_moved" in caplog.text
    order = PhaseOrder.from_dict({**_order().to_dict(), "priority": 1})
    assert order == _order()


def test_an_older_peer_s_missing_fields_take_their_defaults() -> None:
    data = PhaseReport(7, "ok", 1.0, 2.0, released={"h20-1": 1.5}).to_dict()
    del data["released"], data["bytes_moved"]
    report = PhaseReport.from_dict(data)
    assert report.released == {} and report.bytes_moved is None
    order = _order().to_dict()
    del order["node_gpus"], order["tail_nodes"]
    assert PhaseOrder.from_dict(order).node_gpus == {}
