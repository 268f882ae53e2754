"""Static files (the stylesheet, htmx) are served with DEBUG off: by the browser suite's
live server through WhiteNoise, and by `bin/run.sh` started as production
(ROLLMUX_EMBEDDED=false, DEBUG left unset), which also shows no debug page (issue 24
items 8 and 9)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.workers.builders import wait_for

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]
RUN_PORT = 8184  # this checkout's ports: 8180-8189
BODY_BACKGROUND = "rgb(248, 249, 251)"  # app.css: body { background: var(--bg) }


def _static_served(page: Any, url: str) -> dict[str, Any]:
    page.set_default_timeout(60000)  # a loaded CI machine
    statuses: dict[str, int] = {}
    page.on(
        "response", lambda r: statuses.update({r.url: r.status}) if "/static/" in r.url else None
    )
    page.goto(url)
    page.wait_for_load_state("networkidle")
    return {
        "statuses": statuses,
        "background": page.evaluate("getComputedStyle(document.body).backgroundColor"),
        "htmx": page.evaluate("typeof window.htmx"),
    }


@pytest.mark.django_db(transaction=True)
def test_the_live_server_serves_static_files_through_whitenoise_with_debug_off(
    page: Any, live_server: Any
) -> None:
    assert settings.DEBUG is False
    seen = _static_served(page, f"{live_server.url}/accounts/login/")
    assert seen["statuses"] and set(seen["statuses"].values()) == {200}, seen
    assert seen["background"] == BODY_BACKGROUND and seen["htmx"] == "object", seen


@pytest.mark.slow
def test_bin_run_sh_in_production_serves_static_files_and_no_debug_page(page: Any) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="rmx-run-"))
    env = {
        **os.environ,
        "ROLLMUX_EMBEDDED": "false",
        "SECRET_KEY": "k3Jq9Zr7Wm2Xv5Tb8Ny4Lc6Pd1Hf0Gs9Ua3Ei7Ro2Qw5Zx8Cv4Bn6Ml1Tk",
        "ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "ROLLMUX_PORT": str(RUN_PORT),
        "ROLLMUX_SEED_ARGS": "--no-jobs",
        "ROLLMUX_DISPATCHER": "inline",
        # plain HTTP on loopback, no TLS proxy in front (the deploy check warns about it)
        "ROLLMUX_SECURE_SSL_REDIRECT": "false",
        "ROLLMUX_SECURE_COOKIES": "false",
    }
    for key in ("DEBUG", "REDIS_URL", "ROLLMUX_CACHE_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"):
        env.pop(key, None)
    log = tmp / "run.log"
    run = subprocess.Popen(
        ["bin/run.sh"], cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{RUN_PORT}"

    def answers() -> bool:
        assert run.poll() is None, log.read_text()[-4000:]
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=2)
            return True
        except OSError:
            return False

    try:
        wait_for(answers, timeout=240)
        seen = _static_served(page, f"{url}/accounts/login/")
        assert seen["statuses"] and set(seen["statuses"].values()) == {200}, seen
        assert seen["background"] == BODY_BACKGROUND and seen["htmx"] == "object", seen
        missing = page.goto(f"{url}/no-such-page/")
        assert missing is not None and missing.status == 404
        assert "DEBUG = True" not in page.content() and "Traceback" not in page.content()
    finally:
        run.terminate()  # run.sh's trap stops the server it started
        try:
            run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, 9)
            run.wait()
