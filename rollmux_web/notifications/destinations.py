"""Where a webhook may go, how it is signed and the one way it is posted (the network
edge of notifications).

A subscription's URL is checked when it is made (`check_webhook_url`, `destination_refusal`);
a delivery resolves the host once (`resolve_destination`: every address public unless
ROLLMUX_WEBHOOK_ALLOW_PRIVATE) and posts to the address it checked (`post_pinned`), so a
name that answers a public address to the check and a private one to the POST (DNS
rebinding) reaches only the public one.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import time
from urllib.parse import urlparse

import certifi
import urllib3
from django.conf import settings
from django.core.exceptions import ValidationError

from rollmux_web.notifications import signing
from rollmux_web.notifications.models import Delivery, Subscription

__all__ = [
    "WEBHOOK_TIMEOUT_S",
    "check_webhook_url",
    "destination_refusal",
    "not_public",
    "post_pinned",
    "resolve_destination",
    "webhook_request",
]

WEBHOOK_TIMEOUT_S = 10.0


def check_webhook_url(url: str) -> None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValidationError({"target": ["Use an http:// or https:// URL with a host."]})
    if parsed.username or parsed.password:
        raise ValidationError(
            {"target": ["Put no credentials in the URL: the signature authenticates."]}
        )


def not_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Return whether a webhook may not go to `address`: anything but a global unicast
    address (loopback, private, link-local, shared, reserved, multicast, unspecified), also
    when it hides in an IPv6 address (IPv4-mapped, 6to4, Teredo)."""
    if isinstance(address, ipaddress.IPv6Address):
        teredo = address.teredo
        for inner in (address.ipv4_mapped, address.sixtofour, teredo[1] if teredo else None):
            if inner is not None and not_public(inner):
                return True
    return (
        not address.is_global
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or address.is_loopback
        or address.is_link_local
    )


def _port(url: str) -> int:
    parsed = urlparse(url)
    return parsed.port or (443 if parsed.scheme == "https" else 80)


def resolve_destination(url: str) -> tuple[str, str | None]:
    """Resolve the host of `url` once: return (why the server will not post there, or "";
    the address to connect to, None when the name does not resolve now).

    Every address the name resolves to must be public unless ROLLMUX_WEBHOOK_ALLOW_PRIVATE
    is set (else any user could make the server call its own network). The delivery then
    connects to the address checked here, never resolving the name again: a name that
    answers a public address to the check and 127.0.0.1 to the POST (DNS rebinding) reaches
    only the public one.
    """
    host = urlparse(url).hostname or ""
    try:
        infos = socket.getaddrinfo(host, _port(url), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return "", None  # not resolvable now: the delivery fails (and retries) instead
    addresses = [str(info[4][0]) for info in infos]
    if not settings.ROLLMUX_WEBHOOK_ALLOW_PRIVATE:
        for raw in addresses:
            address = ipaddress.ip_address(raw.split("%", 1)[0])
            if not_public(address):
                return f"{host} resolves to {address}, a non-public address", None
    return "", addresses[0] if addresses else None


def destination_refusal(url: str) -> str:
    """Return why the server will not post to `url`, or "" (see resolve_destination)."""
    return resolve_destination(url)[0]


def post_pinned(url: str, address: str, body: bytes, headers: dict[str, str]) -> int:
    """POST `body` to `url` over a connection to `address` (the one resolve_destination
    checked), with the URL's host in the Host header and, for https, in the TLS server name
    and the certificate check; no redirect is followed, no proxy used. Return the status."""
    parsed = urlparse(url)
    host = parsed.hostname or ""
    path = (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")
    timeout = urllib3.Timeout(connect=WEBHOOK_TIMEOUT_S, read=WEBHOOK_TIMEOUT_S)
    pool: urllib3.HTTPConnectionPool
    if parsed.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(
            address,
            _port(url),
            timeout=timeout,
            retries=False,
            cert_reqs="CERT_REQUIRED",
            ca_certs=certifi.where(),
            server_hostname=host,
            assert_hostname=host,
        )
    else:
        pool = urllib3.HTTPConnectionPool(address, _port(url), timeout=timeout, retries=False)
    try:
        resp = pool.urlopen(
            "POST", path, body=body, headers={**headers, "Host": parsed.netloc}, redirect=False
        )
        return int(resp.status)
    finally:
        pool.close()


def webhook_request(
    sub: Subscription, delivery: Delivery, *, now: float | None = None
) -> tuple[bytes, dict[str, str]]:
    """Return the body and headers of a webhook delivery, signed with the endpoint's secret."""
    body = json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True).encode()
    timestamp = int(time.time() if now is None else now)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "RollMux-Webhook/1",
        signing.EVENT_HEADER: delivery.event_kind,
        signing.DELIVERY_HEADER: str(delivery.pk),
        signing.TIMESTAMP_HEADER: str(timestamp),
        signing.SIGNATURE_HEADER: signing.sign(sub.secret, timestamp, body),
    }
    return body, headers
