"""The co-located strategy: a job alone on its training nodes, both phases there (issue 14 item 3).

Under the trace-format spec's assumption (a rollout on the training GPU type takes as
long as on the rollout type) a job that would sit alone in a new disaggregated group
costs less co-located: it pays only its training nodes, busy in both phases, instead
of rollout and training nodes each idle half the time. The planner may choose it as a
fourth strategy beside direct packing, rollout scaling and a new group, when it is
the cheapest admissible placement under the job's SLO; consolidation
(scheduler.planner.consolidation) later moves the job into a group when a partner
makes that cheaper.

* Its iteration takes `f x t_roll + t_train`, f the training type's
  `rollout_speed_factor` (1.0 by default; the issue reports 1.0 and 1.5); its
  predicted slowdown is that over the disaggregated solo time, and must be within
  its SLO (worst case, as Algorithm 1's check).
* It takes the job's count of free training nodes with residency room; Δ is their
  price. A co-located group has no rollout nodes, and no other job joins it (its
  training nodes run the member's rollouts too).
"""

from __future__ import annotations

from scheduler.model import JobProfile, Pool, Strategy
from scheduler.planner.algorithm1 import NEW_GROUP_ORDER, Candidate, Choice, Request
from scheduler.planner.slo_checks import EPS


def colocated_iteration_s(job: JobProfile, rollout_speed_factor: float) -> float:
    """Return the job's worst-case co-located iteration time."""
    return rollout_speed_factor * job.t_roll_max_s + job.t_train_max_s


def colocated_candidate(req: Request, rollout_speed_factor: float) -> Choice | None:
    """Return the co-located placement of the job, or None (no room, or its SLO breaks)."""
    job = req.job
    iteration = colocated_iteration_s(job, rollout_speed_factor)
    slowdown = iteration / job.t_solo_max_s
    if slowdown > job.slo + EPS:
        return None
    free = req.pools[Pool.TRAIN]
    train = free.take(req.n_train)
    if train is None:
        return None
    cand = Candidate(
        strategy=Strategy.COLOCATED,
        delta=free.cost(train),
        new_count=req.n_train,
        lower_bound=iteration,
        order=NEW_GROUP_ORDER + 1,
        summary=None,
        rollout=(),
        train=tuple(train),
        new_nodes=tuple(train),
    )
    return cand, {job.id: slowdown}
