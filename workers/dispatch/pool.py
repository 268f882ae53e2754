"""One worker of a job on Ray: one side of its runner on one GPU of one node.

The job's coordinator (`ray_coordinator.JobCoordinator`) creates one `PoolWorker` per GPU
of each of the job's nodes: rollout workers on its rollout nodes, trainers on its
training nodes. A worker keeps its side's state resident in that node's host memory
between phases (`offload` after each call, `reload` before the next). Data moves between
workers through Ray's object store, actor to actor: a rollout's batch is `put` by the
rollout worker and fetched by each trainer; the weights go the other way in the sync
(`send_shards` -> `receive_shard` -> `assemble`, the paper's topology-aware sync).

This module does not import Ray: the object-store calls (`_put`, `_get`, `_where`) are
supplied by the Ray actor class in `ray_coordinator`. Object refs travel nested in lists,
so Ray hands them over as refs (the receiver fetches them itself) instead of resolving them.
"""

from __future__ import annotations

import os
import time
from typing import Any

from workers.dispatch.storage import CheckpointStore
from workers.runners import Peer, RunnerContext, RunnerLoadError, WorkerContext, pool_sides

TAIL_METHODS = ("progress", "release_tail", "take_tail")  # a rollout side's long-tail hooks


def shard_bounds(size: int, shards: int) -> list[tuple[int, int]]:
    """Return the [start, end) byte ranges of `shards` near-equal shards of `size` bytes."""
    return [(size * j // shards, size * (j + 1) // shards) for j in range(shards)]


class PoolWorker:
    def __init__(
        self, runner: str, role: str, context: dict[str, Any], checkpoint_uri: str
    ) -> None:
        self.runner_name, self.role = runner, role
        self.job = RunnerContext.from_dict(context)
        self.store = CheckpointStore(checkpoint_uri)
        self.side: Any = None
        self.ctx: WorkerContext | None = None
        self.received: dict[int, bytes] = {}  # this sync's shard, kept for `assemble`

    # --- supplied by the Ray actor class ---------------------------------------------------
    def _put(self, value: Any) -> Any:
        raise NotImplementedError

    def _get(self, refs: list[Any]) -> list[Any]:
        raise NotImplementedError

    def _where(self) -> tuple[str, tuple[int, ...]]:
        """Return (this process's Ray node id, the GPU ids Ray assigned it)."""
        raise NotImplementedError

    # --- lifecycle ---------------------------------------------------------------------------
    def setup(self, spec: dict[str, Any], resume_iteration: int) -> dict[str, Any]:
        """Load this worker's side of the runner (cold start) and restore a resumed job."""
        ray_node_id, gpu_ids = self._where()
        info: dict[str, Any] = {"ray_node_id": ray_node_id, "gpu_ids": list(gpu_ids)}
        info["pid"] = os.getpid()
        info["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        try:
            rollout_cls, trainer_cls = pool_sides(self.runner_name, self.job.runner_packages)
        except RunnerLoadError as exc:
            return {**info, "load_error": str(exc)}
        self.ctx = WorkerContext(
            job=self.job,
            role=self.role,
            rank=int(spec["rank"]),
            world_size=int(spec["world_size"]),
            node=str(spec["node"]),
            ray_node_id=ray_node_id,
            gpu_ids=gpu_ids,
            peers=tuple(Peer(p["role"], p["rank"], p["node"]) for p in spec["peers"]),
        )
        self.side = (rollout_cls if self.role == "rollout" else trainer_cls)()
        self.side.setup(self.ctx)
        if resume_iteration > 0:
            blob = self.store.read(self.job.job_id, resume_iteration)
            if blob is not None:
                self.side.restore(blob)
        self.side.offload()
        info["holds_weights"] = bool(getattr(self.side, "holds_weights", True))
        info["long_tail"] = all(hasattr(self.side, m) for m in TAIL_METHODS)
        return info

    # --- phases ------------------------------------------------------------------------------
    def rollout(
        self, iteration: int, weights: tuple[list[tuple[int, list[Any]]], int] | None = None
    ) -> dict[str, Any]:
        """Run this worker's share of a rollout; its batch stays in this node's object store.
        `weights` (the shards, their version): load them first (`assemble`), in this call."""
        synced = self.assemble(*weights) if weights is not None else None
        self.side.reload()
        metrics, batch = self.side.rollout(iteration)
        self.side.offload()
        out = {"metrics": metrics, "batch": [self._put(batch)]}
        if synced is not None:
            out["sync"] = synced
        return out

    # --- long-tail migration (called while `rollout` runs: the actor has spare threads) ---
    def progress(self) -> float:
        """Return the share of the running rollout's responses done (1.0: none running)."""
        return float(self.side.progress())

    def release_tail(self) -> Any:
        """Stop this worker's rollout now; return its unfinished responses for a peer."""
        return self.side.release_tail()

    def take_tail(self, work: Any) -> None:
        """Take over a released peer's unfinished responses."""
        self.side.take_tail(work)

    def train(
        self,
        iteration: int,
        batches: list[Any],
        checkpoint: bool,
        cut: list[int] | None = None,
        shards: int = 0,
    ) -> dict[str, Any]:
        """Fetch every rollout worker's batch (actor to actor), train, checkpoint if asked;
        with `cut`, also cut the new weights into `shards` pieces and put the ones at those
        indices (the next sync's scatter, without a call of its own)."""
        t0 = time.perf_counter()
        data = self._get(batches) if batches else []
        fetch_s = time.perf_counter() - t0
        self.side.reload()
        metrics = dict(self.side.train(iteration, data))
        if checkpoint:
            self.store.write(self.job.job_id, iteration + 1, self.side.checkpoint())
        out: dict[str, Any] = {}
        if cut is not None:
            out["shards"] = self._cut(self.side.send_weights(), cut, shards)
        self.side.offload()
        return {**out, "metrics": {**metrics, "batch_fetch_s": fetch_s}}

    def _cut(self, weights: bytes, indices: list[int], shards: int) -> list[tuple[int, list[Any]]]:
        bounds = shard_bounds(len(weights), shards)
        return [(j, [self._put(weights[bounds[j][0] : bounds[j][1]])]) for j in indices]

    # --- the sync: scatter across the pools, then broadcast inside the rollout pool ----------
    def send_shards(self, indices: list[int], shards: int) -> list[tuple[int, list[Any]]]:
        """Cut the weights into `shards` pieces; put the ones this trainer sends (by index)."""
        self.side.reload()
        weights = self.side.send_weights()
        self.side.offload()
        return self._cut(weights, indices, shards)

    def receive_shard(self, index: int, shard: list[Any]) -> dict[str, Any]:
        """Pull one shard from its trainer (the only copy that crosses the pools) and put a
        copy in this node's object store for the rollout peers."""
        (data,) = self._get(shard)
        self.received = {index: data}
        return {"index": index, "ref": [self._put(data)], "bytes": len(data)}

    def assemble(self, shards: list[tuple[int, list[Any]]], version: int) -> dict[str, Any]:
        """Fetch every other shard from the rollout peers (or, alone in its pool, its one
        shard from the trainer), join them, load the weights."""
        t0 = time.perf_counter()
        own = self.received
        wanted = [(j, ref) for j, ref in shards if j not in own]
        fetched = dict(
            zip([j for j, _ in wanted], self._get([r[0] for _, r in wanted]), strict=True)
        )
        weights = b"".join((own | fetched)[j] for j, _ in sorted(shards))
        self.received = {}
        self.side.reload()
        metrics = dict(self.side.receive_weights(weights, version) or {})
        self.side.offload()
        return {"metrics": metrics, "bytes": len(weights), "s": time.perf_counter() - t0}

    def shard_sizes(self, shards: list[tuple[int, list[Any]]]) -> dict[int, int]:
        """Return the size of each shard (the flat sync baseline's accounting)."""
        return {
            j: len(data)
            for (j, _), data in zip(shards, self._get([r[0] for _, r in shards]), strict=True)
        }

    def ping(self) -> int:
        return os.getpid()
