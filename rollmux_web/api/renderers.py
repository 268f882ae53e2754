"""The API's renderers: JSON with tidy floats, and the browsable API for logged-in
browsers (Accept: text/html)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rest_framework.renderers import BrowsableAPIRenderer as DRFBrowsableAPIRenderer
from rest_framework.renderers import JSONRenderer as DRFJSONRenderer


class BrowsableAPIRenderer(DRFBrowsableAPIRenderer):
    """DRF's renderer without the filter form: it asks every view for `get_queryset()`, which
    views that read through selectors (jobs, phases, groups) do not have, and it would show
    nothing here anyway (the API has no filter backends; filters are query parameters)."""

    def get_filter_form(self, data: Any, view: Any, request: Any) -> None:
        return None


SIGNIFICANT_DIGITS = 12


def tidy_floats(data: Any) -> Any:
    """Return `data` with every float rounded to 12 significant digits: 57.04, not the
    57.040000000000006 binary arithmetic leaves (a profiled time is wall-clock x time
    scale). Twelve digits keep every figure the app measures (microseconds over years)."""
    if isinstance(data, float):
        return float(f"{data:.{SIGNIFICANT_DIGITS}g}") if math.isfinite(data) else data
    if isinstance(data, dict):
        return {k: tidy_floats(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [tidy_floats(v) for v in data]
    return data


class JSONRenderer(DRFJSONRenderer):
    """DRF's JSON renderer, floats tidied first (`tidy_floats`): every API response."""

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        return super().render(tidy_floats(data), accepted_media_type, renderer_context)
