"""Co-execution groups, placements, node allocations and phase records.

Phase records and node allocations are the single source of truth for Gantt
views, cost and SLO reports.
"""

from __future__ import annotations

from django.db import models

from rollmux_web.inventory.models import Node
from rollmux_web.jobs.models import Job


class ExecutionGroup(models.Model):
    """A co-execution group: members time-multiplex its rollout and training nodes."""

    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(
        null=True, blank=True, help_text="set when its last member left"
    )
    # The core GroupRuntime snapshot (per-node FIFO queues, running phases), saved after
    # every phase event under the group's row lock so any worker can take the next event.
    runtime_state = models.JSONField(null=True, blank=True)

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
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="placements")
    group = models.ForeignKey(ExecutionGroup, on_delete=models.PROTECT, related_name="placements")
    attempt = models.PositiveIntegerField(default=1)
    strategy = models.CharField(max_length=32)  # scheduler.model.Strategy values
    marginal_cost_per_hour = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    predicted_slowdown = models.FloatField(default=1.0)
    rollout_nodes = models.ManyToManyField(Node, related_name="rollout_placements")
    train_nodes = models.ManyToManyField(Node, related_name="train_placements")
    created_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True, help_text="when the job left the group")
    end_reason = models.CharField(
        max_length=16,
        blank=True,
        help_text="completed, cancelled, failed or node_down (empty while open)",
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt"], name="uniq_placement_attempt")
        ]

    @property
    def strategy_label(self) -> str:
        """The strategy as people say it: "direct packing", "rollout scaling", "new group"."""
        return self.strategy.replace("_", " ")

    @property
    def end_reason_label(self) -> str:
        return {
            "completed": "completed",
            "cancelled": "cancelled",
            "failed": "a phase failed: the job was resubmitted",
            "node_down": "a node went down: the job was resubmitted",
        }.get(self.end_reason, self.end_reason)


class NodeAllocation(models.Model):
    """A node allocated to a group from `start` to `end` (null while allocated). Cost = time x price."""

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


class PhaseState(models.TextChoices):
    QUEUED = "queued", "Queued"
    DISPATCHED = "dispatched", "Dispatched"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    LOST = "lost", "Lost"  # its worker/actor died; recovered by reconcile
    CANCELLED = "cancelled", "Cancelled"


class PhaseRecord(models.Model):
    """One phase of one iteration of one job, on the nodes it ran on."""

    job_id: int
    group_id: int
    placement_id: int
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="phases")
    group = models.ForeignKey(ExecutionGroup, on_delete=models.CASCADE, related_name="phases")
    placement = models.ForeignKey(Placement, on_delete=models.CASCADE, related_name="phases")
    iteration = models.PositiveIntegerField()  # 0-based
    kind = models.CharField(max_length=16)  # scheduler.model.PhaseKind values
    node_names = models.JSONField(default=list)
    state = models.CharField(
        max_length=16, choices=PhaseState.choices, default=PhaseState.QUEUED, db_index=True
    )
    warm_start = models.BooleanField(null=True)
    queued_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True, db_index=True)
    outcome = models.CharField(max_length=500, blank=True)
    metrics = models.JSONField(default=dict, blank=True)  # e.g. toy-rl reward

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [
            models.Index(fields=["group", "started_at"]),
            models.Index(fields=["job", "iteration"]),
        ]
        constraints = [
            # a phase of an iteration of a placement runs once (idempotent dispatch)
            models.UniqueConstraint(fields=["placement", "iteration", "kind"], name="uniq_phase"),
        ]
