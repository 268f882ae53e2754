"""Login lockout (django-axes) and API rate limits (DRF throttles), and what they answer.

Why both: axes counts *failed* logins per username and per client address in the
database, across every way in (login form, admin, POST /api/v1/auth/token/), and locks
the username or the address out for a cool-off even if the next password is right. DRF's
throttles bound the *rate* of requests, which is what limits a token: one per API token,
one per address for anonymous requests. Each answer is a 429 that says when to retry.

The rate counters fail open: while their store (Redis) does not answer, requests go through
unthrottled, as the pages do, instead of every API call failing with a 500; the outage is
logged (once per OUTAGE_RETRY_S) and counted (rollmux_rate_limit_unavailable_total), and
the store is tried again OUTAGE_RETRY_S later, so an unreachable one costs a request no
connect timeout meanwhile.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from prometheus_client import Counter
from redis.exceptions import RedisError
from rest_framework.throttling import BaseThrottle

from rollmux_web.audit.services import audit_record

log = logging.getLogger(__name__)

LOCKOUT_CODE = "login_locked_out"
# After the counter's store failed, requests go unthrottled (without trying it) this long.
OUTAGE_RETRY_S = 5.0
# (here, not in rollmux_web.metrics: that module reaches the apps above this one)
RATE_LIMIT_UNAVAILABLE = Counter(
    "rollmux_rate_limit_unavailable",
    "API requests let through unthrottled because the rate-limit counter's store (Redis) "
    "did not answer, by throttle scope (token, anon)",
    ["scope"],
)


def client_ip(request: Any) -> str:
    """Return the client's address: REMOTE_ADDR, or behind the TLS proxy (ROLLMUX_TLS_PROXY)
    the last X-Forwarded-For entry, the one the proxy appended (earlier ones are the client's
    word)."""
    meta = getattr(request, "META", {})
    if getattr(settings, "SECURE_PROXY_SSL_HEADER", None):
        forwarded = [a.strip() for a in meta.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        if forwarded and forwarded[-1]:
            return forwarded[-1]
    return str(meta.get("REMOTE_ADDR") or "")


def cooloff_minutes() -> int:
    return max(1, math.ceil(float(settings.AXES_COOLOFF_TIME) * 60))


def lockout_message() -> str:
    return (
        f"Too many failed logins for this username or from this address: try again in "
        f"{cooloff_minutes()} minutes, or ask an admin to unlock it."
    )


def lockout_response(
    request: HttpRequest, original_response: Any, credentials: Any
) -> HttpResponse:
    """Answer a locked-out login with 429: the API's error shape, or the login page."""
    # (imported here: api.errors imports DRF's views, whose settings import this module)
    from rollmux_web.api.errors import error_json

    retry_after = str(cooloff_minutes() * 60)
    if request.path.startswith("/api/"):
        response: HttpResponse = error_json(LOCKOUT_CODE, lockout_message(), None, 429)
    else:
        response = render(
            request,
            "registration/login.html",
            {"locked_out": lockout_message(), "next": request.POST.get("next", "")},
            status=429,
        )
    response["Retry-After"] = retry_after
    return response


def record_lockout(
    sender: Any, request: Any, username: str | None, ip_address: str, **kw: Any
) -> None:
    """Write a lockout to the audit log (connected to axes' user_locked_out signal)."""
    audit_record(
        actor=None,
        action="auth.lockout",
        object_type="auth.user",
        object_id=str(username or "")[:64],
        after={
            "username": username or "",
            "ip_address": ip_address,
            "path": getattr(request, "path", ""),
            "cooloff_minutes": cooloff_minutes(),
        },
    )


