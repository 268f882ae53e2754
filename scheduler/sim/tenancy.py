"""Tenants in the simulator: quotas, fair-share queue order and preemption (issue 22).

The engine (scheduler.sim.engine) calls a `Tenancy` at four places: it orders the
waiting queue, asks whether a job may be admitted now, tells it when a job could not
be placed (it may then choose victims with scheduler.fairshare.preemption_targets, the
core the live planner calls too), and asks at every iteration boundary after training
whether the job must yield (checkpoint; the engine's drift-yield path, so no iteration
is lost and the job resumes later from its checkpoint after its restart).

Modes:
- `fifo`: no Tenancy at all (the simulator as before: first fit over a FIFO queue).
- `caps`: today's live planner: a tenant's nominal quota is a hard cap per GPU type,
  FIFO within it, no borrowing, no preemption.
- `fairshare`: borrowing up to the borrowing limit, the queue in fair-share order
  (priority, weighted dominant share of decayed usage + holdings + entry penalty,
  submission), preemption of borrowed capacity at iteration boundaries.

Quota accounting counts what a job asks for: its rollout GPUs on the rollout type
(none when it runs co-located, on its training nodes) and its training GPUs on the
training type, while it holds a placement; co-execution groups share nodes, so the sum
over tenants may exceed the pool.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from scheduler.cluster import nodes_needed
from scheduler.fairshare import (
    DEFAULT_PENALTY_HALF_LIFE_S,
    PreemptionDecision,
    PreemptionPolicy,
    QueuedJob,
    QuotaStatus,
    RunningJob,
    Share,
    TenantLoad,
    accrue,
    entry_penalty,
    preemption_targets,
    queue_order,
    quota_check,
)
from scheduler.model import ClusterState, JobProfile, Pool
from scheduler.sim.records import JobRecord


class Simulation(Protocol):
    """What the hook reads of the engine's run (scheduler.sim.engine.Simulation)."""

    @property
    def now(self) -> float: ...
    @property
    def state(self) -> ClusterState: ...
    @property
    def jobs(self) -> dict[str, JobRecord]: ...


MODES = ("fifo", "caps", "fairshare")
RETRY_EVERY_S = 300.0  # [I] how often a blocked job within its quota looks again


@dataclass(frozen=True)
class TenancyConfig:
    """Tenants' shares and the preemption policy of a multi-tenant run."""

    shares: tuple[Share, ...]
    mode: str = "fairshare"
    policy: PreemptionPolicy = field(default_factory=PreemptionPolicy)
    half_life_s: float = 7 * 24 * 3600.0
    penalty_half_life_s: float = DEFAULT_PENALTY_HALF_LIFE_S
    slo_class: Mapping[str, str] = field(default_factory=dict)  # job id -> SLO class

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode: must be one of {', '.join(MODES)}, got {self.mode!r}")


@dataclass(frozen=True)
class Preemption:
    """One preemption as the report and the job page tell it."""

    at_s: float
    victim: str
    victim_tenant: str
    preemptor: str
    preemptor_tenant: str
    iteration: int  # the victim's iterations done when it yielded (its checkpoint)
    kind: str  # reclaim | fair_share | priority
    work_lost_s: float  # work since its checkpoint when it yielded (0 at a boundary)


def job_gpus(job: JobProfile, state: ClusterState, *, colocated: bool = False) -> dict[str, int]:
    """Return what `job` holds per GPU type (module docstring)."""
    spec = state.spec
    out = {spec.train.name: job.train_gpus}
    if not colocated:
        out[spec.rollout.name] = out.get(spec.rollout.name, 0) + job.rollout_gpus
    return out


