"""Settings fail loudly on bad environment values (each case in a process of its own).

Every case runs `import django; django.setup()` (or `manage.py`, or a request) in its own
process, forked with the case's environment from one interpreter that preloaded only
libraries that read no settings (tests/web/forked_starts.py): the module starts them all at
once (they are independent) and each test checks its own outcome.
`test_a_forked_start_behaves_as_a_fresh_interpreter` starts a bad and a good case as real
`python -c` processes too and checks both ways agree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Only what Django needs to start; each case adds its own variables.
BASE_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "DJANGO_SETTINGS_MODULE": "rollmux_web.settings",
    "PYTHONPATH": str(ROOT),
}
PRODUCTION_KEY = "d8Fq2-vLr9ZkP0wXa7TnB4yHcE6mJ1sUgQ3oRi5VbN-tYeW_zKxA"
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
    ({"ROLLMUX_PLANNER_OBJECTIVE": "cheapest"}, "ROLLMUX_PLANNER_OBJECTIVE"),
    ({"ROLLMUX_COLOCATED_ON_ARRIVAL": "sometimes"}, "ROLLMUX_COLOCATED_ON_ARRIVAL"),
    ({"ROLLMUX_SPEC_FILE_MAX_BYTES": "1e6"}, "ROLLMUX_SPEC_FILE_MAX_BYTES"),
    ({"ROLLMUX_TIME_SCALE": "fast"}, "ROLLMUX_TIME_SCALE"),
    ({"REDIS_URL": "localhost:6379"}, "REDIS_URL"),
    ({"REDIS_URL": "http://127.0.0.1:6379/0"}, "REDIS_URL"),
    ({"SECRET_KEY": "short"}, "SECRET_KEY"),
    ({"ROLLMUX_EMBEDDED": "false"}, "SECRET_KEY"),
    # check --deploy's rule for a production key: 50 characters, not one repeated
    ({"ROLLMUX_EMBEDDED": "false", "SECRET_KEY": "x" * 60}, "SECRET_KEY"),
    ({"ROLLMUX_EMBEDDED": "false", "SECRET_KEY": "k3y-" * 10}, "SECRET_KEY"),
    ({"ALLOWED_HOSTS": " , "}, "ALLOWED_HOSTS"),
    # retention below the ranges it would break (issue 25)
    ({"ROLLMUX_PHASE_RETENTION_DAYS": "30"}, "ROLLMUX_PHASE_RETENTION_DAYS"),
    ({"ROLLMUX_ROLLUP_RETENTION_MONTHS": "6"}, "ROLLMUX_ROLLUP_RETENTION_MONTHS"),
    ({"ROLLMUX_AUDIT_RETENTION_DAYS": "365"}, "ROLLMUX_AUDIT_RETENTION_DAYS"),
    ({"ROLLMUX_PHASE_RETENTION_DAYS": "ninety"}, "ROLLMUX_PHASE_RETENTION_DAYS"),
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
            "SECRET_KEY": PRODUCTION_KEY,
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


Start = tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]  # program, env, argv


def _program(env: dict[str, str]) -> Start:
    return ("-c", _key(env), (PROGRAM,))


def _forked(starts: list[Start], results: Path) -> dict[Start, subprocess.CompletedProcess[str]]:
    """Run each start in a process of its own, forked by tests/web/forked_starts.py."""
    jobs = []
    for kind, env, argv in starts:
        job: dict[str, object] = {"env": {**BASE_ENV, **dict(env)}}
        if kind == "-c":
            job.update(argv=[], code=argv[0])
        else:
            job.update(argv=["manage.py", *argv], script=str(ROOT / "manage.py"))
        jobs.append(job)
    server = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("forked_starts.py")), str(results)],
        input=json.dumps(jobs),
        env=BASE_ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert server.returncode == 0, server.stderr[-2000:]
    outcomes = json.loads(results.read_text())
    return {
        start: subprocess.CompletedProcess(
            [start[0]], out["returncode"], out["stdout"], out["stderr"]
        )
        for start, out in zip(starts, outcomes, strict=True)
    }


@pytest.fixture(scope="module")
def archive_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with a plain file in it, where an archive directory cannot be created."""
    root = tmp_path_factory.mktemp("archive")
    (root / "a-file").write_text("not a directory")
    return root


