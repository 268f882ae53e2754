"""The emulated rollout's long-tail hooks (no Ray): progress along its response lengths, a
released worker stops at once and hands its unfinished share over."""

from __future__ import annotations

import threading
import time
from typing import Any

from workers.runners import RunnerContext, WorkerContext
from workers.runners.emulated import RESPONSES, EmulatedRollout, response_lengths


def rollout_side(world_size: int = 2) -> EmulatedRollout:
    ctx = RunnerContext(7, 3, 100.0, 100.0, 10.0, 10.0, 1.0, time_scale=100.0)
    side = EmulatedRollout()
    side.setup(WorkerContext(job=ctx, role="rollout", rank=0, world_size=world_size, node="h20-0"))
    return side


def test_response_lengths_are_a_seeded_long_tail() -> None:
    ctx = RunnerContext(7, 3, 100.0, 100.0, 10.0, 10.0, 1.0)
    lengths = response_lengths(ctx, 0)
    assert lengths == response_lengths(ctx, 0) != response_lengths(ctx, 1)
    assert len(lengths) == RESPONSES and lengths == sorted(lengths) and lengths[-1] == 1.0
    # the last 20% of the responses take a large share of the rollout: the tail
    assert lengths[int(0.8 * RESPONSES)] < 0.75


def test_progress_rises_and_a_released_worker_stops_and_hands_its_share_over() -> None:
    side = rollout_side()
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(r=side.rollout(0)))
    t0 = time.monotonic()
    thread.start()
    time.sleep(0.3)  # of a 1 s rollout
    early = side.progress()
    time.sleep(0.3)
    later = side.progress()
    assert 0.0 <= early < later < 1.0
    work = side.release_tail()
    thread.join(timeout=2)
    took = time.monotonic() - t0
    metrics, _batch = out["r"]
    assert took < 0.9 and metrics["released_after_s"] < 0.9
    # its share (of 2 workers) of the responses not done when released
    assert 0 < work["responses"] <= RESPONSES // 2
    peer = rollout_side()  # takes the share over while its own rollout runs
    thread = threading.Thread(target=lambda: out.update(p=peer.rollout(1)))
    thread.start()
    time.sleep(0.1)
    peer.take_tail(work)
    thread.join(timeout=3)
    metrics, _ = out["p"]
    assert metrics["tail_responses_taken"] == work["responses"]
    assert "released_after_s" not in metrics
