"""Production's gunicorn settings: one worker per CPU it may use, 8 threads, overridable."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

from rollmux_web import gunicorn_conf


def _reloaded(monkeypatch: pytest.MonkeyPatch, **env: str) -> ModuleType:
    for name in ("GUNICORN_WORKERS", "GUNICORN_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return importlib.reload(gunicorn_conf)


def test_defaults_to_one_worker_per_usable_cpu_with_eight_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conf = _reloaded(monkeypatch)
    assert conf.workers == len(os.sched_getaffinity(0))
    assert conf.threads == 8


def test_compose_passes_an_empty_value_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = _reloaded(monkeypatch, GUNICORN_WORKERS="", GUNICORN_THREADS=" ")
    assert conf.workers == len(os.sched_getaffinity(0))
    assert conf.threads == 8


def test_the_environment_overrides_both(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = _reloaded(monkeypatch, GUNICORN_WORKERS="5", GUNICORN_THREADS="3")
    assert (conf.workers, conf.threads) == (5, 3)
    monkeypatch.delenv("GUNICORN_WORKERS")
    monkeypatch.delenv("GUNICORN_THREADS")
    importlib.reload(gunicorn_conf)
