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
version of the group) and the job's profile without its iterations (`NoJoins`, which
holds the summaries weakly: a version of a group no state holds any more is forgotten).

A job's complete answer ("no group of the state admits it") is remembered too, with
the departure's state it was found on (`Ledger`): the states a caller plans departures
on follow one another (the simulator's), and a group (an immutable object) that is in
two of them was in every state between, so at the next departure only the groups that
are new since (a summary not seen before: the departed group's survivors, arrivals,
moves) need asking; the job's own group must be the same and its remaining iterations
no more. Each departure costs the groups that changed, not every group for every job.

It is used only where it is exact as stated: the rollout pool is unbounded (rollout
scaling never lacks free nodes, whose names the check does not read) and no node is
cordoned (a join's rooms depend on the group's nodes alone). Elsewhere, or without a
lasting memo, every job is asked as before.

`JoinFilter` is the consolidation round's cheap side of it: which candidates pass
Algorithm 1's first bounds for some other group at all (one vectorised pass over the
groups), and the remembered answer above per candidate.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import replace

import numpy as np

from scheduler.cluster import nodes_needed
from scheduler.config import PlannerConfig
from scheduler.model import ClusterState, Group, JobProfile, Member, Pool
from scheduler.planner import admits_join, join_request, planner_index
from scheduler.planner.index import GroupSummary, group_bounds, group_position
from scheduler.planner.memo import LastingMemo, current_lasting
from scheduler.planner.objective import JobProgress, remaining_iterations
from scheduler.planner.slo_checks import EPS, profile_shape

__all__ = ["JoinFilter", "Ledger", "NoJoins", "admits_no_join", "answers_local"]

# the groups' summaries whose answers are kept at most (those alive), then forgotten
_MAX_KNOWN = 50_000
# the departures' states whose new groups are kept (a job's answer older than that is
# found again from every group)
_MAX_GENERATIONS = 256
# `JoinFilter.passes_any` checks at most this many groups one by one, more by columns
_FEW = 8


class Ledger:
    """The departures' states seen (their summaries, by the state they first appear in)
    and each job's last complete answer (module docstring)."""

    def __init__(self) -> None:
        self.generation = 0
        self._last: tuple[GroupSummary, ...] | None = None
        self._first_seen: dict[int, tuple[GroupSummary, int]] = {}
        self.new_in: dict[int, list[GroupSummary]] = {}
        # job id -> (its profile's shape, its group's summary, remaining, generation)
        self.answers: dict[str, tuple[tuple[object, ...], GroupSummary, int, int]] = {}
        # job id -> the group that admitted it last (asked first next time)
        self.admitted: dict[str, GroupSummary] = {}

    def see(self, summaries: tuple[GroupSummary, ...]) -> int:
        """Register a departure's state (its summaries); return its generation."""
        if summaries is self._last:
            return self.generation
        self.generation += 1
        gen, old = self.generation, self._first_seen
        first: dict[int, tuple[GroupSummary, int]] = {}
        new: list[GroupSummary] = []
        for s in summaries:
            hit = old.get(id(s))
            if hit is not None and hit[0] is s:
                first[id(s)] = hit
            else:
                first[id(s)] = (s, gen)
                new.append(s)
        self._first_seen, self._last = first, summaries
        self.new_in[gen] = new
        self.new_in.pop(gen - _MAX_GENERATIONS, None)
        return gen

    def present(self, summary: GroupSummary) -> bool:
        """Return True when `summary` is one of the last registered state's."""
        hit = self._first_seen.get(id(summary))
        return hit is not None and hit[0] is summary

    def new_since(self, generation: int) -> list[GroupSummary] | None:
        """Return the summaries new after `generation` (None: no longer known)."""
        if generation - 1 + _MAX_GENERATIONS <= self.generation:
            return None
        # the last state's summaries only: those gone since are no option
        return [
            s
            for g in range(generation + 1, self.generation + 1)
            for s in self.new_in[g]
            if self.present(s)
        ]