class Tenancy:
    """The engine's tenant hook (module docstring); one per simulation run."""

    def __init__(self, config: TenancyConfig) -> None:
        self.config = config
        self.pending: dict[str, set[str]] = {}  # preemptor -> victims not yielded yet
        self.due: dict[str, tuple[str, str]] = {}  # victim -> (preemptor, kind)
        self.preemptions: list[Preemption] = []
        self.blocked_since: dict[str, float] = {}
        self.started_s: dict[str, float] = {}  # job -> when it last started or resumed
        self.boundary_s: dict[str, float] = {}  # job -> its last iteration boundary
        self.admitted: dict[str, list[tuple[float, float, str]]] = {}  # tenant -> (t, gpus, pool)
        self.train_ends: dict[str, int] = {}
        # held GPUs, integrated: decayed (for the share) and plain (for the report)
        self.usage: dict[str, dict[str, float]] = {}
        self.gpu_s: dict[str, dict[str, float]] = {}
        self.held: dict[str, dict[str, int]] = {}
        self.peak_held: dict[str, dict[str, int]] = {}  # tenant -> pool -> most GPUs held
        self.last_tick = 0.0
        self.retry_at: float | None = None

    # -- accounting ---------------------------------------------------------------------
    def holdings(self, sim: Simulation) -> dict[str, dict[str, int]]:
        """Return tenant -> GPU type -> GPUs held by the running jobs now."""
        held: dict[str, dict[str, int]] = {}
        for group in sim.state.groups:
            for m in group.members:
                mine = held.setdefault(m.job.tenant, {})
                gpus = job_gpus(m.job, sim.state, colocated=not m.rollout_nodes)
                for pool, g in gpus.items():
                    mine[pool] = mine.get(pool, 0) + g
        return held

    def tick(self, sim: Simulation) -> None:
        """Integrate holdings since the last tick (called whenever allocations change):
        the decayed usage with scheduler.fairshare.accrue, the plain GPU-seconds."""
        dt = sim.now - self.last_tick
        if dt > 0:
            h = self.config.half_life_s
            for tenant in set(self.usage) | set(self.held):
                decayed = self.usage.setdefault(tenant, {})
                held = self.held.get(tenant, {})
                for pool in set(decayed) | set(held):
                    g = held.get(pool, 0)
                    decayed[pool] = accrue(decayed.get(pool, 0.0), g, dt, h)
                    if g:
                        s = self.gpu_s.setdefault(tenant, {})
                        s[pool] = s.get(pool, 0.0) + g * dt
        self.last_tick = sim.now
        self.held = self.holdings(sim)
        for tenant, held in self.held.items():
            peak = self.peak_held.setdefault(tenant, {})
            for pool, g in held.items():
                peak[pool] = max(peak.get(pool, 0), g)

    def loads(self, sim: Simulation) -> dict[str, TenantLoad]:
        out: dict[str, TenantLoad] = {}
        tenants = set(self.held) | set(self.usage) | set(self.admitted)
        for tenant in tenants:
            penalty: dict[str, float] = {}
            for t, g, pool in self.admitted.get(tenant, []):
                penalty[pool] = penalty.get(pool, 0.0) + entry_penalty(
                    [(t, g)], sim.now, self.config.penalty_half_life_s
                )
            out[tenant] = TenantLoad(
                tenant,
                dict(self.usage.get(tenant, {})),
                dict(self.held.get(tenant, {})),
                penalty,
            )
        return out

    def _queued(self, sim: Simulation, job_id: str) -> QueuedJob:
        job = sim.jobs[job_id].profile
        return QueuedJob(
            job_id,
            job.tenant,
            job_gpus(job, sim.state),
            job.priority,
            job.arrival_s,
            self.blocked_since.get(job_id),
        )

    # -- the engine's four calls ----------------------------------------------------------
    def order(self, sim: Simulation, waiting: Sequence[str]) -> list[str]:
        """Return the waiting jobs in the order they are tried."""
        if self.config.mode != "fairshare":
            return list(waiting)
        jobs = [self._queued(sim, j) for j in waiting]
        order = queue_order(jobs, self.loads(sim), self.config.shares, self.config.half_life_s)
        for pos in order:
            sim.jobs[pos.job_id].reason = pos.reason
        return [p.job_id for p in order]

    def may_admit(self, sim: Simulation, job_id: str) -> bool:
        """Return False when `job_id` must wait for its quota (caps: above nominal;
        fairshare: above its borrowing limit, or a borrower while a preemption is under
        way, so the capacity freed goes to the job it was freed for)."""
        self._prune(sim)
        job = self._queued(sim, job_id)
        verdict = quota_check(job, self.held, self.config.shares)
        if self.config.mode == "caps":
            ok = verdict.status is QuotaStatus.WITHIN_NOMINAL
        elif verdict.status is QuotaStatus.OVER_LIMIT:
            ok = False
        else:
            ok = not (
                self.pending
                and job_id not in self.pending
                and verdict.status is QuotaStatus.BORROWS
            )
        if not ok:
            sim.jobs[job_id].reason = verdict.reason
        return ok

    def started(self, sim: Simulation, job_id: str) -> None:
        """Note a job placed (admitted or resumed)."""
        self.tick(sim)
        job = sim.jobs[job_id].profile
        self.started_s[job_id] = sim.now
        self.boundary_s[job_id] = sim.now
        self.blocked_since.pop(job_id, None)
        for pool, g in job_gpus(job, sim.state).items():
            self.admitted.setdefault(job.tenant, []).append((sim.now, float(g), pool))
        for victim in self.pending.pop(job_id, set()):  # placed before they all yielded
            self.due.pop(victim, None)

    def blocked(self, sim: Simulation, job_id: str) -> float | None:
        """A job could not be placed: choose victims if it may have them; return when to
        look again (a grace delay or a minimum run ending), None: at the next departure."""
        self.blocked_since.setdefault(job_id, sim.now)
        self._prune(sim)
        if job_id in self.pending and not self.pending[job_id]:
            del self.pending[job_id]  # its victims all yielded and it still does not fit
        if self.config.mode != "fairshare" or self.pending:
            return None  # one preemption at a time: the next waits for its victims
        self.tick(sim)
        job = self._queued(sim, job_id)
        state = sim.state
        free, capacity, need = self._capacity(sim, sim.jobs[job_id].profile)
        running, group_frees = self._running(sim)
        plan = preemption_targets(
            job,
            running,
            self.config.shares,
            free=free,
            need=need,
            capacity=capacity,
            now_s=sim.now,
            policy=self.config.policy,
            group_frees=group_frees,
        )
        record = sim.jobs[job_id]
        if plan.decision is PreemptionDecision.PREEMPT:
            self.pending[job_id] = set(plan.victims)
            for victim in plan.victims:
                self.due[victim] = (job_id, plan.kind)
            record.reason = f"preempting {', '.join(plan.victims)}: {plan.reason}"
            return None
        if plan.decision is PreemptionDecision.FITS:
            return None  # the planner found no placement for other reasons (memory, SLO)
        record.reason = plan.reason
        if not state.groups:
            return None
        verdict = quota_check(job, self.held, self.config.shares)
        if verdict.status is not QuotaStatus.WITHIN_NOMINAL:
            return None
        return sim.now + RETRY_EVERY_S

    def _prune(self, sim: Simulation) -> None:
        """Forget victims that finished before their boundary came, and preemptors that
        were placed or left."""
        for victim in [v for v in self.due if sim.jobs[v].status != "running"]:
            preemptor, _kind = self.due.pop(victim)
            self.pending.get(preemptor, set()).discard(victim)
        for preemptor in [p for p in self.pending if sim.jobs[p].status == "running"]:
            del self.pending[preemptor]

    def must_yield(self, job_id: str) -> bool:
        """Return True when `job_id`, at an iteration boundary, yields to a preemptor."""
        return job_id in self.due

    def yielded(self, sim: Simulation, job_id: str) -> None:
        """Record the preemption of `job_id` (it has just yielded at its boundary)."""
        preemptor, kind = self.due.pop(job_id)
        record = sim.jobs[job_id]
        self.preemptions.append(
            Preemption(
                sim.now,
                job_id,
                record.profile.tenant,
                preemptor,
                sim.jobs[preemptor].profile.tenant,
                record.iterations_done,
                kind,
                sim.now - self.boundary_s.get(job_id, sim.now),
            )
        )
        record.reason = (
            f"preempted at iteration {record.iterations_done} for job {preemptor} of "
            f"{sim.jobs[preemptor].profile.tenant} ({kind.replace('_', ' ')})"
        )
        victims = self.pending.get(preemptor)
        if victims is not None:
            victims.discard(job_id)
        self.tick(sim)

    def boundary(self, job_id: str, now: float) -> None:
        """Note an iteration boundary (a checkpoint) of `job_id`."""
        self.boundary_s[job_id] = now
        self.train_ends[job_id] = self.train_ends.get(job_id, 0) + 1

    # -- the state as preemption sees it ----------------------------------------------------
    def _capacity(
        self, sim: Simulation, job: JobProfile
    ) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        state = sim.state
        used: set[str] = set()
        for group in state.groups:
            used.update(group.all_nodes)
        free: dict[str, int] = {}
        capacity: dict[str, int] = {}
        for node in state.nodes:
            gtype = state.spec.gpu_type(node.pool).name
            capacity[gtype] = capacity.get(gtype, 0) + node.gpus
            if node.name not in used and not node.cordoned:
                free[gtype] = free.get(gtype, 0) + node.gpus
        need: dict[str, int] = {}
        for pool in (Pool.ROLLOUT, Pool.TRAIN):
            gpu_type = state.spec.gpu_type(pool)
            whole = nodes_needed(job, state.spec, pool) * gpu_type.gpus_per_node
            need[gpu_type.name] = need.get(gpu_type.name, 0) + whole
        return free, capacity, need

    def _running(self, sim: Simulation) -> tuple[list[RunningJob], dict[str, dict[str, int]]]:
        state = sim.state
        gpus_of = {n.name: (state.spec.gpu_type(n.pool).name, n.gpus) for n in state.nodes}
        running: list[RunningJob] = []
        group_frees: dict[str, dict[str, int]] = {}
        for group in state.groups:
            users: dict[str, int] = {}
            for m in group.members:
                for node in set(m.rollout_nodes) | set(m.train_nodes):
                    users[node] = users.get(node, 0) + 1
            shared: dict[str, int] = {}
            for node in group.all_nodes:
                if users.get(node, 0) != 1:
                    gtype, g = gpus_of[node]
                    shared[gtype] = shared.get(gtype, 0) + g
            group_frees[group.id] = shared
            for m in group.members:
                own: dict[str, int] = {}
                for node in set(m.rollout_nodes) | set(m.train_nodes):
                    if users[node] == 1:
                        gtype, g = gpus_of[node]
                        own[gtype] = own.get(gtype, 0) + g
                record = sim.jobs[m.job.id]
                running.append(
                    RunningJob(
                        m.job.id,
                        m.job.tenant,
                        job_gpus(m.job, state, colocated=not m.rollout_nodes),
                        own,
                        self.started_s.get(m.job.id, record.admitted_s or 0.0),
                        m.job.priority,
                        self.config.slo_class.get(m.job.id, "silver"),
                        group.id,
                        sim.now - self.boundary_s.get(m.job.id, sim.now),
                        self._expected_end(sim, m.job.id),
                    )
                )
        return running, group_frees

    def _expected_end(self, sim: Simulation, job_id: str) -> float | None:
        record = sim.jobs[job_id]
        done = record.iterations_done
        since = self.started_s.get(job_id, record.admitted_s)
        if since is None or done == 0 or sim.now <= since:
            return None
        # iterations since it last started, at the pace it ran them
        done_here = max(1, self.train_ends.get(job_id, done))
        pace = (sim.now - since) / done_here
        return sim.now + pace * (record.profile.iterations - done)

    # -- report ---------------------------------------------------------------------------
    def report(self, sim: Simulation) -> dict[str, dict[str, float | int]]:
        """Return per tenant: jobs, wait p50/p95 (h), GPU-hours and their share, nominal
        share, preemptions suffered and caused, iterations lost."""
        self.tick(sim)
        tenants = sorted({r.profile.tenant for r in sim.jobs.values()})
        total_gpu_s = sum(sum(p.values()) for p in self.gpu_s.values()) or 1.0
        nominal: dict[str, int] = {}
        for share in self.config.shares:
            nominal[share.tenant] = nominal.get(share.tenant, 0) + share.nominal
        total_nominal = sum(nominal.values()) or 1
        out: dict[str, dict[str, float | int]] = {}
        for tenant in tenants:
            records = [r for r in sim.jobs.values() if r.profile.tenant == tenant]
            waits = sorted(
                (r.admitted_s - r.profile.arrival_s) / 3600.0
                for r in records
                if r.admitted_s is not None
            )
            lost = sum(
                self.train_ends.get(r.profile.id, 0) - r.profile.iterations
                for r in records
                if r.status == "done"
            )
            gpu_h = sum(self.gpu_s.get(tenant, {}).values()) / 3600.0
            out[tenant] = {
                "jobs": len(records),
                "done": sum(1 for r in records if r.status == "done"),
                "wait_p50_h": _quantile(waits, 0.50),
                "wait_p95_h": _quantile(waits, 0.95),
                "gpu_h": gpu_h,
                "gpu_share": gpu_h * 3600.0 / total_gpu_s,
                "nominal_share": nominal.get(tenant, 0) / total_nominal,
                "preempted": sum(1 for p in self.preemptions if p.victim_tenant == tenant),
                "preempting": sum(1 for p in self.preemptions if p.preemptor_tenant == tenant),
                "reclaimed_from": sum(
                    1 for p in self.preemptions if p.victim_tenant == tenant and p.kind == "reclaim"
                ),
                "iterations_lost": lost,
                "work_lost_s": sum(
                    p.work_lost_s for p in self.preemptions if p.victim_tenant == tenant
                ),
            }
        return out


def _quantile(values: Sequence[float], q: float) -> float:
    """Return the q-quantile of sorted `values` (linear interpolation; 0 when empty)."""
    if not values:
        return 0.0
    pos = q * (len(values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)
