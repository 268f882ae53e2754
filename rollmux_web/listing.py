"""Query-string helpers shared by the list pages: a bad value is named, never ignored."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator
from django.db.models import QuerySet
from django.db.models.query import ModelIterable


class DeferredJoinPaginator(Paginator):
    """A Paginator whose page of a queryset is found on its ids first, then fetched.

    A deep page (`OFFSET` 51,000 of a fleet's 102,000 jobs) made PostgreSQL read and join
    every skipped row in full (each with its tenant, submitter and class); now only the
    skipped ids are walked (the ordering's index) and the page's rows are fetched, with
    their joins and prefetches, by id. The same rows in the same order: the ids come from
    the same ordered queryset. Anything but a plain model queryset, and a page within the
    first `deep_from` rows (one query is cheaper there than two), is paged as before.
    """

    deep_from = 1000

    def page(self, number: Any) -> Page[Any]:
        qs = self.object_list
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        if bottom < self.deep_from or not (
            isinstance(qs, QuerySet)
            and qs._iterable_class is ModelIterable  # model instances, not values()
            and not qs.query.distinct
            and qs.ordered
        ):
            return super().page(number)
        top = bottom + self.per_page
        if top + self.orphans >= self.count:
            top = self.count
        ids = list(qs.values_list("pk", flat=True)[bottom:top])
        rows = {obj.pk: obj for obj in qs.filter(pk__in=ids)}
        page = [rows[i] for i in ids if i in rows]
        return self._get_page(page, number, self)  # type: ignore[attr-defined]


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


def page_of(
    items: Any, per_page: int, params: Any, errors: list[str], *, name: str = "page"
) -> Page[Any]:
    """Return the requested page (?page=N, or the parameter `name` where a page has two
    paged tables); a bad or out-of-range N is noted and page 1 shown."""
    paginator = DeferredJoinPaginator(items, per_page)
    raw = params.get(name) or "1"
    try:
        return paginator.page(raw)
    except (PageNotAnInteger, EmptyPage):
        errors.append(f"{name}: {raw!r} is not a page (1 to {paginator.num_pages}).")
        return paginator.page(1)


def requested_page(params: Any, *, name: str = "page") -> int:
    """Return the page number asked for (?page=N), 1 when it is not a whole number >= 1
    (page_counted then names the error)."""
    try:
        number = int(params.get(name) or "1")
    except ValueError:
        return 1
    return number if number >= 1 else 1


def page_counted(
    items: Sequence[Any],
    count: int,
    number: int,
    per_page: int,
    params: Any,
    errors: list[str],
    *,
    name: str = "page",
) -> Page[Any] | None:
    """Return the page `number` of `count` items whose objects on it the caller fetched
    already (`items`), as page_of would page all of them; None (the error noted, as
    page_of notes it) when the page asked for (params[name]) is not one: the caller
    shows page 1."""
    paginator = Paginator(range(count), per_page)
    raw = params.get(name) or "1"
    try:
        page = paginator.page(raw)
    except (PageNotAnInteger, EmptyPage):
        errors.append(f"{name}: {raw!r} is not a page (1 to {paginator.num_pages}).")
        return None
    if page.number != number:
        return None
    page.object_list = items
    return page
