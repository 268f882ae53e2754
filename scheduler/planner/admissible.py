"""Which groups admit a job at all, remembered across consolidation passes (issue 25 item 4).

Consolidation asks `best_move` about every job alone in a group at every departure, and
at 2,000 live jobs most of those are co-located jobs that no group admits: Algorithm 1
finds no direct packing or rollout scaling candidate that passes its SLO check (line
7), so whatever the expected-cost objective ranks, the answer is a new group, which is
no move. That answer does not read the clock nor anyone's progress but the job's own
remaining iterations, and only monotonically: the SLO check reads a group's members'
profiles and nodes, the job's profile, and its remaining iterations only through the
join allowance (`JOIN_ALLOWANCE_META_ITERATIONS` spread over them), which grows as they
shrink. So "group G admits no join of job j at n remaining iterations" stays true for
the same (immutable) group at n or fewer, and is remembered in the caller's
`LastingMemo` (scheduler.planner.memo), keyed by the group's summary (one object per
version of the group) and the job's profile without its iterations.

It is used only where it is exact as stated: the rollout pool is unbounded (rollout
scaling never lacks free nodes, whose names the check does not read) and no node is
cordoned (a join's rooms depend on the group's nodes alone). Elsewhere, or without a
lasting memo, every job is asked as before.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import replace

from scheduler.config import PlannerConfig
from scheduler.model import ClusterState, Group, Member, Pool
from scheduler.planner import admits_join, planner_index
from scheduler.planner.algorithm1 import profile_shape
from scheduler.planner.memo import current_lasting

__all__ = ["admits_no_join"]

# the remembered answers (summaries and profiles) kept at most, then forgotten
_MAX_KNOWN = 200_000


def admits_no_join(
    state: ClusterState,
    source: Group,
    member: Member,
    remaining: int,
    groups: Iterable[int],
    *,
    config: PlannerConfig,
) -> bool:
    """Return True when no group at the positions `groups` of `state`'s summaries but
    `source` (the member's own: a move there is no move) admits the member's job with
    `remaining` iterations (module docstring); False when one may, or when the answer
    cannot be remembered here."""
    keep = current_lasting()
    spec = state.spec
    if keep is None or spec.gpu_type(Pool.ROLLOUT).nodes is not None:
        return False
    index = planner_index(state)
    if any(index.node_index.cordoned.values()):
        return False
    where: tuple[str, Hashable] = ("admits_no_join", (config.admission, spec))
    known = keep.values.get(where)
    if known is None or len(known) > _MAX_KNOWN:
        known = keep.values[where] = {}
    job = member.job
    shape = profile_shape(job)
    rest = None
    for k in groups:
        s = index.summaries[k]
        if s.group.id == source.id:
            continue
        hit = known.get((id(s), shape))
        if hit is not None and hit[0] is s and remaining <= hit[1]:
            continue  # known: no join at hit[1] iterations, so none at fewer
        if rest is None:
            rest = replace(job, iterations=remaining)
        if admits_join(rest, state, s, config=config):
            return False
        known[(id(s), shape)] = (s, remaining)
    return True
