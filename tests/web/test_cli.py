"""The `rollmux` CLI against a live server on PostgreSQL: login, submit, jobs, cancel."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rollmux_web import cli
from rollmux_web.jobs.models import Job, JobStatus
from tests.factories import job_spec

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    # keep persona setup fast; `rollmux login` still checks a real password hash
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def env(monkeypatch: Any, tmp_path: Path, live_server: Any) -> dict[str, str]:
    config = tmp_path / "cfg" / "token"
    monkeypatch.setenv("ROLLMUX_CONFIG", str(config))
    monkeypatch.setenv("ROLLMUX_URL", live_server.url)
    monkeypatch.delenv("ROLLMUX_TOKEN", raising=False)
    return {"config": str(config), "url": live_server.url}


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = sys.stderr
    sys.stderr = err
    try:
        code = cli.main(argv, out=out)
    finally:
        sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def write_spec(tmp_path: Path, filename: str, **overrides: Any) -> str:
    path = tmp_path / filename
    spec = job_spec(**overrides)
    if filename.endswith(".json"):
        path.write_text(json.dumps(spec))
    else:
        path.write_text("".join(f"{k}: {v}\n" for k, v in spec.items()))
    return str(path)


def test_login_submit_list_cancel(
    world: Any, env: dict[str, str], tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "demo-alice")
    code, out, err = run(["login", "--username", "alice"])
    assert code == 0, err
    token_file = Path(env["config"])
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token_file.read_text().strip().startswith("rmx_")
    assert token_file.with_name("url").read_text().strip() == env["url"]
    monkeypatch.delenv("ROLLMUX_URL")  # from now on the URL of the login is used

    code, out, err = run(["submit", write_spec(tmp_path, "a.yaml", name="cli-yaml")])
    assert code == 0, err
    job = Job.objects.get(name="cli-yaml")
    assert f"Submitted job {job.pk} (cli-yaml) for vision: queued" in out
    code, out, err = run(["submit", write_spec(tmp_path, "b.json", name="cli-json")])
    assert code == 0, err

    code, out, _ = run(["jobs"])
    assert code == 0 and "cli-yaml" in out and "cli-json" in out
    assert "SUBMITTED (UTC)" in out and f"{job.submitted_at:%Y-%m-%d %H:%M:%S}Z" in out
    code, out, _ = run(["cancel", str(job.pk)])
    assert code == 0 and f"Cancelled job {job.pk}" in out
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED
    code, out, _ = run(["jobs", "--status", "cancelled"])
    assert "cli-yaml" in out and "cli-json" not in out


def test_login_with_a_wrong_password_fails(
    world: Any, env: dict[str, str], monkeypatch: Any
) -> None:
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "wrong")
    code, _, err = run(["login", "-u", "alice"])
    assert code == 1 and "error" in err
    assert not Path(env["config"]).exists()


def test_api_errors_are_printed_with_field_messages(
    world: Any, env: dict[str, str], tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    code, _, err = run(
        ["submit", write_spec(tmp_path, "bad.json", rollout_gpus=12, t_train_min_s=999)]
    )
    assert code == 1
    assert "error (invalid): 2 field errors" in err
    assert err.count("rollout_gpus: Must be a multiple of 8") == 1  # said once
    assert "  t_train_min_s: " in err
    assert Job.objects.count() == 0
    code, _, err = run(["cancel", "999999"])
    assert code == 1 and "not_found" in err


def test_missing_token_and_unreadable_spec(world: Any, env: dict[str, str], tmp_path: Path) -> None:
    code, _, err = run(["jobs"])
    assert code == 1 and "rollmux login" in err
    bad = tmp_path / "x.yaml"
    bad.write_text("- just\n- a list\n")
    code, _, err = run(["submit", str(bad)])
    assert code == 1 and "one object" in err
    code, _, err = run(["submit", str(tmp_path / "missing.yaml")])
    assert code == 1 and "Cannot read" in err


def test_console_script_runs_as_a_process(world: Any, env: dict[str, str], tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("rollmux")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "rollmux_web.cli"]
    proc_env = {
        **os.environ,
        "ROLLMUX_TOKEN": world.tokens["charlie"],
        "NO_PROXY": "127.0.0.1,localhost",
    }
    spec = write_spec(tmp_path, "c.yaml", name="speech-cli")
    proc = subprocess.run(
        [*argv, "submit", spec], env=proc_env, capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert "for speech: queued" in proc.stdout
    proc = subprocess.run(
        [*argv, "jobs"], env=proc_env, capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.returncode == 0 and "speech-cli" in proc.stdout


def test_long_names_keep_their_distinguishing_end() -> None:
    a = cli._fit("agentic-qwen2.5-7b-swe-d1-with-a-very-long-suffix-1", 24)
    b = cli._fit("agentic-qwen2.5-7b-swe-d1-with-a-very-long-suffix-2", 24)
    assert len(a) == 24 and a != b and a.endswith("-1") and "…" in a
    assert cli._fit("short", 24) == "short"
    assert cli._utc("2026-11-29T23:05:43.123+01:00") == "2026-11-29 22:05:43Z"
