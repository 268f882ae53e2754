"""The API's JSON parser: a document nested too deep for the parser is a 400, not a 500."""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            # json's decoder recurses once per nesting level: 1,000 `[` in 2 KB exhaust the
            # stack. No request of this API nests more than a few levels.
            raise ParseError("JSON parse error - the document is nested too deeply.") from None
