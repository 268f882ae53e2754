"""Fair-share preemption on the live cluster (issue 22 item 4).

When a queued job cannot be placed (RETRY) the planning pass asks `request_for`: the
core's `scheduler.fairshare.preemption_targets` decides on the running jobs as the planner's
snapshot holds them (what each one's eviction frees on whole nodes, its tenant's quota,
SLO class, priority, how long it ran and how much work it did since its checkpoint) whom
to evict: jobs of tenants on borrowed capacity for a job within its tenant's nominal quota
(reclaim), of tenants above the job's tenant's share (fair share, the no-loop rule), or
lower-priority jobs of its own tenant; first waiting up to ROLLMUX_PREEMPT_GRACE_S for a
departure that frees the same capacity. A job of a class that is not preemptible (gold by
default) or that ran less than ROLLMUX_PREEMPT_MIN_RUN_S is never chosen.

The victims' placements are marked (`move_requested` preempt, `preempted_for` the job);
nothing stops at once. At a victim's next iteration boundary after training (its
checkpoint of that iteration is written before the end is reported) the controller calls
`services.moves.at_iteration_boundary`, which hands a preempt request to `yield_now` here:
the placement ends `preempted` (its nodes are released as any departure's), the job goes
back to the queue and resumes later from its checkpoint, like a drift re-plan's yield: no
work is lost, it never fails for it and burns no attempt (only `failed` ends count
against ROLLMUX_MAX_ATTEMPTS). If the job it yields for is no longer queued by then
(placed elsewhere, cancelled), the request is dropped and the victim runs on.

What is said: the victim's job page and reason ("preempted at iteration 37 for another
tenant's job, which is within its tenant's nominal H800 quota; queued to resume from its
checkpoint"; a viewer who may see the job it yielded for reads "job #91 of speech":
`workflow.selectors.preemption_text`), the audit (`job.preempt_request`, `job.preempt`,
with both jobs: admins only), a `job.preempted` notification and the metric
`rollmux_preemptions_total{reason}`.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import NamedTuple

from django.conf import settings
from django.db.models import Max

from rollmux_web import events, metrics
from rollmux_web.accounts.access import OTHER_TENANT_JOB
from rollmux_web.audit.services import audit_record
from rollmux_web.id_sql import in_ids
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.quotas.models import SloClass
from rollmux_web.workflow.fairshare import Picture, job_gpus, queued_job
from rollmux_web.workflow.models import (
    EndReason,
    MoveKind,
    PhaseRecord,
    Placement,
    PlanWait,
    Strategy,
)
from rollmux_web.workflow.services.departures import placement_end
from rollmux_web.workflow.services.effects import Effects
from scheduler.fairshare import (
    PreemptionDecision,
    PreemptionPlan,
    PreemptionPolicy,
    RunningJob,
    preemption_targets,
    running_holdings,
)
from scheduler.model import ClusterState

log = logging.getLogger(__name__)


def policy() -> PreemptionPolicy:
    """Return the live preemption policy: each SLO class's flag, the minimum run and grace."""
    return PreemptionPolicy(
        preemptible=dict(SloClass.objects.values_list("name", "preemptible")),
        min_run_s=settings.ROLLMUX_PREEMPT_MIN_RUN_S,
        grace_s=settings.ROLLMUX_PREEMPT_GRACE_S,
    )


def _nodes_gpus(
    state: ClusterState,
    names: set[str],
    *,
    usable: bool,
    at: dict[str, list[int]] | None = None,
) -> dict[str, int]:
    """Return the GPUs of `names` per GPU type (`usable`: leaving out drained nodes), in
    the state's node order. `at`: each node's position in `state.nodes` (`_positions`),
    for a caller that asks about many sets of one state (a few names of thousands)."""
    out: dict[str, int] = defaultdict(int)
    nodes = state.nodes
    if at is None:
        chosen = [node for node in nodes if node.name in names]
    else:
        chosen = [nodes[i] for i in sorted(i for n in names for i in at.get(n, ()))]
    for node in chosen:
        if not (usable and node.cordoned):
            out[node.gpu_type] += node.gpus
    return dict(out)


