"""The browsable API for logged-in browsers (Accept: text/html)."""

from __future__ import annotations

from typing import Any

from rest_framework.renderers import BrowsableAPIRenderer as DRFBrowsableAPIRenderer


class BrowsableAPIRenderer(DRFBrowsableAPIRenderer):
    """DRF's renderer without the filter form: it asks every view for `get_queryset()`, which
    views that read through selectors (jobs, phases, groups) do not have, and it would show
    nothing here anyway (the API has no filter backends; filters are query parameters)."""

    def get_filter_form(self, data: Any, view: Any, request: Any) -> None:
        return None
