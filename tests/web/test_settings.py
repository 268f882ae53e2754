"""Settings fail loudly on bad environment values (each case in a fresh interpreter).

Every case runs `import django; django.setup()` in its own subprocess; the module starts
them all at once (they are independent) and each test checks its own outcome.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Only what Django needs to start; each case adds its own variables.
BASE_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "DJANGO_SETTINGS_MODULE": "rollmux_web.settings",
    "PYTHONPATH": str(ROOT),
}
PROGRAM = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.DATABASES['default']['ENGINE'])"
)

BAD = [
    ({"DATABASE_URL": "mysql://u@h/db"}, "DATABASE_URL"),
    ({"DATABASE_URL": "postgres://u@h:5432/"}, "DATABASE_URL"),
    ({"DATABASE_URL": "postgres://u@h:notaport/db"}, "DATABASE_URL"),
    ({"DATABASE_URL": "sqlite://relative.db"}, "DATABASE_URL"),
    ({"DEBUG": "maybe"}, "DEBUG"),
    ({"ROLLMUX_MAX_GROUP_SIZE": "five"}, "ROLLMUX_MAX_GROUP_SIZE"),
    ({"ROLLMUX_MAX_GROUP_SIZE": "0"}, "ROLLMUX_MAX_GROUP_SIZE"),
    ({"ROLLMUX_SPEC_FILE_MAX_BYTES": "1e6"}, "ROLLMUX_SPEC_FILE_MAX_BYTES"),
    ({"ROLLMUX_TIME_SCALE": "fast"}, "ROLLMUX_TIME_SCALE"),
    ({"REDIS_URL": "localhost:6379"}, "REDIS_URL"),
    ({"REDIS_URL": "http://127.0.0.1:6379/0"}, "REDIS_URL"),
    ({"SECRET_KEY": "short"}, "SECRET_KEY"),
    ({"ROLLMUX_EMBEDDED": "false"}, "SECRET_KEY"),
    ({"ALLOWED_HOSTS": " , "}, "ALLOWED_HOSTS"),
]
GOOD = [
    ({}, "django.db.backends.sqlite3"),
    (
        {"DATABASE_URL": "postgres://u:p%40ss@db.example:5433/rollmux"},
        "django.db.backends.postgresql",
    ),
    (
        {"DATABASE_URL": "sqlite:////tmp/rollmux-test.sqlite3", "DEBUG": "true"},
        "django.db.backends.sqlite3",
    ),
    (
        {
            "REDIS_URL": "redis://127.0.0.1:6379/3",
            "SECRET_KEY": "x" * 50,
            "ROLLMUX_EMBEDDED": "false",
        },
        "django.db.backends.sqlite3",
    ),
]


def _key(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(env.items()))


def _setup(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env={**BASE_ENV, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[tuple[str, str], ...], subprocess.CompletedProcess[str]]:
    envs = [env for env, _ in BAD + GOOD]
    with ThreadPoolExecutor(max_workers=4) as pool:
        return {_key(env): result for env, result in zip(envs, pool.map(_setup, envs), strict=True)}


def _ids(value: object) -> str | None:
    if isinstance(value, dict):
        return "-".join(f"{k}={v}" for k, v in value.items()) or "nothing-set"
    return None


@pytest.mark.parametrize(("env", "mentions"), BAD, ids=_ids)
def test_bad_value_stops_startup_naming_the_variable(outcomes, env, mentions):
    result = outcomes[_key(env)]
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "ImproperlyConfigured" in last, result.stderr[-2000:]
    assert mentions in last


@pytest.mark.parametrize(("env", "engine"), GOOD, ids=_ids)
def test_good_values_start(outcomes, env, engine):
    result = outcomes[_key(env)]
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == engine


def test_postgres_url_is_parsed_into_parts():
    from rollmux_web.settings import database_from_url

    db = database_from_url("postgresql://app:p%40ss@db.example:5433/roll%2Dmux")
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"], db["NAME"]) == (
        "app",
        "p@ss",
        "db.example",
        "5433",
        "roll-mux",
    )


def test_embedded_secret_key_is_random_per_checkout_and_stable(tmp_path: Path) -> None:
    from rollmux_web.settings import embedded_secret_key

    first = embedded_secret_key(tmp_path / "var" / "secret_key")
    again = embedded_secret_key(tmp_path / "var" / "secret_key")
    other = embedded_secret_key(tmp_path / "elsewhere" / "secret_key")
    assert first == again and len(first) >= 50
    assert other != first
    assert (tmp_path / "var" / "secret_key").stat().st_mode & 0o777 == 0o600