def _positions(state: ClusterState) -> dict[str, list[int]]:
    """Return the positions in `state.nodes` of each node name."""
    out: dict[str, list[int]] = defaultdict(list)
    for i, node in enumerate(state.nodes):
        out[node.name].append(i)
    return dict(out)


def _need(job: Job, state: ClusterState) -> dict[str, int]:
    """Return the GPUs on free whole nodes the job needs per GPU type (a new group's)."""
    out: dict[str, int] = defaultdict(int)
    for gt, gpus in ((state.spec.rollout, job.rollout_gpus), (state.spec.train, job.train_gpus)):
        if gpus:
            per = max(1, gt.gpus_per_node)
            out[gt.name] += math.ceil(gpus / per) * per
    return dict(out)


class _Open(NamedTuple):
    """What `_running` reads of an open placement and its job (one row, no model objects:
    a pass that leaves jobs waiting reads every running job's once per snapshot)."""

    job_id: int
    pk: int
    move_requested: str
    created_at: datetime
    iterations: int
    iterations_done: int
    rollout_gpus: int
    train_gpus: int
    priority: int
    tenant: str
    slo_class: str


_OPEN_COLUMNS = (
    "job_id",
    "pk",
    "move_requested",
    "created_at",
    "job__iterations",
    "job__iterations_done",
    "job__rollout_gpus",
    "job__train_gpus",
    "job__priority",
    "job__tenant__name",
    "job__slo_class__name",
)


def _running(
    state: ClusterState, pic: Picture, now_s: float
) -> tuple[list[RunningJob], dict[str, dict[str, int]], dict[str, int]]:
    """Return the running jobs as the core sees them, the GPUs each group's shared nodes
    free once all its members leave, and the GPUs already being freed (victims marked
    before, still running to their boundary) per GPU type."""
    members = {m.job.id: (g, m) for g in state.groups for m in g.members}
    at = _positions(state)
    rows = {
        str(row[0]): _Open(*row)
        for row in Placement.objects.filter(
            in_ids("job_id", {int(i) for i in members}), ended_at__isnull=True
        )
        .exclude(strategy=Strategy.PROFILE)
        .values_list(*_OPEN_COLUMNS)
    }
    last_train = dict(
        PhaseRecord.objects.filter(
            in_ids("placement_id", {p.pk for p in rows.values()}), kind="train"
        )
        .values("placement_id")
        .annotate(t=Max("finished_at"))
        .values_list("placement_id", "t")
    )
    running: list[RunningJob] = []
    group_frees: dict[str, dict[str, int]] = {}
    freeing: dict[str, int] = defaultdict(int)
    for group in state.groups:
        nodes = set(group.rollout_nodes) | set(group.train_nodes)
        count: dict[str, int] = defaultdict(int)
        for m in group.members:
            for n in set(m.rollout_nodes) | set(m.train_nodes):
                count[n] += 1
        own_all: set[str] = set()
        for m in group.members:
            own = {n for n in set(m.rollout_nodes) | set(m.train_nodes) if count[n] == 1}
            if len(group.members) == 1:
                own = nodes
            own_all |= own
            placement = rows.get(m.job.id)
            if placement is None:
                continue
            frees = _nodes_gpus(state, own, usable=True, at=at)
            if placement.move_requested == MoveKind.PREEMPT:
                for gt, g in frees.items():
                    freeing[gt] += g
                continue
            left = max(0, placement.iterations - placement.iterations_done)
            per_iteration = (m.job.t_roll_max_s + m.job.t_train_max_s + m.job.t_sync_s) / max(
                m.job.time_scale, 1e-9
            )
            checkpoint = last_train.get(placement.pk) or placement.created_at
            running.append(
                RunningJob(
                    id=m.job.id,
                    tenant=placement.tenant,
                    gpus=job_gpus(placement.rollout_gpus, placement.train_gpus, pic.types),
                    frees=frees,
                    started_s=placement.created_at.timestamp(),
                    priority=placement.priority,
                    slo_class=placement.slo_class,
                    group=group.id,
                    since_checkpoint_s=max(0.0, now_s - checkpoint.timestamp()),
                    ends_s=now_s + left * per_iteration,
                )
            )
        group_frees[group.id] = _nodes_gpus(state, nodes - own_all, usable=True, at=at)
    return running, group_frees, dict(freeing)


