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
from collections.abc import Mapping
from typing import Any

from workers.dispatch.storage import CheckpointStore
from workers.runners import Peer, RunnerContext, RunnerLoadError, WorkerContext, pool_sides

TAIL_METHODS = ("progress", "release_tail", "take_tail")  # a rollout side's long-tail hooks


def shard_bounds(size: int, shards: int) -> list[tuple[int, int]]:
    """Return the [start, end) byte ranges of `shards` near-equal shards of `size` bytes."""
    return [(size * j // shards, size * (j + 1) // shards) for j in range(shards)]


def nbytes(weights: Any) -> int:
    """Return the bytes of weights: a bytes-like blob, or a name -> array mapping (numpy
    arrays or anything with `nbytes`) as `send_weights` of a tensor runner returns."""
    if isinstance(weights, Mapping):
        return sum(int(v.nbytes) for v in weights.values())
    return len(weights)


def cut_weights(weights: Any, shards: int) -> list[Any]:
    """Cut weights into `shards` pieces: a blob into near-equal byte ranges; a name -> array
    mapping into groups of whole tensors, balanced by bytes (largest first, each to the
    lightest shard so far; the order of the names decides ties, so every trainer cuts alike)."""
    if not isinstance(weights, Mapping):
        return [weights[a:b] for a, b in shard_bounds(len(weights), shards)]
    pieces: list[dict[str, Any]] = [{} for _ in range(shards)]
    load = [0] * shards
    for name in sorted(weights, key=lambda k: (-int(weights[k].nbytes), k)):
        j = min(range(shards), key=lambda i: (load[i], i))
        pieces[j][name] = weights[name]
        load[j] += int(weights[name].nbytes)
    return pieces


def join_weights(pieces: list[Any]) -> Any:
    """Join the shards `cut_weights` made, in shard order."""
    if pieces and isinstance(pieces[0], Mapping):
        joined: dict[str, Any] = {}
        for piece in pieces:
            joined.update(piece)
        return joined
    return b"".join(pieces)


class CheckpointMissing(RuntimeError):
    """A resumed job's checkpoint is not in the checkpoint storage."""


class PoolWorker:
    def __init__(
        self, runner: str, role: str, context: dict[str, Any], checkpoint_uri: str
    ) -> None:
        self.runner_name, self.role = runner, role
        self.job = RunnerContext.from_dict(context)
        self.store = CheckpointStore(checkpoint_uri)
        self.side: Any = None
        self.ctx: WorkerContext | None = None
        self.received: dict[int, Any] = {}  # this sync's shard, kept for `assemble`

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
        t0 = time.perf_counter()
        self.side = (rollout_cls if self.role == "rollout" else trainer_cls)()
        self.side.setup(self.ctx)
        t1 = time.perf_counter()
        if resume_iteration > 0:
            blob = self.store.read(self.job.job_id, resume_iteration)
            if blob is not None:
                self.side.restore(blob)
            elif getattr(self.side, "requires_checkpoint", False):
                # a real runner never silently starts again from step 0
                where = self.store.path(self.job.job_id, resume_iteration) if self.store else ""
                raise CheckpointMissing(
                    f"cannot resume job {self.job.job_id} after {resume_iteration} iterations:"
                    f" its checkpoint is missing ({where or 'no checkpoint storage configured'})"
                )
        self.side.offload()
        # the cold start's parts: the runner built (set-up), the checkpoint restored (load)
        info["setup_s"], info["restore_s"] = t1 - t0, time.perf_counter() - t1
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
        reload_s = self._reload()
        metrics, batch = self.side.rollout(iteration)
        self.side.offload()
        out = {"metrics": metrics, "batch": [self._put(batch)], "reload_s": reload_s}
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
        reload_s = self._reload()
        metrics = dict(self.side.train(iteration, data))
        if checkpoint:
            self.store.write(self.job.job_id, iteration + 1, self.side.checkpoint())
        out: dict[str, Any] = {}
        if cut is not None:
            out["shards"] = self._cut(self.side.send_weights(), cut, shards)
        self.side.offload()
        out["reload_s"] = reload_s
        return {**out, "metrics": {**metrics, "batch_fetch_s": fetch_s}}

    def _reload(self) -> float:
        """Bring the side's resident state back from host memory (a warm start); its time."""
        t0 = time.perf_counter()
        self.side.reload()
        return time.perf_counter() - t0

    def _cut(self, weights: Any, indices: list[int], shards: int) -> list[tuple[int, list[Any]]]:
        pieces = cut_weights(weights, shards)
        return [(j, [self._put(pieces[j])]) for j in indices]

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
        return {"index": index, "ref": [self._put(data)], "bytes": nbytes(data)}

    def assemble(self, shards: list[tuple[int, list[Any]]], version: int) -> dict[str, Any]:
        """Fetch every other shard from the rollout peers (or, alone in its pool, its one
        shard from the trainer), join them, load the weights."""
        t0 = time.perf_counter()
        own = self.received
        wanted = [(j, ref) for j, ref in shards if j not in own]
        fetched = dict(
            zip([j for j, _ in wanted], self._get([r[0] for _, r in wanted]), strict=True)
        )
        weights = join_weights([(own | fetched)[j] for j, _ in sorted(shards)])
        self.received = {}
        self.side.reload()
        metrics = dict(self.side.receive_weights(weights, version) or {})
        self.side.offload()
        return {"metrics": metrics, "bytes": nbytes(weights), "s": time.perf_counter() - t0}

    def shard_sizes(self, shards: list[tuple[int, list[Any]]]) -> dict[int, int]:
        """Return the size of each shard (the flat sync baseline's accounting)."""
        return {
            j: nbytes(data)
            for (j, _), data in zip(shards, self._get([r[0] for _, r in shards]), strict=True)
        }

    def ping(self) -> int:
        return os.getpid()
