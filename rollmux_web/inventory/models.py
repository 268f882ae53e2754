"""GPU types with price history, pools (Ray clusters) and nodes."""

from __future__ import annotations

from decimal import Decimal

from django.db import models


class GpuType(models.Model):
    """A GPU model. The current price is the latest GpuPrice; history keeps past costs fixed."""

    name = models.CharField(max_length=32, unique=True)
    gpus_per_node = models.PositiveIntegerField(default=8)
    host_mem_gb = models.FloatField(help_text="host memory per node, GB")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class GpuPrice(models.Model):
    """A price per GPU-hour effective from a moment on (until the next one)."""

    gpu_type = models.ForeignKey(GpuType, on_delete=models.CASCADE, related_name="prices")
    price_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4)
    effective_from = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["gpu_type", "effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu_type", "effective_from"], name="uniq_price_moment"
            ),
            models.CheckConstraint(
                condition=models.Q(price_per_gpu_hour__gte=Decimal("0")), name="price_nonneg"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_type} at ${self.price_per_gpu_hour}/GPU-hour from {self.effective_from:%Y-%m-%d %H:%M}"


class PoolKind(models.TextChoices):
    ROLLOUT = "rollout", "Rollout pool"
    TRAIN = "train", "Training pool"


class Cluster(models.Model):
    """A pool of one GPU type reachable through one Ray address."""

    name = models.CharField(max_length=64, unique=True)
    kind = models.CharField(max_length=16, choices=PoolKind.choices)
    gpu_type = models.ForeignKey(GpuType, on_delete=models.PROTECT, related_name="clusters")
    ray_address = models.CharField(max_length=255, default="local")

    class Meta:
        ordering = ["kind", "name"]

    def __str__(self) -> str:
        return self.name


class NodeState(models.TextChoices):
    UP = "up", "Up"
    DRAINED = "drained", "Drained"  # keeps running what it has, gets nothing new
    DOWN = "down", "Down"  # jobs pinned to it are resubmitted


class Node(models.Model):
    name = models.CharField(max_length=64, unique=True)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="nodes")
    gpu_type = models.ForeignKey(GpuType, on_delete=models.PROTECT, related_name="nodes")
    gpus = models.PositiveIntegerField(default=8)
    host_mem_gb = models.FloatField()
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.UP)
    # why it is in that state when the platform set it (e.g. its Ray node died); empty when
    # an operator set it
    state_reason = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster__kind", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def ray_resource(self) -> str:
        """The Ray custom resource a single local Ray advertises for this node (`make run`);
        multi-node clusters pin by `ray_label` instead."""
        return f"node:{self.name}"

    @property
    def ray_label(self) -> str:
        """The node label of the Ray node that serves this node (`ray start --labels=...`)."""
        return f"rollmux.io/node={self.name}"


class RunnerPackage(models.Model):
    """An allowlist entry: import paths researchers may name as a job's runner.

    `path` is a package or module ("acme_rl", "acme_rl.runners": any class under it) or one
    class ("acme_rl.runners:GrpoRunner"). The built-in runners need no entry. Submissions
    are checked against the list without importing anything (jobs.spec.runner_permitted).
    """

    path = models.CharField(max_length=200, unique=True)
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["path"]

    def __str__(self) -> str:
        return self.path
