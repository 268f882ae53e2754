"""Custom import-linter contracts (registered in pyproject.toml, run by `make contracts`).

`acyclic_modules`: no import cycle between the modules of the given packages. The built-in
`acyclic_siblings` contract also forbids cycles between sibling *packages* (jobs imports
workflow's models, workflow imports jobs' models: no module cycle, but a package-level
one), which the `layers` contract over the apps governs instead; this one forbids what
makes an import order matter: a module that (through others) imports itself.
"""

from __future__ import annotations

from typing import Any

import grimp
from importlinter.application import contract_utils, output
from importlinter.application.contract_utils import AlertLevel
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Return the strongly connected components (size > 1) of `modules` (Tarjan, iterative)."""
    adjacency = {
        m: sorted(n for n in graph.find_modules_directly_imported_by(m) if n in modules)
        for m in modules
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            if i < len(adjacency[node]):
                work.append((node, i + 1))
                nxt = adjacency[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found)


class AcyclicModulesContract(Contract):
    """No module of `packages` imports itself through other modules of `packages`."""

    type_name = "acyclic_modules"

    packages = fields.ListField(subfield=fields.StringField())
    ignore_imports = fields.SetField(subfield=fields.ImportExpressionField(), required=False)
    unmatched_ignore_imports_alerting = fields.EnumField(AlertLevel, default=AlertLevel.ERROR)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        removal = contract_utils.remove_ignored_imports_and_report(
            graph=graph,
            ignore_imports=self.ignore_imports,  # type: ignore[arg-type]
            unmatched_alerting=self.unmatched_ignore_imports_alerting,  # type: ignore[arg-type]
        )
        modules: set[str] = set()
        for package in self.packages:  # type: ignore[attr-defined]
            modules |= {package} | graph.find_descendants(package)
        cycles = _cycles(graph, modules)
        edges = [
            [
                (a, b)
                for a in cycle
                for b in sorted(graph.find_modules_directly_imported_by(a))
                if b in cycle
            ]
            for cycle in cycles
        ]
        return ContractCheck(
            kept=not cycles,
            warnings=list(removal.warnings),
            ignored_import_count=removal.ignored_import_count,
            metadata={"cycles": cycles, "edges": edges},
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        meta: dict[str, Any] = check.metadata
        for cycle, edges in zip(meta["cycles"], meta["edges"], strict=True):
            output.print_error(f"Import cycle between {len(cycle)} modules:")
            for a, b in edges:
                output.print_error(f"  {a} -> {b}")
            output.new_line()
