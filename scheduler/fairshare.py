"""Fair share across tenants: quotas, decayed usage, queue order and preemption (issue 22).

A pure policy: stdlib only, time passed in (`now_s`), no clock and no randomness. The
live planner (rollmux_web) and the simulator (scheduler.sim) call the same functions.
Pools are named by their GPU type (e.g. "H20", "H800"); amounts are GPUs.

Public API (kept stable; rollmux_web imports it):

- `Share(tenant, pool, nominal, borrowing_limit=None, lending_limit=None, weight=1.0)`:
  one tenant's quota on one pool. Bad values raise `ShareError` (a ValueError) whose
  `field` names the field. `check_shares(shares, pools)` also refuses a pool the cluster
  does not have and a duplicate (tenant, pool).
- `decayed_usage(samples, now_s, half_life_s)`: GPU-seconds decayed with a half-life;
  `accrue(usage, held, dt_s, half_life_s)`: the same as a running total;
  `entry_penalty(admissions, now_s, half_life_s)`: GPUs just admitted, decayed.
- `TenantLoad(tenant, usage_gpu_s, held_gpus, penalty_gpus)` and
  `dominant_share(load, shares, half_life_s)`: the tenant's weighted dominant share
  (`ShareOf`: value, pool, percent) used to order the queue.
- `queue_order(jobs, loads, shares, half_life_s)`: `QueuePosition`s in admission order
  (priority, then weighted share, then submission time) with a human reason.
- `QueuedJob(id, tenant, gpus, priority, submitted_s, blocked_since_s)` and
  `RunningJob(id, tenant, gpus, frees, started_s, priority, slo_class, group,
  since_checkpoint_s, ends_s)`: the inputs (their docstrings say each field).
- `quota_check(job, held, shares)`: `QuotaVerdict` (WITHIN_NOMINAL, BORROWS, OVER_LIMIT)
  with a reason; `held` is tenant -> pool -> GPUs held now.
- `preemption_targets(job, running, shares, *, free, need, capacity, now_s, policy,
  group_frees, held)`: `PreemptionPlan(decision, reason, victims, kind)`, decision FITS,
  WAIT, PREEMPT or BLOCKED, kind reclaim / fair_share / priority; Kueue's GetTargets, pure.
  `held`: `running_holdings(running)` when the caller asks for many jobs on one set of
  running jobs (a planning pass: computed once, not per waiting job).
  `PreemptionPolicy(preemptible, min_run_s, grace_s, fair_share)` says who may be
  preempted and when (`fair_share=False`: reclaim and priority only).
- `borrowed_share(tenant, held, shares, capacity)`: the share the no-loop rule compares.
- `borrowable(tenant, pool, held, shares, capacity)`: GPUs it may borrow now (the others'
  unused reserved part, nominal less lending limit, is not lent).
- `jain_index(values)`: Jain's fairness index.

Shares for queue order. Per pool p, a tenant's load is
    h x usage_p x ln 2 / half_life + (1 - h) x held_p + penalty_p
(h = `history_weight`, 0.5): `usage_p` is GPU-seconds decayed with the half-life, and
x ln 2 / half_life turns it into the decayed mean number of GPUs held (a tenant that held
N GPUs for ever has N); so a tenant that always held N GPUs has load N. The entry
penalty (GPUs of jobs admitted in the last minutes, decayed fast) covers the part of a
fresh admission its history has not caught up with yet, so a burst cannot jump the
queue. Its weighted share of p is load_p / (weight_p x nominal_p) (no nominal: infinite
once it uses the pool), and the dominant share is the largest over pools.

Preemption (reclaim and fair sharing). A job may evict others only at their next
iteration boundary after training (checkpoint and yield: no work is lost, no attempt is
burnt); the caller applies it. Candidates are running jobs that
1. belong to a preemptible SLO class (`PreemptionPolicy.preemptible`, gold: no),
2. have run at least `min_run_s` since they last started,
3. hold GPUs of a pool where the waiting job is short, and either
4a. belong to another tenant that borrows (holds above its nominal) in such a pool the
    job holds GPUs of (so its eviction lowers what the tenant borrows), and,
    when the waiting job would itself borrow, have a priority no higher than its own, or
4b. belong to the job's own tenant with a strictly lower priority (the tenant must not
    borrow more in any pool after the swap).
Victims are ranked by what their eviction frees for the waiting job (GPUs on whole nodes
in the pools it is short of, not a time share), then by the least work since their
checkpoint; a chosen victim's co-execution group mates come next when every member may
be evicted (the group's shared nodes free only with all of them); then victims that are
not needed are dropped again (last chosen first).
Before preempting, a job that became blocked less than `grace_s` ago WAITs when the
departures expected within the grace free enough.

No-loop rule. `borrowed_share` of tenant T is max over pools of
max(0, held_p - nominal_p) / (weight_p x capacity_p) (Kueue's dominant resource share: 0
within the nominal quota). When the waiting job borrows after admission (share a' > 0),
every victim tenant V must satisfy a' <= b_V' < b_V, b_V' its share after the evictions
(Kueue's LessThanOrEqualToFinalShare, with the victim's share strictly falling). Then
every changed share ends below the largest changed share before, so the vector of all
tenants' shares sorted descending falls lexicographically. A reclaim (a' = 0) never
raises a share and strictly lowers the total borrowed GPUs; a same-tenant swap raises
neither and removes a queued job for ones of lower priority. So the potential
(sorted shares, total borrowed GPUs, sorted queued priorities) strictly falls at every
preemption and preemptions cannot cycle (tests/scheduler/test_fairshare_properties.py).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

LN2 = math.log(2.0)
DEFAULT_HALF_LIFE_S = 7 * 24 * 3600.0  # Slurm's and Kueue's usual 7 days
DEFAULT_PENALTY_HALF_LIFE_S = 600.0  # [I] an admission weighs for ~10 min
HISTORY_WEIGHT = 0.5


class ShareError(ValueError):
    """A share setting is refused; `field` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Share:
    """One tenant's quota on one pool (GPU type): nominal, borrowing, lending, weight.

    `borrowing_limit`: GPUs it may use beyond nominal when others do not (None: no
    limit). `lending_limit`: GPUs of its nominal others may borrow (None: all of it).
    """

    tenant: str
    pool: str
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.tenant:
            raise ShareError("tenant", "must not be empty")
        if not self.pool:
            raise ShareError("pool", "must not be empty")
        if self.nominal < 0:
            raise ShareError("nominal", f"must be >= 0, got {self.nominal}")
        if self.borrowing_limit is not None and self.borrowing_limit < 0:
            raise ShareError("borrowing_limit", f"must be >= 0, got {self.borrowing_limit}")
        if self.lending_limit is not None and not 0 <= self.lending_limit <= self.nominal:
            raise ShareError(
                "lending_limit",
                f"must be between 0 and the nominal quota {self.nominal}, got {self.lending_limit}",
            )
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ShareError("weight", f"must be a finite number > 0, got {self.weight}")

    @property
    def reserved(self) -> int:
        """Return the GPUs of its nominal quota nobody else may borrow."""
        return self.nominal - (self.nominal if self.lending_limit is None else self.lending_limit)


