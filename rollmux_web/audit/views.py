"""Audit pages for admins: a filtered, paginated list and a CSV export."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render

from rollmux_web.accounts.decorators import role_required
from rollmux_web.audit import selectors
from rollmux_web.audit.selectors import AuditFilters
from rollmux_web.listing import page_of
from rollmux_web.spreadsheet import csv_safe

PAGE_SIZE = 50
CSV_COLUMNS = ["at", "actor", "action", "object_type", "object_id", "tenant", "before", "after"]


def _filters(request: HttpRequest) -> tuple[AuditFilters, dict[str, list[str]]]:
    try:
        return selectors.parse_filters(request.GET), {}
    except ValidationError as exc:
        return AuditFilters(), exc.message_dict


@role_required(admin=True)
def audit_page(request: HttpRequest) -> HttpResponse:
    filters, bad = _filters(request)
    errors = [f"{field}: {msgs[0]}" for field, msgs in bad.items()]
    # a page that is not one is named and page 1 shown, as on every list
    page = page_of(selectors.audit_list(filters), PAGE_SIZE, request.GET, errors)
    rows = [(e, selectors.changed_fields(e)) for e in page.object_list]
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "page": page,
        "rows": rows,
        "filters": request.GET,
        "errors": errors,
        "actions": selectors.audit_actions(),
        "query": query.urlencode(),
    }
    template = "audit/index.html#audit-table" if request.htmx else "audit/index.html"  # type: ignore[attr-defined]
    return render(request, template, context, status=400 if errors else 200)


class _Echo:
    def write(self, value: str) -> str:
        return value


@role_required(admin=True)
def audit_export(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """Stream the filtered audit log as CSV (before/after as JSON)."""
    filters, errors = _filters(request)
    if errors:
        return HttpResponse(
            "; ".join(f"{k}: {v[0]}" for k, v in errors.items()),
            status=400,
            content_type="text/plain",
        )
    writer = csv.writer(_Echo())

    def rows() -> Iterator[str]:
        yield writer.writerow(CSV_COLUMNS)
        for e in selectors.audit_list(filters).iterator(chunk_size=2000):
            yield writer.writerow(
                [
                    e.at.isoformat(),
                    csv_safe(e.actor_name),
                    e.action,
                    e.object_type,
                    csv_safe(e.object_id),
                    csv_safe(e.tenant),
                    csv_safe(json.dumps(e.before, sort_keys=True)) if e.before is not None else "",
                    csv_safe(json.dumps(e.after, sort_keys=True)) if e.after is not None else "",
                ]
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="rollmux-audit.csv"'
    return response
