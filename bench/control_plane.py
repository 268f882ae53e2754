"""Benchmark the live control plane: Celery (Redis broker) + PostgreSQL + Ray actors.

What it measures, from the phase records (start/end stamped by the Ray actors themselves):

- same-node switch (the headline): a phase's end -> the next phase's start on the same
  node, for the pairs where that end is the event that started the next phase. That is
  the whole control-plane path of the paper's runtime hook: the actor publishes
  `phase_finished` to Redis -> a Celery worker claims the phase record, advances the
  group's GroupRuntime under the group row lock, records the next phases, commits ->
  dispatches them -> the next actor call starts. Target p99 < 100 ms (the paper's warm
  switch is ~2 s, the control plane must be a small part of it).
- ready -> start, for every phase after a job's first: start - max(its node freed, its own
  previous phase ended); this one also counts waits the round-robin order imposes.
- throughput: phases per second the controller sustains with near-zero phase durations.
- baselines measured in the same run: one Ray actor call round trip and one Celery task
  round trip through Redis (no DB), so the ratios show what the controller itself adds.

It builds a scratch database (Django's test-database machinery: `test_<name>` of
DATABASE_URL, dropped at the end), starts a local Ray advertising its nodes (or, with
`--multinode`, a head plus one Ray node per inventory node, each its own raylet), and a
Celery worker subprocess (threads pool) joined to that Ray.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollmux_bench \\
    REDIS_URL=redis://127.0.0.1:6379/4 .venv/bin/python bench/control_plane.py

Use a Redis db of your own: it is flushed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.live import Stack, pct, ping_worker, setup, wait_done  # noqa: E402  (after the path)


def make_world(rollout_nodes: int, train_nodes: int) -> Any:
    from tests.factories import make_world as mk

    return mk(rollout_nodes=rollout_nodes, train_nodes=train_nodes)


def submit(
    world: Any, n: int, iterations: int, roll_s: float, train_s: float, scale: float
) -> list[int]:
    from rollmux_web.inventory.models import GpuType

    gpus = GpuType.objects.order_by("pk").values_list("gpus_per_node", flat=True).first() or 8
    from rollmux_web.jobs.models import Job

    ids = []
    for i in range(n):
        job = Job.objects.create(
            name=f"bench-{i}",
            tenant=world.vision,
            submitter=world.alice,
            slo_class=world.bronze,
            runner="emulated",
            iterations=iterations,
            rollout_gpus=gpus,  # one node of each pool
            train_gpus=gpus,
            t_roll_max_s=roll_s * scale,
            t_roll_min_s=roll_s * scale,
            t_train_max_s=train_s * scale,
            t_train_min_s=train_s * scale,
            host_mem_gb=100.0,
            time_scale=scale,
        )
        ids.append(job.pk)
    return ids


def node_switch_delays(ids: list[int]) -> tuple[list[float], list[float]]:
    """Return, per node, end of a phase -> start of the next phase on that node, for the
    pairs where that end is the event that started the next phase (no other phase ended
    in between: the delay is the control plane's alone, no round-robin order wait).

    Split in two: (warm, cold). A cold one starts a placement's first phase: its dispatch
    also creates the job's coordinator actor (a new Ray worker process), the paper's cold
    start, a different event from the warm phase switch the target is about."""
    import bisect

    from rollmux_web.workflow.models import PhaseRecord

    phases = list(
        PhaseRecord.objects.filter(job_id__in=ids, state="succeeded").order_by("started_at")
    )
    ends = sorted(p.finished_at for p in phases)
    last_on: dict[str, Any] = {}
    warm, cold = [], []
    for p in phases:
        prev = [last_on[n] for n in p.node_names if n in last_on]
        if prev:
            q = max(prev, key=lambda x: x.finished_at)
            i = bisect.bisect_right(ends, p.queued_at) - 1
            if i >= 0 and ends[i] == q.finished_at and p.queued_at >= q.finished_at:
                delay = (p.started_at - q.finished_at).total_seconds()
                (cold if p.warm_start is False else warm).append(delay)
        for n in p.node_names:
            last_on[n] = p
    return warm, cold


def switch_delays(ids: list[int]) -> list[float]:
    """Return, per phase, start - max(node free, own previous phase end), in seconds."""
    from rollmux_web.workflow.models import PhaseRecord

    phases = list(
        PhaseRecord.objects.filter(job_id__in=ids, state="succeeded").order_by("started_at")
    )
    node_free: dict[str, Any] = {}
    job_ready: dict[int, Any] = {}
    delays = []
    for p in phases:
        ready = [job_ready[p.job_id]] if p.job_id in job_ready else []
        ready += [node_free[n] for n in p.node_names if n in node_free]
        if p.job_id in job_ready and ready:
            delays.append((p.started_at - max(ready)).total_seconds())
        job_ready[p.job_id] = p.finished_at
        for n in p.node_names:
            node_free[n] = p.finished_at
    return delays


def split_delays(ids: list[int]) -> tuple[list[float], list[float]]:
    """Split each switch into (previous phase end -> controller picked the report up) and
    (controller picked it up -> next phase started), using queued_at = the controller's
    clock when it handled the event that started the phase."""
    from rollmux_web.workflow.models import PhaseRecord

    phases = list(
        PhaseRecord.objects.filter(job_id__in=ids, state="succeeded").order_by("finished_at")
    )
    ends = sorted(p.finished_at for p in phases)
    pickup, handle = [], []
    import bisect

    for p in phases:
        i = bisect.bisect_right(ends, p.queued_at) - 1
        if i < 0:
            continue
        prev_end = ends[i]
        gap = (p.queued_at - prev_end).total_seconds()
        if 0 <= gap < 60:
            pickup.append(gap)
            handle.append((p.started_at - p.queued_at).total_seconds())
    return pickup, handle


def baseline_ray_call(n: int = 200) -> list[float]:
    import ray

    @ray.remote(num_cpus=0)
    class Echo:
        def ping(self) -> int:
            return 1

    actor = Echo.remote()
    ray.get(actor.ping.remote())
    out = []
    for _ in range(n):
        t = time.perf_counter()
        ray.get(actor.ping.remote())
        out.append(time.perf_counter() - t)
    ray.kill(actor)
    return out


def run(args: argparse.Namespace) -> None:
    setup()
    from rollmux_web.inventory.models import GpuType, Node
    from tests.workers.multinode import PRODUCTION_HEALTH_CHECKS
    from workers import triggers

    print(
        f"load average (1/5/15 min) at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    with Stack("control_plane") as stack:
        world = make_world(args.rollout_nodes, args.train_nodes)
        t = time.perf_counter()
        if args.multinode:
            # a head + one Ray node (its own raylet) per inventory node, labelled with its
            # name and declaring `--gpus` GPUs: one worker per GPU, pinned there; the
            # inventory says what the Ray nodes declare (a Ray node with fewer GPUs than
            # the inventory names fails its phases at once)
            Node.objects.update(gpus=args.gpus)
            GpuType.objects.update(gpus_per_node=args.gpus)
            names = tuple(Node.objects.order_by("name").values_list("name", flat=True))
            # Ray's health checks as production runs them (1 s), not the tests' 0.3 s: ten
            # raylets checked three times a second are load of their own on a small machine
            stack.multinode(
                names, gpus=args.gpus, port=args.ray_port, health_checks=PRODUCTION_HEALTH_CHECKS
            )
            print(f"multi-node Ray up in {time.perf_counter() - t:.1f} s: a head + {len(names)}"
                  f" nodes x {args.gpus} GPUs")  # fmt: skip
        else:
            stack.local_ray()
            print(f"local Ray up in {time.perf_counter() - t:.1f} s")
        with stack.worker(
            pool=args.pool, concurrency=args.concurrency, log_level=args.worker_log_level
        ):
            celery_rt = ping_worker(100)
            ray_rt = baseline_ray_call()
            measure(args, world, triggers, celery_rt, ray_rt)


def measure(
    args: argparse.Namespace, world: Any, triggers: Any, celery_rt: list[float], ray_rt: list[float]
) -> None:
    """Run the two runs and print what they measured."""
    # 1. switch delay: phases long enough that the node is the bottleneck
    ids = submit(
        world, args.jobs, args.iterations, args.phase_ms / 1000, args.phase_ms / 2000, 1000.0
    )
    triggers.request_planning()
    wall = wait_done(ids, timeout=600)
    delays = switch_delays(ids)
    node_delays, cold_delays = node_switch_delays(ids)
    pickup, handle = split_delays(ids)
    from rollmux_web.workflow.models import PhaseRecord, Placement

    groups = len(set(Placement.objects.filter(job_id__in=ids).values_list("group_id", flat=True)))
    ray_call = [  # the controller's dispatch -> the coordinator's start (its stamp)
        float(m["dispatch_s"])
        for m in PhaseRecord.objects.filter(
            job_id__in=ids, state="succeeded", warm_start=True
        ).values_list("metrics", flat=True)
        if m and "dispatch_s" in m
    ]
    n_phases = PhaseRecord.objects.filter(job_id__in=ids).count()

    # 2. throughput: near-zero phases, the controller is the bottleneck
    ids2 = submit(world, args.jobs, args.iterations, 0.001, 0.001, 1000.0)
    triggers.request_planning()
    wall2 = wait_done(ids2, timeout=600)
    n2 = PhaseRecord.objects.filter(job_id__in=ids2, state="succeeded").count()
    first = PhaseRecord.objects.filter(job_id__in=ids2).order_by("started_at").first()
    last = PhaseRecord.objects.filter(job_id__in=ids2).order_by("-finished_at").first()
    span = (last.finished_at - first.started_at).total_seconds() if first and last else wall2
    delays2 = switch_delays(ids2)
    # inside a 1 ms phase: the coordinator's calls to the job's workers (and the sync)
    inside: dict[str, list[float]] = {}
    for kind, started, finished in PhaseRecord.objects.filter(
        job_id__in=ids2, state="succeeded"
    ).values_list("kind", "started_at", "finished_at"):
        inside.setdefault(kind, []).append((finished - started).total_seconds())
    node_delays2, _ = node_switch_delays(ids2)

    ms = 1000.0
    print()
    print(
        f"load average (1/5/15 min) at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores"
    )
    print("control plane: actor -> Redis -> Celery worker (PostgreSQL) -> Ray actor")
    print(
        f"  worker: {args.pool} pool x{args.concurrency}; {args.jobs} jobs x {args.iterations} iterations; {groups} co-execution groups"
    )
    print(f"  run 1 ({args.phase_ms:.0f} ms rollouts): {n_phases} phases in {wall:.1f} s")
    print(
        f"    phase end -> next phase start on the same node (that end started it), warm: p50 {pct(node_delays, 50) * ms:.1f} ms  p99 {pct(node_delays, 99) * ms:.1f} ms  max {max(node_delays) * ms:.1f} ms  (n={len(node_delays)})"
    )
    if cold_delays:
        print(
            f"    the same, starting a placement's first phase (cold: creates its coordinator; not in the target): p50 {pct(cold_delays, 50) * ms:.1f} ms  max {max(cold_delays) * ms:.1f} ms  (n={len(cold_delays)})"
        )
    print(
        f"    ready -> start, any phase (includes round-robin order waits): p50 {pct(delays, 50) * ms:.1f} ms  p99 {pct(delays, 99) * ms:.1f} ms  max {max(delays) * ms:.1f} ms  (n={len(delays)})"
    )
    print(
        f"      of which report -> controller p50 {pct(pickup, 50) * ms:.1f} ms"
        f"  p99 {pct(pickup, 99) * ms:.1f} ms; controller -> actor start"
        f" p50 {pct(handle, 50) * ms:.1f} ms  p99 {pct(handle, 99) * ms:.1f} ms"
    )
    print(
        f"        of which the Ray call (dispatched -> the coordinator's start, warm phases):"
        f" p50 {pct(ray_call, 50) * ms:.1f} ms  p99 {pct(ray_call, 99) * ms:.1f} ms"
        f"  (n={len(ray_call)})"
    )
    print(
        f"  run 2 (1 ms phases): {n2} phases in {span:.2f} s = {n2 / span:.0f} phases/s sustained"
    )
    print(
        f"    same-node switch p50 {pct(node_delays2, 50) * ms:.1f} ms  p99 {pct(node_delays2, 99) * ms:.1f} ms (n={len(node_delays2)});  ready -> start p50 {pct(delays2, 50) * ms:.1f} ms  p99 {pct(delays2, 99) * ms:.1f} ms"
    )
    print(
        "    a 1 ms phase's own time (the coordinator's calls to the job's workers): "
        + ", ".join(
            f"{kind} p50 {pct(v, 50) * ms:.1f} ms (n={len(v)})"
            for kind, v in sorted(inside.items())
        )
    )
    print("  baselines measured in this run:")
    print(
        f"    Ray actor call round trip   p50 {pct(ray_rt, 50) * ms:.2f} ms  p99 {pct(ray_rt, 99) * ms:.2f} ms"
    )
    print(
        f"    Celery task round trip      p50 {pct(celery_rt, 50) * ms:.2f} ms  p99 {pct(celery_rt, 99) * ms:.2f} ms"
    )
    print(
        f"    same-node switch p50 / Celery round trip p50 = {pct(node_delays, 50) / pct(celery_rt, 50):.1f}x"
    )
    p99 = pct(node_delays, 99)
    verdict = "meets" if p99 < 0.100 else "MISSES"
    print(f"  target p99 < 100 ms (same-node switch): {verdict} (p99 {p99 * ms:.1f} ms)")
    print(f"  vs the paper's ~2 s warm switch: p99 is {p99 / 2.0 * 100:.1f}% of it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--phase-ms", type=float, default=100.0, help="rollout ms (train: half)")
    parser.add_argument("--rollout-nodes", type=int, default=6)
    parser.add_argument("--train-nodes", type=int, default=4)
    parser.add_argument(
        "--concurrency", type=int, default=2, help="worker threads (bin/run.sh and compose: 2)"
    )
    parser.add_argument("--pool", default="threads", choices=["threads", "prefork", "solo"])
    parser.add_argument("--worker-log-level", default="WARNING")
    parser.add_argument(
        "--multinode", action="store_true",
        help="one Ray node per inventory node (ray.cluster_utils.Cluster) instead of one local Ray",
    )  # fmt: skip
    parser.add_argument("--gpus", type=int, default=1, help="--multinode: GPUs per Ray node")
    parser.add_argument(
        "--ray-port",
        type=int,
        default=None,
        help="--multinode: head GCS port (default: a free one)",
    )
    run(parser.parse_args())


if __name__ == "__main__":
    main()