def check_shares(shares: Iterable[Share], pools: Collection[str]) -> None:
    """Refuse shares on a pool the cluster does not have, or twice for one tenant and pool."""
    seen: set[tuple[str, str]] = set()
    for share in shares:
        if share.pool not in pools:
            known = ", ".join(sorted(pools))
            raise ShareError("pool", f"the cluster has no GPU type {share.pool!r} (has {known})")
        key = (share.tenant, share.pool)
        if key in seen:
            raise ShareError("pool", f"tenant {share.tenant!r} has two shares of {share.pool!r}")
        seen.add(key)


def shares_by_tenant(shares: Iterable[Share]) -> dict[str, dict[str, Share]]:
    """Return shares as tenant -> pool -> Share."""
    out: dict[str, dict[str, Share]] = {}
    for share in shares:
        out.setdefault(share.tenant, {})[share.pool] = share
    return out


def _decay(age_s: float, half_life_s: float) -> float:
    return 1.0 if age_s <= 0 else 0.5 ** (age_s / half_life_s)


def decayed_usage(
    samples: Iterable[tuple[float, float]], now_s: float, half_life_s: float
) -> float:
    """Return the GPU-seconds of `samples` (end time s, GPU-seconds) decayed to `now_s`.

    A sample that ended `half_life_s` ago counts half; one ending after `now_s` counts
    whole. Bad half-life raises ShareError naming `half_life_s`.
    """
    if not (math.isfinite(half_life_s) and half_life_s > 0):
        raise ShareError("half_life_s", f"must be a finite number > 0, got {half_life_s}")
    return sum(gpu_s * _decay(now_s - end_s, half_life_s) for end_s, gpu_s in samples)


