"""The distribution-aware SLO check (issue 13 item 3): one rule for the planner and the simulator.

Admission plans every co-execution group on worst-case durations: the predicted
iteration time of each member with every phase at its maximum, W_k
(scheduler.meta_iteration), must stay within its window slo_k x T_k^solo,max, so no
member is ever scheduled past it (the paper's check). That alone still misses SLOs
on what users feel (the spec's headline attainment compares the mean iteration time
with the mean DRAWN solo time): a short member whose actual/max ratio is lower than
the cycle-setter's is slowed by the long member's actual cycle more than the
worst-case ratio says.

So each member's SLO is ALSO checked against its own expected solo iteration time:

    E_k^co <= slo_k x E[T_k^solo]

where E[T_k^solo] is the job's observed mean solo iteration time once known
(`JobProfile.observed_solo_s`), else the mean of its duration distribution (the trace
format's uniform [min, max] per phase) plus its weight sync; and E_k^co is the
member's steady iteration time in the group with its own phases at their expected
durations and every OTHER member's at their expected durations plus the margin
(default 3%, never above their maximum). The margin absorbs how far the others'
drawn means and their spread can push the meta-iteration above the expected one;
the member's own phases are on both sides of the comparison, so they get none. With
`margin=None` only the worst-case check applies; a group of jobs whose phases are
exact (min = max) passes the expected check whenever it passes the worst-case one.

A member with a tight SLO has less slack than the margin is meant to cover: the
others' drawn phases, and the drawn phases' slips in the meta-iteration (a member
whose rollout ends early or late waits for a partner's training that the expected
schedule interlocks exactly), can push its mean iteration a few percent above the
expected one. So a member that shares a group and whose slack slo_k - 1 is below
`tight_slack` is also checked on its worst-case iteration time in the group (every
phase, its own too, at its maximum) against its EXPECTED solo window:
W_k <= slo_k x E[T_k^solo]. It then shares only when the group's whole spread fits
the window its users see; alone it never waits (docs/results.md, section 11).

`check_group` is the one function: the planner's Algorithm 1 (line 7) calls it for
every candidate, and the simulator's offline optimum holds its plans to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from scheduler.config import DEFAULT_SLO_MARGIN as _CONFIG_SLO_MARGIN
from scheduler.config import DEFAULT_TIGHT_SLACK as _CONFIG_TIGHT_SLACK
from scheduler.meta_iteration import group_loads, steady_iteration_times
from scheduler.model import JobProfile, Member

__all__ = [
    "DEFAULT_SLO_MARGIN",
    "DEFAULT_TIGHT_SLACK",
    "SLO_EPS",
    "GroupSloCheck",
    "check_group",
    "expected_profile",
    "expected_solo_s",
    "worst_case_times",
]

DEFAULT_SLO_MARGIN = _CONFIG_SLO_MARGIN  # one default: scheduler.config
DEFAULT_TIGHT_SLACK = _CONFIG_TIGHT_SLACK
# Floating-point slack of every comparison (the planner's EPS).
SLO_EPS = 1e-9


def expected_solo_s(job: JobProfile) -> float:
    """Return the job's expected solo iteration time: its observed mean once known, else
    the mean of its phase-duration distribution (uniform [min, max]) plus its sync."""
    if job.observed_solo_s is not None:
        return job.observed_solo_s
    roll = (job.roll_min + job.t_roll_max_s) / 2.0
    train = (job.train_min + job.t_train_max_s) / 2.0
    return roll + train + job.t_sync_s


def expected_profile(job: JobProfile, *, margin: float = 0.0) -> JobProfile:
    """Return `job` with exact phases at their expected durations x (1 + margin).

    From the profile, a phase's expected duration is the mean of [min, max], and the
    margin never takes it above the max (an exact phase stays at its max). With an
    observed mean solo time the two phases' means are scaled so that their sum with
    the sync is that mean (then the max does not cap: the job may be drifting).
    """
    f = 1.0 + margin
    roll = (job.roll_min + job.t_roll_max_s) / 2.0
    train = (job.train_min + job.t_train_max_s) / 2.0
    if job.observed_solo_s is not None and roll + train > 0:
        scale = max(0.0, job.observed_solo_s - job.t_sync_s) / (roll + train)
        roll, train = roll * scale * f, train * scale * f
    else:
        roll, train = min(roll * f, job.t_roll_max_s), min(train * f, job.t_train_max_s)
    roll, train = max(roll, SLO_EPS), max(train, SLO_EPS)
    return job.with_phase_times(
        t_roll_max_s=roll, t_roll_min_s=roll, t_train_max_s=train, t_train_min_s=train
    )


@dataclass(frozen=True)
class GroupSloCheck:
    """The SLO check of one co-execution group, member by member (admission order)."""

    worst_s: tuple[float, ...]  # planned iteration time, every phase at its maximum
    expected_s: tuple[float, ...]  # the same with expected phases (+ margin); () if unchecked
    held: tuple[bool, ...]  # both checks pass for the member

    @property
    def ok(self) -> bool:
        """Return True when every member keeps its SLO."""
        return all(self.held)


def worst_case_times(members: Sequence[Member], *, switch_overhead_s: float) -> list[float]:
    """Return each member's worst-case iteration time in the group (every phase at its
    maximum): what `check_group` checks first, and takes as `worst_s`."""
    return _floored(members, switch_overhead_s)


def _floored(members: Sequence[Member], switch_overhead_s: float) -> list[float]:
    """Return the steady iteration times, never below the paper's max(T_cycle, T_load)."""
    times = steady_iteration_times(members, switch_overhead_s=switch_overhead_s)
    floor = max(max(m.job.t_solo_max_s for m in members), max(group_loads(members).values()))
    return [max(t, floor) for t in times]


