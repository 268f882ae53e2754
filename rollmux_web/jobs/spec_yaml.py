"""Read a job spec file (YAML, or JSON as YAML's subset) without letting it stall the reader.

A spec is one flat mapping of about sixteen fields, so a file that needs anchors and aliases,
nests deeper than a few levels or holds thousands of values is not a spec. Such files are
refused from the parser's events, before any node is built or any value validated:

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
MAX_NODES = 2_000  # a job spec has ~35 (a whole job record read from the API a few hundred)

__all__ = ["MAX_DEPTH", "MAX_NODES", "SpecFileRefused", "load_spec_text"]


class SpecFileRefused(yaml.MarkedYAMLError):
    """A spec file refused before it was built: an alias, too deep, or too many nodes."""


def _refused(*, problem: str, problem_mark: Any = None) -> SpecFileRefused:
    # (libyaml's marks are their own class, read alike: line, column)
    return SpecFileRefused(problem=problem, problem_mark=problem_mark)


class _PureLoader(yaml.SafeLoader):
    """PyYAML's pure-Python safe loader, for where libyaml is missing: its scanner reads
    ahead over every `[` or `{` that may start a key (10,000 of them took half a second
    before the first event), so the depth is checked where it opens one."""

    def _too_deep(self) -> SpecFileRefused:
        return _refused(problem=_DEEP, problem_mark=self.get_mark())

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise self._too_deep()
        super().fetch_flow_collection_start(token_class)

    def add_indent(self, column: int) -> bool:
        if len(self.indents) >= MAX_DEPTH:
            raise self._too_deep()
        return bool(super().add_indent(column))


# libyaml's parser when PyYAML has it (about 50x faster than the pure-Python one, which
# takes ~100 us a node on a busy machine: 10,000 nodes would take a second)
LOADER: type = getattr(yaml, "CSafeLoader", None) or _PureLoader
_DEEP = f"nested more than {MAX_DEPTH} levels deep; a job spec is one mapping of fields"


def _events(text: str, loader: type) -> Any:
    """Yield the events of `text`, stopping after MAX_NODES + 1 node events (the file is
    refused then: the rest need not be parsed)."""
    nodes = 0
    for event in yaml.parse(text, Loader=loader):
        yield event
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
            if nodes > MAX_NODES:
                return


def _check_events(text: str, loader: type) -> None:
    """Read the events of `text` (no node is built) and raise SpecFileRefused at the first
    alias, the first collection nested past MAX_DEPTH, the node past MAX_NODES or a key
    a mapping repeats."""
    depth = nodes = 0
    try:
        events = list(_events(text, loader))
    except yaml.MarkedYAMLError as exc:
        if "maximum nesting depth" in str(exc.problem):  # libyaml's own limit (1,000)
            raise _refused(problem=_DEEP, problem_mark=exc.problem_mark) from None
        raise
    # per open collection: None for a sequence; for a mapping, whether its next node is a
    # key and the line of each scalar key seen (YAML requires unique keys; PyYAML keeps
    # the last value of a repeated one without a word)
    open_: list[tuple[bool, dict[Any, int]] | None] = []
    for event in events:
        if isinstance(event, yaml.NodeEvent) and open_ and open_[-1] is not None:
            key_next, seen = open_[-1]
            open_[-1] = (not key_next, seen)
            if key_next and isinstance(event, yaml.ScalarEvent):
                line = event.start_mark.line + 1 if event.start_mark else 0
                if event.value in seen:
                    raise _refused(
                        problem=f"the field {event.value[:40]} is given twice (lines "
                        f"{seen[event.value]} and {line}); a spec gives each field once",
                        problem_mark=event.start_mark,
                    )
                seen[event.value] = line
        if isinstance(event, yaml.MappingStartEvent):
            open_.append((True, {}))
        elif isinstance(event, yaml.SequenceStartEvent):
            open_.append(None)
        elif isinstance(event, yaml.CollectionEndEvent) and open_:
            open_.pop()
        if isinstance(event, yaml.AliasEvent):
            raise _refused(
                problem=f"an alias (*{event.anchor}) is not allowed in a spec file "
                "(anchors and aliases can expand a small file into gigabytes)",
                problem_mark=event.start_mark,
            )
        if isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            continue
        if not isinstance(event, yaml.NodeEvent):
            continue  # stream and document boundaries
        nodes += 1
        if nodes > MAX_NODES:
            raise _refused(
                problem=f"more than {MAX_NODES:,} values; a job spec is one mapping of fields",
                problem_mark=event.start_mark,
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _refused(problem=_DEEP, problem_mark=event.start_mark)


def load_spec_text(text: str, *, loader: type | None = None) -> Any:
    """Return the document in `text` (YAML or JSON), or raise yaml.YAMLError saying why not
    and where: a syntax error, or an alias, nesting or size no spec file has (refused
    from the events, before any node is built: milliseconds, whatever the file would
    expand to). `loader` (default LOADER) is for tests of the pure-Python fallback."""
    loader = loader or LOADER
    try:
        _check_events(text, loader)
        return yaml.load(text, Loader=loader)  # noqa: S506  (a safe loader, checked above)
    except ValueError as exc:
        # a constructor's refusal, e.g. an integer of more than 4,300 digits
        raise _refused(problem=str(exc).splitlines()[0]) from None
    except RecursionError:
        # (not reached with MAX_DEPTH far below Python's stack limit; kept as a backstop)
        raise _refused(problem="nested too deeply") from None
