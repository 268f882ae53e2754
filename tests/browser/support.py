"""What the browser tests share besides fixtures: where screenshots go and how a persona logs in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts"


def browser_login(page: Any, live_server: Any, username: str) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"demo-{username}")
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
