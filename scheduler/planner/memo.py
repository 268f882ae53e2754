"""A memo of the planner's pure evaluations, scoped to one consolidation pass.

`plan_consolidation` asks `best_move` about every candidate, and `best_move` places the
candidate by Algorithm 1 with the expected-cost objective: for every candidate the same
groups are evaluated again (their expected remaining cost, the SLO check of the group
with the candidate, its SLO probabilities), and after each move every candidate is asked
again on a state that differs in two groups. Within one pass the inputs of those
evaluations repeat: the memo keeps their results for the pass.

* `evaluation_scope(progress)` opens a scope (a context manager; nested scopes reuse the
  outer one) for a pass whose jobs' progress is `progress`: the memo answers only calls
  that read that very mapping, and node prices are those of the pass's states (a node's
  price is a function of its name and pool, which a pass does not change).
* `cached(kind, key, compute)` returns the memo's value for `(kind, key)` or computes and
  keeps it. Keys are values (members, profiles, node names): equal inputs, equal
  results, since every memoised function is pure. Without a scope it just computes.

The scope lives in a `contextvars.ContextVar`: it is per thread (and per task), so two
threads planning at once share nothing, and it is gone when the pass returns.

Evaluations that read neither the jobs' progress nor the clock (a group's SLO check, its
steady meta-iteration at expected durations: functions of the members' profiles and
nodes alone) repeat across passes too: consolidation asks about the same lone jobs and
the same groups at every departure (issue 25 item 4). A caller that plans again and again
(the simulator's policy) may own a `LastingMemo` and open `lasting(memo)` around its
calls; `cached(..., lasting=True)` then keeps such a value across passes, under a key
that holds everything the value reads. The memo is the caller's (no module-level cache),
bounded (`LastingMemo.limit` entries: then it starts again), and per thread like the
scope.

Some values read what changes from pass to pass but seldom for one owner: a group's
expected remaining cost reads its members' remaining iterations, and a group nobody
joined or left between two departures is asked about again at the same position.
`cached_for(kind, owner, stamp, compute)` keeps one value per owner (a group's id) with
the stamp it was computed under (everything it reads: the group object, the members'
remaining iterations, the node prices) and answers while the stamp is the same; a new
stamp replaces the value. In the lasting memo when one is open, else in the scope.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

__all__ = [
    "LastingMemo",
    "cached",
    "cached_for",
    "current_lasting",
    "evaluation_scope",
    "in_scope",
    "interned",
    "keeping",
    "lasting",
    "peek",
]

T = TypeVar("T")


class _Scope:
    __slots__ = ("by_id", "by_value", "progress", "values")

    def __init__(self, progress: Mapping[str, Any] | None) -> None:
        self.progress = progress
        self.values: dict[tuple[str, Hashable], Any] = {}
        # `interned`: each object seen (kept, so its id is not reused while the scope
        # lives) and its number, and the number of each value
        self.by_id: dict[int, tuple[Hashable, int]] = {}
        self.by_value: dict[Hashable, int] = {}


_SCOPE: ContextVar[_Scope | None] = ContextVar("rollmux_planner_memo", default=None)


class LastingMemo:
    """A caller's memo of the evaluations that read neither progress nor the clock, kept
    across passes (module docstring); at most `limit` entries, then emptied."""

    __slots__ = ("limit", "values")

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self.values: dict[tuple[str, Hashable], Any] = {}


_LASTING: ContextVar[LastingMemo | None] = ContextVar("rollmux_planner_lasting", default=None)


def current_lasting() -> LastingMemo | None:
    """Return the `LastingMemo` open in this context (`lasting`), or None."""
    return _LASTING.get()


@contextmanager
def lasting(memo: LastingMemo | None) -> Iterator[None]:
    """Keep the lasting evaluations in `memo` until the block ends (None: not kept)."""
    token = _LASTING.set(memo)
    try:
        yield
    finally:
        _LASTING.reset(token)


@contextmanager
def evaluation_scope(progress: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Memoise the planner's evaluations until the block ends (see the module docstring)."""
    if _SCOPE.get() is not None:
        yield
        return
    token = _SCOPE.set(_Scope(progress))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def keeping() -> bool:
    """Return True when `cached(..., lasting=True)` keeps what it computes here (a scope or
    a lasting memo is open): a caller whose key costs something to build (a group's
    members' profiles) builds it only then, and otherwise just computes (the live
    planner's pass opens neither)."""
    return _LASTING.get() is not None or _SCOPE.get() is not None