def accrue(usage_gpu_s: float, held_gpus: float, dt_s: float, half_life_s: float) -> float:
    """Return decayed usage `dt_s` later, `held_gpus` held all along: what was there
    decays by 2^(-dt/h) and the holding adds g x h / ln 2 x (1 - 2^(-dt/h)), exactly
    `decayed_usage` of the holding sampled ever finer (for a running total)."""
    if not (math.isfinite(half_life_s) and half_life_s > 0):
        raise ShareError("half_life_s", f"must be a finite number > 0, got {half_life_s}")
    decay: float = 0.5 ** (max(0.0, dt_s) / half_life_s)
    return usage_gpu_s * decay + held_gpus * half_life_s / LN2 * (1.0 - decay)


def entry_penalty(
    admissions: Iterable[tuple[float, float]],
    now_s: float,
    half_life_s: float = DEFAULT_PENALTY_HALF_LIFE_S,
    *,
    history_weight: float = HISTORY_WEIGHT,
) -> float:
    """Return the entry penalty in GPUs of `admissions` (admitted at s, GPUs) at `now_s`.

    A job admitted now weighs `history_weight` x its GPUs (the part of its load its
    decayed usage has not accumulated yet), decaying with `half_life_s`.
    """
    if not (math.isfinite(half_life_s) and half_life_s > 0):
        raise ShareError("half_life_s", f"must be a finite number > 0, got {half_life_s}")
    return history_weight * sum(g * _decay(now_s - t, half_life_s) for t, g in admissions)


@dataclass(frozen=True)
class TenantLoad:
    """What a tenant used and holds, per pool: decayed GPU-seconds, GPUs now, penalty."""

    tenant: str
    usage_gpu_s: Mapping[str, float] = field(default_factory=dict)
    held_gpus: Mapping[str, int] = field(default_factory=dict)
    penalty_gpus: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ShareOf:
    """A tenant's weighted dominant share: its value (1.0 = its share), and which pool."""

    tenant: str
    value: float
    pool: str | None  # the dominant pool (None: it uses nothing)

    @property
    def percent(self) -> str:
        """Return the share as a percentage for a reason ("120%", "no quota")."""
        return "no quota" if math.isinf(self.value) else f"{self.value:.0%}"


def dominant_share(
    load: TenantLoad,
    shares: Mapping[str, Share],
    half_life_s: float = DEFAULT_HALF_LIFE_S,
    *,
    history_weight: float = HISTORY_WEIGHT,
) -> ShareOf:
    """Return `load.tenant`'s weighted dominant share over pools (module docstring).

    `shares` is the tenant's pool -> Share; a pool it has no share of counts nominal 0.
    """
    if not 0.0 <= history_weight <= 1.0:
        raise ShareError("history_weight", f"must be between 0 and 1, got {history_weight}")
    pools = set(load.usage_gpu_s) | set(load.held_gpus) | set(load.penalty_gpus)
    best = ShareOf(load.tenant, 0.0, None)
    for pool in sorted(pools):
        used = (
            history_weight * load.usage_gpu_s.get(pool, 0.0) * LN2 / half_life_s
            + (1.0 - history_weight) * load.held_gpus.get(pool, 0)
            + load.penalty_gpus.get(pool, 0.0)
        )
        share = shares.get(pool)
        if used <= 0:
            continue
        entitled = 0.0 if share is None else share.weight * share.nominal
        value = math.inf if entitled <= 0 else used / entitled
        if value > best.value or best.pool is None:
            best = ShareOf(load.tenant, value, pool)
    return best