def _queued_since(job: Job) -> datetime:
    """Return when the job entered the queue (submission, or its last placement's end)."""
    ended = (
        Placement.objects.filter(job=job, ended_at__isnull=False)
        .order_by("-ended_at")
        .values_list("ended_at", flat=True)
        .first()
    )
    return ended or job.submitted_at


@dataclass
class Memo:
    """What `decide` reads once per snapshot of a planning pass (the running jobs, what
    their tenants hold, the free and freeing GPUs, the policy), not once per waiting job:
    a pass that leaves hundreds of jobs waiting asks for each of them."""

    state: ClusterState | None = None
    running: list[RunningJob] = field(default_factory=list)
    group_frees: dict[str, dict[str, int]] = field(default_factory=dict)
    free: dict[str, int] = field(default_factory=dict)
    policy: PreemptionPolicy | None = None
    # tenant -> GPU type -> GPUs the running jobs hold (the core's `running_holdings`)
    held: dict[str, dict[str, int]] = field(default_factory=dict)

    def load(self, state: ClusterState, pic: Picture, now_s: float) -> None:
        if self.state is state:
            return
        running, group_frees, freeing = _running(state, pic, now_s)
        used = {n for g in state.groups for n in set(g.rollout_nodes) | set(g.train_nodes)}
        free = _nodes_gpus(state, {n.name for n in state.nodes} - used, usable=True)
        for gt, g in freeing.items():  # victims already on their way out count as free
            free[gt] = free.get(gt, 0) + g
        self.state, self.running, self.group_frees, self.free = state, running, group_frees, free
        self.held = running_holdings(running)
        if self.policy is None:
            self.policy = policy()

    def marked(self, victims: set[str]) -> None:
        """The victims are on their way out: their GPUs count as free from now on."""
        for r in self.running:
            if r.id in victims:
                for gt, g in r.frees.items():
                    self.free[gt] = self.free.get(gt, 0) + g
        self.running = [r for r in self.running if r.id not in victims]
        self.held = running_holdings(self.running)


def decide(
    job: Job, state: ClusterState, pic: Picture, now: datetime, memo: Memo | None = None
) -> PreemptionPlan:
    """Return the core's preemption plan for a queued job the planner could not place."""
    now_s = now.timestamp()
    memo = memo if memo is not None else Memo()
    memo.load(state, pic, now_s)
    since = _queued_since(job) if job.attempts else job.submitted_at
    waiting = replace(queued_job(job, pic.types), blocked_since_s=since.timestamp())
    return preemption_targets(
        waiting,
        memo.running,
        pic.shares,
        free=memo.free,
        need=_need(job, state),
        capacity=pic.capacity,
        now_s=now_s,
        policy=memo.policy,
        group_frees=memo.group_frees,
        held=memo.held,
    )


def _within_text(job: Job, plan: PreemptionPlan, need: dict[str, int]) -> str:
    pools = "/".join(sorted(need)) or "GPU"
    if plan.kind == "reclaim":
        return f"which is within its tenant's nominal {pools} quota"
    if plan.kind == "fair_share":
        return f"whose tenant stays within its fair share of {pools} after admission"
    return f"which has a higher priority ({job.priority})"


