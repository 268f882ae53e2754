"""Benchmark the weight sync between the pools on a local multi-node Ray.

The cluster: a head plus `--train-nodes` H800 and `--rollout-nodes` H20 Ray nodes (each
its own raylet on loopback, `--gpus` GPUs declared each), built with
`ray.cluster_utils.Cluster`. One job's workers (one per GPU) run the emulated runner with a
weight blob of `--mb` MB. Per plan and per sync it reports the bytes that crossed from the
training pool to the rollout pool and the time:

- topology-aware (paper section 6, what the dispatcher runs): the weights are cut into
  one shard per rollout worker, each shard crosses once (trainer -> its rollout worker),
  then the rollout workers exchange shards inside their pool;
- flat (the baseline, veRL's flat gather): every rollout worker fetches every shard from
  the trainers. Ray's object store keeps one copy per node, so the weights cross once per
  rollout node (an NCCL all-gather would cross once per rollout GPU: shown too).

All nodes share one machine's loopback, so the cross-pool link is no slower than the
in-pool one here: the times show the plans' overheads, the bytes show what a real slow
link would carry (the paper: 20 Gbps between the pools; the line "at 20 Gbps" converts).

    .venv/bin/python bench/sync.py --mb 64 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)  # Ray's workers import the project from the cluster's working directory
from workers import ray_env  # noqa: E402  (after the path)

ray_env.apply(override=False)

LINK_GBPS = 20.0  # the paper's cross-pool link


def run(args: argparse.Namespace) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from workers.dispatch import PhaseOrder
    from workers.dispatch.ray_dispatcher import NAMESPACE, NODE_LABEL, JobCoordinatorActor
    from workers.runners import RunnerContext
    from workers.runners.emulated import WEIGHTS_FRACTION

    store = int(max(256, 4 * args.mb) * 2**20)
    t0 = time.perf_counter()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "gcs_server_port": args.port, "include_dashboard": False},
    )
    rollout = tuple(f"h20-{i}" for i in range(args.rollout_nodes))
    train = tuple(f"h800-{i}" for i in range(args.train_nodes))
    for name in rollout + train:
        cluster.add_node(
            num_cpus=0, num_gpus=args.gpus, labels={NODE_LABEL: name}, object_store_memory=store
        )
    ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
    print(f"cluster up in {time.perf_counter() - t0:.1f} s: {len(train)} H800 + {len(rollout)} H20"
          f" Ray nodes x {args.gpus} GPUs")  # fmt: skip
    try:
        weights_gb = args.mb * 2**20 / (2**30 * WEIGHTS_FRACTION)  # the emulated blob's scale
        ctx = RunnerContext(
            job_id=1, iterations=1, t_roll_min_s=0.0, t_roll_max_s=0.0, t_train_min_s=0.0,
            t_train_max_s=0.0, host_mem_gb=1.0, weights_gb=weights_gb,
        )  # fmt: skip
        coordinator: Any = JobCoordinatorActor.options(name="bench-sync").remote(
            "emulated", ctx.to_dict(), ""
        )
        for pid, kind in enumerate(("rollout", "train"), start=1):  # set up, train once
            order = PhaseOrder(
                phase_id=pid, job_id=1, placement_id=1, kind=kind, iteration=0,
                nodes=rollout if kind == "rollout" else train, pinned_nodes=rollout + train,
                runner="emulated", context=ctx.to_dict(), rollout_nodes=rollout, train_nodes=train,
            )  # fmt: skip
            result = ray.get(coordinator.run_phase.remote(order.to_dict(), None), timeout=300)
            if result["outcome"] != "ok":
                raise SystemExit(f"{kind}: {result['outcome']}")
        rollout_gpus = len(rollout) * max(1, args.gpus)
        results: dict[str, list[dict[str, float]]] = {"topology": [], "flat": []}
        for _ in range(args.repeats):
            for plan in results:  # interleaved, so load on the machine hits both alike
                results[plan].append(ray.get(coordinator.sync_once.remote(plan), timeout=300))
        weights = results["topology"][0]["weights_bytes"]
        mb = 2**20
        print(f"\nweights {weights / mb:.1f} MB; {len(train) * max(1, args.gpus)} trainers ->"
              f" {rollout_gpus} rollout workers on {len(rollout)} nodes; {args.repeats} syncs per"
              f" plan; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
        print(f"{'plan':<16} {'crossing pools / sync':>22} {'x weights':>10} {'time p50':>10}"
              f" {'time max':>10} {'at 20 Gbps':>11}")  # fmt: skip
        for plan, rows in results.items():
            cross = rows[0]["cross_pool_bytes"]
            times = [r["sync_s"] for r in rows]
            print(f"{plan:<16} {cross / mb:>19.1f} MB {cross / weights:>10.2f}"
                  f" {statistics.median(times) * 1e3:>8.1f} ms {max(times) * 1e3:>8.1f} ms"
                  f" {cross * 8 / (LINK_GBPS * 1e9) * 1e3:>8.1f} ms")  # fmt: skip
        nccl = weights * rollout_gpus
        print(f"{'flat (NCCL)':<16} {nccl / mb:>19.1f} MB {rollout_gpus:>10.2f}"
              f" {'-':>11} {'-':>11} {nccl * 8 / (LINK_GBPS * 1e9) * 1e3:>8.1f} ms"
              "   (all-gather: one copy per rollout GPU; not run)")  # fmt: skip
        ratio = results["flat"][0]["cross_pool_bytes"] / results["topology"][0]["cross_pool_bytes"]
        print(f"topology-aware moves {ratio:.2f}x fewer bytes across the pools than the flat"
              f" fetch here ({rollout_gpus:.0f}x fewer than an all-gather)")  # fmt: skip
        ray.kill(coordinator)
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=64.0, help="weight blob size (MB)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rollout-nodes", type=int, default=2)
    parser.add_argument("--train-nodes", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=2, help="GPUs declared per node")
    parser.add_argument("--port", type=int, default=8143, help="the Ray head's GCS port")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
