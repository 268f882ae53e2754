"""Notifications cannot be turned against others: an email address gets nothing but its
confirmation until its owner follows the link, sends are capped per user (tests an hour,
deliveries an hour, subscriptions, addresses awaiting confirmation), webhooks refuse
non-public addresses however written and connect to the address their check resolved, and
a webhook secret is shown once."""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from rollmux_web import events
from rollmux_web.notifications import destinations, services
from rollmux_web.notifications.models import Delivery, DeliveryStatus, Subscription
from tests.web.test_notifications import (  # noqa: F401  (fixtures)
    Inbox,
    Receiver,
    eager,
    receiver,
    smtp,
)
from tests.workers.builders import Recorder, make_job

pytestmark = pytest.mark.django_db


def _failed(job: Any, n: int) -> events.Event:
    return events.Event(
        kind=events.JOB_FAILED,
        key=f"{events.JOB_FAILED}:{job.pk}:{n}",
        tenant_id=job.tenant_id,
        user_id=job.submitter_id,
        job_id=job.pk,
        detail={"reason": "boom"},
    )


def test_an_email_address_gets_only_its_confirmation_until_its_link_is_followed(
    world: Any,
    client_as: Any,
    eager: Recorder,  # noqa: F811
    smtp: Inbox,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
) -> None:
    client = client_as("alice")
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post(
            "/notifications/",
            {"channel": "email", "target": "oncall@example.internal", "scope": "mine",
             "events": ["job.failed"]},
        )  # fmt: skip
    assert resp.status_code == 302
    sub = Subscription.objects.get()
    assert sub.confirmed_at is None
    assert len(smtp.messages) == 1  # the confirmation, nothing else
    mail = smtp.messages[0].content.decode()
    assert "Subject: [RollMux] confirm this address" in mail
    link = re.search(r"Confirm: (\S+)", mail)
    assert link, mail
    # an event of hers is not delivered there, nor is a test: the test button re-sends
    # the confirmation
    assert services.create_deliveries(_failed(make_job(world), 1)) == []
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/notifications/{sub.pk}/test/")
    assert len(smtp.messages) == 2
    assert "confirm this address" in smtp.messages[1].content.decode()
    # a delivery row of another kind that reaches the sender anyway is refused there
    forged = Delivery.objects.create(
        subscription=sub, event_kind="test", event_key="test:forged", payload={"event": "test"}
    )
    assert services.deliver(forged.pk).status == "failed"
    forged.refresh_from_db()
    assert forged.last_error == "not sent: oncall@example.internal is not confirmed yet"
    assert len(smtp.messages) == 2
    # the recipient, logged in or not: GET asks (a link scanner confirms nothing), POST confirms
    anonymous = Client()
    path = link.group(1)
    page = anonymous.get(path)
    assert page.status_code == 200 and "Confirm this address" in page.content.decode()
    sub.refresh_from_db()
    assert sub.confirmed_at is None
    assert anonymous.post(path).status_code == 200
    sub.refresh_from_db()
    assert sub.confirmed_at is not None
    assert anonymous.get(path.replace("/confirm/", "/confirm/x")).status_code == 400
    # now events and tests reach it
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/notifications/{sub.pk}/test/")
    assert len(smtp.messages) == 3 and "A test delivery" in smtp.messages[2].content.decode()
    assert len(services.create_deliveries(_failed(make_job(world), 2))) == 1


def test_test_sends_are_limited_per_user_an_hour(
    world: Any,
    client_as: Any,
    eager: Recorder,  # noqa: F811
    receiver: Receiver,  # noqa: F811
    settings: Any,
) -> None:
    settings.ROLLMUX_NOTIFY_TESTS_PER_HOUR = 3
    sub = services.subscription_create(
        user=world.alice, channel="webhook", target=receiver.url, events_wanted=["job.failed"]
    )
    client = client_as("alice")
    for _ in range(5):
        resp = client.post(f"/notifications/{sub.pk}/test/", follow=True)
    page = resp.content.decode()
    assert "3 test or confirmation sends in the last hour" in page
    assert "ROLLMUX_NOTIFY_TESTS_PER_HOUR" in page
    assert Delivery.objects.filter(event_kind="test").count() == 3
    assert len(receiver.requests) == 3
    # the count is the asking user's: an admin may still test her subscription
    services.send_test(user=world.admin, subscription_id=sub.pk)