def request_for(
    job: Job, state: ClusterState, pic: Picture, now: datetime, memo: Memo | None = None
) -> str:
    """Decide preemption for `job` (RETRY in this planning pass) and mark the victims;
    return what to add to its reason ("" when nothing is done for it). `memo`: the pass's
    (`Memo`), kept across its waiting jobs."""
    if not settings.ROLLMUX_PREEMPTION:
        return ""
    memo = memo if memo is not None else Memo()
    plan = decide(job, state, pic, now, memo)
    if plan.decision is PreemptionDecision.FITS:
        pending = Placement.objects.filter(
            preempted_for=job, ended_at__isnull=True, move_requested=MoveKind.PREEMPT
        ).count()
        if pending:
            return (
                f"; waiting for {pending} preempted job{'s' if pending != 1 else ''} to "
                "yield at their next iteration boundary"
            )
        return ""
    if plan.decision is PreemptionDecision.WAIT:
        return f"; {plan.reason}"
    if plan.decision is not PreemptionDecision.PREEMPT:
        return ""
    within = _within_text(job, plan, _need(job, state))
    victims = list(
        Placement.objects.filter(
            job_id__in=[int(v) for v in plan.victims], ended_at__isnull=True
        ).select_related("job__tenant")
    )
    memo.marked(set(plan.victims))
    for placement in victims:
        same = placement.job.tenant_id == job.tenant_id
        who = f"job #{job.pk} {job.name}" if same else OTHER_TENANT_JOB
        placement.move_requested = MoveKind.PREEMPT
        placement.preempted_for = job
        placement.move_reason = f"for {who}, {within}"[:500]
        placement.save(update_fields=["move_requested", "preempted_for", "move_reason"])
        audit_record(
            actor=None,
            action="job.preempt_request",
            obj=placement.job,
            tenant=placement.job.tenant.name,
            before={"group": placement.group_id, "placement": placement.pk},
            after={
                "for_job": job.pk,
                "for_tenant": job.tenant.name,
                "kind": plan.kind,
                "reason": plan.reason,
                "iterations_done": placement.job.iterations_done,
            },
        )
        log.info("job %s: to yield for job %s (%s)", placement.job_id, job.pk, plan.kind)
    n = len(victims)
    return (
        f"; {n} job{'s' if n != 1 else ''} on borrowed capacity (or of lower priority) "
        "will yield at their next iteration boundary, after a checkpoint"
        if plan.kind != "priority"
        else f"; {n} lower-priority job{'s' if n != 1 else ''} of {job.tenant.name} "
        "will yield at their next iteration boundary, after a checkpoint"
    )


def yield_now(
    *, job: Job, placement: Placement, now: datetime, effects: Effects
) -> EndReason | None:
    """Make a preemption at the victim's iteration boundary (module docstring): end its
    placement (PREEMPTED; the controller's decision drops the job from its group's runtime
    as a yield's) and return EndReason.PREEMPTED; None if the job it was for no longer
    waits (the request is dropped)."""
    waiting = (
        Job.objects.filter(pk=placement.preempted_for_id or 0, status=JobStatus.QUEUED)
        .select_related("tenant")
        .first()
    )
    if waiting is None or waiting.cancel_requested:
        placement.move_requested = ""
        placement.preempted_for = None
        placement.move_reason = ""
        placement.save(update_fields=["move_requested", "preempted_for", "move_reason"])
        return None
    text = (
        f"preempted at iteration {job.iterations_done} {placement.move_reason}; queued to "
        "resume from its checkpoint"
    )[:500]
    kind = "priority" if waiting.tenant_id == job.tenant_id else "reclaim"
    if "fair share" in placement.move_reason:
        kind = "fair_share"
    placement.move_requested = ""
    placement.move_reason = text
    placement.save(update_fields=["move_requested", "move_reason"])
    placement_end(placement, EndReason.PREEMPTED, now, effects)
    job.status = job.requeue_status
    job.reason = text
    job.save(update_fields=["status", "reason", "updated_at"])
    PlanWait.objects.filter(job_id__in=[job.pk, waiting.pk]).delete()
    audit_record(
        actor=None,
        action="job.preempt",
        obj=job,
        tenant=job.tenant.name,
        before={"group": placement.group_id, "placement": placement.pk},
        after={
            "for_job": waiting.pk,
            "for_tenant": waiting.tenant.name,
            "kind": kind,
            "reason": text,
            "iterations_done": job.iterations_done,
        },
    )
    events.publish(
        events.JOB_PREEMPTED,
        job=job,
        detail={"reason": text, "iteration": job.iterations_done, "kind": kind},
    )
    metrics.PREEMPTIONS.labels(kind).inc()
    log.info("job %s: %s", job.pk, text)
    effects.replan = True
    return EndReason.PREEMPTED
