"""Algorithm 1's SLO check (line 7) and what it is keyed and bounded by.

`check_slo` simulates a group's meta-iteration with a candidate (worst case, then the
expected one); `slo_key` / `keyed_check_slo` / `known_slo_check` key it for the memo
(scheduler.planner.memo) by the members' profiles without their iterations
(`members_shape`); `join_window_holds`, `worst_case_holds` and `joined_worst_case` are
its cheap halves and bounds, read before it by the candidates' generation and the
expected-cost ranking. Split from scheduler.planner.algorithm1, which asks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from operator import attrgetter
from typing import Any, Protocol

from scheduler.model import Group, JobProfile, Member
from scheduler.planner.index import GroupSummary
from scheduler.planner.memo import cached, keeping, peek
from scheduler.slo import (
    DEFAULT_SLO_MARGIN,
    DEFAULT_TIGHT_SLACK,
    SLO_EPS,
    GroupSloCheck,
    check_group,
    expected_solo_s,
    worst_case_times,
)


class JoinedNodes(Protocol):
    """What `joined_worst_case` reads of a candidate (`algorithm1.Candidate`): the group
    it joins and the joiner's nodes there, its new (free) ones among them."""

    @property
    def summary(self) -> GroupSummary | None: ...
    @property
    def rollout(self) -> tuple[str, ...]: ...
    @property
    def train(self) -> tuple[str, ...]: ...
    @property
    def new_nodes(self) -> tuple[str, ...]: ...


# Floating-point slack of every time and memory comparison of the planner.
EPS = 1e-9
# Meta-iterations a job joining a running group may lose waiting for its turn and
# for the group to settle (measured worst case 1.2 over 3,000 random joins with
# worst-case durations); admission counts them against the joiner's SLO.
JOIN_ALLOWANCE_META_ITERATIONS = 1.5


def join_window_holds(job: JobProfile, t: float) -> bool:
    """Return True when the joiner's worst-case iteration time `t` in the group, with the
    wait for its turn in the meta-iteration in progress (JOIN_ALLOWANCE_META_ITERATIONS
    meta-iterations spread over its iterations), fits its SLO window: the joiner's half of
    the worst-case check (`_joined_slowdowns`, `worst_case_holds`). Monotone in `t` (a
    product and a quotient by positive constants round monotonically), so a lower bound
    of `t` that fails it rules the join out exactly (`algorithm1.GroupOptions`)."""
    n = job.iterations
    return not t * (n + JOIN_ALLOWANCE_META_ITERATIONS) / n > job.slo * job.t_solo_max_s + EPS


def check_slo(
    group: Group,
    job: JobProfile,
    rollout: tuple[str, ...],
    train: tuple[str, ...],
    *,
    switch_overhead_s: float,
    slo_margin: float | None = DEFAULT_SLO_MARGIN,
    tight_slack: float = DEFAULT_TIGHT_SLACK,
    worst_s: Sequence[float] | None = None,
) -> dict[str, float] | None:
    """Return every member's predicted slowdown in G + job, or None if an SLO breaks (line 7).

    The slowdowns are worst-case (every phase at its maximum); the SLOs are checked by
    scheduler.slo.check_group: on worst-case durations against worst-case solo times,
    and on expected durations (the others' with the margin; a tight-SLO
    member's worst case too, `tight_slack`) against expected solo times. `worst_s`: the
    worst-case iteration times of G + job when the caller has them already
    (`worst_case_holds`).
    """
    members = group.members + (Member(job, rollout, train),)
    return keyed_check_slo(
        members,
        slo_key(
            members,
            switch_overhead_s=switch_overhead_s,
            slo_margin=slo_margin,
            tight_slack=tight_slack,
        )
        if keeping()
        else None,
        switch_overhead_s=switch_overhead_s,
        slo_margin=slo_margin,
        tight_slack=tight_slack,
        worst_s=worst_s,
    )


def keyed_check_slo(
    members: tuple[Member, ...],
    key: tuple[Any, ...] | None,
    *,
    switch_overhead_s: float,
    slo_margin: float | None = DEFAULT_SLO_MARGIN,
    tight_slack: float = DEFAULT_TIGHT_SLACK,
    worst_s: Sequence[float] | None = None,
) -> dict[str, float] | None:
    """`check_slo` of G + job (`members`, the joiner last) under its memo key (`slo_key`;
    None: not memoised), for a caller that built the key already (`known_slo_check`)."""

    # (memoised, across passes for a caller with a lasting memo: the check reads only the
    # members' profiles but their iterations, and which of them share a node;
    # scheduler.planner.memo)
    def compute() -> GroupSloCheck:
        return check_group(
            members,
            switch_overhead_s=switch_overhead_s,
            margin=slo_margin,
            tight_slack=tight_slack,
            worst_s=worst_s,
            until_broken=True,  # (read below: `ok`, and the times when it holds)
        )

    check = cached("check_group", key, compute, lasting=True) if key is not None else compute()
    return _joined_slowdowns(check, members)