def _count(key: str, timeout: int) -> int:
    """Count one request in the window's counter and return the count so far.

    On Redis (production) one round trip: SET NX with the window's expiry and INCR in one
    MULTI (atomic, so the counter never outlives its window); Django's add() then incr()
    would be three (incr checks that the key exists first). The value is the integer the
    cache itself would store. Other caches (embedded: the process's memory) use add + incr.
    """
    redis_cache = getattr(cache, "_cache", None)
    get_client = getattr(redis_cache, "get_client", None)
    if get_client is not None:
        full_key = cache.make_and_validate_key(key)
        pipe = get_client(full_key, write=True).pipeline(transaction=True)
        pipe.set(full_key, 0, ex=timeout, nx=True)
        pipe.incr(full_key)
        return int(pipe.execute()[1])
    cache.add(key, 0, timeout=timeout)
    try:
        return int(cache.incr(key))
    except ValueError:  # evicted between add and incr: count this one as the first
        cache.set(key, 1, timeout=timeout)
        return 1


class _CounterOutage:
    """Whether the counters' store is known to be down (per process), and logging it once
    per OUTAGE_RETRY_S."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.until = 0.0  # time.monotonic() before which the store is not tried

    def down(self) -> bool:
        return time.monotonic() < self.until

    def failed(self, scope: str, exc: BaseException) -> None:
        with self._lock:
            first = not self.down()
            self.until = time.monotonic() + OUTAGE_RETRY_S
        if first:
            log.warning(
                "API rate limits are off: the rate-limit counter's store does not answer "
                "(%s: %s); requests go through unthrottled, trying it again in %.0f s",
                type(exc).__name__, exc, OUTAGE_RETRY_S,
            )  # fmt: skip

    def reset(self) -> None:
        self.until = 0.0


counter_outage = _CounterOutage()


class _FixedWindowThrottle(BaseThrottle):
    """At most `rate` requests per window per key, counted in the cache (`_count`)."""

    scope = ""

    def rate(self) -> str:
        raise NotImplementedError

    def key(self, request: Any) -> str | None:
        raise NotImplementedError

    def allow_request(self, request: Any, view: Any) -> bool:
        rate = self.rate()
        ident = self.key(request)
        if not rate or ident is None:
            return True
        count, _, period = rate.partition("/")
        self.window = {"s": 1, "m": 60, "h": 3600, "d": 86400}[period[:1] or "m"]
        now = time.time()
        slot = int(now // self.window)
        self.reset_in = (slot + 1) * self.window - now
        key = f"rmx-throttle:{self.scope}:{ident}:{slot}"
        if counter_outage.down():
            RATE_LIMIT_UNAVAILABLE.labels(self.scope).inc()
            return True
        try:
            counted = _count(key, self.window + 1)
        except (RedisError, OSError) as exc:  # fail open: an outage of Redis is no 500
            counter_outage.failed(self.scope, exc)
            RATE_LIMIT_UNAVAILABLE.labels(self.scope).inc()
            return True
        return counted <= int(count)

    def wait(self) -> float | None:
        return max(getattr(self, "reset_in", 1.0), 1.0)


class TokenRateThrottle(_FixedWindowThrottle):
    """ROLLMUX_API_TOKEN_RATE requests per API token (session users: per user)."""

    scope = "token"

    def rate(self) -> str:
        return str(settings.ROLLMUX_API_TOKEN_RATE)

    def key(self, request: Any) -> str | None:
        token = getattr(request, "auth", None)
        if token is not None and getattr(token, "pk", None) is not None:
            return f"t{token.pk}"
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return f"u{user.pk}"
        return None


class AnonRateThrottle(_FixedWindowThrottle):
    """ROLLMUX_API_ANON_RATE anonymous requests (the token endpoint) per client address."""

    scope = "anon"

    def rate(self) -> str:
        return str(settings.ROLLMUX_API_ANON_RATE)

    def key(self, request: Any) -> str | None:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return None
        return client_ip(request) or "unknown"


class LoginLockoutBackend(AxesStandaloneBackend):
    """django-axes' check, first in AUTHENTICATION_BACKENDS: it refuses a locked-out username
    or address before any password is checked. A call without a request (a management
    command, the shell, a test) is not a login attempt from a client: it is not checked."""

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> None:
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)  # type: ignore[no-any-return]
