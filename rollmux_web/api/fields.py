"""Input helpers shared by the API views: names that refer to rows, and text query parameters.

PostgreSQL text cannot hold NUL bytes: a lookup with one raises DataError (a 500), so
every name from a client is checked before it reaches a query.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

NUL_MESSAGE = "Null characters are not allowed."


class NameRelatedField(serializers.SlugRelatedField):
    """A foreign key given by its name; malformed names are a field error, never a 500."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("slug_field", "name")
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid")
        if "\x00" in data:
            raise serializers.ValidationError(NUL_MESSAGE)
        return super().to_internal_value(data)


def query_text(params: Any, name: str) -> str | None:
    """Return a text query parameter (None when absent or empty); NUL bytes are a 400."""
    value = params.get(name)
    if not value:
        return None
    if "\x00" in value:
        raise serializers.ValidationError({name: [NUL_MESSAGE]})
    return str(value)
