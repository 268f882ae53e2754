"""The Celery worker's consumer, reconnecting to the broker within a second.

Celery's consumer retries a lost broker connection with kombu's defaults: 2 s, then 2 s
more after every failure, up to 30 s between attempts. After a Redis outage of half a
minute the controller came back 39-44 s after Redis did (issue 12 item 6). This one tries
every half second, then every second, however long the outage: a reconnect costs one TCP
connect, and the controller has nothing better to do meanwhile.
(CELERY_WORKER_CONSUMER in settings names it.)
"""

from __future__ import annotations

import functools
from typing import Any

from celery.worker.consumer import Consumer

RECONNECT_INTERVAL_START_S = 0.5
RECONNECT_INTERVAL_STEP_S = 0.5
RECONNECT_INTERVAL_MAX_S = 1.0


class QuickReconnectConsumer(Consumer):  # type: ignore[misc]
    def ensure_connected(self, conn: Any) -> Any:
        conn.ensure_connection = functools.partial(
            conn.ensure_connection,
            interval_start=RECONNECT_INTERVAL_START_S,
            interval_step=RECONNECT_INTERVAL_STEP_S,
            interval_max=RECONNECT_INTERVAL_MAX_S,
        )
        return super().ensure_connected(conn)
