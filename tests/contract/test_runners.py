"""The runner allowlist rule has one home: the submission check and a worker apply the same
rule (they differed: the worker's import-path pattern accepted `a..b:C`)."""

from __future__ import annotations

import pytest

from rollmux_contract.runners import (
    BUILTIN_RUNNERS,
    allowlist_entry_problem,
    runner_permitted,
)
from workers.runners import RunnerLoadError, runner_class

ALLOWED = ("tests.workers.user_runners", "acme_rl.runners:GrpoRunner")


@pytest.mark.parametrize(
    ("name", "permitted"),
    [
        ("emulated", True),
        ("tests.workers.user_runners:FlakyRunner", True),  # under an allowed module
        ("acme_rl.runners:GrpoRunner", True),  # exactly an allowed class
        ("acme_rl.runners:OtherRunner", False),  # not that class
        ("tests.workers.user_runnersX:FlakyRunner", False),  # a prefix is not a package
        ("tests..workers.user_runners:FlakyRunner", False),  # an empty module part
        ("tests.workers.user_runners.:FlakyRunner", False),
        ("a..b:C", False),
        ("subprocess:Popen", False),  # the standard library, never
        ("rm -rf", False),
    ],
)
def test_the_submission_check_and_a_worker_apply_one_rule(name: str, permitted: bool) -> None:
    assert runner_permitted(name, ALLOWED) is permitted
    if permitted:
        # a worker imports what the rule lets through (here: the tests' own runner, or the
        # one that is not installed, which fails at its import, past the rule)
        try:
            runner_class(name, ALLOWED)
        except RunnerLoadError as exc:
            assert "cannot import" in str(exc), exc
    else:
        with pytest.raises(RunnerLoadError) as refused:
            runner_class(name, ALLOWED)
        assert "cannot import" not in str(refused.value)  # refused before any import


def test_a_worker_refuses_a_path_with_an_empty_module_part_even_without_an_allowlist() -> None:
    with pytest.raises(RunnerLoadError, match="import path of the form package.module:Class"):
        runner_class("a..b:C")


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("acme_rl", None),
        ("acme_rl.runners:GrpoRunner", None),
        ("emulated", "built-in"),
        ("acme..rl", "Give a package or module"),
        ("subprocess", "standard library"),
        ("rollmux_web.settings", "standard library or RollMux's own code"),
        ("x" * 201, "Give a package or module"),
    ],
)
def test_an_allowlist_entry_is_checked_by_the_same_module(entry: str, problem: str | None) -> None:
    found = allowlist_entry_problem(entry)
    assert (found is None) if problem is None else (problem in (found or "")), found


def test_the_web_app_and_the_workers_name_the_same_builtins() -> None:
    from rollmux_web.jobs import spec
    from workers import runners

    assert spec.BUILTIN_RUNNERS is BUILTIN_RUNNERS is runners.BUILTIN_RUNNERS
