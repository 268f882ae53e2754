"""Ray dispatch, the job side: per job placement, a coordinator actor and one worker actor per GPU of each
of the job's nodes, each pinned to its own Ray node.

Where work runs (see workers/README.md "Placement on Ray nodes"):
- every Ray node that serves an inventory node carries the node label
  `rollmux.io/node=<name>` (`ray start --labels=rollmux.io/node=h20-0`); the dispatcher
  finds the Ray node of each inventory node by that label (`NodeDirectory`);
- a node's GPUs are one placement group per node (`rollmux-gpus-<name>`, one {"GPU": 1}
  bundle per GPU, its bundles label-selected onto that node, detached): a worker for GPU i
  is created in bundle i with a fractional GPU (1 / ROLLMUX_GPU_SHARE), so Ray gives it
  exactly that GPU (`ray.get_gpu_ids()`, `CUDA_VISIBLE_DEVICES`) and the resident workers
  of several jobs share the node's GPUs over time, the way veRL colocates its workers; a
  node without GPUs gets one worker, pinned by a label selector;
- one local Ray with no labelled node (`make run`, address "local") serves every
  inventory node itself: all of a job's workers run on it.

The coordinator (`JobCoordinator`, detached, named `job-<id>-p<placement>` in namespace
"rollmux", on the controller's own Ray node: never a GPU node) outlives the Celery worker
that created it, runs each phase on the workers of the phase's pool, moves the batches and
weights between them through the object store (it passes object refs; the data goes actor
to actor), writes no data itself, and publishes `phase_started`/`phase_finished` to the
broker. Its workers are its own (non-detached) actors: releasing or killing the
coordinator takes them with it. A worker (or its node) dying mid-phase fails the phase as
`lost: node <name> died` at once; this process also watches Ray's node table
(`watch_nodes`) so a node lost between phases is noticed within a second or two.

With `ray_dispatcher` (the controller side: `RayDispatcher`, the Ray connection and the
node watch), the only modules of the project that import `ray`.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import ray
from ray._private import state as ray_state
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import (
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import (
    PlacementGroupSchedulingStrategy,
)

from rollmux_contract.phases import PhaseOrder, PhaseReport, pool_metrics
from workers.dispatch.host import PhaseHost, WorkerLost
from workers.dispatch.pool import PoolWorker
from workers.runners import RunnerLoadError

log = logging.getLogger(__name__)

NAMESPACE = "rollmux"
NODE_LABEL = "rollmux.io/node"  # the inventory node a Ray node serves
PROBE_TIMEOUT_S = 10.0
# A worker Ray lacks nothing for but has not started yet (a loaded machine) fails after
# CREATE_TIMEOUT_S; one whose node lacks what it needs fails at once, or after BUSY_WAIT_S
# when what it needs is only taken now (see `pending_reason`). CREATE_POLL_S: how often
# the coordinator looks while it waits.
CREATE_TIMEOUT_S = float(os.environ.get("ROLLMUX_WORKER_CREATE_TIMEOUT_S", "60"))
BUSY_WAIT_S = float(os.environ.get("ROLLMUX_WORKER_BUSY_WAIT_S", "3"))
CREATE_POLL_S = 0.25
GPU_SHARE = int(os.environ.get("ROLLMUX_GPU_SHARE", "8"))  # resident jobs per GPU, at most
# how long a dead worker's node may take to show as dead in Ray's node table (compose and
# the KubeRay manifest: 5 missed health checks 1 s apart)
NODE_DEATH_WAIT_S = float(os.environ.get("ROLLMUX_NODE_DEATH_WAIT_S", "6"))


# --------------------------------------------------------------------------------------
# which Ray node serves which inventory node
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RayNode:
    node_id: str
    gpus: int
    labelled: bool  # False: the one local Ray that stands in for every node


@dataclass(frozen=True)
class Lacking:
    """Why no worker can be created on some inventory nodes (`why` starts with their names);
    `nodes[0]` is the node the report names as lost (the controller marks it down)."""

    nodes: tuple[str, ...]
    why: str

    def __str__(self) -> str:
        return self.why


class NodeDirectory:
    """Inventory node name -> the live Ray node that serves it, from Ray's node table."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        alive = [n for n in nodes if n.get("Alive")]
        self.by_name: dict[str, RayNode] = {}
        for n in alive:
            name = (n.get("Labels") or {}).get(NODE_LABEL)
            if name:
                gpus = int(n.get("Resources", {}).get("GPU", 0))
                self.by_name[name] = RayNode(n["NodeID"], gpus, True)
        # No labelled node at all and a single live Ray node: a local Ray that serves every
        # inventory node (the embedded default and single-machine tests).
        self.local = (
            RayNode(alive[0]["NodeID"], int(alive[0].get("Resources", {}).get("GPU", 0)), False)
            if not self.by_name and len(alive) == 1
            else None
        )

    @classmethod
    def read(cls) -> NodeDirectory:
        return cls(ray.nodes())  # type: ignore[no-untyped-call]

    def find(self, name: str) -> RayNode | None:
        return self.by_name.get(name) or self.local

    def missing(self, names: tuple[str, ...]) -> list[str]:
        return [n for n in names if self.find(n) is None]

    def lacking(self, names: tuple[str, ...], gpus: dict[str, int]) -> Lacking | None:
        """Return why no worker can be created for some of `names` (no live Ray node has
        its label, or not with the GPUs the job needs there), or None. It starts with the
        first such node's name (the controller marks that node down with the reason)."""
        missing = self.missing(names)
        if missing:
            return missing_reason(missing)
        for name in names:
            where = self.find(name)
            need = gpus.get(name, 0)
            if where is not None and where.labelled and where.gpus < need:
                return Lacking(
                    (name,),
                    f"{name}: no live Ray node has the label {NODE_LABEL}={name} with {need} GPU"
                    f" (its Ray node {where.node_id[:12]} has {where.gpus})",
                )
        return None


