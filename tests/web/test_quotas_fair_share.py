"""Fair share on the web side (issue 22): shares (nominal, borrowing, lending, weight) set by
admins and refused naming the field, submission up to nominal + borrowing, decayed usage
from phase records, the queue in fair-share order with positions and masking, the quotas
page's share table, the API, the metrics."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from rollmux_web.inventory.models import GpuType
from rollmux_web.jobs.models import Job, JobStatus
from rollmux_web.quotas.models import Quota, SloClass
from rollmux_web.workflow import fairshare
from rollmux_web.workflow.models import ExecutionGroup, PhaseRecord, Placement
from tests.factories import job_spec
from tests.workers.builders import make_job

pytestmark = pytest.mark.django_db

QUOTAS = "/api/v1/quotas/"


def _post(api, **fields):
    body = {"tenant": "vision", "gpu_type": "H800", "max_gpus": 16, **fields}
    return api.post(QUOTAS, body, format="json")


# --- shares: set by admins, refused naming the field -------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"borrowing_limit": -8}, "borrowing_limit", ""),
        ({"lending_limit": 24}, "lending_limit", "at most the nominal quota"),
        ({"weight": 0}, "weight", "above 0"),
        ({"weight": -1.5}, "weight", "above 0"),
        # a denormal weight made the share infinite: the queue then said the tenant "uses
        # H800 with no nominal quota there" (QA pass 13)
        ({"weight": 1e-320}, "weight", "at least 0.000001"),
        ({"gpu_type": "A100", "weight": 2.0}, "gpu_type", "no A100 nodes"),
    ],
)
def test_a_bad_share_is_refused_naming_the_field(api_as, world, fields, field, words):
    if fields.get("gpu_type") == "A100":
        GpuType.objects.create(name="A100", gpus_per_node=8, host_mem_gb=1024)
    resp = _post(api_as("admin"), **fields)
    assert resp.status_code == 400, resp.content
    body = resp.json()
    errors = body.get("errors") or body.get("fields") or body
    assert field in str(errors), body
    assert words in str(body), body
    assert not Quota.objects.exists()  # nothing half-written


def test_admin_sets_a_share_and_its_researchers_read_it(api_as, world):
    resp = _post(api_as("admin"), borrowing_limit=16, lending_limit=8, weight=2.0)
    assert resp.status_code == 201, resp.content
    q = Quota.objects.get()
    assert (q.max_gpus, q.borrowing_limit, q.lending_limit, q.weight) == (16, 16, 8, 2.0)
    mine = api_as("alice").get(QUOTAS).json()["results"]
    assert [(r["borrowing_limit"], r["lending_limit"], r["weight"]) for r in mine] == [(16, 8, 2.0)]
    assert api_as("charlie").get(QUOTAS).json()["results"] == []  # another tenant's
    assert (
        api_as("alice").patch(f"{QUOTAS}{q.pk}/", {"weight": 3}, format="json").status_code == 403
    )
    # the audit keeps the share's fields
    from rollmux_web.audit.models import AuditEntry

    entry = AuditEntry.objects.get(action="quota.create")
    assert entry.after["borrowing_limit"] == 16 and entry.after["weight"] == 2.0


def test_the_quota_form_refuses_a_negative_borrowing_limit(client_as, world):
    client = client_as("admin")
    resp = client.post(
        "/quotas/new/",
        {"tenant": "vision", "gpu_type": "H800", "max_gpus": 16, "borrowing_limit": -1},
    )
    assert resp.status_code == 400
    assert "borrowing_limit" in resp.content.decode() or "Borrowing limit" in resp.content.decode()
    assert "Must be zero or more GPUs" in resp.content.decode()
    assert not Quota.objects.exists()


def test_gold_is_not_preemptible_by_default_and_others_are(api_as, world):
    api = api_as("admin")
    made = api.post("/api/v1/slo-classes/", {"name": "gold2", "slowdown": 1.2}, format="json")
    assert made.json()["preemptible"] is True
    SloClass.objects.filter(name="gold").delete()
    made = api.post("/api/v1/slo-classes/", {"name": "gold", "slowdown": 1.1}, format="json")
    assert made.json()["preemptible"] is False


def test_a_submission_may_borrow_up_to_its_borrowing_limit(api_as, world):
    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, max_gpus=16, borrowing_limit=8)
    api = api_as("alice")
    ok = api.post("/api/v1/jobs/", job_spec(train_gpus=24), format="json")
    assert ok.status_code == 201, ok.content
    refused = api.post("/api/v1/jobs/", job_spec(train_gpus=8), format="json")
    assert refused.status_code == 403
    err = refused.json()["error"]
    assert err["code"] == "quota_exceeded"
    assert "at most 24 (16 nominal + 8 it may borrow) H800 GPUs" in err["message"]


# --- decayed usage -------------------------------------------------------------------------------


def _phase(job, placement, *, ended_ago_s, length_s, nodes):
    now = timezone.now()
    end = now - timedelta(seconds=ended_ago_s)
    return PhaseRecord.objects.create(
        job=job,
        group=placement.group,
        placement=placement,
        iteration=PhaseRecord.objects.filter(placement=placement).count(),
        kind="train",
        node_names=nodes,
        queued_at=end - timedelta(seconds=length_s),
        started_at=end - timedelta(seconds=length_s),
        finished_at=end,
        state="succeeded",
    )


def test_decayed_usage_halves_per_half_life_per_gpu_type(world, settings):
    settings.ROLLMUX_FAIR_SHARE_HALF_LIFE_S = 3600.0
    job = make_job(world, status=JobStatus.COMPLETED)
    placement = Placement.objects.create(
        job=job, group=ExecutionGroup.objects.create(), strategy="new_group"
    )
    # an hour on one 8-GPU H800 node, ending now; the same an hour (one half-life) ago
    _phase(job, placement, ended_ago_s=0, length_s=3600, nodes=["h800-0"])
    _phase(job, placement, ended_ago_s=3600, length_s=3600, nodes=["h800-0", "h800-1"])
    used = fairshare.usage_gpu_s(timezone.now())["vision"]
    assert set(used) == {"H800"}
    # 8 GPU-hours now + 16 GPU-hours counted half
    assert used["H800"] / 3600.0 == pytest.approx(8.0 + 16.0 / 2, rel=1e-3)
    settings.ROLLMUX_FAIR_SHARE_HALF_LIFE_S = 7200.0  # a longer half-life forgets less
    longer = fairshare.usage_gpu_s(timezone.now())["vision"]["H800"] / 3600.0
    assert longer == pytest.approx(8.0 + 16.0 * 0.5**0.5, rel=1e-3)


# --- queue order -----------------------------------------------------------------------------------


def _heavy_user(world, tenant, user):
    """Give `tenant` a day of busy H800 time on four nodes (its decayed usage)."""
    done = make_job(world, name="past", tenant=tenant, submitter=user, status=JobStatus.COMPLETED)
    placement = Placement.objects.create(
        job=done, group=ExecutionGroup.objects.create(), strategy="new_group"
    )
    _phase(done, placement, ended_ago_s=60, length_s=86400, nodes=[f"h800-{i}" for i in range(4)])


def test_the_queue_puts_the_tenant_that_used_less_first_and_masks_others(api_as, world, client_as):
    _heavy_user(world, world.vision, world.alice)
    first_in = make_job(world, name="vision-job")  # submitted first
    later = make_job(world, name="speech-job", tenant=world.speech, submitter=world.charlie)
    positions, _ = fairshare.queue_positions(timezone.now())
    assert [int(p.job_id) for p in positions] == [later.pk, first_in.pk]
    assert positions[0].reason.startswith("1st in the queue; speech uses nothing now")
    assert positions[1].reason.startswith("2nd in the queue; vision is at ")
    assert "of its share of H800" in positions[1].reason
    # the API, as alice sees it: speech's job is a position, nothing else
    rows = api_as("alice").get("/api/v1/queue/").json()
    assert rows[0] == {
        "position": 1,
        "hidden": True,
        "id": None,
        "name": "another tenant's job",
        "tenant": "",
        "priority": None,
        "why": "",
        "waiting": "",
        "submitted_at": None,
    }
    assert rows[1]["id"] == first_in.pk and rows[1]["why"] == positions[1].reason
    # admins see both; the page and the job page say it too
    assert [r["id"] for r in api_as("admin").get("/api/v1/queue/").json()] == [
        later.pk,
        first_in.pk,
    ]
    html = client_as("alice").get("/queue/").content.decode()
    assert "speech-job" not in html and f"#{later.pk}" not in html and "vision-job" in html
    html = client_as("alice").get(f"/queue/jobs/{first_in.pk}/").content.decode()
    assert "2nd in the queue; vision is at" in html
    assert client_as("alice").get(f"/queue/jobs/{later.pk}/").status_code == 404


def test_priority_comes_before_share(world):
    _heavy_user(world, world.vision, world.alice)
    urgent = make_job(world, name="urgent", priority=5)
    other = make_job(world, name="other", tenant=world.speech, submitter=world.charlie)
    positions, _ = fairshare.queue_positions(timezone.now())
    assert [int(p.job_id) for p in positions] == [urgent.pk, other.pk]
    assert positions[0].reason.startswith("1st in the queue; priority 5; vision is at")


def test_the_planning_pass_follows_the_fair_share_order(world, monkeypatch):
    from rollmux_web import ports
    from rollmux_web.workflow.services import planning
    from tests.workers.builders import NoTriggers, Recorder

    _heavy_user(world, world.vision, world.alice)
    # both want the whole cluster: only the first planned runs
    first_in = make_job(world, name="vision-job", rollout_gpus=32, train_gpus=32)
    later = make_job(
        world,
        name="speech-job",
        tenant=world.speech,
        submitter=world.charlie,
        rollout_gpus=32,
        train_gpus=32,
    )
    with ports.override(dispatcher=Recorder(), triggers=NoTriggers()):
        summary = planning.queue_plan()
    assert summary.placed == [later.pk]
    assert Job.objects.get(pk=first_in.pk).status == JobStatus.QUEUED


# --- the share table, the metrics ------------------------------------------------------------------


def test_the_share_table_shows_nominal_borrowed_and_share(world, client_as, api_as):
    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, max_gpus=16, borrowing_limit=16)
    Quota.objects.create(tenant=world.speech, gpu_type=world.h800, max_gpus=16)
    make_job(world, name="big", train_gpus=24, status=JobStatus.RUNNING)
    rows = {(r.tenant, r.gpu_type): r for r in fairshare.share_rows(timezone.now())}
    vision = rows[("vision", "H800")]
    assert (vision.nominal, vision.held, vision.borrowed) == (16, 24, 8)
    assert vision.borrowed_share == pytest.approx(8 / 32)
    assert rows[("speech", "H800")].borrowed == 0
    assert rows[("speech", "H20")].unlimited  # no quota row on H20: the pool's capacity
    html = client_as("alice").get("/fair-share/").content.decode()
    assert 'data-tenant="vision"' in html and 'data-tenant="speech"' not in html
    assert '<td class="num" data-col="borrowed">8</td>' in html
    data = api_as("admin").get("/api/v1/fair-share/").json()
    assert {(r["tenant"], r["gpu_type"], r["borrowed"]) for r in data} >= {
        ("vision", "H800", 8),
        ("speech", "H800", 0),
    }
    assert "/fair-share/" in client_as("alice").get("/quotas/").content.decode()
    # the quotas page loads the card (htmx); its link, followed without JavaScript, is a
    # page with the site's navigation (it was the bare card, unstyled)
    assert "<title>Fair share · RollMux</title>" in html and 'aria-label="Main"' in html
    card = client_as("alice").get("/fair-share/", HTTP_HX_REQUEST="true").content.decode()
    assert card.startswith('<div id="fair-share-card">') and "<title>" not in card
    assert '<td class="num" data-col="borrowed">8</td>' in card


def test_metrics_export_share_borrowed_and_preemptions(client, world):
    from rollmux_web import metrics

    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, max_gpus=16, borrowing_limit=16)
    make_job(world, name="big", train_gpus=24, status=JobStatus.RUNNING)
    metrics.PREEMPTIONS.labels("reclaim").inc()
    samples = {}
    for family in text_string_to_metric_families(client.get("/metrics").content.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    key = (("gpu_type", "H800"), ("tenant", "vision"))
    assert samples[("rollmux_tenant_borrowed_gpus", key)] == 8
    assert samples[("rollmux_tenant_nominal_gpus", key)] == 16
    assert ("rollmux_tenant_share", key) in samples
    assert samples[("rollmux_quota_gpus_limit", key)] == 32  # nominal + borrowing
    assert samples[("rollmux_preemptions_total", (("reason", "reclaim"),))] >= 1


# --- preemption in the planning pass ---------------------------------------------------------------


@pytest.mark.parametrize("case", ["borrower", "gold", "young"])
def test_a_pass_marks_a_borrower_to_yield_but_never_gold_or_a_young_job(world, settings, case):
    from rollmux_web import ports
    from rollmux_web.audit.models import AuditEntry
    from rollmux_web.workflow.services import planning
    from tests.workers.builders import NoTriggers, Recorder

    settings.ROLLMUX_PREEMPT_MIN_RUN_S = 3600.0 if case == "young" else 0.0
    settings.ROLLMUX_PREEMPT_GRACE_S = 0.0
    if case == "gold":
        SloClass.objects.filter(name="gold").update(preemptible=False)
    for tenant in (world.vision, world.speech):
        for gt in (world.h20, world.h800):
            borrow = 16 if tenant == world.vision else 0
            Quota.objects.create(tenant=tenant, gpu_type=gt, max_gpus=16, borrowing_limit=borrow)
    slo = world.gold if case == "gold" else world.silver
    # 1,500 GB resident on 2,048 GB nodes: the two jobs never share a node
    big = {"host_mem_gb": 1500.0, "slo_class": slo}
    with ports.override(dispatcher=Recorder(), triggers=NoTriggers()):
        borrower = make_job(world, name="borrower", rollout_gpus=32, train_gpus=32, **big)
        assert planning.queue_plan().placed == [borrower.pk]
        newcomer = make_job(
            world,
            name="newcomer",
            tenant=world.speech,
            submitter=world.charlie,
            host_mem_gb=1500.0,
            rollout_gpus=16,
            train_gpus=16,
        )
        assert planning.queue_plan().waiting.keys() == {newcomer.pk}
    placement = Placement.objects.get(job=borrower, ended_at__isnull=True)
    newcomer.refresh_from_db()
    if case != "borrower":
        assert placement.move_requested == "" and placement.preempted_for_id is None
        assert "will yield" not in newcomer.reason
        return
    assert placement.move_requested == "preempt" and placement.preempted_for_id == newcomer.pk
    assert placement.move_reason == (
        "for another tenant's job, which is within its tenant's nominal H20/H800 quota"
    )
    assert "1 job on borrowed capacity (or of lower priority) will yield at their next " in (
        newcomer.reason
    )
    entry = AuditEntry.objects.get(action="job.preempt_request")
    assert entry.after["for_job"] == newcomer.pk and entry.after["kind"] == "reclaim"


@pytest.mark.parametrize(("speech_lends", "admitted"), [(0, False), (None, True)])
def test_a_borrower_gets_only_what_other_tenants_lend(world, speech_lends, admitted):
    """vision holds its nominal 16 H800 GPUs and asks for 16 more; speech, idle, keeps its
    whole nominal 16 (lending limit 0) or lends all of it (no limit)."""
    from rollmux_web import ports
    from rollmux_web.workflow.services import planning
    from tests.workers.builders import NoTriggers, Recorder

    Quota.objects.create(tenant=world.vision, gpu_type=world.h800, max_gpus=16, borrowing_limit=16)
    Quota.objects.create(
        tenant=world.speech, gpu_type=world.h800, max_gpus=16, lending_limit=speech_lends
    )
    make_job(world, name="nominal", rollout_gpus=8, train_gpus=16, status=JobStatus.RUNNING)
    borrower = make_job(world, name="borrower", rollout_gpus=8, train_gpus=16)
    with ports.override(dispatcher=Recorder(), triggers=NoTriggers()):
        summary = planning.queue_plan()
    assert (summary.placed == [borrower.pk]) is admitted
    borrower.refresh_from_db()
    if not admitted:
        assert borrower.status == JobStatus.QUEUED
        assert (
            "would borrow 16 H800 GPUs beyond its tenant's nominal quota of 16" in borrower.reason
        )
        assert "0 are not kept by other tenants" in borrower.reason


def test_decayed_usage_with_the_closed_hours_kept_is_every_phase_decayed(
    world, settings, monkeypatch
):
    # the closed hours are summed once and kept (issue 25, /quotas/ and /metrics at a
    # fleet's size); the figure is still every phase's GPU-seconds decayed from the last end
    # of its tenant, node list and hour: reads at later times, the kept hours reused, equal
    # the plain sum over the rows
    settings.ROLLMUX_FAIR_SHARE_HALF_LIFE_S = 3 * 3600.0  # a window of 30 hours
    job = make_job(world, status=JobStatus.COMPLETED)
    placement = Placement.objects.create(
        job=job, group=ExecutionGroup.objects.create(), strategy="new_group"
    )
    for i, ago in enumerate((60, 1500, 4000, 7300, 20000, 50000, 100000, 107990, 120000)):
        nodes = ["h800-0"] if i % 2 else ["h800-0", "h20-0"]
        _phase(job, placement, ended_ago_s=ago, length_s=600 + 37 * i, nodes=nodes)
    running = PhaseRecord.objects.filter(job=job).order_by("-finished_at").first()
    PhaseRecord.objects.filter(pk=running.pk).update(finished_at=None, state="running")
    node = {
        name: (gt, gpus)
        for name, gt, gpus in fairshare.Node.objects.values_list("name", "gpu_type__name", "gpus")
    }

    def plain(now):
        h = settings.ROLLMUX_FAIR_SHARE_HALF_LIFE_S
        since = now - timedelta(seconds=fairshare.HALF_LIVES_READ * h)
        samples = {}
        for rows in fairshare._hour_sums(since, None, node).values():
            for _tenant, gt, end_s, gpu_s in rows:
                samples.setdefault(gt, []).append((min(end_s, now.timestamp()), gpu_s))
        for name in running.node_names:
            gt, gpus = node[name]
            busy = now.timestamp() - running.started_at.timestamp()
            samples.setdefault(gt, []).append((now.timestamp(), gpus * busy))
        return {gt: fairshare.decayed_usage(s, now.timestamp(), h) for gt, s in samples.items()}

    now = timezone.now()
    # a first read keeps every closed hour; later reads the few closed since, or the whole
    # window again when more than FILL_HOURS are missing
    for fill in (fairshare.FILL_HOURS, 4):
        monkeypatch.setattr(fairshare, "FILL_HOURS", fill)
        fairshare.clear_usage_cache()
        for later in (0, 1, 1800, 3 * 3600 + 5, 8 * 3600):  # the window moves, hours drop out
            at = now + timedelta(seconds=later)
            got = fairshare.usage_gpu_s(at)["vision"]
            want = plain(at)
            assert set(got) == set(want) == {"H800", "H20"}
            for gt in want:
                assert got[gt] == pytest.approx(want[gt], rel=1e-12), (fill, later, gt)
        kept = next(iter(fairshare._closed_hours.values()))
        assert len(kept) >= min(fill * 5, 20)  # (kept: a window of 30 hours, 28 closed)
