"""The Celery worker's consumer, reconnecting to the broker within a second.

Celery's consumer retries a lost broker connection with kombu's defaults: 2 s, then 2 s
more after every failure, up to 30 s between attempts. After a Redis outage of half a
minute the controller came back 39-44 s after Redis did (issue 12 item 6). This one tries
every half second, then every second, however long the outage: a reconnect costs one TCP
connect, and the controller has nothing better to do meanwhile.
(CELERY_WORKER_CONSUMER in settings names it.)

It also survives the Redis transport's own failure when the connection dies under it: a
pub/sub read (remote control, gossip) that loses the server mid-read makes kombu rebuild
the channel's connection pool from a channel already closed, and the AttributeError
("'NoneType' object has no attribute 'hostname'", celery/kombu#582) escaped the consumer's
connection-error handling: "Unrecoverable error", and the worker exited (the notifications
worker, issue 24 item 10; tests/workers/test_notify_outage.py). It is a lost connection:
the consumer reconnects as for any other.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from celery.worker.consumer import Consumer

log = logging.getLogger(__name__)

RECONNECT_INTERVAL_START_S = 0.5
RECONNECT_INTERVAL_STEP_S = 0.5
RECONNECT_INTERVAL_MAX_S = 1.0


class QuickReconnectConsumer(Consumer):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.conninfo.transport.driver_type == "redis":
            errors: tuple[type[BaseException], ...] = tuple(self.conninfo.connection_errors)
            self.connection_errors = (*errors, AttributeError)

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        try:
            super().on_connection_error_after_connected(exc)
        except AttributeError:  # closing the dead connection's channels (kombu#582)
            log.warning("the broker connection died mid-close; reconnecting", exc_info=True)
            self.connection = None

    def ensure_connected(self, conn: Any) -> Any:
        conn.ensure_connection = functools.partial(
            conn.ensure_connection,
            interval_start=RECONNECT_INTERVAL_START_S,
            interval_step=RECONNECT_INTERVAL_STEP_S,
            interval_max=RECONNECT_INTERVAL_MAX_S,
        )
        return super().ensure_connected(conn)
