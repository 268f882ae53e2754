"""Co-execution groups, placements, node allocations and phase records.

Phase records and node allocations are the single source of truth for Gantt
views, cost and SLO reports.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import models

from rollmux_web.formatting import iteration_number
from rollmux_web.inventory.models import Node
from rollmux_web.jobs.models import Job


class Strategy(models.TextChoices):
    """How Algorithm 1 admitted a job (scheduler.model.Strategy values)."""

    DIRECT_PACKING = "direct_packing", "direct packing"
    ROLLOUT_SCALING = "rollout_scaling", "rollout scaling"
    NEW_GROUP = "new_group", "new group"
    COLOCATED = "colocated", "co-located"
    # not Algorithm 1's: a job submitted without phase times runs alone on free nodes of its
    # shape first (workflow.services.profiling), in a group of its own
    PROFILE = "profile", "profiling run"


class EndReason(models.TextChoices):
    """Why a job left its group (a placement ended)."""

    COMPLETED = "completed", "completed"
    CANCELLED = "cancelled", "cancelled"
    FAILED = "failed", "a phase failed: the job was resubmitted"
    NODE_DOWN = "node_down", "a node went down: the job was resubmitted"
    # its host died (the platform's failure, not the job's: not counted as a failed attempt)
    LOST = "lost", "its host was lost: the job was resubmitted"
    PROFILED = "profiled", "its profiling run ended: queued with the measured phase times"
    # the planner moved it to another co-execution group at an iteration boundary
    # (workflow.services.moves: consolidation on departure, or a drift re-plan)
    MOVED = "moved", "moved to another co-execution group (resumed from its checkpoint)"
    # a drift re-plan found it must leave for its partners' sake and nowhere to go (a full
    # pool): it left them its nodes and waits in the queue, first (services.moves)
    YIELDED = (
        "yielded",
        "yielded its nodes to the members of its group its phases would slow past their SLO; "
        "queued to resume from its checkpoint",
    )
    # fair share (issue 22): it ran on borrowed capacity (or at a lower priority within its
    # tenant) and a job within its tenant's nominal quota needed the nodes: it yielded at an
    # iteration boundary after its checkpoint and waits in the queue (services.preemption);
    # like a yield, not a failure: it burns no attempt
    PREEMPTED = (
        "preempted",
        "preempted for a job within its tenant's nominal quota; queued to resume from its "
        "checkpoint",
    )


class MoveKind(models.TextChoices):
    """Why the planner wants a job moved (workflow.services.moves)."""

    CONSOLIDATION = "consolidation", "consolidation on departure"
    DRIFT = "drift", "drift re-plan"
    PREEMPT = "preempt", "fair-share preemption"


class ExecutionGroup(models.Model):
    """A co-execution group: members time-multiplex its rollout and training nodes."""

    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(
        null=True, blank=True, help_text="set when its last member left"
    )
    # The core GroupRuntime snapshot (per-node FIFO queues, running phases), saved after
    # every phase event under the group's row lock so any worker can take the next event.
    runtime_state = models.JSONField(null=True, blank=True)
    # A member left and others remain: the next planning pass asks the planner which
    # survivors to move (services.moves.consolidation_plan) and clears it.
    consolidation_due = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"group-{self.pk}"

    @property
    def is_active(self) -> bool:
        return self.released_at is None


class Placement(models.Model):
    """One admission of a job (a resubmitted job gets a new placement, maybe in another group)."""

    job_id: int
    group_id: int
    preempted_for_id: int | None
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="placements")
    group = models.ForeignKey(ExecutionGroup, on_delete=models.PROTECT, related_name="placements")
    attempt = models.PositiveIntegerField(default=1)
    strategy = models.CharField(max_length=32, choices=Strategy.choices)
    marginal_cost_per_hour = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    predicted_slowdown = models.FloatField(default=1.0)
    rollout_nodes = models.ManyToManyField(Node, related_name="rollout_placements")
    train_nodes = models.ManyToManyField(Node, related_name="train_placements")
    created_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(
        null=True, blank=True, db_index=True, help_text="when the job left the group"
    )
    end_reason = models.CharField(
        max_length=16, blank=True, choices=EndReason.choices, help_text="empty while open"
    )
    # The planner wants the job moved at its next iteration boundary (services.moves); the
    # controller then re-checks the move on the cluster of that moment and makes it or not.
    move_requested = models.CharField(max_length=16, blank=True, choices=MoveKind.choices)
    # A placement that ended MOVED or YIELDED: what the move did, as the job page and the
    # audit say it ("moved from group 4 to group 7: saves ...").
    move_reason = models.CharField(max_length=500, blank=True)
    # Fair-share preemption (services.preemption): the queued job this placement yields
    # (or yielded) its nodes to. `move_reason` names it without identity ("another tenant's
    # job"); a viewer who may see this job is told its id and tenant (selectors).
    preempted_for = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt"], name="uniq_placement_attempt")
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} in group {self.group_id} (attempt {self.attempt})"

    @property
    def strategy_label(self) -> str:
        """The strategy as people say it: "direct packing", "rollout scaling", "new group"."""
        return self.get_strategy_display()

    @property
    def end_reason_label(self) -> str:
        return self.get_end_reason_display()


class NodeAllocation(models.Model):
    """A node allocated to a group from `start` to `end` (null while allocated). Cost = time x price.

    On PostgreSQL an exclusion constraint (migration 0006, btree_gist) also forbids two
    allocations of one node whose [start, end) ranges overlap: a node is never billed to
    two groups at once.
    """

    node_id: int
    group_id: int
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    group = models.ForeignKey(ExecutionGroup, on_delete=models.PROTECT, related_name="allocations")
    start = models.DateTimeField(db_index=True)
    end = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["start"]
        constraints = [
            # a node is in at most one group at a time
            models.UniqueConstraint(
                fields=["node"],
                condition=models.Q(end__isnull=True),
                name="one_open_allocation_per_node",
            ),
        ]

    def __str__(self) -> str:
        return f"node {self.node_id} to group {self.group_id} from {self.start:%Y-%m-%d %H:%M}"


class PhaseState(models.TextChoices):
    """A phase record's state. A record is written when the group controller starts the
    phase (RUNNING: it is dispatched at once, to nodes the runtime found idle); its end
    report moves it to one of the three others, once."""

    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"  # the runner raised, or it overran its deadline
    LOST = "lost", "Lost"  # its host (actor) died or its node went down


class PhaseKind(models.TextChoices):
    """The phases of an iteration (scheduler.model.PhaseKind values); `sync` moves the
    trained weights to the job's rollout nodes."""

    ROLLOUT = "rollout", "rollout"
    TRAIN = "train", "train"
    SYNC = "sync", "sync"