class NoJoins:
    """The remembered "no join" answers (module docstring): per group's summary, per job
    profile's shape, the remaining iterations at which the group admits no join of it.

    A summary is held weakly: once no state holds its group it cannot be asked about
    again, and the answers go with it instead of keeping it alive, and with it its group
    and what the planner kept on it (its joiners' options: at 2,100 jobs a strong hold
    kept ~120,000 of them to the run's end). Dead entries are swept when the count has
    doubled since the last sweep; no callback, so nothing here is a reference cycle."""

    __slots__ = ("_by_summary", "_swept_at")

    def __init__(self) -> None:
        self._by_summary: dict[int, tuple[weakref.ref[GroupSummary], dict[Hashable, int]]] = {}
        self._swept_at = 64

    def __len__(self) -> int:
        return len(self._by_summary)

    def known(self, s: GroupSummary, shape: Hashable) -> int | None:
        """Return the remaining iterations at which `s`'s group admits no join of a job
        of `shape` (so none at fewer), or None when nothing is known."""
        hit = self._by_summary.get(id(s))
        if hit is None or hit[0]() is not s:
            return None
        return hit[1].get(shape)

    def remember(self, s: GroupSummary, shape: Hashable, remaining: int) -> None:
        """Remember that `s`'s group admits no join of a job of `shape` at `remaining`."""
        by = self._by_summary
        hit = by.get(id(s))
        if hit is None or hit[0]() is not s:
            if len(by) >= self._swept_at:
                self._sweep()
            hit = by[id(s)] = (weakref.ref(s), {})
        hit[1][shape] = remaining

    def _sweep(self) -> None:
        by = self._by_summary
        for key in [k for k, (ref, _) in by.items() if ref() is None]:
            del by[key]
        if len(by) > _MAX_KNOWN:
            by.clear()
        self._swept_at = max(64, 2 * len(by))


def answers_local(state: ClusterState) -> bool:
    """Return True when whether (and where) a group admits a job reads only that group:
    the rollout pool is unbounded (rollout scaling never lacks free nodes, whose names
    the SLO check does not read) and no node is cordoned (a join's rooms depend on the
    group's nodes alone). Only then is an answer remembered (module docstring)."""
    if state.spec.gpu_type(Pool.ROLLOUT).nodes is not None:
        return False
    return not any(planner_index(state).node_index.cordoned.values())


def _store(keep: LastingMemo, kind: str, context: Hashable, make: Callable[[], object]) -> object:
    where: tuple[str, Hashable] = (kind, context)
    value = keep.values.get(where)
    if value is None:
        value = keep.values[where] = make()
    return value


def admits_no_join(
    state: ClusterState,
    source: Group,
    member: Member,
    remaining: int,
    groups: Callable[[], Iterable[int]],
    *,
    config: PlannerConfig,
    departure: bool = False,
) -> bool:
    """Return True when no group at the positions `groups()` of `state`'s summaries but
    `source` (the member's own: a move there is no move) admits the member's job with
    `remaining` iterations (module docstring); False when one may, or when the answer
    cannot be remembered here. `departure`: `state` is the state a departure is planned
    on (the caller's, not one its planned moves lead to), and `groups()` every group
    that could admit the job: the answer is kept for the next departure's."""
    keep = current_lasting()
    if keep is None or not answers_local(state):
        return False
    spec = state.spec
    index = planner_index(state)
    context = (config.admission, spec)
    known = _store(keep, "admits_no_join", context, NoJoins)
    assert isinstance(known, NoJoins)
    job = member.job
    shape = profile_shape(job)
    ledger: Ledger | None = None
    at = group_position(index, source.id)
    mine = index.summaries[at] if at is not None else None
    candidates: Iterable[GroupSummary] | None = None
    if departure and mine is not None:
        stored = _store(keep, "admits_no_join_ledger", context, Ledger)
        assert isinstance(stored, Ledger)
        ledger = stored
        gen = ledger.see(index.summaries)
        prior = ledger.answers.get(job.id)
        if prior is not None and prior[0] == shape and prior[1] is mine and remaining <= prior[2]:
            candidates = ledger.new_since(prior[3])  # the rest answered no already
        elif (
            (last := ledger.admitted.get(job.id)) is not None
            and ledger.present(last)
            # the group that admitted it last, asked first: it likely still does
            and admits_join(replace(job, iterations=remaining), state, last, config=config)
        ):
            return False
    if candidates is None:
        candidates = [index.summaries[k] for k in groups()]
    rest = request = None
    for s in candidates:
        if s.group.id == source.id:
            continue
        hit = known.known(s, shape)
        if hit is not None and remaining <= hit:
            continue  # known: no join at `hit` iterations, so none at fewer
        if rest is None or request is None:
            rest = replace(job, iterations=remaining)
            request = join_request(rest, state, config=config)  # one for every group
        if admits_join(rest, state, s, config=config, request=request):
            if ledger is not None:
                ledger.answers.pop(job.id, None)
                ledger.admitted[job.id] = s
            return False
        known.remember(s, shape, remaining)
    if ledger is not None and mine is not None:
        ledger.answers[job.id] = (shape, mine, remaining, gen)
    return True


