"""The phase API for trainers that own their loop (the paper's `@rollmux.phase`).

A job whose runner is `external` does not hand its code to RollMux: its own process runs
the training loop and wraps each phase::

    import rollmux

    session = rollmux.PhaseSession(job_id=42, redis_url="redis://127.0.0.1:6379/0")
    for step in range(iterations):
        with session.phase("rollout") as grant:   # blocks until the group controller grants it
            batch = generate(policy)               # grant.iteration: 0-based, pages show + 1
        with session.phase("train") as grant:
            loss = update(policy, batch)           # leaving the block reports completion
            grant.metrics["loss"] = loss           # stored with the iteration (the curve)

or as a decorator: ``@session.phase("rollout")``. With no session, ``rollmux.phase(kind)``
reads ROLLMUX_JOB_ID and ROLLMUX_REDIS_URL from the environment.

The control channel is Redis, as in the paper: the controller pushes a grant to
``rollmux:job:<id>:grant`` and waits on ``rollmux:job:<id>:done:<kind>:<iteration>``.
Without Redis (in-process tests, the embedded default) a process-local channel is used.
This package imports neither Django nor Ray.
"""

from __future__ import annotations

import functools
import json
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

__all__ = ["Grant", "PhaseSession", "PhaseTimeout", "channel_for", "phase"]

F = TypeVar("F", bound=Callable[..., Any])
PHASE_KINDS = ("rollout", "train")


class PhaseTimeout(TimeoutError):
    """No grant (or no completion) arrived within the timeout."""


class Channel(Protocol):
    def push(self, key: str, value: dict[str, Any]) -> None: ...

    def pop(self, key: str, timeout: float) -> dict[str, Any] | None: ...


class LocalChannel:
    """A process-local channel (thread-safe queues), for tests and the embedded default."""

    _queues: dict[str, queue.Queue[dict[str, Any]]] = {}
    _lock = threading.Lock()

    def _queue(self, key: str) -> queue.Queue[dict[str, Any]]:
        with self._lock:
            return self._queues.setdefault(key, queue.Queue())

    def push(self, key: str, value: dict[str, Any]) -> None:
        self._queue(key).put(value)

    def pop(self, key: str, timeout: float) -> dict[str, Any] | None:
        try:
            return self._queue(key).get(timeout=timeout)
        except queue.Empty:
            return None


class RedisChannel:
    """Redis lists: RPUSH to send, BLPOP to wait (survives either side restarting)."""

    def __init__(self, url: str) -> None:
        import redis

        self._redis = redis.Redis.from_url(url)

    def push(self, key: str, value: dict[str, Any]) -> None:
        pipe = self._redis.pipeline()
        pipe.rpush(key, json.dumps(value))
        pipe.expire(key, 7 * 24 * 3600)
        pipe.execute()

    # One BLPOP waits at most this long: redis-py (8.x) reads with a 5 s socket timeout by
    # default, so a single BLPOP for a phase-long wait failed with "Timeout reading from
    # socket" after 5 s (any phase or grant wait over 5 s). Short waits in a loop work with
    # any client default, and a Redis restart in between costs one retry, not the phase.
    WAIT_CHUNK_S = 2

    def pop(self, key: str, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            wait = max(1, min(self.WAIT_CHUNK_S, int(math.ceil(left))))
            item = self._redis.blpop([key], timeout=wait)
            if item is not None:
                return json.loads(item[1])  # type: ignore[no-any-return]
            if time.monotonic() >= deadline:
                return None


def channel_for(redis_url: str | None) -> Channel:
    """Return the Redis channel for a URL, or the process-local one for None/empty."""
    return RedisChannel(redis_url) if redis_url else LocalChannel()


def grant_key(job_id: int) -> str:
    return f"rollmux:job:{job_id}:grant"


def done_key(job_id: int, kind: str, iteration: int) -> str:
    return f"rollmux:job:{job_id}:done:{kind}:{iteration}"


@dataclass
class Grant:
    """Permission to run one phase: which kind and which iteration (0-based, as stored;
    the pages and the CLI show it + 1)."""

    kind: str
    iteration: int
    metrics: dict[str, float] = field(default_factory=dict)  # the trainer may fill these


class PhaseSession:
    """A trainer's connection to its group controller."""

    def __init__(
        self,
        job_id: int,
        *,
        redis_url: str | None = None,
        channel: Channel | None = None,
        timeout_s: float = 24 * 3600,
    ) -> None:
        self.job_id = int(job_id)
        self.channel = channel or channel_for(redis_url)
        self.timeout_s = timeout_s

    def wait_grant(self, kind: str) -> Grant:
        """Block until the controller grants this job's next phase, which must be `kind`."""
        if kind not in PHASE_KINDS:
            raise ValueError(f"phase kind {kind!r}: use one of {', '.join(PHASE_KINDS)}")
        msg = self.channel.pop(grant_key(self.job_id), self.timeout_s)
        if msg is None:
            raise PhaseTimeout(f"job {self.job_id}: no {kind} grant within {self.timeout_s} s")
        if msg["kind"] != kind:
            # The trainer's loop and the controller disagree on the phase order: say so loudly.
            self.report(Grant(msg["kind"], msg["iteration"]), error=f"expected {msg['kind']}")
            raise RuntimeError(
                f"job {self.job_id}: granted {msg['kind']} {msg['iteration']} "
                f"but the trainer asked for {kind}"
            )
        return Grant(kind=kind, iteration=int(msg["iteration"]))

    def report(self, grant: Grant, *, error: str | None = None) -> None:
        """Report the end of a granted phase (the runtime hook)."""
        self.channel.push(
            done_key(self.job_id, grant.kind, grant.iteration),
            {"outcome": "ok" if error is None else f"error: {error}", "metrics": grant.metrics},
        )

    @contextmanager
    def _phase_cm(self, kind: str) -> Iterator[Grant]:
        grant = self.wait_grant(kind)
        try:
            yield grant
        except BaseException as exc:
            self.report(grant, error=f"{type(exc).__name__}: {exc}")
            raise
        self.report(grant)

    def phase(self, kind: str) -> _PhaseHelper:
        """Return a context manager / decorator that runs a block as one granted phase."""
        return _PhaseHelper(self, kind)


class _PhaseHelper:
    def __init__(self, session: PhaseSession, kind: str) -> None:
        self.session, self.kind = session, kind
        self._cm: Any = None

    def __enter__(self) -> Grant:
        self._cm = self.session._phase_cm(self.kind)
        return self._cm.__enter__()  # type: ignore[no-any-return]

    def __exit__(self, *exc: Any) -> bool:
        return bool(self._cm.__exit__(*exc))

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.session._phase_cm(self.kind):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


_default: PhaseSession | None = None


def phase(kind: str) -> _PhaseHelper:
    """Run a block or a function as one granted phase of the job named by ROLLMUX_JOB_ID."""
    global _default
    if _default is None:
        job_id = os.environ.get("ROLLMUX_JOB_ID")
        if not job_id:
            raise RuntimeError("rollmux.phase: set ROLLMUX_JOB_ID or create a PhaseSession")
        _default = PhaseSession(int(job_id), redis_url=os.environ.get("ROLLMUX_REDIS_URL"))
    return _default.phase(kind)
