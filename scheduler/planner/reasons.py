"""The planner's human reasons: why a job can never run here, and why not now.

`infeasible_reason` validates a job against the cluster (INFEASIBLE: never on this
cluster); `retry_reason` says what is missing right now (RETRY); `pool_capacity` is
the one sentence for what a bounded pool can ever hold, which the web's field errors
reuse. Every reason names the field or the pool and carries the numbers.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping

from scheduler.cluster import nodes_needed
from scheduler.model import ClusterSpec, JobProfile, Pool
from scheduler.planner.algorithm1 import FreePool
from scheduler.planner.index import NodeIndex
from scheduler.planner.slo_checks import EPS


def infeasible_reason(job: JobProfile, spec: ClusterSpec, index: NodeIndex) -> str | None:
    """Return why `job` can never run on this cluster, or None when it could."""
    if job.slo < 1.0:
        return f"slo must be >= 1.0 (a tolerated slowdown), got {job.slo:g}"
    if job.iterations < 1:
        return f"iterations must be >= 1, got {job.iterations}"
    for name, v in (("t_roll_max_s", job.t_roll_max_s), ("t_train_max_s", job.t_train_max_s)):
        if not v > 0:
            return f"{name} must be > 0, got {v:g}"
    if not job.host_mem_gb > 0:
        return f"host_mem_gb must be > 0, got {job.host_mem_gb:g}"
    for pool, field in ((Pool.ROLLOUT, "rollout_gpus"), (Pool.TRAIN, "train_gpus")):
        gt = spec.gpu_type(pool)
        gpus = job.gpus(pool)
        if gpus < 1:
            return f"{field} must be >= 1, got {gpus}"
        if gpus % gt.gpus_per_node:
            return (
                f"{field}={gpus} is not a multiple of {gt.gpus_per_node} ({gt.name} GPUs per node)"
            )
        need = gpus // gt.gpus_per_node
        if gt.nodes is not None and need > gt.nodes:
            return f"{field}={gpus} needs {need} {gt.name} nodes; " + pool_capacity(spec, pool)
        biggest = max(index.biggest_mem[pool], gt.host_mem_gb)
        if job.host_mem_gb > biggest + EPS:
            return (
                f"host_mem_gb={job.host_mem_gb:g} exceeds the host memory of every "
                f"{gt.name} node ({biggest:g} GB): residency is impossible"
            )
        pool_nodes = index.by_pool[pool]
        if gt.nodes is not None and len(pool_nodes) >= gt.nodes:
            # Every node the pool's capacity counts is in the state (cordoned ones too):
            # count those big enough for residency.
            # (those with host_mem_gb + EPS >= the job's: a suffix of the sorted memories)
            mems = index.mem_sorted[pool]
            big = len(mems) - bisect_left(mems, job.host_mem_gb, key=lambda m: m + EPS)
            if big < need:
                return (
                    f"{field}={gpus} needs {need} {gt.name} nodes with "
                    f">= {job.host_mem_gb:g} GB host memory; the {pool.value} pool has {big}"
                )
    return None


def pool_capacity(spec: ClusterSpec, pool: Pool) -> str:
    """Return what a bounded pool can ever hold, in words, for reasons and field errors."""
    gt = spec.gpu_type(pool)
    nodes = gt.nodes or 0
    text = f"the {pool.value} pool has {nodes} nodes ({nodes * gt.gpus_per_node} GPUs)"
    if gt.nodes_down:
        noun = "node" if gt.nodes_down == 1 else "nodes"
        return f"{text}, not counting {gt.nodes_down} down {noun}"
    return f"{text} in total"


def retry_reason(
    job: JobProfile, spec: ClusterSpec, pools: Mapping[Pool, FreePool], index: NodeIndex
) -> str:
    """Return what `job` lacks right now (free nodes with room), for a RETRY."""
    parts = []
    for pool in (Pool.ROLLOUT, Pool.TRAIN):
        need = nodes_needed(job, spec, pool)
        fp = pools[pool]
        if fp.unbounded:
            continue
        free, fit = fp.free_total, len(fp.fit)
        if fit < need:
            gt = spec.gpu_type(pool)
            extra = ""
            if free > fit:
                extra = f" ({free} free in all, {fit} with {job.host_mem_gb:g} GB host memory room)"
            cordoned = index.cordoned[pool]
            if cordoned == 1:
                extra += "; 1 drained node takes no new work"
            elif cordoned:
                extra += f"; {cordoned} drained nodes take no new work"
            noun = "node" if need == 1 else "nodes"
            parts.append(f"needs {need} free {gt.name} {noun}, {fit} free{extra}")
    detail = "; ".join(parts) or "no capacity"
    return f"{detail}, and no existing co-execution group can take it now"