def check_group(
    members: Sequence[Member],
    *,
    switch_overhead_s: float,
    margin: float | None = DEFAULT_SLO_MARGIN,
    tight_slack: float | None = None,
    worst_s: Sequence[float] | None = None,
    until_broken: bool = False,
) -> GroupSloCheck:
    """Return the SLO check of a co-execution group of `members` (see the module docstring).

    A sharing member whose slo - 1 is below `tight_slack` must also keep its SLO on its
    worst-case iteration time against its expected solo time (None: never). `worst_s` passes the worst-case iteration times when the caller has them already.
    The expected check is skipped (and `expected_s` empty) when the worst-case one
    fails or `margin` is None. With `until_broken` (a caller that reads only `ok`, and
    the times when it holds) the expected check stops at the first member that breaks
    its SLO: `expected_s` and `held` then end with that member (each member's expected
    time is a recursion of its own, and most failing joins break the first member's).
    """
    worst = list(worst_s) if worst_s is not None else _floored(members, switch_overhead_s)
    held = [
        t <= m.job.slo * m.job.t_solo_max_s + SLO_EPS for m, t in zip(members, worst, strict=True)
    ]
    if margin is None or not all(held):
        return GroupSloCheck(tuple(worst), (), tuple(held))
    inflated = [
        _seen(Member(expected_profile(m.job, margin=margin), m.rollout_nodes, m.train_nodes))
        for m in members
    ]
    plain = [
        Member(expected_profile(m.job, margin=0.0), m.rollout_nodes, m.train_nodes) for m in members
    ]
    expected, solo = [], []
    for k, m in enumerate(members):
        shape = m.job.trend_shape if len(members) > 1 else None
        if shape is None:
            mix = inflated[:k] + [plain[k]] + inflated[k + 1 :]
            expected.append(_floored(mix, switch_overhead_s)[k])
            solo.append(expected_solo_s(m.job))
        else:
            # a trending member, followed over the pieces of its remaining run: its mean
            # iteration time in the group against its mean solo time (the others at theirs)
            times, solos = [], []
            for f in shape:
                own = _scaled(plain[k], f)
                mix = inflated[:k] + [own] + inflated[k + 1 :]
                times.append(_floored(mix, switch_overhead_s)[k])
                solos.append(own.job.t_solo_max_s)
            expected.append(sum(times) / len(times))
            solo.append(sum(solos) / len(solos))
        if until_broken and not _holds(m, expected[k], worst[k], solo[k], tight_slack, members):
            return GroupSloCheck(tuple(worst), tuple(expected), (True,) * k + (False,))
    held = [
        _holds(m, t, w, s, tight_slack, members)
        for m, t, w, s in zip(members, expected, worst, solo, strict=True)
    ]
    return GroupSloCheck(tuple(worst), tuple(expected), tuple(held))


def _holds(
    m: Member, t: float, w: float, s: float, tight_slack: float | None, members: Sequence[Member]
) -> bool:
    """Return True when member `m` keeps its SLO at expected time `t` (worst-case `w`)
    against its expected solo time `s` (`check_group`)."""
    if not t <= m.job.slo * s + SLO_EPS:
        return False
    if tight_slack is not None and len(members) > 1:
        # a tight-SLO member: the group's whole spread within its expected window
        return m.job.slo - 1.0 >= tight_slack or w <= m.job.slo * s + SLO_EPS
    return True


def _seen(member: Member) -> Member:
    """Return a member as the others' checks see it: a trending one at the larger of its
    mean and its forecast now (`JobProfile.trend_shape`'s first piece; the others' runs
    may be shorter than its own: a shrinking member is longer now than on average)."""
    shape = member.job.trend_shape
    return member if shape is None or shape[0] <= 1.0 else _scaled(member, shape[0])


def _scaled(member: Member, factor: float) -> Member:
    """Return `member` (exact phases) with its rollout and training x `factor`."""
    job = member.job
    roll, train = job.t_roll_max_s * factor, job.t_train_max_s * factor
    job = replace(
        job, t_roll_max_s=roll, t_roll_min_s=roll, t_train_max_s=train, t_train_min_s=train
    )
    return replace(member, job=job)
