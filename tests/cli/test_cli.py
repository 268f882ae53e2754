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

from rollmux_cli import cli
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.workflow.models import Placement
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


def test_a_listing_error_names_the_option_the_user_typed(
    world: Any, env: dict[str, str], monkeypatch: Any
) -> None:
    # the API's query parameter is page_size; `rollmux get jobs --limit 0` said
    # "page_size: Must be an integer from 1 to 500", a name the user never typed (QA pass 14)
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    for argv in (["get", "jobs", "--limit", "0"], ["jobs", "--limit", "501"]):
        code, _, err = run(argv)
        assert code == 1
        assert "  --limit: Must be an integer from 1 to 500" in err, err
        assert "page_size" not in err


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
    # The one test that starts the CLI as a process (the others call `cli.main`): the
    # installed script and the process's own stdin, closed and without a terminal (a CI
    # job, `rollmux login < /dev/null`: it crashed with EOFError).
    script = Path(sys.executable).with_name("rollmux")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "rollmux_cli"]
    proc_env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
    proc = subprocess.run(
        [*argv, "login", "--username", "charlie"],
        env=proc_env, capture_output=True, text=True, timeout=60, cwd=ROOT,
        stdin=subprocess.DEVNULL, start_new_session=True,  # no controlling terminal either
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "No password given: stdin is closed. Run `rollmux login` in a terminal, "
        "or set ROLLMUX_TOKEN to an API token instead."
    )
    assert "Traceback" not in proc.stderr and "EOFError" not in proc.stderr
    assert not Path(env["config"]).exists()


def test_login_with_stdin_closed_says_so_and_checks_the_server_first(
    world: Any, env: dict[str, str], monkeypatch: Any
) -> None:
    import socket

    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # closed: input() meets its end
    code, _, err = run(["login"])
    assert code == 1 and "No username given: stdin is closed" in err
    assert "pass --username" in err and "Traceback" not in err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    # a server that does not answer is said before any question is asked
    code, _, err = run(["login", "--url", f"http://127.0.0.1:{closed}"])
    assert code == 1 and err.startswith(
        f"Cannot reach the RollMux server at http://127.0.0.1:{closed}"
    )
    assert "username" not in err


def test_jobs_of_a_tenant_you_may_not_see_are_refused_naming_yours(
    world: Any, env: dict[str, str], monkeypatch: Any
) -> None:
    # it printed an empty table with exit 0: "speech has no jobs", which is not what it knew
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    code, out, err = run(["get", "jobs", "--tenant", "speech"])
    assert code == 1 and out == ""
    assert "tenant: Unknown tenant 'speech': the tenants you may see are vision." in err
    code, out, err = run(["get", "jobs", "--tenant", "vision"])
    assert code == 0, err
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["admin"])  # sees every tenant
    code, _, err = run(["get", "jobs", "--tenant", "speech"])
    assert code == 0, err


# --- get / describe / dry run / watch / errors / completion ---------------------------------


@pytest.fixture
def placed(world: Any, settings: Any) -> Any:
    """Two placed jobs (one per tenant) with a Recorder dispatcher; nothing runs."""
    from rollmux_web import ports
    from rollmux_web.workflow.services import queue_plan
    from tests.workers.builders import Recorder, make_job

    settings.CELERY_TASK_ALWAYS_EAGER = True
    rec = Recorder()
    with ports.override(dispatcher=rec):
        mine = make_job(world, name="vision-" + "x" * 70 + "-tail1")
        theirs = make_job(world, name="speech-secret", tenant=world.speech, submitter=world.charlie)
        queue_plan()
        yield rec, mine, theirs


