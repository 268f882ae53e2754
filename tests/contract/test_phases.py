"""The phase contract's messages: typed outcomes, and they survive a rolling upgrade (QA: a
newer worker's report with a field the controller did not know failed every report of the
phase)."""

from __future__ import annotations

import ast
import logging
import sys
from pathlib import Path

import pytest

from rollmux_contract.phases import Outcome, PhaseOrder, PhaseReport


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
    with caplog.at_level(logging.WARNING, logger="rollmux_contract.phases"):
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


def test_a_report_says_whose_failure_it_was_in_its_outcome_and_why_in_its_reason() -> None:
    assert PhaseReport(1).ok and PhaseReport(1, "ok").outcome is Outcome.OK
    report = PhaseReport.failed(7, Outcome.LOST, "its host (actor) died", job_id=3)
    assert (report.outcome, report.reason, report.job_id, report.ok) == (
        Outcome.LOST,
        "its host (actor) died",
        3,
        False,
    )
    assert report.summary == "lost: its host (actor) died" and report.lost_node is None
    assert PhaseReport.failed(2, Outcome.LOAD_ERROR, "not allowlisted").load_error
    assert len(PhaseReport.failed(2, Outcome.ERROR, "x" * 5000).reason) == 480
    with pytest.raises(ValueError, match="'error: boom'"):
        PhaseReport(1, "error: boom")  # type: ignore[arg-type]  # a kind, not a sentence


def test_a_lost_node_travels_as_its_own_field() -> None:
    report = PhaseReport.failed(
        7, Outcome.LOST, "node h20-1.x died (RayActorError)", lost_node="h20-1.x", group_id=4
    )
    data = report.to_dict()
    assert data["outcome"] == "lost" and data["lost_node"] == "h20-1.x"
    back = PhaseReport.from_dict(data)
    assert back == report and back.outcome is Outcome.LOST
    with pytest.raises(ValueError, match="lost_node"):
        PhaseReport.failed(7, Outcome.ERROR, "boom", lost_node="h20-1")


@pytest.mark.parametrize(
    ("outcome", "kind", "reason", "lost_node"),
    [
        ("ok", Outcome.OK, "", None),
        ("error: ValueError: boom", Outcome.ERROR, "ValueError: boom", None),
        ("load-error: runner 'x:Y' is not covered", Outcome.LOAD_ERROR, "runner 'x:Y' is not covered", None),
        ("lost: actor died: RayActorError", Outcome.LOST, "actor died: RayActorError", None),
        ("lost: node h20-1 died (RayActorError)", Outcome.LOST, "node h20-1 died (RayActorError)", "h20-1"),
        (
            "lost: node h20-1, h20-2: no live Ray node has the label rollmux.io/node=h20-1",
            Outcome.LOST,
            "node h20-1, h20-2: no live Ray node has the label rollmux.io/node=h20-1",
            "h20-1",
        ),
        # a kind this side does not know (a newer peer's): the job's error, to be safe
        ("preempted: by a higher tier", Outcome.ERROR, "preempted: by a higher tier", None),
        ("something odd", Outcome.ERROR, "something odd", None),
    ],
)  # fmt: skip
def test_an_older_peer_s_report_is_read_into_the_typed_fields(
    outcome: str, kind: Outcome, reason: str, lost_node: str | None
) -> None:
    # what a host before the typed contract sent: one "kind: why" string, no reason field
    old = {"phase_id": 7, "outcome": outcome, "started_at": 1.0, "finished_at": 2.0}
    report = PhaseReport.from_dict(old)
    assert (report.outcome, report.reason, report.lost_node) == (kind, reason, lost_node)
    assert report.summary == outcome or kind is Outcome.ERROR


def test_the_contract_imports_only_the_standard_library() -> None:
    import rollmux_contract

    stdlib = set(sys.stdlib_module_names) | {"__future__", "rollmux_contract"}
    here = Path(rollmux_contract.__file__).parent
    for path in sorted(here.glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {
            (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        assert {m for m in imported if m.split(".")[0] not in stdlib} == set(), path.name


def test_a_pools_metrics_add_counts_and_pool_the_reward_over_its_ranks() -> None:
    from rollmux_contract.phases import pool_metrics

    # rank 0: 8 responses, rewards mean 1.0 std 0; rank 1: 24 responses, mean 0.0 std 0
    got = pool_metrics([
        {"reward_mean": 1.0, "reward_std": 0.0, "samples": 8, "tokens_per_s": 100.0, "load_s": 1.0},
        {"reward_mean": 0.0, "reward_std": 0.0, "samples": 24, "tokens_per_s": 50.0, "load_s": 3.0},
    ])  # fmt: skip
    assert got["samples"] == 32 and got["tokens_per_s"] == 150.0
    assert got["reward_mean"] == 0.25  # weighted by samples: 8 of 32 responses scored 1
    # the pooled std of 8 ones and 24 zeros: sqrt(0.25 * 0.75)
    assert abs(got["reward_std"] - (0.25 * 0.75) ** 0.5) < 1e-12
    assert got["load_s"] == 2.0  # anything else: the mean over the ranks
    assert pool_metrics([{"reward_mean": 0.5}]) == {"reward_mean": 0.5}
