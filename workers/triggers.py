"""Hooks the web app calls after a commit to wake the workflow (filled in by the workflow).

Each function is safe to call from `transaction.on_commit` and enqueues Celery tasks
that take ids; in embedded mode the tasks run in-process.
"""

from __future__ import annotations


def request_planning() -> None:
    """Ask for a planning pass (after a submission, departure, failure or node change)."""


def request_cancel(job_id: int) -> None:
    """Ask the job's group controller to stop the job at the next phase boundary."""


def node_state_changed(node_id: int) -> None:
    """React to a node going down/drained/up (resubmit jobs pinned to a down node)."""
