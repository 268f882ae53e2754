"""Input helpers shared by the API views: names that refer to rows, and text query parameters.

PostgreSQL text cannot hold NUL bytes: a lookup with one raises DataError (a 500), so
every name from a client is checked before it reaches a query.
"""

from __future__ import annotations

import math
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


def _encodable(value: str) -> None:
    # Lone surrogates decode from JSON but cannot be stored (or even sent) as UTF-8.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise serializers.ValidationError("Contains characters that are not valid UTF-8.") from None


class Utf8CharField(serializers.CharField):
    """A text field that refuses what cannot be stored as UTF-8 (lone surrogates)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("validators", []).append(_encodable)
        super().__init__(**kwargs)


class _Strict:
    """Reject JSON booleans where a number is expected (DRF would coerce True to 1)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool):
            self.fail("invalid")  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc]


class StrictIntegerField(_Strict, serializers.IntegerField):
    pass


class StrictFloatField(_Strict, serializers.FloatField):
    """A number field that says why NaN and Infinity are refused ("nan" in a form, `.inf`
    in a YAML spec file, 1e999 in JSON), in words naming the value."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str) and len(data) <= self.MAX_STRING_LENGTH:
            try:
                parsed: Any = float(data)
            except ValueError:
                parsed = None
        else:
            parsed = data
        if isinstance(parsed, float) and not math.isfinite(parsed):
            raise serializers.ValidationError(
                f"Must be a finite number, got {data if isinstance(data, str) else parsed}."
            )
        return super().to_internal_value(data)


def query_choice(params: Any, name: str, choices: list[str]) -> str | None:
    """Return a query parameter that must be one of `choices` (the schema's enum), or None
    when absent or empty; another value is a 400 naming the parameter and the choices."""
    value = query_text(params, name)
    if value is not None and value not in choices:
        raise serializers.ValidationError(
            {name: [f"Must be one of {', '.join(choices)}; got {value!r}."]}
        )
    return value