class JoinFilter:
    """Which candidates of a consolidation round Algorithm 1 could place anywhere but
    where they are (or in a new group, which is no move).

    A job that may not go co-located (`best_move` allows that only to a job with
    rollout nodes) moves only into another group, and Algorithm 1 generates a
    candidate in a group only when its first checks pass (`algorithm1.candidates`'s
    inline bounds and `GroupOptions`' first step and clock rule: members, size, training
    nodes, rollout nodes, saturation, T_cycle and the least-loaded training node within
    the SLO window). Those read only the group's summary and the job's profile, so one
    vectorised pass over the state's groups answers for every candidate; a job no other
    group passes them for gets no move from `best_move`, which is not asked.
    """

    def __init__(self, state: ClusterState, cfg: PlannerConfig) -> None:
        self.state = state
        self.cfg = cfg
        self._table: dict[str, np.ndarray] | None = None

    def _row(self, x: GroupSummary) -> tuple[bool, float, float, float, float, float]:
        """Return what the first checks read of a group's summary: whether it may take
        anyone, its training nodes, T_cycle, SLO tolerance, least training load, clock."""
        prune = self.cfg.admission.prune_saturated
        ok = (
            0 < x.size < self.cfg.admission.max_group_size
            and bool(x.group.rollout_nodes)
            and not (prune and x.t_load >= x.t_cycle)
        )
        scale = math.nan if x.time_scale is None else x.time_scale
        return ok, x.n_train, x.t_cycle, x.tolerance, x.min_train_load, scale

    def _columns(self) -> dict[str, np.ndarray]:
        """Return `_row` of every summary of the state, by column: from the index's
        `GroupBounds` (carried from state to state by the transitions, where a table of
        every summary's row per filter was a pass over every group per round), the same
        numbers and the same comparisons."""
        if self._table is None:
            b = group_bounds(planner_index(self.state))
            adm = self.cfg.admission
            ok = (b.takes > 0.0) & (b.size < adm.max_group_size)
            if adm.prune_saturated:
                ok &= b.saturated == 0.0
            self._table = {
                "ok": ok,
                "n_train": b.n_train,
                "t_cycle": b.t_cycle,
                "tolerance": b.tolerance,
                "min_train": b.min_train_load,
                "scale": b.time_scale,
            }
        return self._table

    def _is(self, group_id: str) -> np.ndarray:
        """Return which groups of the state are `group_id` (ids are unique in a state)."""
        mask = np.zeros(len(self._columns()["ok"]), dtype=bool)
        at = group_position(planner_index(self.state), group_id)
        if at is not None:
            mask[at] = True
        return mask

    def _fits(self, job: JobProfile, at: list[int] | None = None) -> np.ndarray:
        """Return which groups pass the job's first checks (the class docstring): every
        group of the state, or those at the positions `at`."""
        t = self._columns()
        if at is not None:
            t = {k: v[at] for k, v in t.items()}
        solo = job.t_solo_max_s
        tol = np.minimum(t["tolerance"], job.slo * solo) + EPS
        n_train = nodes_needed(job, self.state.spec, Pool.TRAIN)
        return (  # type: ignore[no-any-return]
            t["ok"]
            & (t["n_train"] >= n_train)
            & (np.maximum(t["t_cycle"], solo) <= tol)
            & (t["min_train"] + job.t_train_max_s <= tol)
            & (t["scale"] == job.time_scale)
        )

    def may_move(self, source: Group, member: Member, progress: Mapping[str, JobProgress]) -> bool:
        """Return False only when `best_move` would return None for the member because
        Algorithm 1 has no placement for it outside its own group but a new group."""
        cfg = self.cfg
        if cfg.admission.colocated and member.rollout_nodes:
            return True  # the co-located placement is open to it: ask best_move
        if not len(self._columns()["ok"]):
            return False
        return bool((self._fits(member.job) & ~self._is(source.id)).any())

    def admits_none(
        self,
        found: tuple[Group, Member],
        progress: Mapping[str, JobProgress],
        group_id: str | None = None,
        *,
        departure: bool = False,
    ) -> bool:
        """Return True only when `best_move` would return None for the member (or, with
        `group_id`, a move anywhere but into that group) because no group it could join
        admits it and the co-located placement is closed to it
        (scheduler.planner.admissible: remembered across passes; `departure`: this is
        the state a departure is planned on)."""
        source, member = found
        cfg = self.cfg
        if cfg.admission.colocated and member.rollout_nodes:
            return False  # the co-located placement is open to it
        remaining = remaining_iterations(member.job, progress)
        if remaining < 1:
            return False

        def groups() -> list[int]:
            if group_id is not None:  # one group: its first checks alone (`_fits_one`)
                k = group_position(planner_index(self.state), group_id)
                return [k] if k is not None and self._fits_one(member.job, k) else []
            if not len(self._columns()["ok"]):
                return []
            other = ~self._is(source.id)
            return np.flatnonzero(self._fits(member.job) & other).tolist()

        return admits_no_join(
            self.state,
            source,
            member,
            remaining,
            groups,
            config=cfg,
            departure=departure and group_id is None,
        )

    def passes_any(self, member: Member, group_ids: Iterable[str]) -> bool:
        """Return True when one of the groups `group_ids` of the state passes the member's
        first checks (those Algorithm 1 asks before it considers a group at all)."""
        index = planner_index(self.state)
        at = [k for g in group_ids if (k := group_position(index, g)) is not None]
        if len(at) <= _FEW:
            # a round's changed groups (two): the checks group by group, in Python, each the
            # same floating-point operations as `_fits`'s columns (numpy's fixed cost per
            # call was 10% of a departure's consolidation at 1,200 jobs)
            job = member.job
            return any(self._fits_one(job, k) for k in at)
        # (those groups' columns alone: a later round asks this of every candidate)
        return bool(self._fits(member.job, at).any())

    def _fits_one(self, job: JobProfile, k: int) -> bool:
        """Return `_fits(job, [k])[0]`: the group at position k passes the job's first
        checks, read from its summary (the columns of every group are not built)."""
        x = planner_index(self.state).summaries[k]
        ok, n_train, t_cycle, tolerance, min_train, scale = self._row(x)
        solo = job.t_solo_max_s
        limit = job.slo * solo
        # np.minimum / np.maximum: the one that is NaN, else the least / the greatest
        tol = (tolerance if tolerance <= limit or tolerance != tolerance else limit) + EPS
        cycle = t_cycle if t_cycle >= solo or t_cycle != t_cycle else solo
        return bool(
            ok
            and n_train >= nodes_needed(job, self.state.spec, Pool.TRAIN)
            and cycle <= tol
            and min_train + job.t_train_max_s <= tol
            and scale == job.time_scale
        )

    def may_join(self, member: Member, group_id: str) -> bool:
        """Return False only when Algorithm 1 cannot place the member (a co-located job:
        no co-located placement for it) in the group `group_id`."""
        # (one group: its first checks alone, `_fits_one`, the same comparisons as the
        # columns'; an arrival's partner search asks this of every co-located job)
        k = group_position(planner_index(self.state), group_id)
        return k is not None and self._fits_one(member.job, k)
