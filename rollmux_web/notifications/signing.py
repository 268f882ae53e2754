"""Webhook signatures: HMAC-SHA256 over "<timestamp>.<body>" with the endpoint's secret.

The timestamp (X-RollMux-Timestamp, Unix seconds) is inside what is signed, so a receiver
that refuses a timestamp older than a few minutes refuses a replayed delivery, and one that
changes the timestamp breaks the signature. Stdlib only: a receiver may copy `verify`.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-RollMux-Signature"
TIMESTAMP_HEADER = "X-RollMux-Timestamp"
EVENT_HEADER = "X-RollMux-Event"
DELIVERY_HEADER = "X-RollMux-Delivery"
TOLERANCE_S = 300


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """Return the signature header's value: `sha256=<hex digest>`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(
    secret: str,
    body: bytes,
    timestamp: str,
    signature: str,
    *,
    now: float | None = None,
    tolerance_s: int = TOLERANCE_S,
) -> bool:
    """Return whether a delivery is authentic and fresh (within `tolerance_s` of now)."""
    try:
        ts = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((time.time() if now is None else now) - ts) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, ts, body), signature or "")
