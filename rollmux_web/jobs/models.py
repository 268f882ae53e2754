"""RL post-training jobs: the trace-format fields plus lifecycle."""

from __future__ import annotations

from typing import NamedTuple

from django.conf import settings
from django.db import models

from rollmux_web.accounts.models import Tenant
from rollmux_web.quotas.models import SloClass


class JobStatus(models.TextChoices):
    # submitted without phase times: its one-shot profile runs (or waits for free nodes)
    # before it is queued for the planner with the measured estimates (paper section 4)
    PROFILING = "profiling", "Profiling"
    QUEUED = "queued", "Queued"
    PLACED = "placed", "Placed"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


TERMINAL_STATUSES = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)


class DurationSource(models.TextChoices):
    """Where a job's phase-time estimates (t_roll_*, t_train_*) come from."""

    DECLARED = "declared", "Declared at submission"
    PROFILED = "profiled", "Measured by its profiling run"
    LEARNED = "learned", "Learned from its observed phases"


class PhaseTimes(NamedTuple):
    """A job's phase-time estimates, profile seconds."""

    t_roll_min_s: float
    t_roll_max_s: float
    t_train_min_s: float
    t_train_max_s: float


class NoPhaseTimes(ValueError):
    """The job is profiled: its phase times are not known yet."""


class Job(models.Model):
    name = models.CharField(max_length=128)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="jobs")
    submitter = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    slo_class = models.ForeignKey(SloClass, on_delete=models.PROTECT, related_name="jobs")
    runner = models.CharField(
        max_length=200, default="emulated", help_text="emulated, toy-rl or an import path"
    )
    model = models.CharField(max_length=128, blank=True)
    priority = models.IntegerField(default=0)

    # trace-format fields (docs/spec/trace-format.md); the phase times (profile seconds)
    # are null while a job submitted without them is profiled
    iterations = models.PositiveIntegerField()
    rollout_gpus = models.PositiveIntegerField()
    train_gpus = models.PositiveIntegerField()
    t_roll_max_s = models.FloatField(null=True, blank=True)
    t_roll_min_s = models.FloatField(null=True, blank=True)
    t_train_max_s = models.FloatField(null=True, blank=True)
    t_train_min_s = models.FloatField(null=True, blank=True)
    duration_source = models.CharField(
        max_length=16,
        choices=DurationSource.choices,
        blank=True,
        help_text="where the phase times come from; empty until a profiled job's run ends",
    )
    # What the estimates were before they were learned from the job's observed phases (a
    # drift re-plan, workflow.services.moves): {"t_roll_min_s": ..., "source": "declared"}.
    # An emulating runner keeps drawing its phases from these (its configured distribution).
    prior_estimates = models.JSONField(null=True, blank=True)
    host_mem_gb = models.FloatField()
    time_scale = models.FloatField(
        null=True, blank=True, help_text="emulation speed-up; null = settings default"
    )
    emulated_drift = models.FloatField(
        default=0.0,
        help_text="emulated runner: iteration i of n lasts (1 + this x i/(n-1)) times its draw",
    )

    # lifecycle
    status = models.CharField(
        max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED, db_index=True
    )
    reason = models.CharField(
        max_length=500, blank=True, help_text="why it waits, or why it failed"
    )
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(
        default=0, help_text="placements so far (resubmissions + 1)"
    )
    iterations_done = models.PositiveIntegerField(default=0)
    submitted_at = models.DateTimeField(auto_now_add=True, db_index=True)
    placed_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "status"]),
            # the jobs cancelled or failed in a range (the SLO report's, at a fleet's size
            # ~10,000 of ~100,000 spread over every page of the table)
            models.Index(fields=["status", "finished_at"], name="job_status_finished"),
            # the resubmitted jobs (/metrics' migrations: a few, among every job)
            models.Index(fields=["id"], condition=models.Q(attempts__gt=1), name="job_resubmitted"),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def has_phase_times(self) -> bool:
        return self.t_roll_max_s is not None and self.t_train_max_s is not None

    @property
    def phase_times(self) -> PhaseTimes:
        """Return the estimates (a min not set is its max), or raise NoPhaseTimes while the
        job is being profiled."""
        roll, train = self.t_roll_max_s, self.t_train_max_s
        if roll is None or train is None:
            raise NoPhaseTimes(f"job {self.pk} has no phase times yet (it is being profiled)")
        return PhaseTimes(
            float(roll if self.t_roll_min_s is None else self.t_roll_min_s),
            float(roll),
            float(train if self.t_train_min_s is None else self.t_train_min_s),
            float(train),
        )

    @property
    def requeue_status(self) -> str:
        """Return the status a resubmitted job goes back to: profiling again when its
        profile never finished, else the planner's queue."""
        return JobStatus.QUEUED if self.has_phase_times else JobStatus.PROFILING

    @property
    def slo(self) -> float:
        return self.slo_class.slowdown
