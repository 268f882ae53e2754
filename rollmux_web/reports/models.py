"""What-if simulator runs, and the closed days', months' and hours' cost amounts the
cost report and the overview sum."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import models


class WhatIfRun(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="whatif_runs"
    )
    tenant = models.CharField(max_length=64, blank=True)
    source = models.CharField(max_length=16, default="upload")  # upload | queue
    trace_text = models.TextField()
    policies = models.JSONField(default=list)
    seed = models.IntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    progress = models.FloatField(default=0.0)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)  # claimed by a worker
    # the worker's heartbeat while it simulates: a running run whose heartbeat stops had its
    # worker die (reconcile fails it)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"what-if run {self.pk} ({self.source}, {self.status})"

    @property
    def source_label(self) -> str:
        """Return what the run simulated, in words: a queue run says whose jobs it took
        (a researcher's takes only their tenants' jobs; `tenant` is "" for every tenant)."""
        if self.source != "queue":
            return "an uploaded trace"
        return queue_scope_label(self.tenant)


def queue_scope_label(tenants: str) -> str:
    """Return whose jobs a what-if on the current queue simulates: `tenants` the caller's
    tenants, comma-separated ("" for an admin or finance user: every tenant)."""
    if not tenants:
        return "the current queue: every tenant's queued and running jobs"
    names = tenants.replace(",", ", ")
    return (
        f"the current queue: {names}'s queued and running jobs only "
        "(other tenants' jobs are not simulated)"
    )


class ExactDecimalField(models.Field):  # type: ignore[type-arg]
    """A Decimal kept exactly as computed: PostgreSQL `numeric` with no precision or scale
    (its sums are exact too); text elsewhere (SQLite's decimals are floats)."""

    def db_type(self, connection: Any) -> str:
        return "numeric" if connection.vendor == "postgresql" else "text"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Decimal | None:
        return None if value is None else Decimal(value)

    def to_python(self, value: Any) -> Decimal | None:
        return None if value is None else Decimal(value)

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if value is None:
            return None
        return Decimal(value) if connection.vendor == "postgresql" else str(Decimal(value))


class CostDay(models.Model):
    """A closed UTC day whose cost amounts are kept (`CostDayLine`, `CostDayGroup`): the
    days kept run without a gap from the first to the last (reports.cost_days)."""

    day = models.DateField(primary_key=True)
    lines = models.PositiveIntegerField(default=0)
    computed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"cost of {self.day} kept ({self.lines} lines)"


class CostDayGroup(models.Model):
    """A group's allocated cost on a kept day, and whether its idle split that day is one
    a range's report cannot sum over days (`dirty`, or `tail` on one day of the range and
    `uneven` on one: the report computes that group over its whole range from the rows)."""

    day = models.DateField()
    group_id = models.BigIntegerField()
    alloc_cost = ExactDecimalField()
    dirty = models.BooleanField(default=False)
    # idle time while no member was present / members of different weights (a range
    # holding a tail day and an uneven day is dirty too: cost_engine._additivity)
    tail = models.BooleanField(default=False)
    uneven = models.BooleanField(default=False)

    class Meta:
        indexes = [models.Index(fields=["day", "group_id"])]

    def __str__(self) -> str:
        return f"group {self.group_id} on {self.day}"


class _JobAmounts(models.Model):
    """One job's exact amounts on one GPU type in one group and stage over a kept span
    (a day, `CostDayLine`, a month, `CostMonthLine`, or a group's life,
    `CostGroupLifeLine`)."""

    group_id = models.BigIntegerField()
    job_id = models.BigIntegerField()
    tenant_id = models.BigIntegerField()
    gpu_type_id = models.BigIntegerField()
    stage = models.CharField(max_length=16)
    has_parts = models.BooleanField(default=True)
    busy_gpu_hours = ExactDecimalField()
    idle_gpu_hours = ExactDecimalField()
    busy_cost = ExactDecimalField()
    idle_cost = ExactDecimalField()
    solo_disagg_cost = ExactDecimalField()
    colocated_cost = ExactDecimalField()

    class Meta:
        abstract = True


class CostDayLine(_JobAmounts):
    """The cost engine's exact amounts of one job on one GPU type in one group and stage
    over one kept day (cost_engine.group_amounts): a report over whole kept days sums
    them (exact numerics) instead of running the engine over the days' rows."""

    day = models.DateField()

    class Meta:
        indexes = [
            models.Index(fields=["day", "tenant_id"]),
            # a range's dirty groups' rows, taken from the days' per-tenant sums
            models.Index(fields=["group_id", "day"]),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} in group {self.group_id} on {self.day}"


class CostHour(models.Model):
    """A closed UTC hour of the last day whose tenants' busy and idle cost is kept
    (`CostHourShare`, `CostHourGroup`): the overview's last 24 hours sum them and run the
    cost engine only for the edges (reports.cost_hours)."""

    hour = models.DateTimeField(primary_key=True)
    computed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"cost of the hour from {self.hour:%Y-%m-%d %H:%M} kept"


class CostHourShare(models.Model):
    """One tenant's exact busy and idle cost in one group over one kept hour (integer
    numerators over cost_engine.KEPT_DENOMINATOR, as `CostDayLine`'s)."""

    hour = models.DateTimeField()
    group_id = models.BigIntegerField()
    tenant_id = models.BigIntegerField()
    busy_cost = ExactDecimalField()
    idle_cost = ExactDecimalField()

    class Meta:
        indexes = [models.Index(fields=["hour", "tenant_id"])]

    def __str__(self) -> str:
        return f"tenant {self.tenant_id} in group {self.group_id} from {self.hour:%H:%M}"


class CostHourGroup(models.Model):
    """A group whose idle split over a kept hour may not add up over hours (`dirty`: it
    keeps no share that hour; `tail` and `uneven`: cost_engine._additivity). Clean groups
    have no row."""

    hour = models.DateTimeField()
    group_id = models.BigIntegerField()
    dirty = models.BooleanField(default=False)
    tail = models.BooleanField(default=False)
    uneven = models.BooleanField(default=False)

    class Meta:
        indexes = [models.Index(fields=["hour", "group_id"])]

    def __str__(self) -> str:
        return f"group {self.group_id} from {self.hour:%H:%M}"


class CostMonth(models.Model):
    """A UTC month whose kept days are summed into `CostMonthLine` (built once its last
    day is kept: reports.cost_days.keep_months)."""

    month = models.DateField(primary_key=True)  # its first day
    computed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"cost of {self.month:%Y-%m} kept"


class CostMonthLine(_JobAmounts):
    """The kept days' amounts of one job on one GPU type in one group and stage over one
    month (`CostDayLine`'s summed): a range of whole months sums these. `multi`: the
    job, type and stage have another row (another group, or another month), so a range
    must add them up; the others are a line each as they stand."""

    month = models.DateField()
    multi = models.BooleanField(default=False)

    class Meta:
        indexes = [
            models.Index(fields=["month", "tenant_id"]),
            models.Index(fields=["job_id", "gpu_type_id", "stage"]),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} in group {self.group_id} in {self.month:%Y-%m}"


class CostDaySummed(models.Model):
    """A kept day whose lines are also summed per tenant, GPU type and stage
    (`CostDayTenant`, written in the day's own transaction by reports.cost_days.keep_day):
    a day without this row (kept before the sums were) is read from its lines."""

    day = models.DateField(primary_key=True)

    def __str__(self) -> str:
        return f"cost of {self.day} summed per tenant"


class CostDayTenant(models.Model):
    """The sum of one kept day's `CostDayLine`s of one tenant on one GPU type in one stage
    (exact numerators, as theirs) and how many lines it sums: the cost report's rows and
    the burn-down's days add these up instead of every line."""

    day = models.DateField()
    tenant_id = models.BigIntegerField()
    gpu_type_id = models.BigIntegerField()
    stage = models.CharField(max_length=16)
    lines = models.PositiveIntegerField()
    busy_gpu_hours = ExactDecimalField()
    idle_gpu_hours = ExactDecimalField()
    busy_cost = ExactDecimalField()
    idle_cost = ExactDecimalField()
    solo_disagg_cost = ExactDecimalField()
    colocated_cost = ExactDecimalField()

    class Meta:
        indexes = [models.Index(fields=["day", "tenant_id"])]

    def __str__(self) -> str:
        return f"tenant {self.tenant_id} on {self.day} ({self.stage})"


class CostMonthJobs(models.Model):
    """A kept month's jobs (those with a `CostMonthLine`) counted per tenant and by the
    last kept month before it that has each job ("" when none has): a range of whole
    months counts its jobs without reading their lines (a job is new to the range in the
    first month whose last one before is not in the range). Written with the month
    (reports.cost_days.keep_months), counted again when an earlier month is kept after it."""

    month = models.DateField(primary_key=True)
    # {tenant id: {the last kept month before with the job, ISO, or "": jobs}}
    counts = models.JSONField()

    def __str__(self) -> str:
        return f"jobs of {self.month:%Y-%m} counted"


class CostGroupLife(models.Model):
    """A released group, dirty on a kept day (its idle split does not add up over days),
    whose amounts over its whole life [lo, hi) (whole UTC days, all kept) are kept: the
    cost engine over any range holding its life computes these same amounts, so such a
    range reads them instead (reports.cost_days.keep_lives)."""

    group_id = models.BigIntegerField(primary_key=True)
    lo = models.DateTimeField()
    hi = models.DateTimeField()
    computed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"group {self.group_id}'s life kept"


class CostGroupLifeLine(_JobAmounts):
    """The cost engine's exact amounts of one job on one GPU type and stage over a kept
    group life (`CostGroupLife`; exact decimals, not numerators: an idle split by
    membership weights need not be a multiple of 1 / KEPT_DENOMINATOR)."""

    group_id = models.BigIntegerField(db_index=True)  # (a life's lines are read by group)

    def __str__(self) -> str:
        return f"job {self.job_id} over group {self.group_id}'s life"


class CostGroupLifeDay(models.Model):
    """A tenant's exact busy or idle cost on one day of a kept group life (the burn-down's
    days)."""

    group_id = models.BigIntegerField(db_index=True)
    day = models.DateField()
    tenant_id = models.BigIntegerField()
    kind = models.CharField(max_length=8)  # busy | idle
    cost = ExactDecimalField()

    def __str__(self) -> str:
        return f"tenant {self.tenant_id} in group {self.group_id} on {self.day} ({self.kind})"
