"""A bad window on a group's or a job's timeline names its field (QA pass 10): the page
said "'soon' is not a date and time" or "the window ends before it starts" without saying
which of the two boxes (start, end) was wrong, while the cost and SLO pages' range errors
and the selector's own error ("start: ...") name it. The page still shows the message and
the default window (tests/reports/test_timeline.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.reports.test_timeline import interleaved

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("start=soon", "start: 'soon' is not a date and time"),
        ("end=9999-99-99", "end: '9999-99-99' is not a date and time"),
        (
            "start=2026-03-10T01:00:00&end=2026-03-10T00:00:00",
            "end: the window ends before it starts",
        ),
        ("start=2020-01-01T00:00:00&end=2026-03-10T00:00:00", "end: the window is longer than"),
    ],
)
def test_a_bad_window_names_its_field_on_both_timelines(
    world: Any, client_as: Any, query: str, message: str
) -> None:
    g, a, _ = interleaved(world)
    client = client_as("alice")
    for url in (f"/groups/{g.pk}/", f"/timeline/jobs/{a.pk}/"):
        resp = client.get(f"{url}?{query}")
        assert resp.status_code == 200
        html = resp.content.decode().replace("&#x27;", "'")
        assert f'<p class="error" role="alert">{message}' in html, (url, html[:3000])