class PhaseRecord(models.Model):
    """One phase of one iteration of one job, on the nodes it ran on."""

    job_id: int
    group_id: int
    placement_id: int
    # (its index is `phase_job_span` below: the job, then its phases' start and end)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="phases", db_index=False)
    group = models.ForeignKey(ExecutionGroup, on_delete=models.CASCADE, related_name="phases")
    placement = models.ForeignKey(Placement, on_delete=models.CASCADE, related_name="phases")
    iteration = models.PositiveIntegerField()  # 0-based
    kind = models.CharField(max_length=16, choices=PhaseKind.choices)
    node_names = models.JSONField(default=list)
    state = models.CharField(
        max_length=16, choices=PhaseState.choices, default=PhaseState.RUNNING, db_index=True
    )
    warm_start = models.BooleanField(null=True)
    queued_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True, db_index=True)
    outcome = models.CharField(max_length=500, blank=True)
    # When the controller applied the end (finished_at is the host's own stamp). Normally
    # milliseconds after finished_at; when the report was lost and `reconcile` recovered it
    # from the host (`recovered`), the gap is time the group's nodes sat idle for the
    # control plane's sake: the timeline marks finished_at -> reported_at as such a delay.
    reported_at = models.DateTimeField(null=True, blank=True)
    recovered = models.BooleanField(default=False)
    # When its end report is due: started_at + the job's worst case for this phase kind
    # (profile seconds / time scale). The watch task probes the hosts of running phases
    # past it, so a lost report costs about a second, not a reconcile interval.
    due_at = models.DateTimeField(null=True, blank=True)
    metrics = models.JSONField(default=dict, blank=True)  # e.g. toy-rl reward
    # Where it ran, as its host saw it: per inventory node, the Ray node id and the GPU ids
    # Ray gave the phase's workers there (empty for the in-process dispatcher).
    ray_node_ids = models.JSONField(default=dict, blank=True)
    gpu_ids = models.JSONField(default=dict, blank=True)
    bytes_moved = models.BigIntegerField(
        null=True, blank=True, help_text="sync: bytes that crossed from the training pool"
    )
    # Where its time went, as its host measured it (seconds; null: not split): set-up (a
    # cold start's workers and runner), load (a warm start's reload from host memory, a cold
    # start's restore from the checkpoint) and work (the phase itself: what the profile and
    # the learned estimates use, workflow.services.profiling.measured_times).
    setup_s = models.FloatField(null=True, blank=True)
    load_s = models.FloatField(null=True, blank=True)
    work_s = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [
            models.Index(fields=["group", "started_at"]),
            models.Index(fields=["job", "iteration"]),
            # a job's phases that started before a time and ended after another (the SLO
            # report's "ran in the range" for the jobs without kept inputs), read from the
            # index alone: a live job's phases after a past range are not read, and the
            # planner prefers it to (job, iteration) for that probe, which it did not with
            # (job, started_at) (migration 0020); it serves as the foreign key's index too
            models.Index(fields=["job", "started_at", "finished_at"], name="phase_job_span"),
            # a job's latest phases of a kind (its drift: jobs.selectors._recent_phases)
            models.Index(fields=["job", "kind", "-finished_at"], name="phase_job_kind_finished"),
            models.Index(
                fields=["due_at"], condition=models.Q(state="running"), name="phase_running_due"
            ),
        ]
        constraints = [
            # a phase of an iteration of a placement runs once (idempotent dispatch)
            models.UniqueConstraint(fields=["placement", "iteration", "kind"], name="uniq_phase"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.kind} #{iteration_number(self.iteration)} ({self.state})"


class PlanWait(models.Model):
    """A queued job the planner could not place, and the capacity it saw then: the next
    passes leave it out until `planning.capacity_key()` changes (requeue on change)."""

    job = models.OneToOneField(
        Job, on_delete=models.CASCADE, primary_key=True, related_name="plan_wait"
    )
    capacity = models.CharField(max_length=255)

    def __str__(self) -> str:
        return f"job {self.job_id} waiting for capacity"


class IterationMetrics(models.Model):
    """The training metrics of one iteration of a job (the reward curve's points).

    One row per (job, iteration), whichever placements ran it: a moved, yielded or
    resubmitted job resumes at its next iteration, so its rows make one curve across its
    placements. A row is written when the controller applies the end of a phase that
    reported any of `ports.TRAINING_METRICS` (the rollout typically the reward, the
    training the loss), in the same transaction (`services.metrics`). An iteration run
    again by a later placement (the job failed within it) takes that placement's values
    (`placement` is the one that wrote them: the latest attempt wins).
    """

    # its metric columns: the names of the dispatch contract's TRAINING_METRICS, in order
    METRICS = ("reward_mean", "reward_std", "loss", "kl", "entropy", "tokens_per_s", "samples")

    job_id: int
    placement_id: int
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="iteration_metrics")
    placement = models.ForeignKey(Placement, on_delete=models.CASCADE, related_name="+")
    iteration = models.PositiveIntegerField()  # 0-based, as PhaseRecord.iteration
    reward_mean = models.FloatField(null=True, blank=True)
    reward_std = models.FloatField(null=True, blank=True)
    loss = models.FloatField(null=True, blank=True)
    kl = models.FloatField(null=True, blank=True)
    entropy = models.FloatField(null=True, blank=True)
    tokens_per_s = models.FloatField(null=True, blank=True)
    samples = models.FloatField(null=True, blank=True)
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["job", "iteration"]
        constraints = [
            models.UniqueConstraint(fields=["job", "iteration"], name="uniq_iteration_metrics"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} iteration {iteration_number(self.iteration)} metrics"


class PhaseRollup(models.Model):
    """Busy time of archived phase records, kept after the rows went to Parquet (issue 25).

    One row per (group, job, nodes, day and elementary segment): the phases' busy
    microseconds on those nodes inside [seg_start, seg_end), a stretch of one UTC day that
    no price change, membership change (a placement's start or end) or node allocation's
    start or end of the group cuts. That is every cut the cost engine makes, so the engine
    reads a row as one phase span [seg_start, seg_start + busy) and prices it, buckets it by
    day and shares the node's idle time exactly as it did the rows it replaces (idle time
    itself comes from allocations and placements, which are never archived). Denormalised
    per tenant, GPU type (pool) and stage for the usage readers (budgets, quotas, fair
    share). Deleted after ROLLMUX_ROLLUP_RETENTION_MONTHS.
    """

    job_id: int
    group_id: int
    tenant_id: int
    gpu_type_id: int | None
    day = models.DateField(db_index=True)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    group = models.ForeignKey(ExecutionGroup, on_delete=models.CASCADE, related_name="+")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="+")
    gpu_type = models.ForeignKey(
        "inventory.GpuType", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    kind = models.CharField(max_length=16, choices=PhaseKind.choices)
    stage = models.CharField(max_length=16)  # "profile" (its profiling run) or "run"
    node_names = models.JSONField(default=list)
    seg_start = models.DateTimeField()
    seg_end = models.DateTimeField()
    # False: a long-tail migration's hand-over span (busy time only, no counterfactual)
    counterfactual = models.BooleanField(default=True)
    solo_scale = models.FloatField(default=1.0)
    gpus = models.PositiveIntegerField()  # the job's GPUs of this phase kind
    busy_us = models.BigIntegerField()
    phases = models.PositiveIntegerField()

    class Meta:
        indexes = [
            models.Index(fields=["group", "seg_start"]),
            models.Index(fields=["tenant", "day"]),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.kind} on {self.day}: {self.busy_us} us busy"


class ArchivedJob(models.Model):
    """A job whose phase records and iteration metrics went to the archive (Parquet).

    A job is archived whole, in one batch: when it is in a final state and its last phase
    ended before the retention cutoff. What the SLO report needs of its phases is kept
    here (its completed iterations, their own time, their span); the rest is in `uris`.
    """

    job = models.OneToOneField(
        Job, on_delete=models.CASCADE, primary_key=True, related_name="archive"
    )
    archived_at = models.DateTimeField()
    uris = models.JSONField(default=list)  # the Parquet files holding its rows
    phase_count = models.PositiveIntegerField(default=0)
    metrics_count = models.PositiveIntegerField(default=0)
    # the SLO report's inputs (reports.selectors.slo): completed iterations, the sum of
    # their phases' own time (microseconds), first rollout start and last training end
    iterations_measured = models.PositiveIntegerField(default=0)
    solo_us = models.BigIntegerField(default=0)
    had_sync = models.BooleanField(default=False)
    span_start = models.DateTimeField(null=True, blank=True)
    span_end = models.DateTimeField(null=True, blank=True)
    # the UTC days a phase of it ran on ([first, last] ISO date pairs, merged)
    ran_days = models.JSONField(default=list)
    first_day = models.DateField(null=True, db_index=True)
    last_day = models.DateField(null=True, db_index=True)

    def __str__(self) -> str:
        return f"job {self.job_id} archived ({self.phase_count} phases)"


class RollupWatermark(models.Model):
    """The one row saying "every phase's time before `day` is in the rollups" (issue 25).

    Phase records stay (the Gantt, the SLO report and drift read them), but the cost
    report and tenant usage read their time before `day` from PhaseRollup and only the
    part from `day` on from the raw rows (workflow.services.rollup_days advances it, a
    closed UTC day at a time). No row: nothing is rolled up but archived jobs.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    day = models.DateField()
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"rolled up to {self.day}"


class JobSloSummary(models.Model):
    """A finished job's SLO inputs, kept once all its phases are before the rollup
    watermark (services.rollup_days): the SLO report reads them instead of summing the
    job's phase records again (the same fields, and meaning, as ArchivedJob's)."""

    job = models.OneToOneField(
        Job, on_delete=models.CASCADE, primary_key=True, related_name="slo_summary"
    )
    iterations_measured = models.PositiveIntegerField(default=0)
    solo_us = models.BigIntegerField(default=0)
    had_sync = models.BooleanField(default=False)
    span_start = models.DateTimeField(null=True, blank=True)
    span_end = models.DateTimeField(null=True, blank=True)
    ran_days = models.JSONField(default=list)
    # the first and last of `ran_days` (as ArchivedJob's): the SLO report finds the jobs
    # that ran in its range on these, not among the range's phase records
    first_day = models.DateField(null=True, db_index=True)
    last_day = models.DateField(null=True, db_index=True)

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.iterations_measured} iterations"


def rolled_up_to() -> datetime | None:
    """The watermark as a UTC midnight (None: no day is rolled up)."""
    day = RollupWatermark.objects.filter(pk=1).values_list("day", flat=True).first()
    return None if day is None else datetime(day.year, day.month, day.day, tzinfo=UTC)


class FairShareHour(models.Model):
    """One closed hour's fair-share usage, kept so that a fresh process reads the usage
    window's closed hours, not its ~3.4 million phase records (issue 25; workflow.fairshare).

    Per tenant and GPU type: the sum of the hour's samples' GPU-seconds x 2^((end - hour
    start) / half-life), as `fairshare.usage_gpu_s` keeps it in memory (decayed to a read's
    time as one term). `key` names the half-life and the nodes' (name, GPU type, GPUs) it
    was summed with (`fairshare.usage_key`): another key's rows are not read. Written by
    the retention beat (services.fair_share_hours)."""

    key = models.CharField(max_length=64)
    hour = models.DateTimeField()  # the hour's start (UTC)
    # the (tenant, GPU type) pairs as JSON text ([[tenant, type], ...]: an hour's list is
    # most hours' list, parsed once) and their sums as float64s, little-endian, in that
    # order (the exact floats, read back without parsing decimal text: a window is ~1,700
    # hours of ~40 sums at a fleet's size)
    tenants = models.TextField(default="[]")
    sums = models.BinaryField(default=b"")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "hour"], name="fair_share_hour_key_hour")
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}:00 ({len(self.sums) // 8} sums)"
