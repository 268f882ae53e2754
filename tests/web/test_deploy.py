"""deploy/: the Grafana dashboard loads in Grafana's schema, every metric the dashboard and
the alert rules use is exported (with the labels they use), and docker-compose loads them."""

from __future__ import annotations

import copy
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD_FILE = DEPLOY / "grafana" / "dashboards" / "rollmux.json"
DASHBOARD = json.loads(DASHBOARD_FILE.read_text())
ALERTS = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
PROMETHEUS = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
# Series Prometheus makes itself, and the labels it adds to every scraped series.
BUILTIN_SERIES = {"up"}
TARGET_LABELS = {"job", "instance"}


# --- the dashboard in Grafana's schema ---------------------------------------------------


def schema_problems(dashboard: dict[str, Any]) -> list[str]:
    """Decode the dashboard with Grafana's own generated schema types (grafana-foundation-sdk,
    panel and query plugins registered), encode it again, and return every key or value
    that did not survive: a key Grafana's schema does not know is dropped on decoding."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    decoded = Dashboard.from_json(copy.deepcopy(dashboard))
    again = json.loads(json.dumps(decoded, cls=JSONEncoder))
    problems: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(a, dict):
            if not isinstance(b, dict):
                problems.append(f"{path}: not an object in the schema")
                return
            for key, value in a.items():
                if key not in b:
                    problems.append(f"{path}.{key}: not in Grafana's schema")
                else:
                    walk(value, b[key], f"{path}.{key}")
        elif isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                problems.append(f"{path}: list changed")
                return
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{path}[{i}]")
        elif a != b:
            problems.append(f"{path}: {a!r} became {b!r}")

    walk(dashboard, again, "$")
    return problems


def test_the_dashboard_loads_in_grafanas_schema():
    assert schema_problems(DASHBOARD) == []


def test_the_schema_check_catches_a_misspelt_key():
    broken = copy.deepcopy(DASHBOARD)
    broken["panels"][1]["targets"][0]["legendFormatt"] = "x"
    broken["panels"][1]["options"]["colourMode"] = "value"
    problems = schema_problems(broken)
    assert any(p.endswith("targets[0].legendFormatt: not in Grafana's schema") for p in problems)
    assert any(p.endswith("options.colourMode: not in Grafana's schema") for p in problems)


def _panels() -> list[dict[str, Any]]:
    return [p for p in DASHBOARD["panels"] if p["type"] != "row"]


def test_the_dashboard_layout_is_consistent():
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for p in DASHBOARD["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for cx in range(g["x"], g["x"] + g["w"]):
            for cy in range(g["y"], g["y"] + g["h"]):
                assert (cx, cy) not in cells, f"{p['title']} overlaps another panel"
                cells.add((cx, cy))
    datasource = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )["datasources"][0]
    variables = {v["name"] for v in DASHBOARD["templating"]["list"]}
    for p in _panels():
        assert p["title"] and p["targets"], p
        for target in p["targets"]:
            assert target["datasource"]["uid"] == datasource["uid"]
            for var in re.findall(r"\$(\w+)", target["expr"]):
                assert var in variables, f"{p['title']}: ${var} is not a dashboard variable"


# --- every metric used is exported ---------------------------------------------------------


def _expressions() -> list[tuple[str, str]]:
    out = [(f"panel {p['title']}", t["expr"]) for p in _panels() for t in p["targets"]]
    out += [
        (f"alert {rule['alert']}", rule["expr"])
        for group in ALERTS["groups"]
        for rule in group["rules"]
    ]
    return out


def _selectors(expr: str) -> list[tuple[str, set[str]]]:
    """Return (metric name, label names matched or grouped by) for each selector."""
    found: list[tuple[str, set[str]]] = []

    def walk(node: Any, grouping: set[str]) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            labels = {m.name for m in node.matchers.matchers} | grouping
            found.append((node.name, labels))
        elif isinstance(node, promql_parser.MatrixSelector):
            walk(node.vector_selector, grouping)
        elif isinstance(node, promql_parser.AggregateExpr):
            by = set(node.modifier.labels) if node.modifier is not None else set()
            walk(node.expr, grouping | by)
            if node.param is not None:
                walk(node.param, grouping)
        elif isinstance(node, promql_parser.Call):
            for arg in node.args:
                walk(arg, grouping)
        elif isinstance(node, promql_parser.BinaryExpr):
            walk(node.lhs, grouping)
            walk(node.rhs, grouping)
        elif isinstance(
            node, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr
        ):
            walk(node.expr, grouping)

    # Grafana's $variables are not PromQL: substitute a value before parsing
    walk(promql_parser.parse(expr.replace("$tenant", ".*")), set())
    return found


def test_every_expression_parses_and_the_alerts_are_complete():
    for where, expr in _expressions():
        assert _selectors(expr), f"{where}: no metric in {expr}"
    for group in ALERTS["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}
            assert rule["annotations"]["summary"], rule["alert"]


@pytest.fixture
def exported(client, world, settings, django_capture_on_commit_callbacks, api_as):
    """Return {sample name: label names} from /metrics after real activity: a planning
    pass (a placement and a wait), a phase switch, a resubmission, quotas, API calls."""
    from rollmux_web import ports
    from rollmux_web.inventory.models import Node, NodeState
    from rollmux_web.notifications import services as notifications
    from rollmux_web.quotas.models import Quota
    from rollmux_web.workflow.models import Placement
    from rollmux_web.workflow.services import node_down_resubmit, phase_finish, queue_plan
    from tests.factories import job_spec
    from tests.workers.builders import Recorder, end_of, make_job

    settings.CELERY_TASK_ALWAYS_EAGER = True
    rec = Recorder()
    previous_ports = ports.configure(dispatcher=rec)
    try:
        Quota.objects.create(
            tenant=world.vision,
            gpu_type=world.h800,
            max_gpus=64,
            monthly_gpu_hours=1000,
            monthly_budget_usd=Decimal("5000"),
        )
        job = make_job(world)
        make_job(world, name="too-big", rollout_gpus=64, train_gpus=64)
        with django_capture_on_commit_callbacks(execute=True):
            queue_plan()
        with django_capture_on_commit_callbacks(execute=True):
            phase_finish(end_of(rec.orders[0]))
        node = Placement.objects.get(job=job).train_nodes.get()
        Node.objects.filter(pk=node.pk).update(state=NodeState.DOWN)
        with django_capture_on_commit_callbacks(execute=True):
            node_down_resubmit(node_id=node.pk)
        with django_capture_on_commit_callbacks(execute=True):
            resp = api_as("alice").post("/api/v1/jobs/", job_spec(), format="json")
        assert resp.status_code == 201, resp.content
        settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
        sub = notifications.subscription_create(
            user=world.alice,
            channel="email",
            target="a@example.internal",
            events_wanted=["job.placed"],
        )
        notifications.deliver(notifications.send_test(user=world.alice, subscription_id=sub.pk).pk)
    finally:
        ports.restore(previous_ports)
    resp = client.get("/metrics")
    assert resp.status_code == 200
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(resp.content.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def test_every_metric_the_dashboard_and_alerts_use_is_exported_with_its_labels(exported):
    used = 0
    for where, expr in _expressions():
        for name, labels in _selectors(expr):
            if name in BUILTIN_SERIES:
                continue
            used += 1
            assert name in exported, f"{where}: {name} is not exported by /metrics"
            missing = labels - exported[name] - TARGET_LABELS - {"le"}
            assert not missing, f"{where}: {name} has no label {sorted(missing)}"
    assert used >= 30
    variable = DASHBOARD["templating"]["list"][0]["query"]["query"]
    name, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable).groups()
    assert label in exported[name]


def test_metric_names_follow_prometheus_conventions(exported):
    for name in exported:
        if not name.startswith("rollmux_"):
            continue  # the client's own process_ / python_ series
        assert not name.endswith("_seconds_total") or "duration" not in name
        if name.endswith(("_bucket", "_count", "_sum")):
            base = name.rsplit("_", 1)[0]
            assert base.endswith(("_seconds",)), f"{name}: a histogram's unit is seconds"
    for old in ("rollmux_api_request_seconds_count", "rollmux_gpu_price_dollars"):
        assert old not in exported


# --- docker-compose loads the files ------------------------------------------------------


def test_compose_runs_prometheus_with_these_rules_and_scrapes_every_rollmux_process():
    prom = SERVICES["prometheus"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in prom["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]
    for rule_file in PROMETHEUS["rule_files"]:
        assert (DEPLOY / "prometheus" / Path(rule_file).relative_to("/etc/prometheus")).exists()
    targets = {
        job["job_name"]: [t for sc in job["static_configs"] for t in sc["targets"]]
        for job in PROMETHEUS["scrape_configs"]
    }
    assert targets["rollmux-web"] == ["web:8000"]
    web = PROMETHEUS["scrape_configs"][0]
    secret = Path(web["authorization"]["credentials_file"]).name
    assert secret in prom["secrets"] and secret in COMPOSE["secrets"]
    assert COMPOSE["secrets"][secret]["environment"] == "ROLLMUX_METRICS_TOKEN"
    assert ",web" in SERVICES["web"]["environment"]["ALLOWED_HOSTS"]  # the scrape's Host
    for service in ("worker", "sim-worker", "notify-worker"):
        port = SERVICES[service]["environment"]["ROLLMUX_WORKER_METRICS_PORT"]
        assert f"{service}:{port}" in targets["rollmux-worker"]
    assert SERVICES["sim-worker"]["environment"]["PROMETHEUS_MULTIPROC_DIR"]  # prefork pool
    assert targets["flower"] == ["flower:5555"]
    for target in (t for ts in targets.values() for t in ts):
        assert target.split(":")[0] in SERVICES


def test_compose_provisions_grafana_with_the_dashboard_and_the_prometheus_datasource():
    grafana = SERVICES["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"] if v.startswith("./")}
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    provider = yaml.safe_load((provisioning / "dashboards" / "rollmux.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    assert (ROOT / mounts[path] / DASHBOARD_FILE.name).exists()
    source = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    assert source["datasources"][0]["url"] == "http://prometheus:9090"
    assert re.fullmatch(
        r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]*\}",
        grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"],
    )


def test_compose_runs_flower_and_healthchecks_use_the_probes():
    import importlib

    flower = SERVICES["flower"]["command"]
    assert flower[:4] == ["celery", "-A", "rollmux_web", "flower"]
    importlib.import_module("flower.command")  # `celery flower` is installed
    assert any(a.startswith("--basic-auth=") and ":?" in a for a in flower)
    assert "/healthcheck" in " ".join(SERVICES["flower"]["healthcheck"]["test"])
    assert "/readyz" in " ".join(SERVICES["web"]["healthcheck"]["test"])
    for service, name in (("worker", "controller"), ("sim-worker", "sim")):
        command = SERVICES[service]["command"]
        assert command[command.index("-n") + 1] == f"{name}@%h"
        assert f"inspect ping -d {name}@$$HOSTNAME" in SERVICES[service]["healthcheck"]["test"][1]
    assert SERVICES["prometheus"]["depends_on"]["web"]["condition"] == "service_healthy"
