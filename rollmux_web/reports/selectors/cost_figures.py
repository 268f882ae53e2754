"""The cost report's figures and its rounding rule (once, from exact values).

- a row (per tenant, per GPU type, per stage): its busy cost and its idle cost are each
  its exact sum rounded half-up to the cent, and its cost is their sum (busy + idle =
  cost in every row, each column within half a cent of its exact amount);
  counterfactuals are exact sums rounded once, and a saving is the difference of the
  two figures shown;
- the per-job lines are billing lines (page, API, FOCUS CSV and Parquet alike), billed
  per tenant with a running remainder: a tenant's lines in a fixed order (the lines of
  finished jobs first, by the moment each job ended, then the live jobs'), each line's
  busy cents = its tenant's running exact busy sum rounded, minus the same before it
  (idle likewise). So a tenant's lines add up exactly to its row, a line is less than a
  cent from its exact amount, and a finished job's line never changes: its cents
  depend only on lines that ended before it, which are final too (a job that is still
  running comes after every finished one, so its changing amount moves only its own
  and later live lines);
- the total is the sum of the tenant rows, so the lines add up exactly to it in every
  file (it can be a cent per tenant off the whole range's exact sum rounded once);
- a job's profiling run is billed on lines of its own (`stage` profile, its production
  run's are `stage` run); the per-job rollup adds a job's billed lines, so its total is
  its profiling run's cents + its production run's, exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext
from functools import cached_property, wraps
from typing import Any, TypeVar

CENT = Decimal("0.01")
HOURS_Q = Decimal("0.0001")  # GPU-hours are shown to four decimals
ZERO = Decimal(0)
HOUR = Decimal(3600)
STAGE_LABELS = {"profile": "profiling run", "run": "production run"}


@dataclass(kw_only=True)
class CostFigures:
    """The money and GPU-hour columns every cost row and total carries."""

    busy_gpu_hours: Decimal = Decimal(0)
    idle_gpu_hours: Decimal = Decimal(0)
    busy_cost: Decimal = Decimal(0)
    idle_cost: Decimal = Decimal(0)
    solo_disagg_cost: Decimal = Decimal(0)
    colocated_cost: Decimal = Decimal(0)

    @property
    def gpu_hours(self) -> Decimal:
        return self.busy_gpu_hours + self.idle_gpu_hours

    @property
    def cost(self) -> Decimal:
        return self.busy_cost + self.idle_cost

    @property
    def saving_vs_solo(self) -> Decimal:
        return self.solo_disagg_cost - self.cost

    @property
    def saving_vs_colocated(self) -> Decimal:
        return self.colocated_cost - self.cost


FIGURE_COLUMNS = tuple(f.name for f in fields(CostFigures))


# The cost arithmetic's precision: 60 significant digits (Python's default is 28). Every
# exact amount is a rational whose denominator divides ~1e30 (microseconds, four-decimal
# prices, shares by membership): at 28 digits a sum of thousands of them drifts by ~1e-25
# and could land a total that is exactly on a half-cent below it; at 60 digits the drift
# is ~1e-50, and `cents` / `hq` first move an amount 1e-45 away from zero, which carries
# one that is a half-cent short of a tie by that drift onto its side and moves no other
# across one (any other is >= 1e-30 from a tie): kept days and whole-range runs round
# alike (reports.cost_days).
EXACT = Context(prec=60)
NUDGE = Decimal("1e-45")
T = TypeVar("T")


def exact_arithmetic(fn: Callable[..., T]) -> Callable[..., T]:
    """Run `fn` with the cost arithmetic's precision (EXACT)."""

    @wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        with localcontext(EXACT):
            return fn(*args, **kwargs)

    return run


def hq(hours: Decimal) -> Decimal:
    """Round GPU-hours once, half-up, to the four decimals shown."""
    nudged = EXACT.add(hours, NUDGE) if hours >= 0 else EXACT.subtract(hours, NUDGE)
    return nudged.quantize(HOURS_Q, rounding=ROUND_HALF_UP, context=EXACT)


def cents(amount: Decimal) -> Decimal:
    """Round money once, half-up, to the cent."""
    nudged = EXACT.add(amount, NUDGE) if amount >= 0 else EXACT.subtract(amount, NUDGE)
    return nudged.quantize(CENT, rounding=ROUND_HALF_UP, context=EXACT)


