"""Query-string helpers shared by the list pages: a bad value is named, never ignored."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator


def choice(params: Any, name: str, allowed: Sequence[str], default: str, errors: list[str]) -> str:
    """Return params[name] if it is one of `allowed` (or empty: the default); else note the
    error ("name: 'x' is not one of a, b.") and return the default."""
    value = params.get(name) or default
    if value in allowed:
        return str(value)
    # ("" in `allowed` is "any": left out, or the message would read "not one of , a, b")
    named = ", ".join(a for a in allowed if a) + (" (or empty: any)" if "" in allowed else "")
    errors.append(f"{name}: {value!r} is not one of {named}.")
    return default


def page_of(items: Any, per_page: int, params: Any, errors: list[str]) -> Page[Any]:
    """Return the requested page (?page=N); a bad or out-of-range N is noted and page 1 shown."""
    paginator = Paginator(items, per_page)
    raw = params.get("page") or "1"
    try:
        return paginator.page(raw)
    except (PageNotAnInteger, EmptyPage):
        errors.append(f"page: {raw!r} is not a page (1 to {paginator.num_pages}).")
        return paginator.page(1)
