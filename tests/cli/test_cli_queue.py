"""`rollmux get queue` (issue 22): the queue in planning order with each job's position and
why; another tenant's job is a position only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import run
from tests.workers.builders import make_job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def env(monkeypatch: Any, tmp_path: Path, live_server: Any) -> None:
    monkeypatch.setenv("ROLLMUX_CONFIG", str(tmp_path / "cfg" / "token"))
    monkeypatch.setenv("ROLLMUX_URL", live_server.url)


def test_get_queue_shows_positions_and_masks_other_tenants(
    world: Any, env: None, monkeypatch: Any
) -> None:
    mine = make_job(world, name="vision-queued")
    make_job(world, name="speech-secret", tenant=world.speech, submitter=world.charlie)
    monkeypatch.setenv("ROLLMUX_TOKEN", world.tokens["alice"])
    code, out, err = run(["get", "queue", "-o", "json"])
    assert code == 0, err
    rows = json.loads(out)
    assert sorted(r["position"] for r in rows) == [1, 2]
    hidden = [r for r in rows if r["hidden"]]
    assert len(hidden) == 1 and hidden[0]["id"] is None and "speech" not in json.dumps(hidden)
    own = next(r for r in rows if not r["hidden"])
    assert own["id"] == mine.pk and own["why"].startswith(
        f"{'1st' if own['position'] == 1 else '2nd'} in the queue; "
    )
    code, out, err = run(["get", "queue"])
    assert code == 0, err
    assert out.splitlines()[0].split() == ["POS", "ID", "NAME", "TENANT", "PRIO", "WHY"]
    assert "vision-queued" in out and "speech-secret" not in out
