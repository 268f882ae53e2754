"""Page-number pagination whose validation is what the OpenAPI schema says.

`page` is an integer >= 1 (a page past the end is a 404) and `page_size` an integer from 1
to MAX_PAGE_SIZE; anything else is a 400 naming the parameter, not silently the default
(DRF's behaviour), so schema-driven clients and fuzzers see the contract they were given.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination

from rollmux_web.listing import DeferredJoinPaginator

MAX_PAGE_SIZE = 500


def _int_param(request: Any, name: str, *, low: int, high: int | None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    text = str(raw).strip()
    if not (text.isascii() and text.isdigit()) or int(text) < low or (high and int(text) > high):
        bound = f"from {low} to {high}" if high else f"of at least {low}"
        raise ValidationError({name: [f"Must be an integer {bound}; got {raw!r}."]})
    return int(text)


class Pagination(PageNumberPagination):
    django_paginator_class = DeferredJoinPaginator  # a deep page walks ids, not rows
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request: Any) -> int:
        size = _int_param(request, self.page_size_query_param, low=1, high=MAX_PAGE_SIZE)
        return size if size is not None else self.page_size

    def get_page_number(self, request: Any, paginator: Any) -> Any:
        number = _int_param(request, self.page_query_param, low=1, high=None)
        return number if number is not None else 1

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        params: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        for p in params:
            if p["name"] == self.page_query_param:
                p["schema"] = {"type": "integer", "minimum": 1}
            elif p["name"] == self.page_size_query_param:
                p["schema"] = {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE}
                p["description"] = f"results per page (default {self.page_size})"
        return params