def test_removing_and_adding_a_subscription_again_does_not_reset_the_count(
    world: Any, settings: Any
) -> None:
    settings.ROLLMUX_NOTIFY_TESTS_PER_HOUR = 2
    for _ in range(2):  # each new address gets its confirmation: a send she asked for
        sub = services.subscription_create(
            user=world.alice, channel="email", target="victim@example.internal",
            events_wanted=["job.failed"],
        )  # fmt: skip
        services.subscription_delete(user=world.alice, subscription_id=sub.pk)
    with pytest.raises(ValidationError, match="ROLLMUX_NOTIFY_TESTS_PER_HOUR"):
        services.subscription_create(
            user=world.alice, channel="email", target="victim@example.internal",
            events_wanted=["job.failed"],
        )  # fmt: skip
    assert not Subscription.objects.exists()


def test_deliveries_over_the_hourly_cap_are_logged_as_not_sent(
    world: Any,
    settings: Any,
    receiver: Receiver,  # noqa: F811
) -> None:
    settings.ROLLMUX_NOTIFY_DELIVERIES_PER_HOUR = 2
    services.subscription_create(
        user=world.alice, channel="webhook", target=receiver.url, events_wanted=["job.failed"]
    )
    job = make_job(world)
    created = [pk for n in range(4) for pk in services.create_deliveries(_failed(job, n))]
    assert len(created) == 2
    held = Delivery.objects.exclude(pk__in=created)
    assert held.count() == 2
    assert {d.status for d in held} == {DeliveryStatus.FAILED}
    assert all("ROLLMUX_NOTIFY_DELIVERIES_PER_HOUR" in d.last_error for d in held)
    # bob's subscription has its own count
    services.subscription_create(
        user=world.bob, channel="webhook", target=receiver.url, events_wanted=["job.failed"]
    )
    bobs = make_job(world, submitter=world.bob)
    assert len(services.create_deliveries(_failed(bobs, 1))) == 1


def test_subscriptions_and_addresses_awaiting_confirmation_are_capped_per_user(
    world: Any, settings: Any
) -> None:
    settings.ROLLMUX_NOTIFY_MAX_UNCONFIRMED = 3
    settings.ROLLMUX_NOTIFY_MAX_SUBSCRIPTIONS = 5
    refused = []
    for i in range(30):  # the reliability pass: 30 addresses, none confirmed
        try:
            services.subscription_create(
                user=world.alice,
                channel="email",
                target=f"victim{i}@example.internal",
                events_wanted=["job.failed"],
            )
        except ValidationError as exc:
            refused.append(exc.message_dict["target"][0])
    assert Subscription.objects.filter(owner=world.alice).count() == 3
    assert len(refused) == 27 and "ROLLMUX_NOTIFY_MAX_UNCONFIRMED" in refused[0]
    # another subscription to an address already awaiting its link is not a new address
    services.subscription_create(
        user=world.alice, channel="email", target="victim0@example.internal",
        events_wanted=["job.placed"],
    )  # fmt: skip
    # confirmed destinations count toward the total only
    world.alice.email = "alice@example.internal"
    world.alice.save(update_fields=["email"])
    services.subscription_create(
        user=world.alice, channel="email", target="alice@example.internal",
        events_wanted=["job.placed"],
    )  # fmt: skip
    with pytest.raises(ValidationError, match="ROLLMUX_NOTIFY_MAX_SUBSCRIPTIONS"):
        services.subscription_create(
            user=world.alice, channel="email", target="alice@example.internal",
            events_wanted=["job.failed"],
        )  # fmt: skip
    assert Subscription.objects.filter(owner=world.alice).count() == 5
    # one confirmation each for the three addresses (not for the second subscription)
    assert Delivery.objects.filter(event_kind="confirm").count() == 3


@pytest.mark.parametrize(
    "target",
    [
        "http://224.0.0.1/hook",  # multicast (ipaddress calls it global)
        "http://239.255.255.250:1900/",  # SSDP multicast
        "http://[ff02::1]/hook",  # IPv6 multicast
        "http://240.0.0.1/hook",  # reserved
        "http://0.0.0.0/hook",  # unspecified
        "http://100.64.0.1/hook",  # shared address space
        "http://[::ffff:127.0.0.1]/hook",  # IPv4-mapped loopback
        "http://[2002:7f00:1::1]/hook",  # 6to4 around 127.0.0.1
        "http://[64:ff9b::7f00:1]/hook",  # NAT64 (reserved)
        "http://127.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data/",
    ],
)
def test_webhook_targets_refuse_every_non_public_address(world: Any, target: str) -> None:
    with pytest.raises(ValidationError) as refused:
        services.subscription_create(
            user=world.alice, channel="webhook", target=target, events_wanted=["job.failed"]
        )
    assert "a non-public address" in refused.value.message_dict["target"][0]