@dataclass(frozen=True)
class QueuedJob:
    """A job waiting for admission: its GPUs per pool and whether it is urgent."""

    id: str
    tenant: str
    gpus: Mapping[str, int]  # what it holds once admitted, per pool (quota accounting)
    priority: int = 0  # higher first
    submitted_s: float = 0.0
    # when it first could not be admitted (None: not blocked yet); starts the grace delay
    blocked_since_s: float | None = None


@dataclass(frozen=True)
class QueuePosition:
    """One queued job's place in admission order (1 = next) and why."""

    job_id: str
    position: int
    share: ShareOf
    reason: str


def ordinal(n: int) -> str:
    """Return 1st, 2nd, 3rd, 4th, ..., 11th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def queue_order(
    jobs: Iterable[QueuedJob],
    loads: Mapping[str, TenantLoad],
    shares: Iterable[Share],
    half_life_s: float = DEFAULT_HALF_LIFE_S,
    *,
    history_weight: float = HISTORY_WEIGHT,
) -> list[QueuePosition]:
    """Return the queued jobs in admission order: priority (high first), then their
    tenant's weighted dominant share (low first), then submission time, then id."""
    by_tenant = shares_by_tenant(shares)
    share_of: dict[str, ShareOf] = {}
    for job in jobs:
        if job.tenant not in share_of:
            load = loads.get(job.tenant, TenantLoad(job.tenant))
            share_of[job.tenant] = dominant_share(
                load, by_tenant.get(job.tenant, {}), half_life_s, history_weight=history_weight
            )
    ordered = sorted(
        jobs, key=lambda j: (-j.priority, share_of[j.tenant].value, j.submitted_s, j.id)
    )
    out: list[QueuePosition] = []
    for i, job in enumerate(ordered, start=1):
        share = share_of[job.tenant]
        if share.pool is None:
            why = f"{job.tenant} uses nothing now"
        elif math.isinf(share.value):
            why = f"{job.tenant} uses {share.pool} with no nominal quota there"
        else:
            why = f"{job.tenant} is at {share.percent} of its share of {share.pool}"
        if job.priority:
            why = f"priority {job.priority}; {why}"
        out.append(QueuePosition(job.id, i, share, f"{ordinal(i)} in the queue; {why}"))
    return out


class QuotaStatus(StrEnum):
    """Where a job's admission leaves its tenant against its quotas."""

    WITHIN_NOMINAL = "within_nominal"
    BORROWS = "borrows"
    OVER_LIMIT = "over_limit"  # above nominal + borrowing limit: wait for its own jobs


@dataclass(frozen=True)
class QuotaVerdict:
    status: QuotaStatus
    reason: str
    borrows: Mapping[str, int] = field(default_factory=dict)  # GPUs above nominal after


def _held_after(held: Mapping[str, int], gpus: Mapping[str, int]) -> dict[str, int]:
    out = dict(held)
    for pool, g in gpus.items():
        out[pool] = out.get(pool, 0) + g
    return out


