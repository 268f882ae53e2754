"""The Gantt says what happened: failed and lost phases, control-plane delays, weight syncs,
pools, warm starts, history versus now; the overview tells a drained node from a busy one."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from rollmux_web.inventory.models import Node, NodeState
from rollmux_web.jobs.models import JobStatus
from rollmux_web.reports.selectors import (
    cluster_overview,
    group_timeline,
    job_timeline,
    slo_report,
)
from rollmux_web.reports.svg import timeline_svg
from rollmux_web.workflow.models import PhaseRecord, PhaseState
from tests.reports.builders import allocate, make_group, make_job, phase, place

T0 = datetime(2026, 3, 10, tzinfo=UTC)
M = timedelta(minutes=1)


def group_with(world: Any, *, released: bool = True) -> Any:
    """One job, rollout 0-10 (cold), train 10-20, sync 20-22 on the rollout node, rollout 22-32."""
    job = make_job(world, name="gemma", status=JobStatus.COMPLETED)
    g = make_group(created=T0, released=T0 + 40 * M if released else None)
    allocate(g, "h20-0", T0, T0 + 40 * M if released else None)
    allocate(g, "h800-0", T0, T0 + 40 * M if released else None)
    pl = place(g, job, rollout=["h20-0"], train=["h800-0"], joined=T0)
    phase(pl, iteration=0, kind="rollout", nodes=["h20-0"], start=T0, minutes=10, warm=False)
    phase(pl, iteration=0, kind="train", nodes=["h800-0"], start=T0 + 10 * M, minutes=10)
    phase(pl, iteration=0, kind="sync", nodes=["h20-0"], start=T0 + 20 * M, minutes=2)
    phase(pl, iteration=1, kind="rollout", nodes=["h20-0"], start=T0 + 22 * M, minutes=10)
    return g, job, pl


@pytest.mark.django_db
def test_a_lost_or_failed_phase_is_drawn_apart_with_its_reason(world: Any, client_as: Any) -> None:
    g, _, pl = group_with(world)
    lost = phase(pl, iteration=1, kind="train", nodes=["h800-0"], start=T0 + 32 * M, minutes=3)
    PhaseRecord.objects.filter(pk=lost.pk).update(
        state=PhaseState.LOST, outcome="lost: node h800-0 down"
    )
    tl = group_timeline(user=world.alice, group_id=g.pk)
    failed = [b for b in tl.bars if b.failed]
    assert [b.phase_id for b in failed] == [lost.pk] and tl.has_failed
    assert "· train · 3.0 min · lost: node h800-0 down ·" in failed[0].tip
    svg = str(timeline_svg(tl))
    assert svg.count('class="failed-hatch"') == 1 and 'class="bar train failed"' in svg
    page = client_as("alice").get(f"/groups/{g.pk}/").content.decode()
    assert "failed or lost phase" in page


@pytest.mark.django_db
def test_a_recovered_report_is_marked_as_a_control_plane_delay(world: Any, client_as: Any) -> None:
    g, _, _ = group_with(world)
    # the training's report was lost; reconcile applied it 10 s after the host's end
    PhaseRecord.objects.filter(group=g, kind="train").update(
        reported_at=T0 + 20 * M + timedelta(seconds=10), recovered=True
    )
    # the rollouts were reported within milliseconds: no mark
    PhaseRecord.objects.filter(group=g, kind="rollout").update(
        reported_at=T0 + 10 * M + timedelta(milliseconds=30)
    )
    tl = group_timeline(user=world.alice, group_id=g.pk)
    assert len(tl.delays) == 1
    d = tl.delays[0]
    lane = {ln.node: ln.y for ln in tl.lanes}
    assert d.y == lane["h800-0"] + 2
    assert "control-plane delay on h800-0: 10.0 s" in d.tip and "reconcile" in d.tip
    assert 'class="delay"' in str(timeline_svg(tl))
    page = client_as("alice").get(f"/groups/{g.pk}/").content.decode()
    assert "control-plane delay" in page


@pytest.mark.django_db
def test_a_weight_sync_has_its_own_shade_and_legend_and_runs_on_the_rollout_pool(
    world: Any, client_as: Any
) -> None:
    g, _, _ = group_with(world)
    tl = group_timeline(user=world.alice, group_id=g.pk)
    fills = {b.kind: b.fill for b in tl.bars}
    assert len({fills["rollout"], fills["sync"], fills["train"]}) == 3
    (sync,) = [b for b in tl.bars if b.kind == "sync"]
    assert sync.rects[0].y == next(ln.y for ln in tl.lanes if ln.node == "h20-0") + 2
    assert "sync" in tl.kinds
    page = client_as("alice").get(f"/groups/{g.pk}/").content.decode()
    assert "(rollout, weight sync, training)" in page


@pytest.mark.django_db
def test_lanes_sit_under_their_pool_and_warm_starts_show(world: Any) -> None:
    g, _, _ = group_with(world)
    tl = group_timeline(user=world.alice, group_id=g.pk)
    assert [h.title for h in tl.pool_heads] == ["Rollout pool · 1 node", "Training pool · 1 node"]
    assert tl.pool_heads[0].y < tl.lanes[0].y < tl.pool_heads[1].y < tl.lanes[1].y
    svg = str(timeline_svg(tl))
    assert "Rollout pool · 1 node" in svg and "Training pool · 1 node" in svg
    assert 'data-pool="rollout"' in svg and 'data-pool="train"' in svg
    # a warm start is a green wedge outlined in white (visible on light and dark shades)
    assert svg.count('class="warm"') == 3 and 'fill="#12b76a" stroke="#fff"' in svg
    assert svg.count('class="cold"') == 1


@pytest.mark.django_db
def test_a_jobs_own_timeline_lists_no_bubble_since_it_draws_none(
    world: Any, client_as: Any
) -> None:
    _, job, _ = group_with(world)
    tl = job_timeline(user=world.alice, job_id=job.pk)
    # a job's chart has no allocations: its gaps are other members' time, not bubbles
    assert tl.bubbles == () and "bubble" not in tl.marks
    assert tl.marks == {"cold", "warm"}
    (entry,) = tl.legend
    assert [k for k, _ in entry.swatches] == ["rollout", "sync", "train"]
    page = client_as("alice").get(f"/timeline/jobs/{job.pk}/").content.decode()
    assert "bubble (allocated, idle)" not in page and 'data-mark="bubble"' not in page
    assert "gemma (rollout, weight sync, training)" in page


@pytest.mark.django_db
def test_the_legend_names_only_the_kinds_and_members_drawn_in_the_window(
    world: Any, client_as: Any
) -> None:
    g, _, _ = group_with(world)
    idle = make_job(world, name="idle-member", status=JobStatus.COMPLETED)
    place(g, idle, rollout=["h20-0"], train=["h800-0"], joined=T0)  # never ran a phase
    # the first 8 minutes: gemma's cold rollout only; the training node idles (a bubble)
    a, b = T0.strftime("%Y-%m-%dT%H:%M:%S"), (T0 + 8 * M).strftime("%Y-%m-%dT%H:%M:%S")
    tl = group_timeline(user=world.alice, group_id=g.pk, start=a, end=b)
    (entry,) = tl.legend
    assert entry.label == "gemma" and [k for k, _ in entry.swatches] == ["rollout"]
    assert tl.marks == {"cold", "bubble"}
    page = client_as("alice").get(f"/groups/{g.pk}/?start={a}&end={b}").content.decode()
    assert "gemma (rollout)" in page and "idle-member (" not in page
    assert "warm start" not in page and "cold start" in page


@pytest.mark.django_db
def test_the_chart_is_drawn_at_the_width_the_page_measured_for_its_card(
    world: Any, client_as: Any
) -> None:
    g, _, _ = group_with(world)
    c = client_as("alice")

    def drawn(path: str) -> str:
        page = c.get(path).content.decode()
        return page[page.index('<svg class="timeline') :].split(">", 1)[0]

    # not measured yet (no JavaScript, or its first chart): the default, scaled by the CSS
    first = drawn(f"/groups/{g.pk}/")
    assert 'class="timeline"' in first and 'viewBox="0 0 1200 ' in first
    # timeline.js keeps the card's width in a cookie and asks with ?width= after a resize
    c.cookies["gantt_width"] = "900"
    assert 'class="timeline fitted"' in drawn(f"/groups/{g.pk}/")
    assert 'viewBox="0 0 900 ' in drawn(f"/groups/{g.pk}/")
    assert 'viewBox="0 0 1500 ' in drawn(f"/groups/{g.pk}/?width=1500")
    # a phone's card: drawn at the smallest width that keeps the labels apart, and scrolled
    assert 'viewBox="0 0 640 ' in drawn(f"/groups/{g.pk}/?width=350")
    c.cookies["gantt_width"] = "wide"
    assert 'class="timeline"' in drawn(f"/groups/{g.pk}/")


@pytest.mark.django_db
def test_a_zoomed_past_window_of_a_live_group_is_history_not_now(
    world: Any, client_as: Any
) -> None:
    now = datetime.now(tz=UTC)
    job = make_job(world, name="live-one")
    g = make_group(created=now - 60 * M)
    allocate(g, "h20-0", now - 60 * M, None)
    pl = place(g, job, rollout=["h20-0"], train=[], joined=now - 60 * M)
    phase(pl, iteration=0, kind="rollout", nodes=["h20-0"], start=now - 50 * M, minutes=5)
    c = client_as("alice")
    whole = c.get(f"/groups/{g.pk}/").content.decode()
    assert "bubble now" in whole and "live, refreshes" in whole and 'hx-trigger="every 5s"' in whole
    a, b = (
        (now - 55 * M).strftime("%Y-%m-%dT%H:%M:%S"),
        (now - 40 * M).strftime("%Y-%m-%dT%H:%M:%S"),
    )
    past = c.get(f"/groups/{g.pk}/?start={a}&end={b}").content.decode()
    assert "bubble now" not in past and "bubble in this window" in past
    assert "live, refreshes" not in past and 'hx-trigger="every 5s"' not in past
    # an htmx poll of the past window is told to stop
    assert c.get(f"/groups/{g.pk}/?start={a}&end={b}", HTTP_HX_REQUEST="true").status_code == 286


@pytest.mark.django_db
def test_a_drained_node_still_running_members_shows_as_drained(world: Any) -> None:
    g, _, pl = group_with(world, released=False)
    phase(pl, iteration=1, kind="train", nodes=["h800-0"], start=datetime.now(tz=UTC), minutes=None)
    Node.objects.filter(name="h800-0").update(state=NodeState.DRAINED)
    Node.objects.filter(name="h800-3").update(state=NodeState.DOWN)
    pools = {p.kind: p for p in cluster_overview(user=world.admin).pools}
    train = (
        pools["Training"]
        if "Training" in pools
        else next(p for p in pools.values() if p.gpu_type == "H800")
    )
    assert (train.busy, train.idle, train.drained, train.draining, train.down) == (0, 0, 1, 1, 1)
    assert train.free == 2 and train.total == 4
    rollout = next(p for p in pools.values() if p.gpu_type == "H20")
    assert (rollout.idle, rollout.drained) == (1, 0)  # allocated, nothing running on it


@pytest.mark.django_db
def test_a_weight_sync_counts_in_the_solo_iteration_time(world: Any) -> None:
    _, job, pl = group_with(world)
    phase(pl, iteration=1, kind="train", nodes=["h800-0"], start=T0 + 32 * M, minutes=10)
    report = slo_report(user=world.alice, start=date(2026, 3, 10), end=date(2026, 3, 10))
    (j,) = report.jobs
    # iteration 0: 10 + 10 + 2 (sync) min, iteration 1: 10 + 10 min -> 21 min on average
    assert j.solo_iteration_s == pytest.approx(21 * 60)
    assert j.iterations_measured == 2