def apportion(total: Decimal, parts: Sequence[Decimal]) -> list[Decimal]:
    """Round `parts` to cents so they add up exactly to `total` rounded to cents.

    Largest remainder: floor every part to the cent, then give the missing cents to
    the parts that lost the most.
    """
    target = total.quantize(CENT, rounding=ROUND_HALF_UP)
    floors = [(p / CENT).to_integral_value(rounding="ROUND_FLOOR") * CENT for p in parts]
    missing = int(((target - sum(floors, Decimal(0))) / CENT).to_integral_value())
    out = list(floors)
    if not missing:
        return out
    order = sorted(range(len(parts)), key=lambda i: parts[i] - floors[i], reverse=True)
    if missing > 0:
        for i in order[:missing]:
            out[i] += CENT
    else:
        for i in list(reversed(order))[:-missing]:
            out[i] -= CENT
    return out


@dataclass(kw_only=True)
class Rounded(CostFigures):
    """Figures shown in cents (and GPU-hours to 4 decimals) with the exact ones they came from."""

    exact: CostFigures = field(default_factory=CostFigures)

    @cached_property
    def gpu_hours(self) -> Decimal:  # type: ignore[override]
        return hq(self.exact.gpu_hours)


@dataclass(kw_only=True)
class CostLine(Rounded):
    """One job on one GPU type in one stage over the range: a billing line.

    `stage` is "profile" for the job's profiling run (its own group, issue 13) and "run"
    for its production run. `exact` holds the unrounded amounts; busy_cost and idle_cost
    are the billed cents (its tenant's running remainder, see bill_lines); the
    counterfactuals are the exact ones rounded once.
    """

    tenant_id: int
    tenant: str
    job_id: int
    job_name: str
    gpu_type: str
    group_ids: list[int]
    stage: str = "run"
    # when the line's job ended (epoch microseconds; None: still live): the billing order
    closed_us: int | None = None

    @property
    def stage_label(self) -> str:
        return STAGE_LABELS.get(self.stage, self.stage)

    @property
    def is_profile(self) -> bool:
        return self.stage == "profile"


@dataclass(kw_only=True)
class CostTotals(Rounded):
    """A row of sums: exact sums of the lines, rounded once (see sum_lines); `profile_cost`
    is the part of `cost` its lines' profiling runs make (their exact sum, rounded once)."""

    key: str
    label: str
    profile_cost: Decimal = ZERO


def _exact_sum(rows: Sequence[Rounded]) -> CostFigures:
    # (one pass, six running sums: a month at a fleet's size has ~30,000 lines)
    bh = ih = bc = ic = sc = cc = ZERO
    for r in rows:
        e = r.exact
        bh += e.busy_gpu_hours
        ih += e.idle_gpu_hours
        bc += e.busy_cost
        ic += e.idle_cost
        sc += e.solo_disagg_cost
        cc += e.colocated_cost
    return CostFigures(
        busy_gpu_hours=bh,
        idle_gpu_hours=ih,
        busy_cost=bc,
        idle_cost=ic,
        solo_disagg_cost=sc,
        colocated_cost=cc,
    )


@exact_arithmetic
def sum_lines(lines: Sequence[CostLine], *, key: str, label: str) -> CostTotals:
    """Return the row of `lines`: exact column sums, each rounded once.

    busy and idle each the exact sum rounded half-up to the cent, cost their sum (so a
    tenant's row is its billed lines' sum, see bill_lines); GPU-hours to four decimals;
    the counterfactuals rounded once.
    """
    exact = _exact_sum(lines)
    profile = sum((ln.exact.cost for ln in lines if ln.is_profile), Decimal(0))
    return row_of(exact, profile, key=key, label=label)


@exact_arithmetic
def row_of(exact: CostFigures, profile: Decimal, *, key: str, label: str) -> CostTotals:
    """Return the row of exact column sums `exact` (its profiling runs' exact cost
    `profile`), each rounded once, as sum_lines rounds them."""
    return CostTotals(
        key=key,
        label=label,
        profile_cost=cents(profile),
        exact=exact,
        busy_gpu_hours=hq(exact.busy_gpu_hours),
        idle_gpu_hours=hq(exact.idle_gpu_hours),
        busy_cost=cents(exact.busy_cost),
        idle_cost=cents(exact.idle_cost),
        solo_disagg_cost=cents(exact.solo_disagg_cost),
        colocated_cost=cents(exact.colocated_cost),
    )


