"""Fair-share pages (issue 22): the queue in planning order, and the per-tenant share table
the quotas page loads. Reads only (`workflow.fairshare`), masked for the viewer."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from rollmux_web.accounts.decorators import role_required
from rollmux_web.accounts.selectors import visible_tenants
from rollmux_web.htmx import HtmxHttpRequest
from rollmux_web.workflow import fairshare


@role_required()
def queue_page(request: HttpRequest) -> HttpResponse:
    """Every queued job's position and why; another tenant's job shows its position only."""
    rows = fairshare.queue_view(request.user, timezone.now())
    return render(request, "workflow/queue.html", {"rows": rows})


@role_required()
def share_table(request: HtmxHttpRequest) -> HttpResponse:
    """Each visible tenant's nominal, borrowed, lent, decayed usage and share per GPU type:
    the card the quotas page loads (htmx), or a page of its own (its link, without
    JavaScript)."""
    names = set(visible_tenants(request.user).values_list("name", flat=True))
    context = {
        "share_rows": fairshare.share_rows(timezone.now(), names),
        "half_life_days": settings.ROLLMUX_FAIR_SHARE_HALF_LIFE_S / 86400.0,
    }
    template = "workflow/fair_share.html" if request.htmx else "workflow/fair_share_page.html"
    return render(request, template, context)


@role_required()
def queue_position(request: HttpRequest, job_id: int) -> HttpResponse:
    """A queued job's position and why, for its job page (empty when it is not queued)."""
    from rollmux_web.workflow.access import job_get_for_user

    job = job_get_for_user(user=request.user, job_id=job_id)  # 404 for another tenant's job
    row = fairshare.position_of(job, request.user, timezone.now())
    return render(request, "workflow/queue_position.html", {"row": row})
