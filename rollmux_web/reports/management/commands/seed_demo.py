"""Load the demo world: tenants, users with tokens, GPU types, pools, SLO classes, quotas, jobs.

Passwords are demo-<username>: this is for a laptop demo and tests, never production.

The demo jobs are `emulated` at the default time scale (settings.ROLLMUX_TIME_SCALE, 20):
fast enough that the demo shows work at once (measured in embedded mode: seven jobs placed
4 s after seeding, each one's first iteration done 21-45 s after it; the eighth waits for
room, about 2.5 minutes; all done in about 8.5 minutes), slow enough that the control
plane's time between one phase's end and the next one's start (measured 36-42 ms median,
123-154 ms p95 on a 2-core machine) is a small share of an iteration. The SLO report counts
those gaps as slowdown, and the time scale magnifies them: at 200x the gold (1.1x) job that
ran alone read 1.08x (1.11x in QA's run, F2) and a bronze one 1.25x; at 20x the jobs that ran
alone read 1.002-1.022x.
tests/web/test_seed_demo.py holds every demo job to it.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from rollmux_web.accounts.models import Profile, Role, Tenant
from rollmux_web.accounts.services import token_create
from rollmux_web.inventory import services as inventory
from rollmux_web.inventory.models import Cluster, GpuType, Node, PoolKind
from rollmux_web.jobs.models import Job
from rollmux_web.quotas import services as quotas
from rollmux_web.quotas.models import Quota, SloClass

TENANTS = {"vision": "Vision RL", "speech": "Speech RL"}
USERS: list[tuple[str, str, list[str]]] = [
    ("alice", Role.RESEARCHER, ["vision"]),
    ("bob", Role.RESEARCHER, ["vision"]),
    ("charlie", Role.RESEARCHER, ["speech"]),
    ("admin", Role.ADMIN, []),
    ("finance", Role.FINANCE, []),
]
# Defaults from the paper's cost model (H800 = 2.85 x H20).
GPU_TYPES = [("H20", Decimal("1.85")), ("H800", Decimal("5.28"))]
NODE_MEM_GB = 2048.0
NODES_PER_POOL = 8
SLO_CLASSES = [
    ("gold", 1.1, "Latency-sensitive: at most 10% slower than running alone"),
    ("silver", 1.5, "Default: at most 50% slower than running alone"),
    ("bronze", 2.0, "Best effort: at most twice as slow as running alone"),
]
# tenant -> gpu type -> (max GPUs at once, monthly GPU-hours, monthly $)
# The demo jobs of vision request 64 H20 and 56 H800 GPUs (REAL_JOBS' one included): its
# caps leave room for a new user's first job (the README's example, 8 + 8) and one more,
# so the first submission after
# `make run` is accepted (issue 11 item 5: at 48 of 48 H800 it was refused).
QUOTAS: dict[str, dict[str, tuple[int | None, float | None, Decimal | None]]] = {
    "vision": {
        "H20": (88, 25_000.0, Decimal("40000")),
        "H800": (72, 15_000.0, Decimal("75000")),
    },
    "speech": {
        "H20": (32, 8_000.0, Decimal("12000")),
        "H800": (32, 5_000.0, Decimal("25000")),
    },
}
# (submitter, name, model, slo class, rollout GPUs, train GPUs, t_roll min/max, t_train min/max,
#  host memory GB, iterations): sizes and phase times in the range of the paper's Qwen jobs.
JOBS: list[tuple[Any, ...]] = [
    ("alice", "grpo-qwen2.5-7b-math", "qwen2.5-7b", "silver", 8, 8, 90, 120, 80, 100, 400, 20),
    ("alice", "ppo-qwen2.5-14b-code", "qwen2.5-14b", "gold", 16, 8, 150, 210, 120, 150, 700, 12),
    ("bob", "grpo-qwen2.5-3b-gsm8k", "qwen2.5-3b", "bronze", 8, 8, 40, 60, 30, 45, 200, 30),
    # Two balanced jobs (the paper's Temporal Mux, A x2): the planner packs the second into
    # the first one's bubbles, so the demo shows one job's training overlapping the other's
    # rollout on shared nodes.
    ("bob", "grpo-qwen2.5-7b-mux-a", "qwen2.5-7b", "silver", 8, 8, 170, 200, 170, 200, 400, 25),
    ("charlie", "grpo-qwen2.5-7b-mux-b", "qwen2.5-7b", "silver", 8, 8, 170, 200, 170, 200, 400, 25),
    # Two rollout-heavy jobs (Train Mux, D x2): the gold one may not share a rollout node
    # (1.48x slower), so it gets its own by rollout scaling and shares the training node.
    # 21 iterations: with drift re-planning on, a job of at most 20 (scheduler.replan
    # SHORT_RUN) is held to its young SLO and shares with no one.
    (
        "alice",
        "agentic-qwen2.5-7b-swe-d1",
        "qwen2.5-7b",
        "bronze",
        8,
        8,
        300,
        330,
        100,
        120,
        500,
        21,
    ),
    ("bob", "agentic-qwen2.5-7b-swe-d2", "qwen2.5-7b", "gold", 8, 8, 300, 330, 100, 120, 500, 21),
    (
        "charlie",
        "dapo-qwen2.5-32b-asr",
        "qwen2.5-32b",
        "silver",
        16,
        16,
        240,
        330,
        200,
        260,
        1100,
        8,
    ),
]


# A real RL job (issue 21), on the wall clock (time scale 1: a real runner's phases take the
# time they take): `hf-grpo` trains a Llama by GRPO on single-digit addition (its reward
# curve rises). A ~1M-parameter model: its phases take ~1-3 s on one CPU thread (declared
# so; the one-shot profile measures them), long enough that the control plane's gaps between
# phases stay small against its SLO, and its reward rises within ~40 iterations. The
# cluster's 2 s warm-start switch (ROLLMUX_SWITCH_OVERHEAD_S) and a partner's phases would
# add about its solo iteration to each of its iterations, so the planner runs it in a
# co-execution group of its own.
# (submitter, name, runner, model, t_roll min/max, t_train min/max, iterations)
REAL_JOBS: list[tuple[str, str, str, str, float, float, float, float, int]] = [
    ("bob", "hf-grpo-llama-1M-addition", "hf-grpo", "llama-1M", 0.5, 2, 1, 3, 100),
]


class Command(BaseCommand):
    help = "Create the demo tenants, users (password demo-<username>), inventory, SLO classes, quotas and jobs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--if-empty",
            action="store_true",
            help="do nothing if any user exists (what `make run` uses)",
        )
        parser.add_argument("--no-jobs", action="store_true", help="skip the demo jobs")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["if_empty"] and User.objects.exists():
            self.stdout.write("seed_demo: users exist, nothing to do (--if-empty).")
            return
        with transaction.atomic():
            tokens = self._seed_world()
        if not options["no_jobs"]:
            self._seed_jobs()
        self.stdout.write(self.style.SUCCESS("Demo data loaded."))
        if tokens:
            self.stdout.write("API tokens (shown once; only their digests are stored):")
            for username, key in tokens:
                self.stdout.write(f"  {username:<8} {key}")
        self.stdout.write(
            "Passwords: demo-<username>, e.g. alice / demo-alice, admin / demo-admin."
        )

    def _seed_world(self) -> list[tuple[str, str]]:
        """Create what is missing; return (username, token) for users created now."""
        tenants = {
            name: Tenant.objects.get_or_create(name=name, defaults={"display_name": label})[0]
            for name, label in TENANTS.items()
        }
        tokens: list[tuple[str, str]] = []
        for username, role, tenant_names in USERS:
            if User.objects.filter(username=username).exists():
                continue
            user = User.objects.create_user(
                username=username,
                password=f"demo-{username}",
                is_staff=role == Role.ADMIN,
                is_superuser=role == Role.ADMIN,
            )
            profile = Profile.objects.create(user=user, role=role)
            profile.tenants.set([tenants[t] for t in tenant_names])
            _, key = token_create(user=user, name="demo")
            tokens.append((username, key))

        gpu_types: dict[str, GpuType] = {}
        for name, price in GPU_TYPES:
            existing = GpuType.objects.filter(name=name).first()
            gpu_types[name] = existing or inventory.gpu_type_create(
                actor=None,
                name=name,
                gpus_per_node=8,
                host_mem_gb=NODE_MEM_GB,
                price_per_gpu_hour=price,
            )

        pools = [
            ("rollout-pool", PoolKind.ROLLOUT, "H20", "h20"),
            ("train-pool", PoolKind.TRAIN, "H800", "h800"),
        ]
        for pool_name, kind, gpu_name, prefix in pools:
            cluster = Cluster.objects.filter(name=pool_name).first() or inventory.cluster_create(
                actor=None,
                name=pool_name,
                kind=kind,
                gpu_type=gpu_types[gpu_name],
                ray_address="local",
            )
            for i in range(NODES_PER_POOL):
                if not Node.objects.filter(name=f"{prefix}-{i}").exists():
                    inventory.node_create(actor=None, name=f"{prefix}-{i}", cluster=cluster)

        for name, slowdown, description in SLO_CLASSES:
            if not SloClass.objects.filter(name=name).exists():
                quotas.slo_class_create(
                    actor=None, name=name, slowdown=slowdown, description=description
                )

        for tenant_name, per_type in QUOTAS.items():
            for gpu_name, (max_gpus, hours, budget) in per_type.items():
                if not Quota.objects.filter(
                    tenant=tenants[tenant_name], gpu_type=gpu_types[gpu_name]
                ).exists():
                    quotas.quota_create(
                        actor=None,
                        tenant=tenants[tenant_name],
                        gpu_type=gpu_types[gpu_name],
                        max_gpus=max_gpus,
                        monthly_gpu_hours=hours,
                        monthly_budget_usd=budget,
                    )
        return tokens

    def _seed_jobs(self) -> None:
        """Submit the demo jobs through the same service as the form and the API."""
        if Job.objects.exists():
            return
        from rollmux_web.jobs.services import job_submit

        for username, name, model, slo, rg, tg, rmin, rmax, tmin, tmax, mem, iters in JOBS:
            user = User.objects.get(username=username)
            tenant = user.profile.tenants.first()
            spec = {
                "name": name,
                "tenant": tenant.name if tenant else None,
                "model": model,
                "slo_class": slo,
                "runner": "emulated",
                "rollout_gpus": rg,
                "train_gpus": tg,
                "t_roll_min_s": float(rmin),
                "t_roll_max_s": float(rmax),
                "t_train_min_s": float(tmin),
                "t_train_max_s": float(tmax),
                "host_mem_gb": float(mem),
                "iterations": iters,
            }
            job = job_submit(user=user, spec=spec, channel="seed")
            self.stdout.write(f"  job #{job.pk} {job.name} ({tenant}, {slo})")
        for username, name, runner, model, rmin, rmax, tmin, tmax, iters in REAL_JOBS:
            user = User.objects.get(username=username)
            tenant = user.profile.tenants.first()
            spec = {
                "name": name, "tenant": tenant.name if tenant else None, "model": model,
                "slo_class": "bronze", "runner": runner, "rollout_gpus": 8, "train_gpus": 8,
                "t_roll_min_s": rmin, "t_roll_max_s": rmax, "t_train_min_s": tmin,
                "t_train_max_s": tmax, "host_mem_gb": 16.0, "iterations": iters,
                "time_scale": 1.0,
            }  # fmt: skip
            job = job_submit(user=user, spec=spec, channel="seed")
            self.stdout.write(f"  job #{job.pk} {job.name} ({tenant}, {runner}, real time)")