def slo_key(
    members: tuple[Member, ...],
    *,
    switch_overhead_s: float,
    slo_margin: float | None = DEFAULT_SLO_MARGIN,
    tight_slack: float = DEFAULT_TIGHT_SLACK,
) -> tuple[Any, ...]:
    """The memo key of the SLO check of G + job (`members`, the joiner last): what it reads."""
    return (members_shape(members), switch_overhead_s, slo_margin, tight_slack)


def known_slo_check(
    members: tuple[Member, ...], key: tuple[Any, ...]
) -> tuple[bool, dict[str, float] | None]:
    """Return (True, `check_slo`'s answer for G + job: `members`, the joiner last) when the
    memo holds its check under `key` (`slo_key`) already (a lone job asked again at the
    next departure, its groups unchanged), else (False, None): a caller may then skip an
    inadmissible candidate's dearer evaluations."""
    if not keeping():
        return False, None
    known, check = peek("check_group", key)
    if not known:
        return False, None
    return True, _joined_slowdowns(check, members)


def _joined_slowdowns(check: GroupSloCheck, members: tuple[Member, ...]) -> dict[str, float] | None:
    """Return every member's predicted slowdown from the group's SLO check (`check_slo`,
    the joiner last), or None when an SLO breaks."""
    if not check.ok:
        return None
    job = members[-1].job
    # The joiner also waits for its turn in the meta-iteration in progress (see
    # scheduler.group_runtime): spread over its iterations, that must fit its SLO too.
    if not join_window_holds(job, check.worst_s[-1]):
        return None
    if check.expected_s:
        n = job.iterations
        e_new = check.expected_s[-1]
        if e_new * (n + JOIN_ALLOWANCE_META_ITERATIONS) / n > job.slo * expected_solo_s(job) + EPS:
            return None
    return {m.job.id: t / m.job.t_solo_max_s for m, t in zip(members, check.worst_s, strict=True)}


def worst_case_holds(members: Sequence[Member], worst_s: Sequence[float]) -> bool:
    """Return True when the worst-case half of `check_slo` holds for G + job (`members`,
    the joiner last; `worst_s`: scheduler.slo.worst_case_times of them): every member's
    worst-case iteration time within its SLO window, the joiner's with its join
    allowance. A necessary condition of `check_slo`, at one meta-iteration's
    recursion: the cheap half to fail, checked before a candidate's other evaluations."""
    for m, t in zip(members, worst_s, strict=True):
        if not t <= m.job.slo * m.job.t_solo_max_s + SLO_EPS:
            return False
    return join_window_holds(members[-1].job, worst_s[-1])


# Entries a group's summary keeps of its joiners' worst-case times (`joined_worst_case`).
JOINED_WORST_LIMIT = 256


def joined_worst_case(
    c: JoinedNodes, members: Sequence[Member], *, switch_overhead_s: float
) -> tuple[float, ...]:
    """Return the worst-case iteration times of G + job (`members`: the group of the
    candidate `c`, its joiner last; scheduler.slo.worst_case_times), kept on the group's
    summary (`GroupSummary.joined_worst`) under what they read of the joiner: its
    worst-case phases, sync and switch overhead, its nodes of the group by name and the
    places of its new (free) nodes, which are no other member's. A summary lives as
    long as its group is unchanged, over the decisions of a pass: alike joiners of one
    group (a burst of alike jobs, a job waiting pass after pass) are computed once."""
    s = c.summary
    assert s is not None
    job = members[-1].job
    new = c.new_nodes
    key = (
        job.t_roll_max_s,
        job.t_train_max_s,
        job.t_sync_s,
        job.switch_s,
        switch_overhead_s,
        tuple(None if x in new else x for x in c.rollout) if new else c.rollout,
        tuple(None if x in new else x for x in c.train) if new else c.train,
    )
    kept = s.joined_worst
    worst = kept.get(key)
    if worst is None:
        worst = tuple(worst_case_times(members, switch_overhead_s=switch_overhead_s))
        if len(kept) < JOINED_WORST_LIMIT:
            kept[key] = worst
    return worst


# Every field of a profile but its iterations: what an evaluation of a group's schedule
# (its SLO check, its meta-iteration) may read of a member's job.
_SHAPE_FIELDS = tuple(f.name for f in fields(JobProfile) if f.name != "iterations")
# (one C call for them all: every candidate's SLO check builds its key of them)
_shape_of = attrgetter(*_SHAPE_FIELDS)


def profile_shape(job: JobProfile) -> tuple[object, ...]:
    """Return every field of `job`'s profile but its iterations, as a value."""
    return _shape_of(job)


def members_shape(members: Sequence[Member]) -> tuple[object, ...]:
    """Return `members` as a memo key for an evaluation of their schedule: each job's
    profile without its iterations (a mover is placed with its remaining iterations,
    which change at every boundary), and each node as the order in which the members
    first name it (the schedule reads which members share a node, not its name; an
    unbounded pool names the nodes it adds after the state's size)."""
    label: dict[str, int] = {}
    out: list[object] = []
    for m in members:
        out.append(tuple([label.setdefault(x, len(label)) for x in m.rollout_nodes]))
        out.append(tuple([label.setdefault(x, len(label)) for x in m.train_nodes]))
        out.extend(_shape_of(m.job))
    return tuple(out)
