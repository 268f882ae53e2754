"""The nodes of a cluster spec: one naming rule and one `nodes_needed` rule for the core.

The planner (which names fresh nodes of an unbounded pool), the simulator (which
materialises the pools of a trace's cluster) and the benchmarks all build nodes here,
so a node is called the same thing wherever the core makes one:

* `node_name`: the GPU type and a 0-based, 3-digit index (`H20-000`, `H800-012`); when
  both pools use one GPU type the pool is named too (`H20-rollout-000`), so the two
  pools never share a name.
* `nodes_needed`: whole nodes, rounded up (a job's GPUs are validated to be a multiple
  of the type's GPUs per node, so for a valid job this is the exact quotient).

The web app names its nodes in the inventory; it never calls `node_name`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from scheduler.model import ClusterSpec, ClusterState, JobProfile, Node, Pool

__all__ = [
    "cluster_nodes",
    "empty_state",
    "initial_state",
    "make_node",
    "node_name",
    "nodes_needed",
    "unbounded_node_counts",
]


def node_name(spec: ClusterSpec, pool: Pool, index: int) -> str:
    """Return the name of the `index`-th (0-based) node of `pool`."""
    gt = spec.gpu_type(pool)
    if spec.rollout.name == spec.train.name:
        return f"{gt.name}-{pool.value}-{index:03d}"
    return f"{gt.name}-{index:03d}"


def make_node(spec: ClusterSpec, pool: Pool, name: str) -> Node:
    """Return a node of `pool` named `name`, shaped like the pool's GPU type."""
    gt = spec.gpu_type(pool)
    return Node(
        name=name,
        pool=pool,
        gpu_type=gt.name,
        gpus=gt.gpus_per_node,
        host_mem_gb=gt.host_mem_gb,
        price_per_hour=gt.node_price_per_hour,
    )


def cluster_nodes(
    spec: ClusterSpec, *, unbounded: Mapping[Pool, int] | None = None
) -> tuple[Node, ...]:
    """Return the nodes of `spec`'s pools, rollout pool first.

    A bounded pool gets its `nodes`; an unbounded one (`nodes: null`) gets
    `unbounded[pool]` nodes (none by default: the planner then names fresh ones as it
    needs them). The simulator passes an upper bound on what can ever be used at
    once, so the pool never runs out and cost is what was used.
    """
    out: list[Node] = []
    for pool in (Pool.ROLLOUT, Pool.TRAIN):
        count = spec.gpu_type(pool).nodes
        if count is None:
            count = (unbounded or {}).get(pool, 0)
        out.extend(make_node(spec, pool, node_name(spec, pool, i)) for i in range(count))
    return tuple(out)


def empty_state(spec: ClusterSpec) -> ClusterState:
    """Return a state with every node of `spec`'s bounded pools free and no groups."""
    return ClusterState(spec=spec, nodes=cluster_nodes(spec))


def nodes_needed(job: JobProfile, spec: ClusterSpec, pool: Pool) -> int:
    """Return how many whole nodes of `pool` the job's phase on that pool takes."""
    return -(-job.gpus(pool) // spec.gpu_type(pool).gpus_per_node)


def unbounded_node_counts(spec: ClusterSpec, jobs: Iterable[JobProfile]) -> dict[Pool, int]:
    """Return, per pool, enough nodes that no run of `jobs` can ever exhaust it."""
    counts = {Pool.ROLLOUT: 0, Pool.TRAIN: 0}
    for job in jobs:
        for pool in (Pool.ROLLOUT, Pool.TRAIN):
            counts[pool] += nodes_needed(job, spec, pool)
    # colocated runs rollouts on training nodes: it needs no rollout nodes but may
    # need the rollout-sized count on the training side too; the sum covers both.
    return {pool: max(1, counts[Pool.ROLLOUT] + counts[Pool.TRAIN]) for pool in counts}


def initial_state(spec: ClusterSpec, jobs: Sequence[JobProfile]) -> ClusterState:
    """Return an empty ClusterState for `spec`, materialising unbounded pools (sized for
    `jobs`: `unbounded_node_counts`); `empty_state` when every pool is bounded."""
    unbounded = unbounded_node_counts(spec, jobs)
    return ClusterState(spec=spec, nodes=cluster_nodes(spec, unbounded=unbounded), groups=())