@exact_arithmetic
def add_rows(rows: Sequence[CostTotals], *, key: str, label: str) -> CostTotals:
    """Return the row adding up `rows` (the tenant rows: the total): billed columns are
    the rows' sums; GPU-hours and counterfactuals their exact sums rounded once."""
    exact = _exact_sum(rows)
    return CostTotals(
        key=key,
        label=label,
        profile_cost=sum((r.profile_cost for r in rows), ZERO),
        exact=exact,
        busy_gpu_hours=hq(exact.busy_gpu_hours),
        idle_gpu_hours=hq(exact.idle_gpu_hours),
        busy_cost=sum((r.busy_cost for r in rows), ZERO),
        idle_cost=sum((r.idle_cost for r in rows), ZERO),
        solo_disagg_cost=cents(exact.solo_disagg_cost),
        colocated_cost=cents(exact.colocated_cost),
    )


@dataclass
class StageCost:
    """A job's billed GPU-hours and cents in one stage: the sums of its billed lines."""

    gpu_hours: Decimal = ZERO
    busy_cost: Decimal = ZERO
    idle_cost: Decimal = ZERO

    @property
    def cost(self) -> Decimal:
        return self.busy_cost + self.idle_cost

    def add(self, ln: CostLine) -> None:
        self.gpu_hours += ln.gpu_hours
        self.busy_cost += ln.busy_cost
        self.idle_cost += ln.idle_cost


@dataclass
class JobCost:
    """One job's bill over the range: its profiling run and its production run apart, and
    their sum (every figure a sum of the job's billed lines, so total = profile + run)."""

    tenant: str
    job_id: int
    job_name: str
    profile: StageCost = field(default_factory=StageCost)
    run: StageCost = field(default_factory=StageCost)
    profiled: bool = False  # it has a profiling line in the range

    @property
    def gpu_hours(self) -> Decimal:
        return self.profile.gpu_hours + self.run.gpu_hours

    @property
    def cost(self) -> Decimal:
        return self.profile.cost + self.run.cost


@exact_arithmetic
def job_costs(lines: Sequence[CostLine]) -> list[JobCost]:
    """Return per job (in the lines' order) its billed lines summed by stage (after
    bill_lines: the cents are the billed ones)."""
    out: dict[int, JobCost] = {}
    for ln in lines:
        jc = out.get(ln.job_id)
        if jc is None:
            jc = out[ln.job_id] = JobCost(tenant=ln.tenant, job_id=ln.job_id, job_name=ln.job_name)
        if ln.is_profile:
            jc.profiled = True
            jc.profile.add(ln)
        else:
            jc.run.add(ln)
    return list(out.values())


def billing_order(ln: CostLine) -> tuple[int, int, int, int, str]:
    """The order a tenant's lines are billed in: finished jobs' lines by the moment each
    job ended, then the live jobs' (a live job ends later than every finished one)."""
    closed = ln.closed_us is not None
    return (
        0 if closed else 1,
        ln.closed_us or 0,
        ln.job_id,
        0 if ln.is_profile else 1,
        ln.gpu_type,
    )


@exact_arithmetic
def bill_lines(lines: Sequence[CostLine]) -> None:
    """Set every line's busy and idle cents, per tenant, with a running remainder.

    In billing_order, a line's busy cents are its tenant's exact busy sum so far (this
    line included) rounded half-up, minus the same before it; idle likewise. The lines
    of a tenant add up to its exact sums rounded once (its row, sum_lines); each line is
    less than a cent from its exact amount and never negative; and a finished job's
    line depends only on the lines billed before it, all finished, so it never changes.
    The counterfactuals are each line's exact amount rounded once.
    """
    by_tenant: dict[int, list[CostLine]] = {}
    for ln in lines:
        by_tenant.setdefault(ln.tenant_id, []).append(ln)
    for tenant_lines in by_tenant.values():
        for column in ("busy_cost", "idle_cost"):
            running, billed = ZERO, ZERO
            for ln in sorted(tenant_lines, key=billing_order):
                running += getattr(ln.exact, column)
                now = cents(running)
                setattr(ln, column, now - billed)
                billed = now
    for ln in lines:
        ln.solo_disagg_cost = cents(ln.exact.solo_disagg_cost)
        ln.colocated_cost = cents(ln.exact.colocated_cost)
