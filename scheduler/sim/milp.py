"""How far from optimal: a MILP offline optimum for bursts and an LP lower bound for traces.

Two numbers the brute-force `optimal` policy cannot give (it stops at 8 jobs):

`burst_optimum` (bursts of up to ~16 jobs)
    Grouping and placement as a set-partitioning mixed-integer program, solved by
    HiGHS through `scipy.optimize.milp`. A column is one admissible *arrangement*:
    a subset of the jobs of at most `max_group_size` members together with a
    partition of it into rollout sharing classes (the placement: members of a class
    share rollout nodes, every member shares the group's training nodes; a job
    alone may also run co-located unless `colocated=False`), exactly the plan
    space of `scheduler.sim.optimal` and with its admissibility rule (the
    worst-case round-robin meta-iteration keeps every member within its SLO against
    the profile, residency holds). Its cost is the group simulated alone with the
    run's draws. The program picks one column per group so that every job is in
    exactly one:

        minimise  sum_g c_g x_g   s.t.  sum_{g contains j} x_g = 1 for every job j,
                                         x_g in {0, 1}

    On <= 8 jobs it finds the same optimum as the dynamic programme over subsets
    (tests/scheduler/test_sim_milp.py); beyond that the 3^n DP is out of reach and the
    MILP takes well under a second. Its LP relaxation (x_g in [0, 1]) is reported
    too: the gap says how hard the instance is, not how good a policy is.

`trace_lower_bound` (whole traces)
    A time-indexed linear programme (`scipy.optimize.linprog`, HiGHS) whose optimum
    no SLO-respecting policy on the cluster can beat. Time is cut into slots; in
    each slot a job does some number of iterations in one of three modes:

    * shared: its phases run in someone's bubbles and its own bubbles are filled,
      so it pays only its busy GPU-seconds (rollout on the rollout type, training
      on the training type): the limit "every paid GPU-second busy";
    * alone, disaggregated: it pays both pools for its whole iteration (Solo-D);
    * alone, co-located: it pays its training nodes for rollout x the training
      type's rollout speed factor + training (veRL).

    Shared mode is allowed in a slot only when some *compatible* job may be alive in
    the same slot: a partner whose SLO window overlaps it and with which a
    co-execution group could exist at all (T_cycle = the longer worst-case solo
    iteration within both SLOs, both residencies on one training node). A job's
    window is [arrival, arrival + slo x iterations x its mean drawn solo iteration]
    (the latest it may finish and still meet its SLO, if admitted on arrival); it
    does at most slot-length / (its shortest drawn iteration) iterations per slot,
    and all its iterations inside its window. Each slot's node-time per pool is at
    most the pool's capacity. Relaxed: node integrality, phase order inside a
    slot, which partner fills which bubble, every member's SLO beyond pairwise
    compatibility. So the bound is valid for policies that admit on arrival and
    respect the planner's SLO rule (rollmux and its variants, solo-disagg,
    colocated); random and greedy ignore SLOs, so for them cost / bound is only a
    scale. When the capacity rows make the programme infeasible (the trace cannot
    be served on arrival within every SLO on this cluster), they are dropped and
    `capacity_bound` says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, OptimizeResult, linprog, milp
from scipy.sparse import coo_matrix

from scheduler.cluster import nodes_needed
from scheduler.costs import SECONDS_PER_HOUR
from scheduler.model import ClusterSpec, JobProfile, Pool
from scheduler.sim.engine import simulate
from scheduler.sim.optimal import (
    OptimalSearch,
    admissible_arrangements,
    cost_arrangements,
    excluded_jobs,
    plan_for,
    runnable_jobs,
)
from scheduler.sim.policies import PLAN_RUNTIME, CorePolicy, PlanEntry
from scheduler.sim.records import RunResult, draw_durations

# Bursts larger than this make the column enumeration (and the per-column simulation)
# the bottleneck: the MILP itself stays fast.
MILP_MAX_JOBS = 20
DEFAULT_SLOT_S = 3600.0


@dataclass(frozen=True)
class BurstOptimum:
    """The MILP's optimal static plan and its LP relaxation's value."""

    search: OptimalSearch  # plan, predicted (MILP) cost, columns checked/simulated, time
    lp_relaxation_usd: float
    columns: int


def burst_optimum(
    jobs: Sequence[JobProfile],
    spec: ClusterSpec,
    *,
    seed: int,
    max_group_size: int = 5,
    colocated: bool = True,
) -> BurstOptimum:
    """Return the cheapest admissible static plan of `jobs` by set-partitioning MILP.

    `colocated=False` leaves the co-located arrangement out of the plan space (the
    disaggregated-only optimum of the paper's comparison).
    """
    if len(jobs) > MILP_MAX_JOBS:
        raise ValueError(
            f"the MILP enumerates its columns; at most {MILP_MAX_JOBS} jobs, got {len(jobs)}"
        )
    started = time.perf_counter()
    excluded = excluded_jobs(jobs, spec)
    runnable = runnable_jobs(jobs, excluded)
    n = len(runnable)
    admissible, checked = admissible_arrangements(
        runnable, spec, max_group_size=max_group_size, colocated=colocated
    )
    columns = cost_arrangements(runnable, admissible, spec, seed=seed)
    plan: dict[str, PlanEntry] = {}
    if not n:
        search = OptimalSearch(plan, 0.0, checked, 0, time.perf_counter() - started, excluded)
        return BurstOptimum(search, 0.0, 0)
    rows: list[int] = []
    cols: list[int] = []
    for c, (mask, _classes, _cost) in enumerate(columns):
        for b in range(n):
            if mask >> b & 1:
                rows.append(b)
                cols.append(c)
    a = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, len(columns))).tocsr()
    costs = np.array([c for _m, _k, c in columns])
    cover = LinearConstraint(a, lb=np.ones(n), ub=np.ones(n))
    exact = milp(costs, constraints=cover, integrality=np.ones(len(columns)), bounds=Bounds(0, 1))
    if not exact.success:  # singletons are always admissible, so this is a solver fault
        raise RuntimeError(f"MILP failed: {exact.message}")
    relaxed = milp(
        costs, constraints=cover, integrality=np.zeros(len(columns)), bounds=Bounds(0, 1)
    )
    chosen = [c for c in range(len(columns)) if exact.x[c] > 0.5]
    for index, c in enumerate(chosen):
        mask, classes, _cost = columns[c]
        members = [runnable[b] for b in range(n) if mask >> b & 1]
        plan.update(plan_for(members, classes, key=f"g{index}"))
    search = OptimalSearch(
        plan=plan,
        predicted_cost_usd=float(sum(columns[c][2] for c in chosen)),
        candidates_checked=checked,
        candidates_simulated=len(columns),
        search_s=time.perf_counter() - started,
        excluded=excluded,
    )
    return BurstOptimum(search, float(relaxed.fun), len(columns))


def run_burst_optimum(
    jobs: Sequence[JobProfile],
    spec: ClusterSpec,
    *,
    seed: int,
    max_group_size: int = 5,
    colocated: bool = True,
) -> tuple[RunResult, BurstOptimum]:
    """Solve the MILP, then replay its plan on the whole burst with the engine."""
    from scheduler.sim.optimal import ExcludedPolicy

    best = burst_optimum(jobs, spec, seed=seed, max_group_size=max_group_size, colocated=colocated)
    policy = ExcludedPolicy(
        best.search, runtime_policy=CorePolicy("rollmux", seed=seed, config=PLAN_RUNTIME)
    )
    return simulate(jobs, spec, policy, seed=seed), best


# ---------------------------------------------------------------------------
# Whole-trace lower bound
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LowerBound:
    """The LP lower bound of a trace's total cost and what it is made of."""

    cost_usd: float
    busy_cost_usd: float  # every iteration shared: the "every GPU-second busy" limit
    shared_share: float  # share of iterations the LP could run in shared mode
    capacity_bound: bool  # False if the capacity rows had to be dropped
    slots: int
    variables: int
    solve_s: float


def compatible(a: JobProfile, b: JobProfile, spec: ClusterSpec) -> bool:
    """Return True when `a` and `b` could ever be members of one co-execution group.

    Necessary conditions only (what the bound may assume): the group's cycle, the
    longer worst-case solo iteration, is within both SLOs, both fit in one training
    node's host memory (every member shares the group's training nodes), and both
    run on one clock.
    """
    if a.time_scale != b.time_scale:
        return False
    if a.host_mem_gb + b.host_mem_gb > spec.train.host_mem_gb:
        return False
    cycle = max(a.t_solo_max_s, b.t_solo_max_s)
    return cycle <= min(a.slo * a.t_solo_max_s, b.slo * b.t_solo_max_s) * (1 + 1e-9)


_BoundWindow = tuple[JobProfile, int, float, float, float, int, int, float]


def _bound_windows(jobs: Sequence[JobProfile], spec: ClusterSpec, seed: int) -> list[_BoundWindow]:
    """Return per job: itself, iterations, mean rollout and training, its shortest drawn
    iteration, its rollout and training nodes, and the end of its SLO window."""
    info: list[_BoundWindow] = []
    for job in jobs:
        roll, train = draw_durations(job, seed)
        n = job.iterations
        r_mean, t_mean = float(np.mean(roll)), float(np.mean(train))
        shortest = min(r + t for r, t in zip(roll, train, strict=True))
        n_r = nodes_needed(job, spec, Pool.ROLLOUT)
        n_t = nodes_needed(job, spec, Pool.TRAIN)
        end = job.arrival_s + job.slo * n * (r_mean + t_mean)
        info.append((job, n, r_mean, t_mean, shortest, n_r, n_t, end))
    return info


def _solve_bound(
    cost: Any, a_ub: Any, rhs: Any, a_eq: Any, b_eq: Any, base: int
) -> tuple[OptimizeResult, bool]:
    """Solve the bound's LP with HiGHS; without the capacity rows (those after `base`) if
    they make it infeasible. Return the result and whether capacity bounded it."""

    def solve(rows: int) -> OptimizeResult:
        return linprog(
            cost,
            A_ub=a_ub[:rows],
            b_ub=rhs[:rows],
            A_eq=a_eq,
            b_eq=b_eq,
            bounds=(0, None),
            method="highs",
        )

    result = solve(len(rhs))
    capacity_bound = True
    if result.status == 2:  # infeasible with capacity: the trace cannot be served on arrival
        capacity_bound = False
        result = solve(base)
    if not result.success:
        raise RuntimeError(f"lower-bound LP failed: {result.message}")
    return result, capacity_bound


def trace_lower_bound(
    jobs: Sequence[JobProfile],
    spec: ClusterSpec,
    *,
    seed: int,
    slot_s: float = DEFAULT_SLOT_S,
    rollout_speed_on_train: float = 1.0,
) -> LowerBound:
    """Return the LP lower bound of the total cost of serving `jobs` (module docstring)."""
    started = time.perf_counter()
    if not jobs:
        return LowerBound(0.0, 0.0, 0.0, True, 0, 0, 0.0)
    price = {p: spec.gpu_type(p).node_price_per_hour / SECONDS_PER_HOUR for p in Pool}
    info = _bound_windows(jobs, spec, seed)
    t0 = min(j.arrival_s for j in jobs)
    horizon = max(x[7] for x in info)
    slots = max(1, math.ceil((horizon - t0) / slot_s))

    def slot_range(lo: float, hi: float) -> range:
        return range(int((lo - t0) // slot_s), min(slots, math.ceil((hi - t0) / slot_s)))

    alive: list[set[int]] = [set() for _ in range(slots)]
    for i, x in enumerate(info):
        for s in slot_range(x[0].arrival_s, x[7]):
            alive[s].add(i)
    partners = [
        {k for k in range(len(jobs)) if k != i and compatible(info[i][0], info[k][0], spec)}
        for i in range(len(jobs))
    ]
    # Variables: per (job, slot in its window) three modes: shared, alone-disagg, colocated.
    cost: list[float] = []
    eq_rows: list[int] = []
    eq_cols: list[int] = []
    ub_rows: list[int] = []
    ub_cols: list[int] = []
    ub_vals: list[float] = []
    ub_rhs: list[float] = []
    capacity: list[tuple[tuple[Pool, int], int, float]] = []  # (pool, slot), variable, node-s
    shared_vars: list[int] = []
    busy_total = 0.0
    for i, (job, _n, r, t, shortest, n_r, n_t, end) in enumerate(info):
        solo = r + t
        co_iter = rollout_speed_on_train * r + t
        busy = r * n_r * price[Pool.ROLLOUT] + t * n_t * price[Pool.TRAIN]
        colocated = co_iter * n_t * price[Pool.TRAIN]
        busy_total += info[i][1] * min(busy, colocated)
        modes = (
            # (cost per iteration, node-seconds per iteration on each pool, elapsed s)
            (busy, {Pool.ROLLOUT: r * n_r, Pool.TRAIN: t * n_t}, shortest),
            (
                solo * (n_r * price[Pool.ROLLOUT] + n_t * price[Pool.TRAIN]),
                {Pool.ROLLOUT: solo * n_r, Pool.TRAIN: solo * n_t},
                shortest,
            ),
            (colocated, {Pool.TRAIN: co_iter * n_t}, shortest * co_iter / solo),
        )
        for s in slot_range(job.arrival_s, end):
            lo = max(job.arrival_s, t0 + s * slot_s)
            hi = min(end, t0 + (s + 1) * slot_s)
            has_partner = bool(partners[i] & alive[s])
            rate_row = len(ub_rhs)
            ub_rhs.append(max(0.0, hi - lo))
            for m, (c, use, elapsed) in enumerate(modes):
                if m == 0 and not has_partner:
                    continue
                v = len(cost)
                cost.append(c)
                if m == 0:
                    shared_vars.append(v)
                eq_rows.append(i)
                eq_cols.append(v)
                # at most one iteration per its shortest drawn iteration, in any mode
                ub_rows.append(rate_row)
                ub_cols.append(v)
                ub_vals.append(elapsed)
                for pool, node_s in use.items():
                    capacity.append(((pool, s), v, node_s))
    # Capacity rows (one per bounded pool and slot) follow the rate rows.
    base = len(ub_rhs)
    cap_row: dict[tuple[Pool, int], int] = {}
    for key, v, node_s in capacity:
        nodes = spec.gpu_type(key[0]).nodes
        if nodes is None:
            continue
        if key not in cap_row:
            cap_row[key] = len(ub_rhs)
            ub_rhs.append(nodes * slot_s)
        ub_rows.append(cap_row[key])
        ub_cols.append(v)
        ub_vals.append(node_s)
    n_vars = len(cost)
    a_eq = coo_matrix((np.ones(len(eq_rows)), (eq_rows, eq_cols)), shape=(len(jobs), n_vars))
    b_eq = np.array([float(x[1]) for x in info])
    rhs = np.array(ub_rhs)
    a_ub = coo_matrix((ub_vals, (ub_rows, ub_cols)), shape=(len(rhs), n_vars)).tocsr()
    result, capacity_bound = _solve_bound(np.array(cost), a_ub, rhs, a_eq.tocsr(), b_eq, base)
    total = float(sum(x[1] for x in info))
    shared = float(sum(result.x[v] for v in shared_vars)) / total if total else 0.0
    return LowerBound(
        cost_usd=float(result.fun),
        busy_cost_usd=busy_total,
        shared_share=shared,
        capacity_bound=capacity_bound,
        slots=slots,
        variables=n_vars,
        solve_s=time.perf_counter() - started,
    )
