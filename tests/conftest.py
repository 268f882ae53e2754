"""Shared fixtures. Tests that need PostgreSQL, Redis, Celery, Ray or Chromium use the real thing."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.support import ARTIFACTS

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
# the suite runs the core as Python (tests patch it); tests/scheduler/test_compiled.py runs
# its compiled build in processes of their own (scheduler.compiled)
os.environ["ROLLMUX_COMPILED"] = "0"
for _k, _v in {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
}.items():
    os.environ.setdefault(_k, _v)

CHROMIUM = os.environ.get("CHROMIUM_BIN") or shutil.which("chromium") or "/usr/bin/chromium"
CHROME_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
]


@pytest.fixture(scope="session", autouse=True)
def _test_database_left_alone(django_db_setup: Any, django_db_blocker: Any) -> Iterator[None]:
    """Close, at the end of the run, the test database's sessions that ended worker threads
    left open, so the database can be dropped. An in-process Celery worker (celery's
    `start_worker`) runs its tasks on threads, and a worker thread keeps its connection from
    one task to the next by design (workers/connections.py); when the thread ends the
    connection is not closed, and the teardown failed with "database test_rollmux is being
    accessed by other users" (25 such sessions after the serial stage, all idle, their last
    statement a task's)."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """Hash test passwords with MD5: the production PBKDF2 costs ~1 s per user on a busy CI box."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _no_moves(settings: Any) -> None:
    """Run without live moves (consolidation on departure, drift re-plan) unless a test
    turns them on (tests/workers/test_moves.py does): a test of something else that counts
    a job's placements or attempts would otherwise see the planner move a lone survivor."""
    settings.ROLLMUX_CONSOLIDATION = False
    settings.ROLLMUX_DRIFT_REPLAN = False


@pytest.fixture(autouse=True)
def _celery_current_app_restored() -> Iterator[None]:
    """Give the next test the Celery app this one started with. `Celery(...)` makes itself
    the thread's current app unless told `set_as_current=False`, and every `shared_task`
    (workers.tasks) then sends to it: after a test's probe app on a broker it has since
    stopped, a later test's `request_planning()` went nowhere and its job waited out its
    timeout (tests/workers/test_run_topology.py before the inline workflow tests)."""
    from celery import _state

    current, default = getattr(_state._tls, "current_app", None), _state.default_app
    yield
    _state._tls.current_app, _state.default_app = current, default


@pytest.fixture(autouse=True)
def _fresh_rate_limits() -> None:
    """Start each test with empty rate-limit counters (the cache: per process in tests), so
    the anonymous limit on the token endpoint counts one test's requests, not the run's."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _fresh_fair_share_usage() -> None:
    """Start each test without the closed hours' usage sums a previous test's phases left
    (workflow.fairshare keeps them per process: in production those hours never change)."""
    from rollmux_web.workflow import fairshare

    fairshare.clear_usage_cache()


@pytest.fixture
def world(db: Any) -> Any:
    from tests.factories import make_world

    return make_world()


@pytest.fixture
def api_client() -> Any:
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def client_as(client: Any, world: Any) -> Any:
    """Return a function that logs the Django test client in as a persona."""

    def login(name: str) -> Any:
        client.force_login(world.user(name))
        return client

    return login


@pytest.fixture
def api_as(world: Any) -> Any:
    """Return a function giving a DRF APIClient authenticated by the persona's API token."""
    from rest_framework.test import APIClient

    def make(name: str) -> Any:
        c = APIClient()
        c.credentials(HTTP_AUTHORIZATION=f"Bearer {world.tokens[name]}")
        return c

    return make


@pytest.fixture(scope="session")
def _playwright() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def chromium_browser(_playwright: Any) -> Iterator[Any]:
    browser = _playwright.chromium.launch(
        executable_path=CHROMIUM, args=CHROME_FLAGS, headless=True
    )
    yield browser
    browser.close()


@pytest.fixture
def page(chromium_browser: Any, request: Any) -> Iterator[Any]:
    """A fresh browser page; on exit a full-page screenshot goes to test-artifacts/."""
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(15000)
    yield pg
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    finally:
        context.close()


@pytest.fixture
def recorder(settings: Any) -> Iterator[Any]:
    """A dispatcher that records the phases it is handed (nothing runs), Celery eager."""
    from rollmux_web import ports
    from tests.workers.builders import Recorder

    settings.CELERY_TASK_ALWAYS_EAGER = True
    rec = Recorder()
    with ports.override(dispatcher=rec):
        yield rec