def _archive_envs(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    """ROLLMUX_ARCHIVE_URI that cannot be written (under a file), and one that can."""
    return (
        {"ROLLMUX_ARCHIVE_URI": str(root / "a-file" / "archive")},
        {"ROLLMUX_ARCHIVE_URI": str(root / "archive")},
    )


@pytest.fixture(scope="module")
def outcomes(
    tmp_path_factory: pytest.TempPathFactory, archive_root: Path
) -> dict[Start, subprocess.CompletedProcess[str]]:
    starts = [_program(env) for env, _ in BAD + GOOD]
    starts += [("manage.py", _key(env), argv) for env, argv in MANAGE]
    starts += [("manage.py", _key(env), ("check",)) for env in _archive_envs(archive_root)]
    starts += [
        ("-c", _key({**PRODUCTION, **env}), (REQUEST.format(extra=extra),))
        for env, extra in REQUESTS
    ]
    return _forked(starts, tmp_path_factory.mktemp("forked-starts") / "results.json")


def _ids(value: object) -> str | None:
    if isinstance(value, dict):
        return "-".join(f"{k}={v}" for k, v in value.items()) or "nothing-set"
    return None


@pytest.mark.parametrize(("env", "mentions"), BAD, ids=_ids)
def test_bad_value_stops_startup_naming_the_variable(outcomes, env, mentions):
    result = outcomes[_program(env)]
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "ImproperlyConfigured" in last, result.stderr[-2000:]
    assert mentions in last


@pytest.mark.parametrize(("env", "engine"), GOOD, ids=_ids)
def test_good_values_start(outcomes, env, engine):
    result = outcomes[_program(env)]
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


def test_database_url_keeps_every_option():
    from rollmux_web.settings import database_from_url

    db = database_from_url(
        "postgres://app:pw@db.example:5432/rollmux?sslmode=require&connect_timeout=5"
        "&application_name=rollmux-web"
    )
    assert db["OPTIONS"] == {
        "sslmode": "require",
        "connect_timeout": 5,
        "application_name": "rollmux-web",
    }
    assert (db["NAME"], db["HOST"], db["CONN_MAX_AGE"]) == ("rollmux", "db.example", 60)


PRODUCTION = {
    "ROLLMUX_EMBEDDED": "false",
    "SECRET_KEY": PRODUCTION_KEY,
    "ALLOWED_HOSTS": "rollmux.example.internal",
}


CHECK_DEPLOY = ("check", "--deploy", "--fail-level", "WARNING")
MANAGE = [(PRODUCTION, CHECK_DEPLOY), ({"DEBUG": "false"}, CHECK_DEPLOY)]


def test_a_forked_start_behaves_as_a_fresh_interpreter(outcomes):
    """The forked starts above agree with real `python -c` processes, failing and not."""
    for env in (BAD[0][0], GOOD[1][0]):
        real, forked = _setup(env), outcomes[_program(env)]
        assert (real.returncode, real.stdout) == (forked.returncode, forked.stdout)
        assert real.stderr.strip().splitlines()[-1:] == forked.stderr.strip().splitlines()[-1:]


def test_check_deploy_passes_cleanly_with_production_settings(outcomes):
    # --fail-level WARNING: a single deploy warning (HSTS, SSL redirect, cookie flags,
    # a weak key) fails the run; CI runs this test.
    result = outcomes[("manage.py", _key(PRODUCTION), CHECK_DEPLOY)]
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_warns_about_embedded_settings(outcomes):
    # the same check on the embedded defaults reports what production turns on
    result = outcomes[("manage.py", _key({"DEBUG": "false"}), CHECK_DEPLOY)]
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr + result.stdout


# A request through Django's test client in a production-configured process.
REQUEST = (
    "import django, json; django.setup(); from django.test import Client; "
    "r = Client().get('/accounts/login/', HTTP_HOST='rollmux.example.internal', **{extra}); "
    "print(json.dumps({{'status': r.status_code, 'location': r.headers.get('Location'), "
    "'hsts': r.headers.get('Strict-Transport-Security'), "
    "'csp': r.headers.get('Content-Security-Policy'), 'cookies': "
    "{{k: dict(v) for k, v in r.cookies.items()}}}}))"
)


FORWARDED = "{'HTTP_X_FORWARDED_PROTO': 'https'}"
REQUESTS = [
    ({}, "{}"),
    ({}, "{'secure': True}"),
    ({}, FORWARDED),
    ({"ROLLMUX_TLS_PROXY": "true"}, FORWARDED),
]


def _request(outcomes, env: dict[str, str], extra: str) -> dict[str, object]:
    result = outcomes[("-c", _key({**PRODUCTION, **env}), (REQUEST.format(extra=extra),))]
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_production_redirects_http_and_sends_hsts_and_csp_over_https(outcomes):
    plain = _request(outcomes, {}, "{}")
    assert plain["status"] == 301
    assert str(plain["location"]).startswith("https://rollmux.example.internal/")
    secure = _request(outcomes, {}, "{'secure': True}")
    assert secure["status"] == 200
    assert secure["hsts"] == "max-age=31536000; includeSubDomains; preload"
    csp = str(secure["csp"])
    assert "script-src 'self'" in csp and "style-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
    cookie = secure["cookies"]["csrftoken"]  # type: ignore[index]
    assert cookie["secure"] is True


def test_behind_a_tls_proxy_the_forwarded_proto_counts_only_when_configured(outcomes):
    # a client's own header is not trusted
    assert _request(outcomes, {}, FORWARDED)["status"] == 301
    behind = _request(outcomes, {"ROLLMUX_TLS_PROXY": "true"}, FORWARDED)
    assert behind["status"] == 200 and str(behind["hsts"]).startswith("max-age=31536000")


def test_an_archive_uri_that_cannot_be_written_stops_the_checks_naming_it(
    outcomes, archive_root: Path
) -> None:
    """`manage.py check` (run by migrate, runserver and bin/run.sh) fails on it."""
    unwritable, writable = _archive_envs(archive_root)
    bad = outcomes[("manage.py", _key(unwritable), ("check",))]
    assert bad.returncode != 0
    assert "ROLLMUX_ARCHIVE_URI" in bad.stderr and "rollmux.E101" in bad.stderr, bad.stderr[-2000:]
    good = outcomes[("manage.py", _key(writable), ("check",))]
    assert good.returncode == 0, good.stderr[-2000:]
    assert list((archive_root / "archive").iterdir()) == []  # the probe cleaned up after itself
