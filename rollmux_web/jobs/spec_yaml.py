"""Read a job spec file (YAML, or JSON as YAML's subset) without letting it stall the reader.

A spec is one flat mapping of about sixteen fields, so a file that needs anchors and aliases,
nests deeper than a few levels or holds thousands of values is not a spec. Such files are
refused while they are read, before any value is built or validated:

- an alias (`*a`) is refused at the first one: a 520-byte "billion laughs" file expands into
  9^9 list items once its aliases are followed (the field checks then stringified it for
  minutes); without aliases a document holds at most one node per few bytes of its text;
- nesting deeper than MAX_DEPTH is refused before PyYAML's composer recurses into it (10,000
  levels exhausted Python's stack: a RecursionError, a 500);
- more than MAX_NODES nodes are refused, so the time to read a file is bounded however
  large the upload limit is.

Stdlib and PyYAML only, so every reader of spec files (the upload page, the CLI, wherever
either lives) calls the same `load_spec_text`. Its errors are `yaml.MarkedYAMLError`s with
the line and column, worded like PyYAML's own (`jobs.spec.parse_error_text` prints both).
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 20
MAX_NODES = 10_000

__all__ = ["MAX_DEPTH", "MAX_NODES", "SpecFileRefused", "load_spec_text"]


class SpecFileRefused(yaml.MarkedYAMLError):
    """A spec file refused before it was built: an alias, too deep, or too many nodes."""


class _GuardedLoader(yaml.SafeLoader):
    """PyYAML's safe loader whose composer refuses aliases, depth and size as it goes."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def _too_deep(self) -> SpecFileRefused:
        return SpecFileRefused(
            problem=f"nested more than {MAX_DEPTH} levels deep; a job spec is one mapping of "
            "fields",
            problem_mark=self.get_mark(),
        )

    # The scanner reads ahead over every `[` or `{` that may start a key (each has to be
    # remembered, so 10,000 of them took half a second before the composer saw the first):
    # the depth is checked where the scanner opens a flow collection or a block indentation.
    def fetch_flow_collection_start(self, token_class: Any) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise self._too_deep()
        super().fetch_flow_collection_start(token_class)

    def add_indent(self, column: int) -> bool:
        if len(self.indents) >= MAX_DEPTH:
            raise self._too_deep()
        return bool(super().add_indent(column))

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise SpecFileRefused(
                problem=f"an alias (*{event.anchor}) is not allowed in a spec file "
                "(anchors and aliases can expand a small file into gigabytes)",
                problem_mark=event.start_mark,
            )
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise SpecFileRefused(
                problem=f"more than {MAX_NODES:,} values; a job spec is one mapping of fields",
                problem_mark=event.start_mark,
            )
        collection = isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent)
        if collection:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise self._too_deep()
        try:
            return super().compose_node(parent, index)
        finally:
            if collection:
                self._depth -= 1


def load_spec_text(text: str) -> Any:
    """Return the document in `text` (YAML or JSON), or raise yaml.YAMLError saying why not
    and where: a syntax error, or an alias, nesting or size no spec file has (refused
    before anything is built, in milliseconds whatever the file would expand to)."""
    loader = _GuardedLoader(text)
    try:
        return loader.get_single_data()
    except ValueError as exc:
        # a constructor's refusal, e.g. an integer of more than 4,300 digits
        raise SpecFileRefused(problem=str(exc).splitlines()[0]) from None
    except RecursionError:
        # (not reached with MAX_DEPTH far below Python's stack limit; kept as a backstop)
        raise SpecFileRefused(problem="nested too deeply") from None
    finally:
        loader.dispose()
