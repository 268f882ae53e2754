"""GroupRuntime.on_phase_end: a phase end as one pure decision (the job leaves or stays,
and why; the phases that start; the new runtime), which the live controller applies in
one place."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.group_runtime import Departure, GroupRuntime, PhaseEnd
from scheduler.model import PhaseKind
from tests.scheduler import builders
from tests.scheduler.builders import member, runtime_with

R, T = PhaseKind.ROLLOUT, PhaseKind.TRAIN


def pair(iterations: int = 2) -> GroupRuntime:
    """A and B share one rollout node and one training node; A's rollout is running."""
    a = member(builders.job("A", 30, 20, iterations=iterations))
    b = member(builders.job("B", 30, 20, iterations=iterations))
    rt = runtime_with([a, b])
    assert [(s.job_id, s.kind) for s in rt.start_ready()] == [("A", R)]
    return rt


def end(kind: PhaseKind = R, **kw: object) -> PhaseEnd:
    base = PhaseEnd("A", kind, ok=True, iterations_done=0, iterations=2)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_it_decides_on_a_copy_and_leaves_the_runtime_it_was_asked_alone() -> None:
    rt = pair()
    before = rt.to_dict()
    decision = rt.on_phase_end(end())
    assert rt.to_dict() == before
    assert decision.runtime is not rt
    # the same question gets the same answer
    assert rt.on_phase_end(end()).runtime.to_dict() == decision.runtime.to_dict()


def test_a_rollout_end_starts_the_partners_rollout_and_the_jobs_training() -> None:
    decision = pair().on_phase_end(end())
    assert decision.leaves is None and not decision.boundary
    assert decision.finish is not None and decision.finish.next_kind is T
    assert [(s.job_id, s.kind) for s in decision.starts] == [("B", R), ("A", T)]
    # the new state is what the starts left: both nodes busy
    assert {p.job_id for p in decision.runtime.running()} == {"A", "B"}


def test_a_failed_phase_drops_its_job_and_its_partner_starts() -> None:
    decision = pair().on_phase_end(end(ok=False))
    assert decision.leaves is Departure.FAILED
    assert decision.runtime.member_ids() == ("B",)
    assert [(s.job_id, s.kind) for s in decision.starts] == [("B", R)]


def _to_training_end(rt: GroupRuntime, iteration: int) -> GroupRuntime:
    """Run A (and B) until A's training of `iteration` is running."""
    while True:
        (a,) = [p for p in rt.running() if p.job_id == "A"]
        if (a.kind, a.iteration) == (T, iteration):
            return rt
        for p in rt.running():
            rt = rt.on_phase_end(
                PhaseEnd(p.job_id, p.kind, ok=True, iterations_done=p.iteration, iterations=2)
            ).runtime


def test_a_training_end_is_a_boundary_where_the_planner_may_take_the_job() -> None:
    rt = _to_training_end(pair(), 0)
    stays = rt.on_phase_end(end(T, iterations_done=1))
    assert stays.boundary and stays.leaves is None
    assert "A" in stays.runtime.member_ids()
    moved = rt.on_phase_end(end(T, iterations_done=1, left=Departure.MOVED))
    assert moved.boundary and moved.leaves is Departure.MOVED
    assert moved.runtime.member_ids() == ("B",)
    assert all(s.job_id != "A" for s in moved.starts)


def test_the_last_training_completes_the_job_and_a_due_cancel_ends_it() -> None:
    rt = _to_training_end(pair(), 1)
    done = rt.on_phase_end(end(T, iterations_done=2))
    assert done.leaves is Departure.COMPLETED and not done.boundary
    assert done.finish is not None and done.finish.done
    rt = _to_training_end(pair(), 0)
    cancelled = rt.on_phase_end(end(T, iterations_done=1, cancel_requested=True))
    assert cancelled.leaves is Departure.CANCELLED and not cancelled.boundary
    assert cancelled.runtime.member_ids() == ("B",)


def test_a_rollout_end_of_a_job_with_its_iterations_done_completes_it() -> None:
    decision = pair().on_phase_end(end(iterations_done=2))
    assert decision.leaves is Departure.COMPLETED


@pytest.mark.parametrize(
    ("ok", "cancel", "last", "leaves"),
    [
        (True, False, False, None),
        (True, False, True, Departure.PROFILED),
        (True, True, False, Departure.CANCELLED),
        (False, False, False, Departure.FAILED),
        (False, True, False, Departure.CANCELLED),
    ],
)
def test_a_profiling_run_leaves_when_its_run_ends_fails_or_is_cancelled(
    ok: bool, cancel: bool, last: bool, leaves: Departure | None
) -> None:
    rt = runtime_with([member(builders.job("A", 30, 20, iterations=1))])
    rt.start_ready()
    if last:
        rt = rt.on_phase_end(end(profile=True)).runtime
    kind = T if last else R
    decision = rt.on_phase_end(end(kind, ok=ok, cancel_requested=cancel, profile=True))
    assert decision.leaves is leaves
    assert not decision.boundary
    assert ("A" in decision.runtime.member_ids()) is (leaves is None)


def test_a_phase_whose_job_is_no_longer_a_member_only_frees_its_nodes() -> None:
    rt = pair()
    decision = rt.on_phase_end(end(ok=False, member=False))
    assert decision.leaves is None
    assert decision.runtime.member_ids() == ("A", "B")  # the caller's rows say otherwise
    assert [(s.job_id, s.kind) for s in decision.starts] == [("B", R), ("A", T)]


def test_an_end_the_runtime_already_let_go_of_decides_nothing_about_the_phase() -> None:
    rt = pair()
    rt.remove("A")  # its placement ended while its rollout ran
    decision = rt.on_phase_end(end(ok=True))
    assert decision.finish is not None and decision.finish.removed
    assert decision.leaves is None  # (nothing in the runtime to drop)
    again = decision.runtime.on_phase_end(end(ok=True))
    assert again.finish is None  # nothing of A's runs any more