def missing_reason(missing: list[str]) -> Lacking:
    labels = ", ".join(f"{NODE_LABEL}={n}" for n in missing)
    return Lacking(tuple(missing), f"{', '.join(missing)}: no live Ray node has the label {labels}")


def node_gpu_group(name: str, gpus: int) -> Any:
    """Return the node's GPU placement group (one 1-GPU bundle per GPU), creating it once.

    A group left from a Ray node that rejoined with another GPU count can never be placed
    again (Ray keeps rescheduling it): it is removed and made anew for the node as it is.
    """
    pg_name = f"rollmux-gpus-{name}"
    try:
        group = get_placement_group(pg_name)
    except ValueError:
        group = None
    if group is not None:
        if group.bundle_count == gpus or placement_group_table(group)["state"] == "CREATED":
            return group
        remove_placement_group(group)
    try:
        return placement_group(
            [{"GPU": 1}] * gpus,
            strategy="STRICT_PACK",
            name=pg_name,
            lifetime="detached",
            bundle_label_selector=[{NODE_LABEL: name}] * gpus,
        )
    except Exception:  # another coordinator created it meanwhile
        return get_placement_group(pg_name)


# --------------------------------------------------------------------------------------
# the actors
# --------------------------------------------------------------------------------------


class _RayPoolWorker(PoolWorker):
    def _put(self, value: Any) -> Any:
        return ray.put(value)

    def _get(self, refs: list[Any]) -> list[Any]:
        return list(ray.get(refs))

    def _where(self) -> tuple[str, tuple[int, ...]]:
        gpu_ids = tuple(int(g) for g in ray.get_gpu_ids())  # type: ignore[no-untyped-call]
        return ray.get_runtime_context().get_node_id(), gpu_ids


