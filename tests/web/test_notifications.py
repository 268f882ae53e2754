"""Notifications: domain events reach email (a real SMTP server, aiosmtpd) and signed
webhooks (a real HTTP receiver on loopback), by user and by tenant scope, with retries and
backoff from a real Celery worker, a delivery log on the page, and nothing of another
tenant's."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.core.exceptions import ValidationError

from rollmux_web import events, ports
from rollmux_web.notifications import services, signing
from rollmux_web.notifications.models import Delivery, DeliveryStatus, Subscription
from tests.workers.builders import Recorder, end_of, make_job, wait_for

SMTP_PORT = 8182  # this checkout's ports (PROTOCOL: ops 8180-8189)


class Inbox:
    """An aiosmtpd handler that keeps every message it is given."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(envelope)
        return "250 OK"


@pytest.fixture
def smtp(settings: Any) -> Iterator[Inbox]:
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=SMTP_PORT)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", SMTP_PORT
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.DEFAULT_FROM_EMAIL = "rollmux@example.internal"
    yield inbox
    controller.stop()


class Receiver:
    """A webhook receiver on loopback: records each POST; answers `codes` in turn, then 200."""

    def __init__(self, codes: list[int] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.codes = list(codes or [])
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(
                    {"headers": dict(self.headers), "body": body, "at": time.monotonic()}
                )
                self.send_response(receiver.codes.pop(0) if receiver.codes else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/rollmux"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    settings.ROLLMUX_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on loopback
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def eager(settings: Any) -> Iterator[Recorder]:
    """Celery tasks in-process (the embedded mode) and a dispatcher that runs nothing."""
    from rollmux_web.celery import app

    old = (app.conf.task_always_eager, app.conf.task_eager_propagates)
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    settings.CELERY_TASK_ALWAYS_EAGER = True
    events.forget_recent()
    rec = Recorder()
    with ports.override(dispatcher=rec):
        yield rec
    app.conf.task_always_eager, app.conf.task_eager_propagates = old


def _plan(capture: Any) -> None:
    from rollmux_web.workflow.services import queue_plan

    with capture(execute=True):
        queue_plan()


@pytest.mark.django_db
def test_a_placed_job_is_mailed_to_its_submitter_through_smtp(
    world: Any, eager: Recorder, smtp: Inbox, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.ROLLMUX_PUBLIC_URL = "https://rollmux.example.internal"
    world.alice.email = "alice@example.internal"  # her account's own address: confirmed
    world.alice.save(update_fields=["email"])
    services.subscription_create(
        user=world.alice,
        channel="email",
        target="alice@example.internal",
        events_wanted=[events.JOB_PLACED, events.JOB_COMPLETED],
    )
    job = make_job(world, name="mailed-job")
    make_job(world, name="bobs-job", submitter=world.bob)  # alice's subscription: not hers
    _plan(django_capture_on_commit_callbacks)
    assert len(smtp.messages) == 1
    mail = smtp.messages[0]
    text = mail.content.decode()
    assert mail.rcpt_tos == ["alice@example.internal"]
    assert mail.mail_from == "rollmux@example.internal"
    assert "Subject: [RollMux] job placed: Job mailed-job" in text
    assert f"https://rollmux.example.internal/jobs/{job.pk}/" in text
    assert "bobs-job" not in text
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.event_kind) == ("sent", 1, "job.placed")


@pytest.mark.django_db
def test_a_tenant_webhook_is_signed_and_the_signature_verifies(
    world: Any,
    eager: Recorder,
    receiver: Receiver,
    django_capture_on_commit_callbacks: Any,
    settings: Any,
) -> None:
    settings.ROLLMUX_MAX_ATTEMPTS = 1  # the first failed phase fails the job
    sub = services.subscription_create(
        user=world.bob,
        channel="webhook",
        target=receiver.url,
        scope="tenant",
        tenant=world.vision,
        events_wanted=[events.JOB_FAILED],
    )
    job = make_job(world, name="alices-job")  # alice's job: bob's tenant subscription sees it
    _plan(django_capture_on_commit_callbacks)
    from rollmux_web.workflow.services import phase_finish

    with django_capture_on_commit_callbacks(execute=True):
        phase_finish(
            end_of(eager.orders[0], outcome=ports.Outcome.ERROR, reason="CUDA out of memory")
        )
    assert len(receiver.requests) == 1
    req = receiver.requests[0]
    headers, body = req["headers"], req["body"]
    assert headers["X-RollMux-Event"] == "job.failed"
    assert headers["Content-Type"] == "application/json"
    ts, sig = headers["X-RollMux-Timestamp"], headers["X-RollMux-Signature"]
    assert signing.verify(sub.secret, body, ts, sig)
    # a tampered body, another secret, or a replay after the tolerance do not verify
    assert not signing.verify(sub.secret, body.replace(b"alices", b"mallory"), ts, sig)
    assert not signing.verify("another-secret", body, ts, sig)
    assert not signing.verify(sub.secret, body, ts, sig, now=int(ts) + 301)
    assert not signing.verify(sub.secret, body, str(int(ts) + 1), sig)  # a moved timestamp
    payload = json.loads(body)
    assert payload["event"] == "job.failed" and payload["tenant"] == "vision"
    assert payload["job"]["id"] == job.pk and "CUDA out of memory" in payload["message"]


@pytest.mark.django_db
def test_scopes_keep_each_subscription_to_what_its_owner_may_see(
    world: Any, eager: Recorder, receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    with pytest.raises(ValidationError) as refused:
        services.subscription_create(
            user=world.charlie, channel="webhook", target=receiver.url, scope="tenant",
            tenant=world.vision, events_wanted=[events.JOB_PLACED],
        )  # fmt: skip
    assert "tenant" in refused.value.message_dict
    with pytest.raises(ValidationError) as refused:
        services.subscription_create(
            user=world.alice, channel="webhook", target=receiver.url, scope="cluster",
            events_wanted=[events.NODE_DOWN],
        )  # fmt: skip
    assert "scope" in refused.value.message_dict
    speech = services.subscription_create(
        user=world.charlie, channel="webhook", target=receiver.url, scope="tenant",
        tenant=world.speech, events_wanted=[events.JOB_PLACED],
    )  # fmt: skip
    ops = services.subscription_create(
        user=world.admin, channel="webhook", target=receiver.url, scope="cluster",
        events_wanted=[events.NODE_DOWN, events.JOB_PLACED],
    )  # fmt: skip
    make_job(world, name="vision-secret-job")
    _plan(django_capture_on_commit_callbacks)
    # the vision job's placement reaches the admin's cluster scope, never speech's tenant
    assert Delivery.objects.filter(subscription=speech).count() == 0
    assert Delivery.objects.get(subscription=ops).event_kind == "job.placed"
    from rollmux_web.inventory.services import node_set_state

    with django_capture_on_commit_callbacks(execute=True):
        node_set_state(actor=world.admin, node_id=world.train_pool.nodes.first().pk, state="down")
    kinds = sorted(Delivery.objects.filter(subscription=ops).values_list("event_kind", flat=True))
    assert kinds == ["job.placed", "node.down"]
    assert Delivery.objects.filter(subscription=speech).count() == 0
    assert len(receiver.requests) == 2  # the admin's two, nothing for speech


@pytest.mark.django_db
def test_drifting_and_a_missed_slo_are_noticed(
    world: Any, eager: Recorder, receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    from rollmux_contract.phases import PhaseReport
    from rollmux_web.workflow.services import phase_finish

    services.subscription_create(
        user=world.alice, channel="webhook", target=receiver.url,
        events_wanted=[events.JOB_DRIFTING, events.JOB_SLO_MISSED, events.JOB_COMPLETED],
    )  # fmt: skip
    # time scale 1000: a 1 s rollout is 1000 profile seconds, the job declared at most 120
    job = make_job(world, name="drifter", iterations=1, t_train_max_s=5000.0, t_train_min_s=10.0)
    _plan(django_capture_on_commit_callbacks)
    t0 = time.time() - 30

    def report(order: Any, start: float, end: float) -> PhaseReport:
        return PhaseReport(order.phase_id, "ok", started_at=start, finished_at=end, warm=True,
                           group_id=order.group_id, job_id=order.job_id)  # fmt: skip

    with django_capture_on_commit_callbacks(execute=True):
        phase_finish(report(eager.orders[0], t0, t0 + 1))
    # training waits 10 s for its turn: the iteration takes 12 s, its phases ran 2 s
    with django_capture_on_commit_callbacks(execute=True):
        phase_finish(report(eager.orders[1], t0 + 11, t0 + 12))
    job.refresh_from_db()
    assert job.status == "completed"
    by_kind = {json.loads(r["body"])["event"]: json.loads(r["body"]) for r in receiver.requests}
    assert set(by_kind) == {"job.drifting", "job.completed", "job.slo_missed"}
    drift = by_kind["job.drifting"]["detail"]
    assert (drift["phase"], drift["iteration"], drift["declared_s"]) == ("rollout", 1, 120.0)
    assert drift["profile_s"] == pytest.approx(1000.0)
    missed = by_kind["job.slo_missed"]["detail"]
    assert missed["slowdown"] == pytest.approx(6.0) and missed["slo"] == 1.5
    assert "missed its SLO" in by_kind["job.slo_missed"]["message"]


@pytest.mark.django_db
def test_budget_alerts_fire_once_at_80_and_100_percent(
    world: Any, eager: Recorder, smtp: Inbox
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from rollmux_web.notifications import tasks
    from rollmux_web.quotas.models import Quota
    from rollmux_web.workflow.models import ExecutionGroup, PhaseRecord, Placement

    sub = services.subscription_create(
        user=world.finance, channel="email", target="finance@example.internal", scope="tenant",
        tenant=world.vision, events_wanted=[events.BUDGET_80, events.BUDGET_100],
    )  # fmt: skip
    # the address's owner follows the link (its confirmation delivery is not sent here)
    services.subscription_confirm(token=services.confirm_token(sub), apply=True)
    Delivery.objects.filter(event_kind=services.CONFIRM_KIND).delete()
    # $100 a month on H800 at $5.28/GPU-h: 8 GPUs for 2 h is $84.48 (84%)
    Quota.objects.create(
        tenant=world.vision, gpu_type=world.h800, monthly_budget_usd=Decimal("100")
    )
    job = make_job(world, name="spender")
    group = ExecutionGroup.objects.create()
    placement = Placement.objects.create(job=job, group=group, strategy="new_group")
    now = timezone.now()
    start = max(now - timedelta(hours=2), now.replace(day=1, hour=0, minute=0, second=0))
    PhaseRecord.objects.create(
        job=job, group=group, placement=placement, iteration=0, kind="train",
        node_names=["h800-0"], state="succeeded", queued_at=start, started_at=start,
        finished_at=start + timedelta(hours=2),
    )  # fmt: skip
    if (now - start) < timedelta(hours=2):  # the 1st of the month before 02:00: less spent
        pytest.skip("the month is younger than the two hours this test spends")
    tasks.sweep()
    kinds = list(Delivery.objects.values_list("event_kind", flat=True))
    assert kinds == ["budget.80"] and len(smtp.messages) == 1
    assert "84% of its H800 budget" in smtp.messages[0].content.decode()
    tasks.sweep()  # nothing new: once a month
    assert Delivery.objects.count() == 1
    # one more hour of 8 GPUs, already over (usage counts phase time up to now, never after)
    PhaseRecord.objects.create(
        job=job, group=group, placement=placement, iteration=1, kind="train",
        node_names=["h800-0"], state="succeeded", queued_at=start, started_at=start,
        finished_at=start + timedelta(hours=1),
    )  # fmt: skip
    tasks.sweep()
    assert sorted(Delivery.objects.values_list("event_kind", flat=True)) == [
        "budget.100",
        "budget.80",
    ]


@pytest.mark.django_db
def test_private_destinations_are_refused_unless_allowed(world: Any, settings: Any) -> None:
    settings.ROLLMUX_WEBHOOK_ALLOW_PRIVATE = False
    for url in ("http://127.0.0.1:6379/", "http://169.254.169.254/latest", "http://[::1]/x"):
        with pytest.raises(ValidationError) as refused:
            services.subscription_create(
                user=world.alice, channel="webhook", target=url, events_wanted=["job.failed"]
            )
        assert "non-public address" in refused.value.message_dict["target"][0]
    with pytest.raises(ValidationError):
        services.subscription_create(
            user=world.alice, channel="webhook", target="ftp://example.org/",
            events_wanted=["job.failed"],
        )  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.celery
def test_a_failing_webhook_is_retried_with_backoff_by_a_real_celery_worker(
    world: Any, settings: Any
) -> None:
    """503, 503, then 200: three tries of one delivery, spaced by the growing backoff."""
    import redis
    from celery.contrib.testing.worker import start_worker

    from rollmux_web.celery import app
    from rollmux_web.notifications import tasks

    redis.Redis.from_url(settings.REDIS_URL).flushdb()  # this checkout's own db
    settings.ROLLMUX_WEBHOOK_ALLOW_PRIVATE = True
    settings.ROLLMUX_NOTIFY_BACKOFF_S = 0.3
    receiver = Receiver(codes=[503, 503])
    # `queues=` below selects the app's consumed queues for good (kombu keeps the choice on
    # app.amqp.queues): put it back, or a later test's worker would consume only this queue
    selected = app.amqp.queues._consume_from
    try:
        sub = services.subscription_create(
            user=world.alice, channel="webhook", target=receiver.url,
            events_wanted=[events.JOB_FAILED],
        )  # fmt: skip
        with start_worker(
            app, pool="threads", concurrency=2, perform_ping_check=False,
            queues=[settings.ROLLMUX_NOTIFY_QUEUE], shutdown_timeout=10,
        ):  # fmt: skip
            delivery = services.send_test(user=world.alice, subscription_id=sub.pk)
            tasks.enqueue([delivery.pk])
            wait_for(
                lambda: Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.SENT,
                timeout=30,
            )
    finally:
        app.amqp.queues._consume_from = selected
        receiver.close()
    delivery.refresh_from_db()
    assert delivery.attempts == 3 and delivery.response_status == 200
    tries = receiver.requests
    assert len(tries) == 3
    assert {t["headers"]["X-RollMux-Delivery"] for t in tries} == {str(delivery.pk)}
    gaps = [b["at"] - a["at"] for a, b in zip(tries, tries[1:], strict=False)]
    assert gaps[0] >= 0.3 and gaps[1] >= 0.6  # base x 2^(try - 1)
    # every try is signed afresh (its own timestamp), and each verifies
    assert all(
        signing.verify(sub.secret, t["body"], t["headers"]["X-RollMux-Timestamp"],
                       t["headers"]["X-RollMux-Signature"])
        for t in tries
    )  # fmt: skip


@pytest.mark.django_db
def test_the_page_lists_subscriptions_and_the_delivery_log_per_tenant(
    world: Any, client_as: Any, eager: Recorder, receiver: Receiver
) -> None:
    client = client_as("alice")
    resp = client.post(
        "/notifications/",
        {"channel": "webhook", "target": receiver.url, "scope": "tenant", "tenant": "vision",
         "events": ["job.placed", "job.failed"]},
    )  # fmt: skip
    assert resp.status_code == 302
    sub = Subscription.objects.get(owner=world.alice)
    assert sub.events == ["job.failed", "job.placed"] and len(sub.secret) >= 32
    resp = client.post(f"/notifications/{sub.pk}/test/")
    assert resp.status_code == 302
    page = client.get("/notifications/").content.decode()
    # the owner sees the secret once, on the page after its creation, then its prefix
    assert receiver.url in page and sub.secret in page
    page = client.get("/notifications/").content.decode()
    assert sub.secret not in page and sub.secret_prefix in page
    assert "A test delivery to" in page and "Sent" in page
    # the events in the form's words, not their keys
    assert "<td>job failed, job placed</td>" in page and "<td>job.failed" not in page
    bad = client.post("/notifications/", {"channel": "email", "target": "not-an-address",
                                          "events": ["job.placed"]})  # fmt: skip
    assert bad.status_code == 400 and "Enter a valid email address." in bad.content.decode()
    bob = client_as("bob")  # same tenant, not the owner: sees it, not the secret, cannot remove
    page = bob.get("/notifications/").content.decode()
    assert receiver.url in page and sub.secret not in page
    assert bob.post(f"/notifications/{sub.pk}/delete/").status_code == 403
    charlie = client_as("charlie")
    page = charlie.get("/notifications/").content.decode()
    assert receiver.url not in page and "A test delivery" not in page
    assert charlie.post(f"/notifications/{sub.pk}/delete/").status_code == 404
    assert client_as("alice").post(f"/notifications/{sub.pk}/delete/").status_code == 302
    assert not Subscription.objects.exists()


@pytest.mark.django_db
def test_a_second_subscription_sending_an_event_to_the_same_destination_is_refused(
    world: Any,
) -> None:
    first = services.subscription_create(
        user=world.alice, channel="email", target="alice@example.internal",
        events_wanted=[events.JOB_PLACED, events.JOB_COMPLETED],
    )  # fmt: skip
    with pytest.raises(ValidationError) as refused:
        services.subscription_create(
            user=world.alice, channel="email", target="Alice@example.internal",
            events_wanted=[events.JOB_COMPLETED, events.JOB_FAILED],
        )  # fmt: skip
    message = refused.value.message_dict["events"][0]
    assert f"#{first.pk}" in message and events.KINDS[events.JOB_COMPLETED] in message
    assert Subscription.objects.filter(owner=world.alice).count() == 1
    # other events to the same address, or the same events elsewhere, are a different sending
    services.subscription_create(
        user=world.alice, channel="email", target="alice@example.internal",
        events_wanted=[events.JOB_FAILED],
    )  # fmt: skip
    services.subscription_create(
        user=world.alice, channel="email", target="oncall@example.internal",
        events_wanted=[events.JOB_COMPLETED],
    )  # fmt: skip
    assert Subscription.objects.filter(owner=world.alice).count() == 3


@pytest.mark.django_db
def test_under_make_run_the_embedded_beat_retries_a_failed_webhook_delivery(
    world: Any, eager: Recorder, settings: Any, monkeypatch: Any
) -> None:
    """Embedded mode (no Redis): a delivery is tried once in-process; its retry is the
    sweep's, which the server's in-process beat now runs as beat does (it said "retrying"
    for good before)."""
    from rollmux_web.notifications import tasks
    from workers import embedded, triggers

    settings.ROLLMUX_WEBHOOK_ALLOW_PRIVATE = True
    settings.ROLLMUX_NOTIFY_BACKOFF_S = 0.0  # the retry is due at once
    receiver = Receiver(codes=[503])
    beats: list[list[tuple[float, Any]]] = []
    monkeypatch.setattr(embedded, "_started", threading.Event())  # a fresh server process
    monkeypatch.setattr(embedded, "_beat", beats.append)  # what its beat thread would run
    embedded.set_serving()
    try:
        sub = services.subscription_create(
            user=world.alice, channel="webhook", target=receiver.url,
            events_wanted=[events.JOB_FAILED],
        )  # fmt: skip
        delivery = services.send_test(user=world.alice, subscription_id=sub.pk)
        tasks.enqueue([delivery.pk])  # eager: one try, 503
        delivery.refresh_from_db()
        assert (delivery.status, delivery.attempts) == (DeliveryStatus.RETRYING, 1)
        triggers.request_planning()  # the first trigger in the server starts its beat
        wait_for(lambda: bool(beats), timeout=10)
        schedule = settings.CELERY_BEAT_SCHEDULE
        entries = {getattr(fn, "__name__", ""): interval for interval, fn in beats[0]}
        assert entries["run_notifications_sweep"] == schedule["notifications-sweep"]["schedule"]
        assert entries["run_reconcile"] == schedule["reconcile"]["schedule"]
        next(fn for _, fn in beats[0] if fn.__name__ == "run_notifications_sweep")()
    finally:
        embedded.set_serving(False)
        receiver.close()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_status) == ("sent", 2, 200)
    assert len(receiver.requests) == 2


@pytest.mark.django_db
def test_node_down_is_offered_and_accepted_for_the_cluster_scope_only(
    world: Any, client_as: Any
) -> None:
    # issue 24 item 18: a researcher could tick "node down", which no tenant scope ever gets
    for scope, tenant in (("mine", None), ("tenant", world.vision)):
        with pytest.raises(ValidationError) as refused:
            services.subscription_create(
                user=world.alice, channel="email", target="alice@example.org", scope=scope,
                tenant=tenant, events_wanted=[events.JOB_PLACED, events.NODE_DOWN],
            )  # fmt: skip
        (message,) = refused.value.message_dict["events"]
        assert "node down" in message and "cluster-scope subscriptions only" in message
    assert not Subscription.objects.exists()
    page = client_as("alice").get("/notifications/").content.decode()
    assert 'value="node.down"' not in page and 'value="job.placed"' in page
    # the form refuses it the same way, naming the field
    resp = client_as("alice").post(
        "/notifications/",
        {"channel": "email", "target": "alice@example.org", "scope": "mine",
         "events": ["job.placed", "node.down"]},
    )  # fmt: skip
    assert "cluster-scope subscriptions only" in resp.content.decode()
    assert not Subscription.objects.exists()
    admin_page = client_as("admin").get("/notifications/").content.decode()
    assert 'value="node.down"' in admin_page and "node down (cluster scope only)" in admin_page
    services.subscription_create(
        user=world.admin, channel="email", target="ops@example.org", scope="cluster",
        events_wanted=[events.NODE_DOWN],
    )  # fmt: skip
