"""Builders for test data: the three personas (alice and bob in `vision`, charlie in
`speech`), an admin and a finance user, the two GPU types, two pools and SLO classes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User

from rollmux_web.accounts.models import ApiToken, Profile, Role, Tenant
from rollmux_web.inventory.models import Cluster, GpuPrice, GpuType, Node, PoolKind
from rollmux_web.quotas.models import SloClass

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class World:
    vision: Tenant
    speech: Tenant
    alice: User
    bob: User
    charlie: User
    admin: User
    finance: User
    h20: GpuType
    h800: GpuType
    rollout_pool: Cluster
    train_pool: Cluster
    gold: SloClass
    silver: SloClass
    bronze: SloClass
    tokens: dict[str, str]

    def user(self, name: str) -> User:
        return getattr(self, name)  # type: ignore[no-any-return]


def make_user(username: str, role: str, tenants: list[Tenant]) -> User:
    user = User.objects.create_user(username=username, password=f"demo-{username}")
    profile = Profile.objects.create(user=user, role=role)
    profile.tenants.set(tenants)
    return user


def make_token(user: User) -> str:
    key = ApiToken.new_key()
    ApiToken.objects.create(user=user, name="test", prefix=key[:12], digest=ApiToken.hash_key(key))
    return key


def make_world(*, rollout_nodes: int = 4, train_nodes: int = 4) -> World:
    vision = Tenant.objects.create(name="vision")
    speech = Tenant.objects.create(name="speech")
    users = {
        "alice": make_user("alice", Role.RESEARCHER, [vision]),
        "bob": make_user("bob", Role.RESEARCHER, [vision]),
        "charlie": make_user("charlie", Role.RESEARCHER, [speech]),
        "admin": make_user("admin", Role.ADMIN, []),
        "finance": make_user("finance", Role.FINANCE, []),
    }
    h20 = GpuType.objects.create(name="H20", gpus_per_node=8, host_mem_gb=2048)
    h800 = GpuType.objects.create(name="H800", gpus_per_node=8, host_mem_gb=2048)
    GpuPrice.objects.create(gpu_type=h20, price_per_gpu_hour=Decimal("1.85"), effective_from=EPOCH)
    GpuPrice.objects.create(gpu_type=h800, price_per_gpu_hour=Decimal("5.28"), effective_from=EPOCH)
    rollout_pool = Cluster.objects.create(name="rollout-pool", kind=PoolKind.ROLLOUT, gpu_type=h20)
    train_pool = Cluster.objects.create(name="train-pool", kind=PoolKind.TRAIN, gpu_type=h800)
    for i in range(rollout_nodes):
        Node.objects.create(
            name=f"h20-{i}", cluster=rollout_pool, gpu_type=h20, gpus=8, host_mem_gb=2048
        )
    for i in range(train_nodes):
        Node.objects.create(
            name=f"h800-{i}", cluster=train_pool, gpu_type=h800, gpus=8, host_mem_gb=2048
        )
    gold = SloClass.objects.create(name="gold", slowdown=1.1)
    silver = SloClass.objects.create(name="silver", slowdown=1.5)
    bronze = SloClass.objects.create(name="bronze", slowdown=2.0)
    tokens = {name: make_token(u) for name, u in users.items()}
    return World(
        vision=vision,
        speech=speech,
        h20=h20,
        h800=h800,
        rollout_pool=rollout_pool,
        train_pool=train_pool,
        gold=gold,
        silver=silver,
        bronze=bronze,
        tokens=tokens,
        **users,
    )


def job_spec(**overrides: Any) -> dict[str, Any]:
    """A valid job submission (API field names) that one H20 + one H800 node can run."""
    spec: dict[str, Any] = {
        "name": "grpo-7b",
        "slo_class": "silver",
        "runner": "emulated",
        "iterations": 3,
        "rollout_gpus": 8,
        "train_gpus": 8,
        "t_roll_max_s": 120.0,
        "t_roll_min_s": 90.0,
        "t_train_max_s": 100.0,
        "t_train_min_s": 80.0,
        "host_mem_gb": 400.0,
        "model": "qwen2.5-7b",
    }
    spec.update(overrides)
    return spec


def database_url(name: str | None = None) -> str:
    """Return the URL of the database this process uses (or of `name` on the same server),
    for a worker subprocess that must share it."""
    from urllib.parse import quote

    from django.db import connection

    db = connection.settings_dict
    return (
        f"postgres://{quote(db['USER'] or '')}:{quote(db['PASSWORD'] or '')}"
        f"@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name or db['NAME']}"
    )