def test_get_jobs_groups_and_nodes_in_every_output(
    world: Any, env: dict[str, str], monkeypatch: Any, placed: Any
) -> None:
    import yaml

    _, mine, theirs = placed
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    code, out, err = run(["get", "jobs", "-o", "json"])
    assert code == 0, err
    assert [j["id"] for j in json.loads(out)] == [mine.pk]  # charlie's job is not listed
    code, out, _ = run(["get", "nodes", "-o", "yaml"])
    nodes = yaml.safe_load(out)
    assert code == 0 and sorted(n["name"] for n in nodes)[:2] == ["h20-0", "h20-1"]
    code, out, _ = run(["get", "nodes"])
    assert out.splitlines()[0].split() == ["NAME", "POOL", "GPU", "TYPE", "GPUS", "HOST", "MEM",
                                           "GB", "STATE"]  # fmt: skip
    code, out, err = run(["get", "groups"])
    assert code == 0, err
    group = Placement.objects.get(job=mine).group_id
    row = next(line for line in out.splitlines() if line.split()[0] == str(group))
    # a long name is cut in its middle (how much shows depends on the other columns'
    # widths, e.g. the group id's digits): its head and its tail are on the row
    assert "active" in row and "vision" in row and "tail1" in row
    assert "speech-secret" not in out
    code, out, _ = run(["get", "groups", "-o", "json"])
    assert {g["id"] for g in json.loads(out)} == {group}


def test_long_names_never_run_into_the_next_column(
    world: Any, env: dict[str, str], monkeypatch: Any, placed: Any
) -> None:
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = run(["get", "jobs"])
    header, row = out.splitlines()[:2]
    tenant_at = header.index("TENANT")
    assert row[tenant_at:].startswith("vision "), row  # the column starts where its header does
    name_cell = row[header.index("NAME") : tenant_at]
    assert "…" in name_cell and name_cell.rstrip().endswith("-tail1")
    assert all(len(line) <= 100 for line in out.splitlines())


def test_describe_job_says_status_reason_placement_estimates_phases_and_cost(
    world: Any, env: dict[str, str], monkeypatch: Any, placed: Any
) -> None:
    from rollmux_web.workflow.services import phase_finish
    from tests.workers.builders import end_of

    rec, mine, theirs = placed
    phase_finish(end_of(rec.orders[0]))  # the first rollout ends, training starts
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    code, out, err = run(["describe", "job", str(mine.pk)])
    assert code == 0, err
    placement = Placement.objects.get(job=mine)
    node = placement.rollout_nodes.get().name
    text = " ".join(out.split())
    assert "Status: running" in text
    assert "Reason: -" in text  # a running job waits for nothing
    assert f"Group: {placement.group_id}" in text and f"Rollout nodes: {node}" in text
    assert "Predicted slowdown: 1.000x (SLO 1.5x)" in text
    assert "Time left: ~" in text and "for 3 iterations" in text
    assert "rollout: 1 (1 succeeded), mean 1.0 s, 1 warm starts" in text
    assert "Latest: train of iteration 1: running on" in text
    assert "Cost so far: $" in text
    code, out, _ = run(["describe", "job", str(mine.pk), "-o", "json"])
    body = json.loads(out)
    assert body["job"]["id"] == mine.pk and body["phases"]["by_kind"]["rollout"]["count"] == 1
    assert float(body["cost"]["gpu_hours"]) > 0  # its nodes are held (cost is cents here)
    code, _, err = run(["describe", "job", str(theirs.pk)])
    assert code == 1 and "not_found" in err  # another tenant's job


def test_submit_dry_run_prints_the_planners_answer_and_submits_nothing(
    world: Any, env: dict[str, str], tmp_path: Path, monkeypatch: Any, placed: Any
) -> None:
    from rollmux_web.quotas.models import Quota
    from rollmux_web.reports.whatif_selectors import whatif_preview

    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    before = Job.objects.count()
    spec = write_spec(tmp_path, "d.json", name="dry")
    code, out, err = run(["submit", "--dry-run", spec, "-o", "json"])
    assert code == 0, err
    answer = json.loads(out)
    expected = whatif_preview(
        user=world.alice,
        data={**job_spec(), "tenant": "vision", "t_roll_min_s": 90.0, "t_train_min_s": 80.0},
        slo=1.5,
    )
    # the same answer as the submit form's preview
    assert (answer["status"], answer["strategy"]) == (expected.status, expected.strategy)
    assert answer["rollout_nodes"] == expected.rollout_nodes and answer["dry_run"] is True
    code, out, _ = run(["submit", "--dry-run", spec])
    assert code == 0 and "nothing was submitted" in out and "Planner:" in out
    assert Job.objects.count() == before
    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, max_gpus=8)
    code, out, _ = run(["submit", "--dry-run", spec])
    assert code == 1 and "Would be refused: quota: vision may use at most 8 H800" in " ".join(
        out.split()
    )
    code, _, err = run(["submit", "--dry-run", write_spec(tmp_path, "e.json", rollout_gpus=12)])
    assert code == 1 and "rollout_gpus: Must be a multiple of 8" in err
    assert Job.objects.count() == before


