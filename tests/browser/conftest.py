"""The browser suite's live server serves static files as production does: DEBUG is off
(pytest-django's default), the files are collected into STATIC_ROOT once per session and
WhiteNoise serves them from there; pytest-django's own static handler (which would answer
/static/ from the app directories whatever DEBUG says) is left out."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def live_server(request: pytest.FixtureRequest) -> Iterator[Any]:
    from django.core.management import call_command
    from pytest_django import live_server_helper

    call_command("collectstatic", "--noinput", verbosity=0)
    addr = (
        request.config.getvalue("liveserver")
        or os.getenv("DJANGO_LIVE_TEST_SERVER_ADDRESS")
        or "localhost"
    )
    server = live_server_helper.LiveServer(addr, start=False)
    server.thread.static_handler = _through  # every request reaches Django (and WhiteNoise)
    server.start()
    yield server
    server.stop()


def _through(app: Any) -> Any:
    return app