def quota_check(
    job: QueuedJob,
    held: Mapping[str, Mapping[str, int]],
    shares: Iterable[Share],
) -> QuotaVerdict:
    """Return where admitting `job` leaves its tenant: within nominal, borrowing, or over
    its borrowing limit. `held` is tenant -> pool -> GPUs held now."""
    mine = shares_by_tenant(shares).get(job.tenant, {})
    after = _held_after(held.get(job.tenant, {}), job.gpus)
    borrows: dict[str, int] = {}
    for pool, g in sorted(job.gpus.items()):
        if g <= 0:
            continue
        share = mine.get(pool)
        nominal = 0 if share is None else share.nominal
        over = after.get(pool, 0) - nominal
        if over > 0:
            borrows[pool] = over
            limit = None if share is None else share.borrowing_limit
            if limit is not None and over > limit:
                return QuotaVerdict(
                    QuotaStatus.OVER_LIMIT,
                    f"{job.tenant} would use {after[pool]} {pool} GPUs, above its nominal "
                    f"{nominal} + borrowing limit {limit}",
                    borrows,
                )
    if borrows:
        text = ", ".join(f"{g} {p}" for p, g in borrows.items())
        return QuotaVerdict(QuotaStatus.BORROWS, f"{job.tenant} would borrow {text} GPUs", borrows)
    return QuotaVerdict(QuotaStatus.WITHIN_NOMINAL, f"within {job.tenant}'s nominal quota", borrows)


def borrowable(
    tenant: str,
    pool: str,
    held: Mapping[str, Mapping[str, int]],
    shares: Iterable[Share],
    capacity: Mapping[str, int],
) -> int:
    """Return the GPUs of `pool` `tenant` may use beyond its holdings without eating into
    what the others reserved (their nominal less their lending limit) and do not use."""
    reserved_idle = 0
    for share in shares:
        if share.pool == pool and share.tenant != tenant:
            used = held.get(share.tenant, {}).get(pool, 0)
            reserved_idle += max(0, share.reserved - used)
    used_all = sum(h.get(pool, 0) for h in held.values())
    return max(0, capacity.get(pool, 0) - used_all - reserved_idle)


def borrowed_share(
    tenant: str,
    held: Mapping[str, int],
    shares: Mapping[str, Share],
    capacity: Mapping[str, int],
) -> float:
    """Return the share the no-loop rule compares: max over pools of GPUs held above
    nominal / (weight x pool capacity); 0 within the nominal quota."""
    best = 0.0
    for pool, g in held.items():
        share = shares.get(pool)
        nominal, weight = (0, 1.0) if share is None else (share.nominal, share.weight)
        over = g - nominal
        if over > 0:
            best = max(best, over / (weight * max(1, capacity.get(pool, 0))))
    return best


@dataclass(frozen=True)
class RunningJob:
    """A running job as preemption sees it.

    `gpus`: what it holds per pool (quota accounting). `frees`: GPUs on whole nodes its
    eviction alone frees per pool (nodes nobody else uses); `group`: its co-execution
    group, whose shared nodes (`PreemptionInput.group_frees`) free only when every member
    leaves. `started_s`: when it last started or resumed; `since_checkpoint_s`: work done
    since its last checkpoint; `ends_s`: when it is expected to leave (None: unknown).
    """

    id: str
    tenant: str
    gpus: Mapping[str, int]
    frees: Mapping[str, int]
    started_s: float
    priority: int = 0
    slo_class: str = "silver"
    group: str | None = None
    since_checkpoint_s: float = 0.0
    ends_s: float | None = None


@dataclass(frozen=True)
class PreemptionPolicy:
    """Who may be preempted and when (issue 22 item 4)."""

    # SLO class -> may it be preempted; a class not named may
    preemptible: Mapping[str, bool] = field(default_factory=lambda: {"gold": False})
    min_run_s: float = 1800.0  # [I] a job runs at least this long before it may be preempted
    grace_s: float = 600.0  # [I] wait this long for a departure that frees the same capacity
    # may a job that would borrow preempt a bigger borrower (fair share, the no-loop rule)?
    # False: only reclaim (within nominal) and priority within a tenant, Kueue's default
    fair_share: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_run_s) and self.min_run_s >= 0):
            raise ShareError("min_run_s", f"must be a finite number >= 0, got {self.min_run_s}")
        if not (math.isfinite(self.grace_s) and self.grace_s >= 0):
            raise ShareError("grace_s", f"must be a finite number >= 0, got {self.grace_s}")

    def may_preempt(self, slo_class: str) -> bool:
        return self.preemptible.get(slo_class, True)