def test_submit_dry_run_of_a_spec_without_phase_times_says_it_is_profiled_first(
    world: Any, env: dict[str, str], tmp_path: Path, monkeypatch: Any
) -> None:
    # it crashed formatting the (unknown) solo cost: NoneType.__format__
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    spec = job_spec(name="to-profile")
    for key in ("t_roll_max_s", "t_roll_min_s", "t_train_max_s", "t_train_min_s"):
        del spec[key]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(spec))
    code, out, err = run(["submit", "--dry-run", str(path)])
    assert code == 0, err
    text = " ".join(out.split())
    assert "Would be profiled first: no phase times: the job runs its profile first" in text
    assert "Solo cost/iteration: - (no phase times yet: its profiling run measures them)" in text
    assert not Job.objects.exists()


def test_the_example_spec_is_accepted_and_a_typo_is_caught_before_sending(
    world: Any, env: dict[str, str], tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    code, out, _ = run(["submit", "--example"])
    example = tmp_path / "example.yaml"
    example.write_text(out)
    code, out, err = run(["submit", str(example)])
    assert code == 0, err
    typo = tmp_path / "typo.yaml"
    typo.write_text(example.read_text() + "time_scal: 5\n")
    monkeypatch.setenv("ROLLMUX_URL", "http://127.0.0.1:1")  # no server needed to say so
    code, _, err = run(["submit", str(typo)])
    assert code == 1 and "time_scal: Unknown field; did you mean time_scale?" in err


def test_watch_redraws_until_the_described_job_ends(
    world: Any, env: dict[str, str], monkeypatch: Any
) -> None:
    import threading

    from tests.workers.builders import make_job, wait_for

    job = make_job(world, name="watched")
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    out = io.StringIO()

    def finish() -> None:
        wait_for(lambda: "Status:" in out.getvalue(), timeout=20, interval=0.02)
        Job.objects.filter(pk=job.pk).update(status=JobStatus.COMPLETED)

    threading.Thread(target=finish, daemon=True).start()
    code = cli.main(["describe", "job", str(job.pk), "--watch", "--interval", "0.1"], out=out)
    statuses = [
        line.split()[1] for line in out.getvalue().splitlines() if line.startswith("Status:")
    ]
    assert code == 0 and statuses[0] == "queued" and statuses[-1] == "completed"
    code, text, _ = run(["get", "jobs", "--watch", "--count", "2", "--interval", "0.05"])
    assert code == 0 and text.count("SUBMITTED (UTC)") == 2


def test_describe_job_of_a_job_without_phase_times_says_it_is_profiled_first(
    world: Any, env: dict[str, str], monkeypatch: Any
) -> None:
    # the QA pass: `rollmux describe job` of a profiling job crashed formatting its
    # (unknown) solo cost per iteration
    from tests.reports.builders import make_job

    times = ("t_roll_max_s", "t_roll_min_s", "t_train_max_s", "t_train_min_s")
    job = make_job(world, name="to-profile", status=JobStatus.PROFILING, **dict.fromkeys(times))
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    code, out, err = run(["describe", "job", str(job.pk)])
    assert code == 0, err
    text = " ".join(out.split())
    assert "Status: profiling" in text and "Solo iteration: - worst case" in text
    assert "Solo cost/iteration: - (no phase times yet: its profiling run measures them)" in text


def test_submit_of_a_file_yaml_cannot_parse_says_what_is_wrong_and_where(
    tmp_path: Path, env: dict[str, str], monkeypatch: Any, world: Any
) -> None:
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    code, _, err = run(["submit", str(path)])
    assert code == 1
    assert (
        f"{path} is not valid YAML or JSON: did not find expected ',' or ']' "
        "at line 2, column 1 (while parsing a flow sequence from line 1, column 7)"
    ) in err
    assert not Job.objects.exists()  # refused before anything was sent


def test_describe_job_shows_its_reward_course_and_latest_training_metrics(
    world: Any, env: dict[str, str], monkeypatch: Any, placed: Any
) -> None:
    from tests.workers.builders import record_curve

    _, mine, _ = placed
    record_curve(mine, [[0.25, 0.5], [0.5, 0.75]])
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    code, out, err = run(["describe", "job", str(mine.pk)])
    assert code == 0, err
    text = " ".join(out.split())
    assert "Training: 4 iterations recorded" in text
    # stored iterations 0-3 read as 1-4, as the job page and the Gantt count them
    assert "Reward: 0.25 (iteration 1) -> 0.75 (iteration 4), best 0.75" in text
    # (its placement by the fixture is attempt 1: the curve's two are attempts 2 and 3)
    assert "Latest: iteration 4 (attempt 3): reward_mean 0.75, reward_std 0.1, loss 0.25" in text
    code, out, _ = run(["describe", "job", str(mine.pk), "-o", "json"])
    training = json.loads(out)["training"]
    assert training["latest"]["samples"] == 64.0
    # the API's training rows keep the stored 0-based index
    assert training["first_reward"]["iteration"] == 0 and training["latest"]["iteration"] == 3


def test_describe_job_of_a_queued_job_says_its_place_in_the_queue_and_why(
    world: Any, env: dict[str, str], monkeypatch: Any
) -> None:
    from tests.reports.builders import make_job

    first = make_job(world, name="first", status=JobStatus.QUEUED)
    second = make_job(world, name="second", status=JobStatus.QUEUED)
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    code, out, err = run(["describe", "job", str(second.pk), "-o", "json"])
    assert code == 0, err
    queue = json.loads(out)["queue"]
    assert queue["position"] == 2 and queue["why"]
    code, out, err = run(["describe", "job", str(second.pk)])
    assert code == 0, err
    assert f"Queue: position 2: {queue['why']}" in " ".join(out.split())
    code, out, _ = run(["describe", "job", str(first.pk), "-o", "json"])
    assert json.loads(out)["queue"]["position"] == 1
    Job.objects.filter(pk=first.pk).update(status=JobStatus.RUNNING)
    code, out, _ = run(["describe", "job", str(first.pk)])
    body = " ".join(out.split())
    assert code == 0 and "Queue:" not in body  # only a queued job has a place in the queue


def test_describe_job_of_an_archived_job_counts_its_archived_phases(
    world: Any, env: dict[str, str], monkeypatch: Any, settings: Any, tmp_path: Path
) -> None:
    # QA pass 11: a finished job whose phases retention moved to the archive read
    # "Phases: 0" (and the API's phases nothing), as if it had never run
    from datetime import UTC, datetime, timedelta

    from rollmux_web.workflow.services import retention
    from tests.reports.builders import allocate, alternate, make_group, make_job, place

    settings.ROLLMUX_ARCHIVE_URI = str(tmp_path / "archive")
    t0 = datetime(2026, 3, 10, tzinfo=UTC)
    g = make_group(created=t0, released=t0 + timedelta(hours=1))
    allocate(g, "h20-0", t0, t0 + timedelta(hours=1))
    allocate(g, "h800-0", t0, t0 + timedelta(hours=1))
    job = make_job(world, name="long-gone", tenant="vision")
    pl = place(g, job, rollout=["h20-0"], train=["h800-0"], joined=t0)
    alternate(pl, start=t0, iterations=2, roll_min=10, train_min=10,
              roll_nodes=["h20-0"], train_nodes=["h800-0"])  # fmt: skip
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.COMPLETED, finished_at=t0 + timedelta(hours=1)
    )
    now = t0 + timedelta(days=200)
    for ids in retention.eligible_batches(now, max_batches=10):
        retention.archive_jobs(ids, now=now)
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    code, out, err = run(["describe", "job", str(job.pk), "-o", "json"])
    assert code == 0, err
    phases = json.loads(out)["phases"]
    assert phases["total"] == 0 and phases["archived"] == {
        "phases": 4,
        "archived_at": "2026-09-26T00:00:00Z",
    }
    code, out, err = run(["describe", "job", str(job.pk)])
    assert code == 0, err
    assert (
        "Phases: 0 in the table; 4 archived on 2026-09-26 (retention: the job's timeline on "
        "the web lists the files)" in " ".join(out.split())
    )