# spare threads: the coordinator asks a rollout worker its progress (and releases its tail)
# while its rollout call runs (long-tail migration)
PoolWorkerActor = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=3)(  # type: ignore[call-overload]
    _RayPoolWorker
)
TAIL_POLL_S = 0.05  # how often a rollout that may migrate its tail is asked its progress


@dataclass
class _Worker:
    handle: Any
    role: str
    rank: int
    node: str
    ray_node_id: str = ""
    gpu_ids: tuple[int, ...] = ()
    holds_weights: bool = True
    long_tail: bool = False  # the runner's rollout side has the long-tail hooks
    labelled: bool = True  # pinned to a labelled Ray node (False: the one local Ray)
    group: Any = None  # its node's GPU placement group (None: a node without GPUs, local Ray)
    bundle: int = 0  # its GPU: the bundle of that group it was created in


def pending_reason(workers: list[_Worker], directory: NodeDirectory) -> tuple[Lacking | None, str]:
    """Say why workers Ray has not created yet are waiting: (definite, busy).

    `definite`: they never can be as the cluster stands (their node's Ray node is gone, has
    too few GPUs, or their GPU group can never be placed there); it starts with the node's
    name. `busy`: what they need is taken now (the node's GPUs held by other Ray work, a
    GPU's shares all held by resident workers). (None, ""): nothing is missing, the worker
    processes are still starting.
    """
    busy = ""
    available: dict[str, float] | None = None
    tables: dict[str, dict[str, Any]] = {}
    for w in workers:
        where = directory.find(w.node)
        if where is None:
            return missing_reason([w.node]), ""
        if w.group is None:  # no GPUs, or the one local Ray: nothing Ray could lack
            continue
        key = w.group.id.hex()
        if key not in tables:
            tables[key] = placement_group_table(w.group)
        table = tables[key]
        if table["state"] != "CREATED":
            state = table.get("stats", {}).get("scheduling_state", "")
            group = f"its GPU placement group {table.get('name') or ''}"
            group += f" ({w.group.bundle_count} x 1 GPU)"
            if state == "INFEASIBLE":
                why = f"{w.node}: {group} cannot be placed on its Ray node ({where.gpus} GPU)"
                return Lacking((w.node,), why), ""
            # pending (Ray retries it, its scheduling state moving between attempts): busy
            # while the node's GPUs are taken; with them free it is being placed (starting)
            free = ray_state.available_resources_per_node().get(where.node_id, {}).get("GPU", 0.0)
            if free + 1e-9 < w.group.bundle_count and not busy:
                busy = (
                    f"the GPUs of {w.node} are held by other Ray work: its Ray node has"
                    f" {free:g} of {where.gpus} GPU free, {group} needs them all"
                )
            continue
        if available is None:
            available = ray.available_resources()  # type: ignore[no-untyped-call]
        share = available.get(f"GPU_group_{w.bundle}_{key}", 0.0)
        if share + 1e-9 < 1.0 / GPU_SHARE and not busy:
            busy = (
                f"GPU {w.bundle} of {w.node} holds {GPU_SHARE} resident workers already"
                f" (ROLLMUX_GPU_SHARE={GPU_SHARE})"
            )
    return None, busy


@dataclass
class _Scatter:
    """A sync's first step done: each rollout worker's shard (`local`), and what it cost."""

    t0: float
    scatter_s: float
    version: int  # the weights' version: iterations trained into them
    local: list[Any]  # (shard index, [object ref]) for each rollout worker to assemble
    cross: int | None  # bytes that crossed the pools (None: known once assembled)
    sender: dict[int, _Worker]  # the trainer that sent shard j


def _prefixed(metrics: dict[str, float]) -> dict[str, float]:
    return {f"sync_{k}": v for k, v in metrics.items()}