class PreemptionDecision(StrEnum):
    FITS = "fits"  # free capacity suffices: no preemption
    WAIT = "wait"  # a departure within the grace delay frees enough
    PREEMPT = "preempt"  # evict `victims` at their next iteration boundary
    BLOCKED = "blocked"  # nothing may be evicted for it now


@dataclass(frozen=True)
class PreemptionPlan:
    decision: PreemptionDecision
    reason: str
    victims: tuple[str, ...] = ()
    # the rule that allowed it: "reclaim" (within nominal), "fair_share", "priority"
    kind: str = ""


def _short(need: Mapping[str, int], free: Mapping[str, int]) -> dict[str, int]:
    return {p: n - free.get(p, 0) for p, n in need.items() if n > free.get(p, 0)}


def _freed(
    victims: Sequence[RunningJob],
    running: Sequence[RunningJob],
    group_frees: Mapping[str, Mapping[str, int]],
) -> dict[str, int]:
    """Return GPUs on whole nodes evicting `victims` frees, per pool (shared group nodes
    count only once all their members are evicted)."""
    out: dict[str, int] = {}
    chosen = {v.id for v in victims}
    for v in victims:
        for p, g in v.frees.items():
            out[p] = out.get(p, 0) + g
    groups = {v.group for v in victims if v.group is not None}
    if not groups:
        return out
    # a group whose running members are all evicted frees its shared nodes (one pass over
    # the running jobs, not one per group: every running job may be leaving in the grace)
    kept = {r.group for r in running if r.group in groups and r.id not in chosen}
    for gid in groups - kept:
        for p, g in group_frees.get(gid, {}).items():
            out[p] = out.get(p, 0) + g
    return out


def _covers(freed: Mapping[str, int], short: Mapping[str, int]) -> bool:
    return all(freed.get(p, 0) >= s for p, s in short.items())


def _minus(held: Mapping[str, int], jobs: Iterable[RunningJob]) -> dict[str, int]:
    out = dict(held)
    for r in jobs:
        for p, g in r.gpus.items():
            out[p] = out.get(p, 0) - g
    return out


def running_holdings(running: Iterable[RunningJob]) -> dict[str, dict[str, int]]:
    """Return tenant -> pool -> GPUs the running jobs hold."""
    held: dict[str, dict[str, int]] = {}
    for r in running:
        mine = held.setdefault(r.tenant, {})
        for p, g in r.gpus.items():
            mine[p] = mine.get(p, 0) + g
    return held


def _leaving_text(job: QueuedJob, leaving: Sequence[RunningJob]) -> str:
    """Return the departures a queued job waits for as its own tenant may read them: its
    tenant's jobs by id, another tenant's counted, never named (the reason is shown to the
    job's tenant: its page, the queue, the API)."""
    own = sorted(r.id for r in leaving if r.tenant == job.tenant)
    others = sum(1 for r in leaving if r.tenant != job.tenant)
    if not others:
        return ", ".join(own)
    counted = "1 job of another tenant" if others == 1 else f"{others} jobs of other tenants"
    return f"{', '.join(own)} and {counted}" if own else counted


