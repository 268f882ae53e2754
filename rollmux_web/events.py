"""Domain events: the one function the apps' services call to say that something happened.

`publish(kind, ...)` records an event to be handed to the subscribers after the current
transaction commits (a rolled-back decision notifies nobody), or at once outside one. The
notifications app subscribes in its AppConfig.ready(); this module imports no app, so every
service may call it (it sits below the apps' layers). Only ids are taken here, never a
query: the controller calls it inside its transaction, whose round trips are counted.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

log = logging.getLogger(__name__)

JOB_PLACED = "job.placed"
JOB_COMPLETED = "job.completed"
JOB_FAILED = "job.failed"
JOB_RESUBMITTED = "job.resubmitted"
JOB_DRIFTING = "job.drifting"
JOB_SLO_MISSED = "job.slo_missed"
JOB_PREEMPTED = "job.preempted"
BUDGET_80 = "budget.80"
BUDGET_100 = "budget.100"
NODE_DOWN = "node.down"
KINDS: dict[str, str] = {
    JOB_PLACED: "job placed",
    JOB_COMPLETED: "job done",
    JOB_FAILED: "job failed",
    JOB_RESUBMITTED: "job resubmitted",
    JOB_DRIFTING: "job drifting from its profile",
    JOB_SLO_MISSED: "job missed its SLO",
    JOB_PREEMPTED: "job preempted (resumes from its checkpoint)",
    BUDGET_80: "budget 80% used",
    BUDGET_100: "budget used up",
    NODE_DOWN: "node down",
}


@dataclass(frozen=True)
class Event:
    """What happened, by id. `key` names the occurrence: two events with one key are one
    (a drifting job says so once per placement, a budget crosses 80% once a month)."""

    kind: str
    key: str
    tenant_id: int | None = None
    user_id: int | None = None  # the job's submitter
    job_id: int | None = None
    node_id: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "job_id": self.job_id,
            "node_id": self.node_id,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        return cls(
            kind=str(data["kind"]),
            key=str(data["key"]),
            tenant_id=data.get("tenant_id"),
            user_id=data.get("user_id"),
            job_id=data.get("job_id"),
            node_id=data.get("node_id"),
            detail=dict(data.get("detail") or {}),
        )


Subscriber = Callable[[Event], None]
_subscribers: list[Subscriber] = []
_recent: OrderedDict[str, None] = OrderedDict()  # keys handed on lately (one process)
_recent_lock = threading.Lock()
RECENT_KEYS = 4096


def subscribe(fn: Subscriber) -> None:
    """Hand every published event to `fn` (once per process; a second call is ignored)."""
    if fn not in _subscribers:
        _subscribers.append(fn)


def unsubscribe(fn: Subscriber) -> None:
    if fn in _subscribers:
        _subscribers.remove(fn)


def _seen(key: str) -> bool:
    """Return whether this process handed on `key` lately (a drifting job's every phase
    would publish again; the deliveries are unique per key anyway, this saves the trip)."""
    with _recent_lock:
        if key in _recent:
            _recent.move_to_end(key)
            return True
        _recent[key] = None
        if len(_recent) > RECENT_KEYS:
            _recent.popitem(last=False)
        return False


def forget_recent() -> None:
    """Forget which keys were handed on (tests that publish one key twice on purpose)."""
    with _recent_lock:
        _recent.clear()


def _hand_on(event: Event) -> None:
    if _seen(event.key):
        return
    for fn in list(_subscribers):
        try:
            fn(event)
        except Exception:  # a notification must never undo or break the domain's work
            log.exception("event %s: subscriber %r failed", event.key, fn)


def publish(
    kind: str,
    *,
    job: Any = None,
    node: Any = None,
    tenant_id: int | None = None,
    key: str | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Publish a domain event after the current transaction commits.

    `job` (a Job row) gives the tenant, the submitter and the default key
    (kind:job:attempt); `node` (a Node row) the node; reads no related row.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}")
    job_id = getattr(job, "pk", None)
    node_id = getattr(node, "pk", None)
    if key is None:
        if job is not None:
            key = f"{kind}:{job_id}:{getattr(job, 'attempts', 0)}"
        elif node is not None:
            key = f"{kind}:{node_id}:{getattr(node, 'updated_at', '')}"
        else:
            raise ValueError("an event without a job or node needs a key")
    event = Event(
        kind=kind,
        key=key,
        tenant_id=tenant_id if tenant_id is not None else getattr(job, "tenant_id", None),
        user_id=getattr(job, "submitter_id", None),
        job_id=job_id,
        node_id=node_id,
        detail=dict(detail or {}),
    )
    if _subscribers:
        transaction.on_commit(lambda: _hand_on(event))
