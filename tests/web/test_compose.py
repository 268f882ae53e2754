"""docker-compose.yml cannot run here: check by parsing that it is complete and consistent."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
OUR_IMAGE = {name for name, svc in SERVICES.items() if svc.get("build")}


JOIN_RAY = ["python", "-m", "workers.join_ray"]


def _command(name: str, *, launcher: bool = False) -> list[str]:
    """Return a service's command; a command that first joins Ray as a node
    (`workers.join_ray ... -- <command>`) gives the command it runs then, unless `launcher`."""
    cmd = SERVICES[name]["command"]
    assert isinstance(cmd, list), f"{name}: use the exec (list) form so no shell interprets it"
    cmd = [str(c) for c in cmd]
    if cmd[:3] == JOIN_RAY and not launcher:
        return cmd[cmd.index("--") + 1 :]
    return cmd


def _option(cmd: list[str], *names: str) -> str | None:
    for i, arg in enumerate(cmd):
        for n in names:
            if arg == n:
                return cmd[i + 1]
            if arg.startswith(n + "="):
                return arg.split("=", 1)[1]
    return None


def _ray_workers() -> dict[str, tuple[dict[str, float], str]]:
    """Return each Ray GPU node service's (resources, inventory node label)."""
    out = {}
    for name in OUR_IMAGE:
        cmd = _command(name)
        if cmd[:2] == ["ray", "start"] and "--head" not in cmd:
            label = (_option(cmd, "--labels") or "").removeprefix("rollmux.io/node=")
            out[name] = (json.loads(_option(cmd, "--resources") or "{}"), label)
    return out


def test_every_production_service_is_there():
    assert {"postgres", "redis", "web", "worker", "sim-worker", "beat", "ray-head"} <= set(SERVICES)
    assert SERVICES["postgres"]["image"].startswith("postgres:")
    assert SERVICES["redis"]["image"].startswith("redis:")
    assert {"web", "worker", "beat", "ray-head", "migrate"} <= OUR_IMAGE


@pytest.mark.parametrize("name", sorted(OUR_IMAGE))
def test_each_command_runs_a_program_installed_in_the_image(name):
    program = _command(name, launcher=True)[0]
    assert program in {"python", "gunicorn", "celery", "ray"}, program
    # The image installs the project like `make install` does: the same entry points.
    assert (VENV_BIN / program).exists() or shutil.which(program), f"{program} is not installed"


def test_web_runs_gunicorn_on_the_wsgi_app_with_an_importable_config():
    cmd = _command("web")
    assert cmd[0] == "gunicorn"
    config = _option(cmd, "-c", "--config")
    assert config and config.startswith("python:")
    conf = importlib.import_module(config.removeprefix("python:"))
    assert conf.bind.endswith(":8000") and conf.workers >= 1
    app_module = cmd[-1]
    wsgi = importlib.import_module(app_module)
    assert callable(wsgi.application)


@pytest.mark.parametrize(
    ("name", "sub"), [("worker", "worker"), ("sim-worker", "worker"), ("beat", "beat")]
)
def test_celery_services_use_the_project_app(name, sub, settings):
    cmd = _command(name)
    assert cmd[0] == "celery" and sub in cmd
    module = _option(cmd, "-A", "--app")
    app = importlib.import_module(f"{module}.celery").app
    assert app.main == "rollmux"
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        # the module that defines it registers the task under its wire name
        # (workers.tasks.plan is the function plan_task)
        importlib.import_module(entry["task"].rpartition(".")[0])
        assert entry["task"] in app.tasks, entry["task"]


def test_every_queue_has_a_worker_and_simulations_stay_off_the_controller(settings):
    ordered = {
        name: (_option(_command(name), "-Q", "--queues") or "").split(",")
        for name in OUR_IMAGE
        if "worker" in _command(name)
    }
    consumed = {name: set(qs) for name, qs in ordered.items()}
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    for queue in {settings.CELERY_TASK_DEFAULT_QUEUE} | routed:
        assert any(queue in qs for qs in consumed.values()), f"no worker consumes {queue}"
    # phase events first (the broker's "priority" queue order takes -Q's order)
    assert ordered["worker"] == settings.ROLLMUX_CONTROLLER_QUEUES
    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["queue_order_strategy"] == "priority"
    assert settings.CELERY_TASK_ROUTES["reports.run_whatif"]["queue"] not in consumed["worker"]
    for name in ordered:  # gossip's restart after a broker outage can kill a worker
        assert {"--without-gossip", "--without-mingle"} <= set(_command(name)), name


