"""Input helpers shared by the API views: names that refer to rows, and text query parameters.

PostgreSQL text cannot hold NUL bytes: a lookup with one raises DataError (a 500), so
every name from a client is checked before it reaches a query.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from rollmux_web.formatting import unknown_key

NUL_MESSAGE = "Null characters are not allowed."
# What an HTML form sends beside its fields (the browsable API's forms): Django's CSRF
# token is the form's transport, never an unknown field of the record
FORM_TRANSPORT_FIELDS = frozenset({"csrfmiddlewaretoken"})


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

    # (the form's word for an empty required field, not DRF's "may not be blank")
    default_error_messages = {"blank": "This field is required."}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("validators", []).append(_encodable)
        super().__init__(**kwargs)


class _Strict:
    """Reject JSON booleans where a number is expected (DRF would coerce True to 1)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool):
            self.fail("invalid")  # type: ignore[attr-defined]
        if isinstance(data, str) and not data.strip():
            self.fail("required")  # type: ignore[attr-defined]  # (an empty form field)
        return super().to_internal_value(data)  # type: ignore[misc]


# One wording for a bad number wherever a field is shown: Django's form words ("Enter a
# number.") and the app's own ("Must be at least 1 (GPUs).") rather than DRF's ("A valid
# number is required.", "Ensure this value is greater than or equal to 1.") beside them.
NUMBER_MESSAGES = {
    "min_value": "Must be at least {min_value}.",
    "max_value": "Must be at most {max_value}.",
    "max_string_length": "The number is too long.",
}


class StrictIntegerField(_Strict, serializers.IntegerField):
    default_error_messages = {"invalid": "Enter a whole number.", **NUMBER_MESSAGES}


class StrictFloatField(_Strict, serializers.FloatField):
    """A number field that says why NaN and Infinity are refused ("nan" in a form, `.inf`
    in a YAML spec file, 1e999 in JSON), in words naming the value."""

    default_error_messages = {"invalid": "Enter a number.", **NUMBER_MESSAGES}

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


class KnownFieldsMixin:
    """Refuse a body with a field the serializer does not have, naming it and the closest
    writable field ("weigth: Unknown field; did you mean weight?") in the job spec's words
    (`formatting.unknown_key`): DRF drops such a field, so a misspelt setting was
    answered 200 and changed nothing. Read-only fields (`id`, `usage`, ...) are still
    ignored, so a record read from the API can be edited and sent back. A JSON boolean for
    a float field is refused too (DRF's FloatField takes `true` as 1.0; its IntegerField
    and DecimalField already refuse it)."""

    def to_internal_value(self, data: Any) -> Any:
        errors: dict[str, list[str]] = {}
        if isinstance(data, Mapping):
            fields = self.fields  # type: ignore[attr-defined]
            writable = [n for n, f in fields.items() if not f.read_only]
            for key in data:
                name = str(key)
                if name in FORM_TRANSPORT_FIELDS:
                    continue
                if name in fields:
                    field = fields[name]
                    if isinstance(field, serializers.FloatField) and isinstance(data[key], bool):
                        errors[name] = [str(field.error_messages["invalid"])]
                    continue
                shown, message = unknown_key(name, writable)
                errors[shown] = message
        try:
            value = super().to_internal_value(data)  # type: ignore[misc]
        except serializers.ValidationError as exc:
            if errors and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **errors}) from None
            raise
        if errors:
            raise serializers.ValidationError(errors)
        return value
