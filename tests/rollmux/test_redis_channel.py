"""The phase API's Redis channel waits as long as a phase takes (regression: redis-py's
default 5 s socket timeout failed every wait over 5 s with "Timeout reading from socket")."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

import rollmux


def test_a_wait_longer_than_the_clients_socket_timeout_gets_its_message(settings: Any) -> None:
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    channel = rollmux.RedisChannel(settings.REDIS_URL)
    key = f"rollmux:test:{uuid.uuid4().hex}"
    pusher = threading.Timer(6.5, lambda: channel.push(key, {"kind": "train", "iteration": 3}))
    pusher.start()
    started = time.monotonic()
    try:
        got = channel.pop(key, timeout=30)
    finally:
        pusher.cancel()
    assert got == {"kind": "train", "iteration": 3}
    assert time.monotonic() - started >= 6.0  # it really waited past the 5 s
    assert channel.pop(key, timeout=1) is None  # and a wait with nothing to pop ends empty
