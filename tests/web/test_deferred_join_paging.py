"""Pages of a list at a fleet's size (issue 25): a page found on its ids first
(`listing.DeferredJoinPaginator`) holds the same rows, in the same order, as the plain
offset page, for every page, ordering and orphan count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.paginator import Paginator

from rollmux_web.jobs.models import Job
from rollmux_web.jobs.selectors import job_list
from rollmux_web.listing import DeferredJoinPaginator
from tests.reports.builders import make_job


@pytest.mark.django_db
def test_a_page_found_on_its_ids_is_the_offset_page(world: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(DeferredJoinPaginator, "deep_from", 0)  # every page found on ids
    t = datetime(2026, 3, 1, tzinfo=UTC)
    for i in range(11):
        job = make_job(world, name=f"j{i % 4}", tenant="vision" if i % 3 else "speech")
        # equal submission times in pairs: the ordering's tie-break (id) decides
        Job.objects.filter(pk=job.pk).update(submitted_at=t + timedelta(minutes=i // 2))
    for ordering in ("-submitted", "name", "-status", "id"):
        qs = job_list(user=world.admin, ordering=ordering)
        for per_page, orphans in ((3, 0), (4, 1), (50, 0)):
            plain = Paginator(qs, per_page, orphans=orphans)
            deferred = DeferredJoinPaginator(qs, per_page, orphans=orphans)
            assert deferred.num_pages == plain.num_pages
            for n in plain.page_range:
                got = list(deferred.page(n))
                assert [j.pk for j in got] == [j.pk for j in plain.page(n)], (ordering, n)
                # the rows come with what the list's queryset selects and prefetches
                assert all(j.tenant.name and hasattr(j, "placements_newest_first") for j in got)
    # not a model queryset: paged as before
    values = Job.objects.order_by("id").values_list("name", flat=True)
    assert list(DeferredJoinPaginator(values, 5).page(2)) == list(Paginator(values, 5).page(2))
