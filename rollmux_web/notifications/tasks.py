"""Celery tasks of the notifications app (queue ROLLMUX_NOTIFY_QUEUE, off the controller's),
and the subscriber that hands committed domain events to them. Each task takes ids or an
event's fields and is safe to run twice."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from rollmux_web import events
from rollmux_web.notifications import services

log = logging.getLogger(__name__)


def on_event(event: events.Event) -> None:
    """Receive a committed domain event (rollmux_web.events subscriber): hand it to the
    notifications worker, if anyone subscribed to anything (else no message, no task)."""
    if not services.anyone_subscribed():
        return
    try:
        fan_out.delay(event.as_dict())
    except Exception:  # a broker outage must not fail the domain's work
        log.exception("could not enqueue the fan-out of %s", event.key)


def enqueue(delivery_ids: list[int]) -> None:
    """Queue deliveries (committed rows); one the broker never gets is sent by the sweep."""
    for pk in delivery_ids:
        try:
            deliver.delay(pk)
        except Exception:
            log.exception("could not enqueue delivery %s", pk)


@shared_task(acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def fan_out(event: dict[str, Any]) -> list[int]:
    """Create the deliveries of a committed event and queue them."""
    ids = services.fan_out(events.Event.from_dict(event))
    enqueue(ids)
    return ids


@shared_task(bind=True, acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def deliver(self: Any, delivery_id: int) -> str:
    """Try a delivery; on a failure worth retrying, Celery retries it after the backoff.

    Run eagerly (embedded mode) it tries once and leaves the retry to the beat's sweep, so
    a slow receiver never holds up the request that published the event.
    """
    outcome = services.deliver(int(delivery_id))
    if outcome.retry_in_s is not None and not self.request.is_eager:
        raise self.retry(countdown=outcome.retry_in_s, max_retries=None)
    return outcome.status


@shared_task(ignore_result=True)  # type: ignore[untyped-decorator]
def sweep() -> int:
    """Queue due retries and lost deliveries; check every tenant's budgets."""
    ids = services.sweep()
    enqueue(ids)
    return len(ids)
