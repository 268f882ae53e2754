"""Run a transaction again when PostgreSQL aborts it for a deadlock or a serialisation failure.

Locks are taken in a fixed order (see workers/README.md), so these should not happen; when
one does anyway (a lock order someone did not foresee, a foreign-key check racing another
transaction), the loser is rolled back whole and can simply run again: the caller gets its
answer a few milliseconds later instead of a 500.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, connection, transaction

log = logging.getLogger(__name__)
T = TypeVar("T")

# SQLSTATE: 40P01 deadlock_detected, 40001 serialization_failure
RETRIED_SQLSTATES = ("40P01", "40001")


def is_conflict(exc: BaseException) -> bool:
    """Return whether the error is a deadlock or serialisation failure (worth a retry)."""
    cause = exc.__cause__ or exc
    return getattr(cause, "sqlstate", None) in RETRIED_SQLSTATES


def atomic_with_retry(fn: Callable[[], T], *, attempts: int = 5, what: str = "transaction") -> T:
    """Run `fn` in transaction.atomic(), again (up to `attempts` times, with a short jittered
    pause) when the database aborts it for a deadlock or a serialisation failure.

    Inside an outer transaction there is nothing to retry (the outer one keeps its locks and
    is aborted too), so the error is raised at once.
    """
    if connection.in_atomic_block:
        with transaction.atomic():
            return fn()
    for attempt in range(1, attempts + 1):
        try:
            with transaction.atomic():
                return fn()
        except OperationalError as exc:
            if attempt == attempts or not is_conflict(exc):
                raise
            log.warning("%s: %s on attempt %d, retrying", what, exc.__cause__ or exc, attempt)
            time.sleep(random.uniform(0.005, 0.02) * attempt)  # noqa: S311 (jitter, not crypto)
    raise AssertionError("unreachable")
