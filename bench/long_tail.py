"""Benchmark live long-tail migration (paper section 3, issue 14 item 4) as an ablation.

A pair in one co-execution group on a multi-node Ray (a head + 2 H20 + 1 H800 Ray nodes,
each its own raylet, 2 GPUs each), PostgreSQL, Redis and the controller's Celery worker
(threads x2, a process of its own per run, as bench/control_plane.py runs it: bench/live.py):
job A rolls out on both H20 nodes, job B, packed into A's group, on one of them; both train
on the H800 node. The same pair runs twice, with ROLLMUX_LONG_TAIL_THRESHOLD 0 (off) and
then 0.8: when A's rollout is tail-bound its workers on B's node hand their responses to
its workers on the other node, and B's rollout starts there.

Printed per run, from the phase records (the Ray actors' own stamps): the pair's makespan
(first phase start -> last phase end), the mean meta-iteration (the time between A's
rollout starts), the hand-overs, how long after the release B's rollout started (the
control-plane path: publish phase_tail -> controller -> dispatch) and how much earlier
than A's end; then the speed-up, and the load average. The paper measures 1.06-1.28x end
to end on pairs (real response lengths); here the lengths are `emulated`'s log-normal.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollmux_bench \\
    REDIS_URL=redis://127.0.0.1:6379/4 .venv/bin/python bench/long_tail.py

Use a Redis db of your own: it is flushed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.live import Stack, setup  # noqa: E402  (after the path)

GPUS = 2


def submit(world: Any, args: argparse.Namespace, tag: str) -> list[int]:
    from tests.workers.builders import make_job

    shape = {
        "iterations": args.iterations, "slo_class": world.bronze, "train_gpus": GPUS,
        "t_roll_max_s": args.roll_s, "t_roll_min_s": args.roll_s, "t_train_max_s": args.train_s,
        "t_train_min_s": args.train_s, "time_scale": args.time_scale, "host_mem_gb": 100.0,
    }  # fmt: skip
    a = make_job(world, name=f"a-{tag}", rollout_gpus=2 * GPUS, **shape)
    b = make_job(world, name=f"b-{tag}", rollout_gpus=GPUS, **shape)
    return [a.pk, b.pk]


def measure(ids: list[int]) -> dict[str, Any]:
    from rollmux_web.workflow.models import PhaseRecord, Placement

    a, b = ids
    groups = set(Placement.objects.filter(job_id__in=ids).values_list("group_id", flat=True))
    phases = list(PhaseRecord.objects.filter(job_id__in=ids).order_by("started_at"))
    start = min(p.started_at for p in phases)
    end = max(p.finished_at for p in phases)
    a_rolls = [p for p in phases if p.job_id == a and p.kind == "rollout"]
    b_rolls = {p.iteration: p for p in phases if p.job_id == b and p.kind == "rollout"}
    # from A's second rollout on: the first meta-iteration is the workers' cold start
    # (creating them takes seconds on a loaded machine), the same with and without migration
    warm = a_rolls[1].started_at if len(a_rolls) > 1 else start
    pairs = zip(a_rolls[1:], a_rolls[2:], strict=False)
    meta = [(y.started_at - x.started_at).total_seconds() for x, y in pairs]
    lag, ahead = [], []
    for p in a_rolls:
        released = (p.metrics or {}).get("tail_released")
        nxt = b_rolls.get(p.iteration)
        if not released or nxt is None:
            continue
        at = p.started_at.timestamp() + min(released.values())
        lag.append(nxt.started_at.timestamp() - at)
        ahead.append((p.finished_at - nxt.started_at).total_seconds())
    return {
        "one_group": len(groups) == 1,
        "makespan": (end - start).total_seconds(),
        "warm": (end - warm).total_seconds(),
        "meta": statistics.mean(meta) if meta else float("nan"),
        "handovers": len(lag),
        "rollouts": len(a_rolls),
        "lag": lag,
        "ahead": ahead,
    }


def print_phases(ids: list[int]) -> None:
    from rollmux_web.workflow.models import PhaseRecord

    phases = list(PhaseRecord.objects.filter(job_id__in=ids).order_by("started_at"))
    t0 = phases[0].started_at
    for p in phases:
        s = (p.started_at - t0).total_seconds()
        f = (p.finished_at - t0).total_seconds()
        released = (p.metrics or {}).get("tail_released") or {}
        cut = "".join(f" {n} freed at {s + t:.2f}" for n, t in released.items())
        print(f"  job {p.job_id} {p.kind} {p.iteration} {','.join(p.node_names)}:"
              f" {s:.2f}-{f:.2f}{cut}")  # fmt: skip


def show(name: str, m: dict[str, Any]) -> None:
    ms = 1000.0

    def span(xs: list[float]) -> str:
        return f"{min(xs) * ms:.0f}-{max(xs) * ms:.0f} ms (mean {statistics.mean(xs) * ms:.0f})"

    print(
        f"{name}: makespan {m['makespan']:.2f} s ({m['warm']:.2f} s after the cold start),"
        f" meta-iteration {m['meta']:.2f} s,"
        f" hand-overs {m['handovers']} of {m['rollouts']} rollouts"
        + ("" if m["one_group"] else " (NOT one group: the pair did not pack)")
    )
    if m["lag"]:
        print(f"  B's rollout started {span(m['lag'])} after the release,"
              f" {span(m['ahead'])} before A's rollout ended")  # fmt: skip


def run(args: argparse.Namespace) -> None:
    setup()
    from rollmux_web.inventory.models import GpuType, Node
    from tests.factories import make_world
    from tests.workers.multinode import wait_all_done
    from workers import triggers

    with Stack("long_tail") as stack:
        world = make_world(rollout_nodes=2, train_nodes=1)
        Node.objects.update(gpus=GPUS)
        GpuType.objects.update(gpus_per_node=GPUS)
        names = tuple(Node.objects.order_by("name").values_list("name", flat=True))
        stack.multinode(names, gpus=GPUS, port=args.ray_port)
        results = {}
        for name, threshold in (("off", 0.0), ("on", args.threshold)):
            # the controller reads the threshold (its rollout orders name the tail nodes)
            with stack.worker(env={"ROLLMUX_LONG_TAIL_THRESHOLD": str(threshold)}):
                ids = submit(world, args, name)
                triggers.request_planning()
                wait_all_done(ids, timeout=600)
            results[name] = measure(ids)
            if args.phases:
                print_phases(ids)
            show(f"long-tail migration {name} (threshold {threshold})", results[name])
        off, on = results["off"], results["on"]
        print(f"speed-up off / on: makespan after the cold start {off['warm'] / on['warm']:.3f}x,"
              f" meta-iteration {off['meta'] / on['meta']:.3f}x"
              f" (whole makespan {off['makespan'] / on['makespan']:.3f}x)"
              f" (load average {os.getloadavg()[0]:.1f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--roll-s", type=float, default=120.0, help="rollout, profile seconds")
    parser.add_argument("--train-s", type=float, default=40.0, help="training, profile seconds")
    parser.add_argument("--time-scale", type=float, default=40.0, help="wall = profile / this")
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--phases", action="store_true", help="print every phase record")
    parser.add_argument(
        "--ray-port", type=int, default=None, help="the head's GCS port (default: a free one)"
    )
    run(parser.parse_args())


if __name__ == "__main__":
    main()
