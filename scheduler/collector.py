"""The cyclic garbage collector, paused while a computation builds many small objects.

Two callers build hundreds of thousands of tuples, dicts and records, none of them
garbage in a cycle, and the collector kept scanning them all: a report at a fleet's
size (a third of its time, rollmux_web.reports) and a simulation at size (measured by
the collector's own callbacks: 0.77 s of ~25 s CPU at 600 live jobs, 791 collections;
its full collections, each over every live object, fell inside the planner's timed
decisions; issue 25 item 4). Reference counting frees memory as usual while it is paused
(so nothing those callers drop may be garbage in a cycle: tests/scheduler/
test_sim_fast_paths.py checks a run leaves none); the
collector runs again afterwards, if it was on (a caller that turned it off keeps it
off). Stdlib only: the core stays pure.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (module docstring)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