def test_migrate_runs_before_web_worker_and_beat():
    assert _command("migrate")[:3] == ["python", "manage.py", "migrate"]
    for name in ("web", "worker", "beat"):
        assert (
            SERVICES[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        )


def test_ray_head_and_workers_advertise_h20_and_h800_nodes():
    head = _command("ray-head")
    assert head[:2] == ["ray", "start"] and "--head" in head and "--block" in head
    port = _option(head, "--port")
    workers = _ray_workers()
    assert {gpu for res, _ in workers.values() for gpu in res} == {"H20", "H800"}
    for name, (res, label) in workers.items():
        cmd = _command(name)
        assert _option(cmd, "--address") == f"ray-head:{port}" and "--block" in cmd
        assert label, f"{name} must be labelled with exactly one inventory node"
        assert not any(k.startswith("node:") for k in res), "pin by label, not node: resources"
        ((gpu, count),) = res.items()
        assert count == float(_option(cmd, "--num-gpus"))
    # the controller joins the same head as a Ray node (a driver on a node, no Ray Client)
    join = _command("worker", launcher=True)
    assert join[:3] == JOIN_RAY and _option(join, "--address") == f"ray-head:{port}"


def test_every_ray_node_mounts_the_one_checkpoint_volume_the_controller_names():
    # a job resumed on other nodes reads the checkpoint its trainers wrote on the lost one
    uri = SERVICES["worker"]["environment"]["ROLLMUX_CHECKPOINT_URI"]
    default = re.fullmatch(r"\$\{ROLLMUX_CHECKPOINT_URI:-(/[^}]+)\}", uri)
    assert default, uri  # a directory by default, object storage when set
    path = default.group(1)
    assert _ray_workers()
    for name in _ray_workers():
        assert f"checkpoints:{path}" in SERVICES[name].get("volumes", []), name
    assert "checkpoints" in COMPOSE["volumes"]
    # the image makes the mount point, owned by its non-root user: a new named volume takes
    # the directory's owner (root's, the trainers could not write there)
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(rf"mkdir -p [^\n]*{re.escape(path)}", text)
    assert re.search(rf"chown rollmux [^\n]*{re.escape(path)}", text)


def test_ray_node_labels_match_the_inventory_naming():
    from rollmux_web.reports.management.commands import seed_demo

    seeded = {
        f"{prefix}-{i}" for prefix in ("h20", "h800") for i in range(seed_demo.NODES_PER_POOL)
    }
    for res, label in _ray_workers().values():
        assert label in seeded
        ((gpu, _),) = res.items()
        assert label.startswith(f"{gpu.lower()}-")


def test_app_services_point_at_compose_postgres_redis_and_ray(settings):
    for name in ("web", "worker", "beat", "migrate"):
        env = SERVICES[name]["environment"]
        assert (
            env["DATABASE_URL"].startswith("postgres://")
            and "@postgres:5432/" in env["DATABASE_URL"]
        )
        assert env["REDIS_URL"].startswith("redis://redis:6379/")
        assert env["ROLLMUX_EMBEDDED"] == "false" and env["DEBUG"] == "false"
        assert env["ROLLMUX_RAY_ADDRESS"] == "ray-head:" + _option(_command("ray-head"), "--port")
        importlib.import_module(env["DJANGO_SETTINGS_MODULE"])


def test_secrets_come_from_the_environment_and_are_required():
    text = (ROOT / "docker-compose.yml").read_text()
    env = SERVICES["web"]["environment"]
    assert re.fullmatch(r"\$\{SECRET_KEY:\?[^}]*\}", env["SECRET_KEY"])
    assert "${POSTGRES_PASSWORD:?" in env["DATABASE_URL"]
    assert re.fullmatch(
        r"\$\{POSTGRES_PASSWORD:\?[^}]*\}", SERVICES["postgres"]["environment"]["POSTGRES_PASSWORD"]
    )
    # every required variable is documented in .env.example
    required = set(re.findall(r"\$\{(\w+):\?", text))
    example = (ROOT / ".env.example").read_text()
    documented = set(re.findall(r"^(\w+)=", example, re.M))
    assert required <= documented
    # and .env.example carries no value for the secrets
    assert re.search(r"^SECRET_KEY=$", example, re.M) and re.search(
        r"^POSTGRES_PASSWORD=$", example, re.M
    )


def test_databases_have_healthchecks_and_volumes():
    for name in ("postgres", "redis"):
        assert SERVICES[name]["healthcheck"]["test"]
    assert "pgdata" in COMPOSE["volumes"]


def test_dockerfile_builds_python_311_and_copies_existing_paths():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", text, re.M)
    for line in re.findall(r"^COPY (.+)$", text, re.M):
        *sources, _dest = line.split()
        for src in sources:
            assert (ROOT / src).exists(), f"Dockerfile copies missing {src}"
    cmd = json.loads(re.search(r"^CMD (.+)$", text, re.M).group(1))
    assert cmd == _command("web")
    assert re.search(r"^USER (?!root)\w+", text, re.M), "run as a non-root user"