def in_scope(progress: Mapping[str, Any] | None) -> bool:
    """Return True when a scope is open for exactly this `progress` mapping."""
    scope = _SCOPE.get()
    return scope is not None and scope.progress is progress


def interned(items: Iterable[Hashable]) -> tuple[int, ...] | None:
    """Return `items` as numbers for a memo key in the open scope: equal items (by value)
    get the same number, so a key of them is equal exactly when a key of the items is.
    Each object is hashed by value once per scope, then found by its identity (a group's
    members, asked about for every candidate of a pass: hashing a member hashes its whole
    profile, and a tuple's hash is not kept). None without a scope."""
    scope = _SCOPE.get()
    if scope is None:
        return None
    by_id, by_value = scope.by_id, scope.by_value
    out: list[int] = []
    for x in items:
        hit = by_id.get(id(x))
        if hit is None or hit[0] is not x:
            number = by_value.setdefault(x, len(by_value))
            hit = by_id[id(x)] = (x, number)
        out.append(hit[1])
    return tuple(out)


def peek(kind: str, key: Hashable) -> tuple[bool, Any]:
    """Return (True, the value) when `cached(kind, key, ..., lasting=True)` would answer
    from the memo without computing, else (False, None)."""
    keep = _LASTING.get()
    scope = _SCOPE.get() if keep is None else None
    values = keep.values if keep is not None else scope.values if scope is not None else None
    if values is None:
        return False, None
    full = (kind, key)
    if full in values:
        return True, values[full]
    return False, None


def cached(
    kind: str,
    key: Hashable,
    compute: Callable[[], T],
    *,
    progress: Mapping[str, Any] | None = None,
    reads_progress: bool = False,
    lasting: bool = False,
) -> T:
    """Return `compute()`, memoised in the open scope under `(kind, key)`.

    With `reads_progress` the value depends on the jobs' progress: it is memoised only
    when the scope was opened for this very `progress`. With `lasting` the value reads
    neither progress nor the clock and `key` holds everything it reads: it is kept in
    the caller's `LastingMemo` when one is open (`lasting`), else in the scope.
    """
    full = (kind, key)
    keep = _LASTING.get() if lasting else None
    if keep is not None:
        values = keep.values
        try:
            return values[full]  # type: ignore[no-any-return]
        except KeyError:
            value = compute()
            if len(values) >= keep.limit:
                values.clear()
            values[full] = value
            return value
    scope = _SCOPE.get()
    if scope is None or (reads_progress and scope.progress is not progress):
        return compute()
    values = scope.values
    try:
        return values[full]  # type: ignore[no-any-return]
    except KeyError:
        value = compute()
        values[full] = value
        return value


def cached_for(
    kind: str,
    owner: Hashable,
    fixed: tuple[Any, ...],
    stamp: Callable[[], tuple[Any, ...]],
    compute: Callable[[T | None], T],
    *,
    progress: Mapping[str, Any] | None = None,
) -> T:
    """Return `compute(prior)`, kept for `owner` while what it reads is the same: one value
    per `(kind, owner)` (module docstring), replaced when `fixed` (cheap to build: the
    objects it reads, by identity) or `stamp()` (what may change between passes: progress)
    differ, each compared by ==. `prior` is the value replaced when only `stamp()` changed
    (the caller may reuse the parts of it that do not read the stamp), else None.

    The value is kept in the lasting memo when one is open, else in the scope; without
    either it is just computed. Within a scope opened for this very `progress` (which a
    pass does not change) a value found or made in the scope is answered again without
    `stamp()`, whose reads of progress were most of a kept value's cost."""
    keep = _LASTING.get()
    scope = _SCOPE.get()
    values = keep.values if keep is not None else scope.values if scope is not None else None
    if values is None:
        return compute(None)
    checked = scope is not None and scope.progress is progress and progress is not None
    if checked:
        assert scope is not None
        seen = scope.values.get(("checked:" + kind, owner))
        if seen is not None and seen[0] == fixed:
            return seen[1]  # type: ignore[no-any-return]
    full = (kind, owner)
    now = stamp()
    hit = values.get(full)
    prior = None
    if hit is not None and hit[0] == fixed:
        if hit[1] == now:
            value: T = hit[2]
            if checked:
                assert scope is not None
                scope.values[("checked:" + kind, owner)] = (fixed, value)
            return value
        prior = hit[2]
    value = compute(prior)
    if keep is not None and len(values) >= keep.limit:
        values.clear()
    values[full] = (fixed, now, value)
    if checked:
        assert scope is not None
        scope.values[("checked:" + kind, owner)] = (fixed, value)
    return value