class JobCoordinator(PhaseHost):
    """The Ray host of one placement: drives its workers phase by phase."""

    def __init__(self, runner: str, context: dict[str, Any], checkpoint_dir: str = "") -> None:
        super().__init__(runner, context, checkpoint_dir)
        self.pools: dict[str, list[_Worker]] = {"rollout": [], "train": []}
        self.batches: list[list[Any]] = []  # the last rollout's batches (refs), for training
        self.trained = 0  # iterations trained into the trainers' weights
        self.synced = 0  # the version of the weights the rollout workers hold
        self.last_sync: dict[str, float] = {}
        self._frozen = False
        self.cut: dict[int, list[Any]] = {}  # the next sync's shards, cut by the trainers
        # co-located (issue 14): no rollout nodes, the rollout workers live on the training
        # nodes beside the trainers (one of each per GPU, two shares of its bundle)
        self.colocated = False

    # --- cold start --------------------------------------------------------------------------
    def _setup(self, order: PhaseOrder) -> None:
        self.trained = self.synced = order.resume_iteration
        self.colocated = not order.rollout_nodes and bool(order.train_nodes)
        directory = NodeDirectory.read()
        nodes = {
            "rollout": order.rollout_nodes or order.pinned_nodes,
            "train": order.train_nodes or order.pinned_nodes,
        }
        lacking = directory.lacking(
            tuple(nodes["rollout"]) + tuple(nodes["train"]), order.node_gpus
        )
        if lacking:  # no worker could be created: say what is missing now, never "running"
            raise WorkerLost(f"node {lacking}", node=lacking.nodes[0])
        specs: list[tuple[str, int, str, RayNode, int]] = []
        for role, names in nodes.items():
            rank = 0
            for name in names:
                where = directory.find(name)
                assert where is not None
                for gpu in range(max(1, where.gpus)):
                    specs.append((role, rank, name, where, gpu))
                    rank += 1
        peers = [{"role": r, "rank": k, "node": n} for r, k, n, _, _ in specs]
        sizes = {role: sum(1 for s in specs if s[0] == role) for role in nodes}
        groups = {
            name: node_gpu_group(name, where.gpus)
            for _, _, name, where, _ in specs
            if where.labelled and where.gpus
        }
        workers, calls = [], []
        for role, rank, name, where, gpu in specs:
            w = _Worker(None, role, rank, name, labelled=where.labelled, group=groups.get(name))
            w.bundle = gpu
            w.handle = PoolWorkerActor.options(**self._placement(w)).remote(
                self.runner_name, role, self.context.to_dict(), self.store.uri
            )
            workers.append(w)
            calls.append(w.handle.ping.remote())
        # 1. the workers created (Ray placed them, their processes started): a worker Ray
        # cannot create fails here; 2. their runner set up (for a real runner: torch and
        # its model loaded, tens of seconds on a loaded machine), which is the job's
        # set-up time, not Ray failing to create it: its errors (a worker's death
        # included) fail the phase as any call's do
        self._await_created(workers, calls)
        infos = self._gather(
            workers,
            [
                w.handle.setup.remote(
                    {"rank": w.rank, "world_size": sizes[w.role], "node": w.node, "peers": peers},
                    order.resume_iteration,
                )
                for w in workers
            ],
        )
        errors = sorted({i["load_error"] for i in infos if i.get("load_error")})
        if errors:
            for w in workers:
                ray.kill(w.handle, no_restart=True)
            raise RunnerLoadError("; ".join(errors))
        # the workers restored in parallel: the cold start's load is the slowest one's
        self.restore_s = max((float(i.get("restore_s", 0.0)) for i in infos), default=0.0)
        for w, info in zip(workers, infos, strict=True):
            w.ray_node_id, w.gpu_ids = info["ray_node_id"], tuple(info["gpu_ids"])
            w.holds_weights = info.get("holds_weights", True)
            w.long_tail = bool(info.get("long_tail", False))
            self.pools[w.role].append(w)

    @staticmethod
    def _placement(w: _Worker) -> dict[str, Any]:
        """Return the Ray options that pin a worker onto its node (and GPU)."""
        if not w.labelled:
            return {}
        if w.group is None:
            return {"label_selector": {NODE_LABEL: w.node}}
        return {
            "num_gpus": 1.0 / GPU_SHARE,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                w.group, placement_group_bundle_index=w.bundle
            ),
        }

    @staticmethod
    def _await_created(workers: list[_Worker], calls: list[Any]) -> None:
        """Wait for every worker's first call (`ping`) to end, and fail at once when Ray cannot create
        some of them: their node lacks what they need (`pending_reason`) for good, or for
        ROLLMUX_WORKER_BUSY_WAIT_S when it is only taken now. A worker Ray lacks nothing
        for is starting (a loaded machine): it gets ROLLMUX_WORKER_CREATE_TIMEOUT_S."""
        started = time.monotonic()
        busy_since: float | None = None
        pending = list(calls)
        while True:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=CREATE_POLL_S)
            if not pending:
                return
            waiting = [w for w, c in zip(workers, calls, strict=True) if c in pending]
            definite, busy = pending_reason(waiting, NodeDirectory.read())
            now = time.monotonic()
            busy_since = (busy_since or now) if busy else None
            why, node = "", None
            if definite:
                why, node = f"node {definite}", definite.nodes[0]
            elif busy and now - busy_since >= BUSY_WAIT_S:  # type: ignore[operator]
                why = f"workers cannot be created: {busy}"
            elif now - started >= CREATE_TIMEOUT_S:
                nodes = ", ".join(sorted({w.node for w in waiting}))
                why = f"workers on {nodes} not created within {CREATE_TIMEOUT_S:g} s"
            if why:
                for w in workers:
                    ray.kill(w.handle, no_restart=True)
                raise WorkerLost(why, node=node)

    def _gather(self, workers: list[_Worker], calls: list[Any]) -> list[Any]:
        """Wait for one call per worker; a dead worker (or node) is `WorkerLost`."""
        try:
            return list(ray.get(calls))
        except RayTaskError as exc:  # the runner raised: fail the phase with its error
            cause = exc.cause if isinstance(exc.cause, Exception) else exc
            raise cause from None
        except RayActorError as exc:
            # A worker's death can reach us before Ray's node table says its node died:
            # give the table a few health-check periods to tell the two apart.
            deadline = time.monotonic() + NODE_DEATH_WAIT_S
            dead = self._dead_nodes(workers)
            while not dead and time.monotonic() < deadline:
                time.sleep(0.2)
                dead = self._dead_nodes(workers)
            where = f"node {', '.join(dead)} died" if dead else "a worker died"
            node = dead[0] if dead else None
            raise WorkerLost(f"{where} ({type(exc).__name__})", node=node) from exc

    @staticmethod
    def _dead_nodes(workers: list[_Worker]) -> list[str]:
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}  # type: ignore[no-untyped-call]
        return sorted({w.node for w in workers if w.ray_node_id not in alive})

    def _call(self, role: str, method: str, *args: Any) -> list[Any]:
        workers = self.pools[role]
        return self._gather(workers, [getattr(w.handle, method).remote(*args) for w in workers])

    # --- phases ------------------------------------------------------------------------------
    def _run(self, order: PhaseOrder, report: PhaseReport) -> dict[str, float]:
        metrics: dict[str, float] = {}
        if order.kind == "rollout":
            workers = self.pools["rollout"]
            tail = self._tail_bound_possible(order)
            # no sync phase ran (t_sync_s = 0): the new weights first, loaded by the rollout
            # workers in their rollout call (before it, when the tail watch reads progress)
            scatter = self._scatter() if self.synced < self.trained else None
            if scatter is not None and tail:
                metrics.update(_prefixed(self._synced(scatter, self._assemble(scatter))))
            weights = (scatter.local, scatter.version) if scatter and not tail else None
            calls = [w.handle.rollout.remote(order.iteration, weights) for w in workers]
            if tail:
                metrics.update(self._long_tail(order, calls, report))
            results = self._gather(workers, calls)
            if weights is not None and scatter is not None:
                metrics.update(_prefixed(self._synced(scatter, [r["sync"] for r in results])))
            if scatter is not None and self.colocated:  # handed over on the nodes:
                report.bytes_moved = 0  # nothing crossed the pools
            self.batches = [r["batch"] for r in results]
            metrics.update(pool_metrics([r["metrics"] for r in results]))
            metrics["reload_s"] = _slowest(results, "reload_s")
        elif order.kind == "train":
            batches = [ref for batch in self.batches for ref in batch]
            trainers = self.pools["train"]
            # the trainers cut the new weights for the sync that follows (not after the last)
            n = len(self.pools["rollout"]) if order.iteration + 1 < self.context.iterations else 0
            holders, sender = self._senders()
            calls = [
                w.handle.train.remote(
                    order.iteration, batches, w.rank == 0 and bool(self.store),
                    [j for j in range(n) if sender[j] is w]
                    if n and any(w is h for h in holders) else None,
                    n,
                )
                for w in trainers
            ]  # fmt: skip
            results = self._gather(trainers, calls)
            self.cut = {j: ref for r in results for j, ref in r.get("shards", ())}
            self.batches = []
            self.trained = order.iteration + 1
            metrics.update(results[0]["metrics"])
            metrics["reload_s"] = _slowest(results, "reload_s")
        elif order.kind == "sync":
            metrics.update(self._sync())
            report.bytes_moved = int(metrics["cross_pool_bytes"])
        pool = self.pools["train" if order.kind == "train" else "rollout"]
        report.ray_node_ids = {w.node: w.ray_node_id for w in pool}
        gpus: dict[str, set[int]] = {}
        for w in pool:
            gpus.setdefault(w.node, set()).update(w.gpu_ids)
        report.gpu_ids = {node: sorted(ids) for node, ids in gpus.items()}
        metrics["workers"] = float(len(pool))
        return metrics

    # --- long-tail migration (paper section 3) ------------------------------------------------
    def _tail_bound_possible(self, order: PhaseOrder) -> bool:
        """Can this rollout hand `order.tail_nodes` over when tail-bound? Its workers there
        and elsewhere, every rollout worker with the runner's long-tail hooks, and a broker
        to tell the controller (embedded mode without one: no migration)."""
        workers = self.pools["rollout"]
        tail = set(order.tail_nodes)
        return (
            order.tail_threshold > 0
            and bool(self.reporting)
            and all(w.long_tail for w in workers)
            and any(w.node in tail for w in workers)
            and any(w.node not in tail for w in workers)
        )

    def _long_tail(
        self, order: PhaseOrder, calls: list[Any], report: PhaseReport
    ) -> dict[str, float]:
        """Watch the rollout's progress; once `tail_threshold` of its responses are done,
        consolidate the tail of the workers on `tail_nodes` onto the others (H20 to H20: the
        same rollout's workers) and tell the controller those nodes are free (the task
        `phase_tail`), so the next member's rollout starts there beside this one's tail.
        The released workers' calls have returned (their state offloaded: residency) before
        the nodes are reported free, so no node's GPUs run two phases at once."""
        t0 = time.monotonic()
        workers = self.pools["rollout"]
        tail = set(order.tail_nodes)
        while True:
            ready, _ = ray.wait(calls, num_returns=len(calls), timeout=TAIL_POLL_S)
            if len(ready) == len(calls):
                return {}  # ended before it was tail-bound
            running = [w for w, c in zip(workers, calls, strict=True) if c not in ready]
            try:
                shares = ray.get(
                    [w.handle.progress.remote() for w in running], timeout=PROBE_TIMEOUT_S
                )
            except Exception:  # a worker died: the rollout's own call reports it
                return {}
            done = (len(workers) - len(running) + sum(float(x) for x in shares)) / len(workers)
            if done >= order.tail_threshold:
                break
        released = [w for w in workers if w.node in tail]
        kept = [w for w in workers if w.node not in tail]
        try:
            work = ray.get([w.handle.release_tail.remote() for w in released])
            ray.get([kept[i % len(kept)].handle.take_tail.remote(x) for i, x in enumerate(work)])
            mine = [c for w, c in zip(workers, calls, strict=True) if w.node in tail]
            ray.wait(mine, num_returns=len(mine), timeout=CREATE_TIMEOUT_S)
        except Exception:
            return {}
        at = time.time()
        freed = sorted(tail)
        report.released = dict.fromkeys(freed, at)
        self._publish(
            self.reporting,
            "workers.tasks.phase_tail",
            {"phase_id": order.phase_id, "group_id": order.group_id, "nodes": freed, "at": at},
        )
        return {"tail_progress": done, "tail_release_s": time.monotonic() - t0}

    def _senders(self) -> tuple[list[_Worker], dict[int, _Worker]]:
        """Return the trainers that hold the weights and which of them sends shard j (one
        per rollout worker: they take turns; co-located, the trainer beside it)."""
        rollout = self.pools["rollout"]
        holders = [w for w in self.pools["train"] if w.holds_weights] or self.pools["train"]
        sender = {j: holders[j % len(holders)] for j in range(len(rollout))} if holders else {}
        if self.colocated:  # each rollout worker's shard from the trainer beside it
            for w in rollout:
                beside = [h for h in holders if h.node == w.node]
                same_gpu = [h for h in beside if h.gpu_ids == w.gpu_ids]
                if same_gpu or beside:
                    sender[w.rank] = (same_gpu or beside)[0]
        return holders, sender

    def _sync(self, plan: str = "topology", *, fresh: bool = False) -> dict[str, float]:
        """Send the trainers' weights to every rollout worker (paper section 6):

        1. scatter: the weights are cut into one shard per rollout worker; shard j goes from
           its trainer (trainers take turns) to rollout worker j, so exactly one copy of the
           weights crosses from the training pool to the rollout pool;
        2. broadcast: each rollout worker fetches the other shards from its rollout peers
           (inside the rollout pool; peers on one node share its object store).

        The trainers cut the shards at the end of the training (`self.cut`; else, or with
        `fresh`, a call of its own here). A rollout worker alone in its pool fetches its one
        shard from its trainer itself (no broadcast step). A job without a sync phase of its
        own has its rollout workers load the weights in their rollout call (`_run`).

        `plan="flat"` is the baseline `bench/sync.py` compares with (veRL's flat gather):
        every rollout worker fetches every shard from the trainers, so the weights cross
        once per rollout node (Ray's object store keeps one copy per node).
        """
        scatter = self._scatter(plan, fresh=fresh)
        metrics = self._synced(scatter, self._assemble(scatter))
        metrics["sync_s"] = self.last_sync["sync_s"] = time.perf_counter() - scatter.t0
        return metrics

    def _scatter(self, plan: str = "topology", *, fresh: bool = False) -> _Scatter:
        """Step 1: get one shard of the weights to each rollout worker (`_sync`)."""
        t0 = time.perf_counter()
        workers = self.pools["rollout"]
        holders, sender = self._senders()
        n = len(workers)
        shards, self.cut = self.cut, {}  # a cut is used once
        if fresh or plan != "topology" or sorted(shards) != list(range(n)):
            sent = self._gather(
                holders,
                [
                    h.handle.send_shards.remote([j for j in range(n) if sender[j] is h], n)
                    for h in holders
                ],
            )
            shards = {j: ref for batch in sent for j, ref in batch}
        cross: int | None = None
        if plan == "flat":
            local = sorted(shards.items())
            sizes = self._gather(workers, [w.handle.shard_sizes.remote(local) for w in workers])
            receivers = {w.ray_node_id for w in workers}
            senders = {h.ray_node_id for h in holders}
            cross = sum(sizes[0].values()) * len(
                receivers - senders if _labelled(workers[0]) else receivers
            )
        elif n == 1:
            local = [(0, shards[0])]  # fetched by the one rollout worker as it assembles
        else:
            received = self._gather(
                workers, [w.handle.receive_shard.remote(w.rank, shards[w.rank]) for w in workers]
            )
            # each shard crossed once, from its trainer's node into its rollout worker's node
            # (co-located: there is no other pool, each shard came from the same node)
            cross = sum(
                r["bytes"]
                for w, r in zip(workers, received, strict=True)
                if self._crossed(sender[w.rank], w)
            )
            local = [(r["index"], r["ref"]) for r in received]
        return _Scatter(t0, time.perf_counter() - t0, self.trained, local, cross, sender)

    def _assemble(self, scatter: _Scatter) -> list[Any]:
        """Step 2, a call of its own: each rollout worker joins the shards, loads them."""
        workers = self.pools["rollout"]
        return self._gather(
            workers, [w.handle.assemble.remote(scatter.local, scatter.version) for w in workers]
        )

    def _synced(self, scatter: _Scatter, done: list[Any]) -> dict[str, float]:
        """Record a finished sync (`done`: each rollout worker's `assemble`); its metrics."""
        workers = self.pools["rollout"]
        cross = scatter.cross
        if cross is None:  # alone in its pool: its one shard is the whole weights
            crossed = self._crossed(scatter.sender[0], workers[0])
            cross = int(done[0]["bytes"]) if crossed else 0
        self.synced = scatter.version
        self.last_sync = {
            "cross_pool_bytes": float(cross),
            "weights_bytes": float(done[0]["bytes"]),
            "shards": float(len(workers)),
            "scatter_s": scatter.scatter_s,
            # the assembling as the rollout workers timed it (it may share their rollout call)
            "sync_s": scatter.scatter_s + max(float(d.get("s", 0.0)) for d in done),
            "weights_version": float(scatter.version),
        }
        return dict(self.last_sync)

    def _crossed(self, sender: _Worker, receiver: _Worker) -> bool:
        """Whether a shard from `sender` to `receiver` crossed between the pools."""
        if self.colocated:
            return False
        return sender.ray_node_id != receiver.ray_node_id or not _labelled(receiver)

    def run_phase(
        self, order_data: dict[str, Any], report: dict[str, Any] | None
    ) -> dict[str, Any]:
        result = super().run_phase(order_data, report)
        if not self._frozen:
            # after the first phase (the runner, Ray and the broker client are loaded):
            # keep them out of every later full garbage collection, which otherwise
            # pauses this process for tens to hundreds of ms on a busy machine
            self._frozen = True
            gc.freeze()
        return result

    def sync_once(self, plan: str) -> dict[str, float]:
        """Run one sync by `plan` ("topology" or "flat") outside any phase (bench/sync.py)."""
        with self._lock:
            if self.current is not None:
                raise RuntimeError("a phase is running")
        return self._sync(plan, fresh=True)

    def stats(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "ray_node_id": ray.get_runtime_context().get_node_id(),
            "niceness": os.nice(0),
            "phases": len(self.results),
            "workers": {
                role: [
                    {"rank": w.rank, "node": w.node, "ray_node_id": w.ray_node_id,
                     "gpu_ids": list(w.gpu_ids)}
                    for w in pool
                ]
                for role, pool in self.pools.items()
            },
            "trained": self.trained,
            "synced": self.synced,
        }  # fmt: skip


def _slowest(results: list[dict[str, Any]], key: str) -> float:
    """Return the largest `key` of the workers' results (they ran in parallel)."""
    return max((float(r.get(key, 0.0)) for r in results), default=0.0)


def _labelled(worker: _Worker) -> bool:
    """False on the one local Ray, where both pools share a node (the bytes still count)."""
    return bool(worker.node) and worker.ray_node_id != "" and worker.labelled


JobCoordinatorActor = ray.remote(num_cpus=0, max_restarts=0)(JobCoordinator)