def preemption_targets(
    job: QueuedJob,
    running: Sequence[RunningJob],
    shares: Iterable[Share],
    *,
    free: Mapping[str, int],
    need: Mapping[str, int],
    capacity: Mapping[str, int],
    now_s: float,
    policy: PreemptionPolicy | None = None,
    group_frees: Mapping[str, Mapping[str, int]] | None = None,
    held: Mapping[str, Mapping[str, int]] | None = None,
) -> PreemptionPlan:
    """Return whom to evict so `job` can start (module docstring: candidates, ranking,
    grace, no-loop rule).

    `free`: GPUs on free whole nodes per pool now; `need`: GPUs on free whole nodes the
    job needs per pool (what a new co-execution group for it takes); `capacity`: each
    pool's GPUs; `group_frees`: per co-execution group, the GPUs on whole nodes its
    members share (freed only when all leave); `held`: `running_holdings(running)`, given
    by a caller that keeps it (read only).
    """
    policy = policy or PreemptionPolicy()
    group_frees = group_frees or {}
    share_list = list(shares)
    by_tenant = shares_by_tenant(share_list)
    short = _short(need, free)
    if not short:
        return PreemptionPlan(PreemptionDecision.FITS, "fits in the free capacity")
    held = running_holdings(running) if held is None else held
    verdict = quota_check(job, held, share_list)
    if verdict.status is QuotaStatus.OVER_LIMIT:
        return PreemptionPlan(PreemptionDecision.BLOCKED, verdict.reason)
    short_text = ", ".join(f"{g} {p}" for p, g in sorted(short.items()))
    # 1. Grace: a departure expected soon that frees the same capacity is waited for.
    blocked = now_s if job.blocked_since_s is None else job.blocked_since_s
    deadline = blocked + policy.grace_s
    if now_s < deadline:
        leaving = [r for r in running if r.ends_s is not None and r.ends_s <= deadline]
        if leaving and _covers(_freed(leaving, running, group_frees), short):
            return PreemptionPlan(
                PreemptionDecision.WAIT,
                f"waiting up to {deadline - now_s:.0f} s for {_leaving_text(job, leaving)} "
                "to finish, "
                f"which frees the {short_text} GPUs it needs",
            )
    mine = by_tenant.get(job.tenant, {})
    within = verdict.status is QuotaStatus.WITHIN_NOMINAL
    after_admit = _held_after(held.get(job.tenant, {}), job.gpus)
    share_after_admit = borrowed_share(job.tenant, after_admit, mine, capacity)

    def borrows_under(r: RunningJob, minus: Sequence[RunningJob]) -> bool:
        """Whether r's tenant borrows in a pool the job is short of and r holds GPUs of."""
        have = _minus(held.get(r.tenant, {}), [v for v in minus if v.tenant == r.tenant])
        theirs = by_tenant.get(r.tenant, {})
        return any(
            r.gpus.get(p, 0) > 0 and have.get(p, 0) > (theirs[p].nominal if p in theirs else 0)
            for p in short
        )

    # 2. Candidates (rules 1-4 of the module docstring).
    candidates: list[RunningJob] = []
    for r in running:
        if not policy.may_preempt(r.slo_class) or now_s - r.started_s < policy.min_run_s:
            continue
        if not any(r.gpus.get(p, 0) > 0 for p in short):
            continue
        if r.tenant == job.tenant:
            if r.priority < job.priority:
                candidates.append(r)
        elif borrows_under(r, ()):
            if not within and (not policy.fair_share or r.priority > job.priority):
                continue
            if not within:  # fair share: only tenants above the preemptor's final share
                theirs = by_tenant.get(r.tenant, {})
                if borrowed_share(r.tenant, held.get(r.tenant, {}), theirs, capacity) <= (
                    share_after_admit
                ):
                    continue
            candidates.append(r)

    # 3. Rank by what eviction frees for the job (whole nodes), then least work lost.
    def frees_for_job(r: RunningJob) -> int:
        return sum(min(s, r.frees.get(p, 0)) for p, s in short.items())

    candidates.sort(key=lambda r: (-frees_for_job(r), r.since_checkpoint_s, r.priority, r.id))
    # A group's shared nodes free only when every member leaves, so a chosen victim's
    # group mates are tried next: the next-ranked job of another group would spend what
    # its tenant may give back without freeing a node (one member of each of two packed
    # pairs frees nothing; both members of one pair free its node).
    mates: dict[str, list[RunningJob]] = {}
    for r in candidates:
        if r.group is not None and group_frees.get(r.group):
            mates.setdefault(r.group, []).append(r)
    members: dict[str, int] = {}
    for r in running:
        if r.group in mates:
            members[r.group] = members.get(r.group, 0) + 1
    # (a group with a member that may not be evicted never frees its nodes: no chaining)
    mates = {g: m for g, m in mates.items() if len(m) == members[g]}
    ordered: list[RunningJob] = []
    seen: set[str] = set()
    for first in candidates:
        for r in [first, *mates.get(first.group or "", [])]:
            if r.id not in seen:
                seen.add(r.id)
                ordered.append(r)
    victims: list[RunningJob] = []
    for r in ordered:
        if _covers(_freed(victims, running, group_frees), short):
            break
        if r.tenant != job.tenant and not borrows_under(r, victims):
            continue  # it stopped borrowing: the rest of its jobs are within its nominal
        if r.tenant != job.tenant and not within:
            # fair share: this eviction must leave its tenant at or above the preemptor
            theirs = by_tenant.get(r.tenant, {})
            left = _minus(held.get(r.tenant, {}), [v for v in victims if v.tenant == r.tenant])
            if borrowed_share(r.tenant, _minus(left, [r]), theirs, capacity) < share_after_admit:
                continue
        victims.append(r)
    if not _covers(_freed(victims, running, group_frees), short):
        return PreemptionPlan(
            PreemptionDecision.BLOCKED,
            f"short of {short_text} GPUs and no job may be preempted for it ({verdict.reason})",
        )
    # 4. Drop victims that are not needed, last chosen first.
    for r in reversed(list(victims)):
        rest = [v for v in victims if v.id != r.id]
        if _covers(_freed(rest, running, group_frees), short):
            victims = rest
    # 5. The no-loop rule on the final set.
    after = {t: dict(h) for t, h in held.items()}
    after[job.tenant] = _held_after(after.get(job.tenant, {}), job.gpus)
    for v in victims:
        for p, g in v.gpus.items():
            after[v.tenant][p] -= g
    a_after = borrowed_share(job.tenant, after[job.tenant], mine, capacity)
    own = [v for v in victims if v.tenant == job.tenant]
    if own:
        before = held.get(job.tenant, {})
        for p in set(before) | set(after[job.tenant]):
            nominal = mine[p].nominal if p in mine else 0
            if max(0, after[job.tenant].get(p, 0) - nominal) > max(0, before.get(p, 0) - nominal):
                return PreemptionPlan(
                    PreemptionDecision.BLOCKED,
                    f"evicting {job.tenant}'s own lower-priority jobs would make it borrow "
                    f"more {p}",
                )
    others = {v.tenant for v in victims if v.tenant != job.tenant}
    if a_after > 0:
        for t in sorted(others):
            theirs = by_tenant.get(t, {})
            b_before = borrowed_share(t, held[t], theirs, capacity)
            b_after = borrowed_share(t, after[t], theirs, capacity)
            if not a_after <= b_after < b_before:
                return PreemptionPlan(
                    PreemptionDecision.BLOCKED,
                    f"fair share: {job.tenant}'s share after admission ({a_after:.3f}) must "
                    f"not exceed {t}'s after eviction ({b_after:.3f}), which must fall",
                )
    kind = "reclaim" if others and within else "fair_share" if others else "priority"
    names = ", ".join(v.id for v in victims)
    why = {
        "reclaim": f"{job.id} is within {job.tenant}'s nominal quota; {names} run on "
        "borrowed capacity",
        "fair_share": f"{job.tenant}'s share after admission stays at or below the "
        f"victims' tenants' ({', '.join(sorted(others))})",
        "priority": f"{job.id} has a higher priority than {names} of the same tenant",
    }[kind]
    return PreemptionPlan(PreemptionDecision.PREEMPT, why, tuple(v.id for v in victims), kind)


def jain_index(values: Iterable[float]) -> float:
    """Return Jain's fairness index (sum x)^2 / (n sum x^2): 1 = equal, 1/n = one has all."""
    xs = list(values)
    square_sum = sum(x * x for x in xs)
    if not xs or square_sum == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * square_sum)