def test_public_addresses_pass_the_webhook_check() -> None:
    for raw in ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "8.8.8.8"):
        assert not destinations.not_public(ipaddress.ip_address(raw)), raw


class _Resolver:
    """A name server for `hook.test` whose answers change between lookups (a rebinding
    attacker's); every other name goes to the system resolver."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.lookups = 0
        self.real = socket.getaddrinfo

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "hook.test":
            return self.real(host, port, *args, **kwargs)
        answer = self.answers[min(self.lookups, len(self.answers) - 1)]
        self.lookups += 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]


def test_a_webhook_posts_to_the_address_its_check_resolved(
    world: Any,
    receiver: Receiver,  # noqa: F811
    monkeypatch: Any,
) -> None:
    port = receiver.server.server_port
    sub = Subscription.objects.create(
        owner=world.alice,
        channel="webhook",
        target=f"http://hook.test:{port}/hooks/rollmux",
        secret="s" * 43,
        events=["job.failed"],
        confirmed_at=world.alice.date_joined,
    )
    # the check's answer is the receiver; a second lookup would get an address nobody
    # answers on (the old code resolved again for the POST and failed here)
    resolver = _Resolver(["127.0.0.1", "10.255.255.1"])
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    delivery = services.send_test(user=world.alice, subscription_id=sub.pk)
    assert services.deliver(delivery.pk).status == "sent"
    assert resolver.lookups == 1
    (request,) = receiver.requests
    assert request["headers"]["Host"] == f"hook.test:{port}"


def test_a_rebinding_name_never_reaches_the_private_address(
    world: Any,
    receiver: Receiver,  # noqa: F811
    monkeypatch: Any,
    settings: Any,
) -> None:
    settings.ROLLMUX_WEBHOOK_ALLOW_PRIVATE = False
    monkeypatch.setattr(destinations, "WEBHOOK_TIMEOUT_S", 1.0)
    port = receiver.server.server_port
    # public to the check (a public address; the test machine has no route out, so the
    # POST fails within the 1 s timeout), loopback to any later lookup
    resolver = _Resolver(["93.184.216.34", "127.0.0.1"])
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    sub = services.subscription_create(
        user=world.alice,
        channel="webhook",
        target=f"http://hook.test:{port}/hooks/rollmux",
        events_wanted=["job.failed"],
    )
    delivery = services.send_test(user=world.alice, subscription_id=sub.pk)
    assert services.deliver(delivery.pk).status in ("retrying", "failed")
    assert receiver.requests == []  # the loopback receiver was never called
    assert resolver.lookups == 2  # one at subscription, one per delivery attempt


def test_a_webhook_secret_is_shown_once_after_creation_and_rotation(
    world: Any,
    client_as: Any,
    receiver: Receiver,  # noqa: F811
) -> None:
    client = client_as("alice")
    client.post(
        "/notifications/",
        {"channel": "webhook", "target": receiver.url, "scope": "mine", "events": ["job.failed"]},
    )
    sub = Subscription.objects.get()
    first = client.get("/notifications/").content.decode()
    assert sub.secret in first and "shown once" in first
    again = client.get("/notifications/").content.decode()
    assert sub.secret not in again and sub.secret_prefix in again
    old = sub.secret
    client.post(f"/notifications/{sub.pk}/rotate/")
    sub.refresh_from_db()
    assert sub.secret != old
    rotated = client.get("/notifications/").content.decode()
    assert sub.secret in rotated and old not in rotated
    later = client.get("/notifications/").content.decode()
    assert sub.secret not in later and old not in later
    # another member of the tenant never sees it
    assert sub.secret_prefix not in client_as("bob").get("/notifications/").content.decode()


def test_a_destination_longer_than_its_column_is_refused_naming_the_field(
    world: Any, client_as: Any, monkeypatch: Any
) -> None:
    # QA pass 11: a webhook URL over the column's 500 characters (a long signed query
    # string) passed every check and failed the INSERT: a server error on PostgreSQL
    monkeypatch.setattr(socket, "getaddrinfo", _Resolver(["93.184.216.34"]))
    target = "https://hook.test/hooks?sig=" + "a" * 600
    resp = client_as("charlie").post(
        "/notifications/",
        {"channel": "webhook", "target": target, "scope": "mine", "events": ["job.failed"]},
    )
    assert resp.status_code == 400
    assert resp.context["errors"]["target"] == [
        f"Use at most 500 characters; this one has {len(target)}."
    ]
    assert not Subscription.objects.exists()
