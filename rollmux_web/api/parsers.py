"""The API's JSON parser: a document nested too deep for the parser is a 400, not a 500, and
NaN or Infinity (which JSON does not have, and PostgreSQL cannot store) is a 400 naming the
field that holds it."""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError, ValidationError

# a key followed by one of the constants Python's json reads but JSON does not have
_NON_FINITE_KEY = re.compile(r'"((?:[^"\\]|\\.){0,64})"\s*:\s*(-?Infinity|NaN)\b')
NON_FINITE_MESSAGE = "Must be a finite number; JSON has no {value} (got {value})."


class _NonFinite(Exception):
    def __init__(self, constant: str) -> None:
        super().__init__(constant)
        self.constant = constant


def _refuse(constant: str) -> Any:
    raise _NonFinite(constant)


def non_finite_errors(text: str, constant: str) -> dict[str, list[str]]:
    """Return an error per key whose value is NaN, Infinity or -Infinity in `text` (the
    first constant, in the whole document, when no key holds one: inside a list)."""
    errors: dict[str, list[str]] = {}
    for match in _NON_FINITE_KEY.finditer(text):
        errors.setdefault(match.group(1), [NON_FINITE_MESSAGE.format(value=match.group(2))])
    return errors or {"non_field_errors": [NON_FINITE_MESSAGE.format(value=constant)]}


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = parsers.get_encoding(parser_context or {})
        try:
            text = codecs.getreader(encoding)(stream).read()
            return json.loads(text, parse_constant=_refuse)
        except _NonFinite as exc:
            raise ValidationError(non_finite_errors(text, exc.constant)) from None
        except RecursionError:
            # json's decoder recurses once per nesting level: 1,000 `[` in 2 KB exhaust the
            # stack. No request of this API nests more than a few levels.
            raise ParseError("JSON parse error - the document is nested too deeply.") from None
        except ValueError as exc:  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
            raise ParseError(f"JSON parse error - {exc}") from None
