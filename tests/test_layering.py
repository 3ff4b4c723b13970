"""Runyard's imports run one way: no two files import each other, even through others,
and no two parts (a top-level package's sub-package, or one of its modules) do. The
import-linter contracts in pyproject.toml say which way; this says there is one. Both run
in ``make lint``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

import grimp

PACKAGES = ("contract", "runtime", "libraries", "provisioning", "service", "worker", "runyard")
Graph = dict[str, set[str]]


def _imports(part: Callable[[str], str]) -> Graph:
    """Who imports whom, each module named by ``part``; imports made only for type
    checkers are not imports."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None, exclude_type_checking_imports=True)
    edges: Graph = defaultdict(set)
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if part(module) != part(imported):
                edges[part(module)].add(part(imported))
    return edges


def circles(edges: Graph) -> list[list[str]]:
    """The groups of nodes that reach each other (Tarjan's strongly connected components,
    iterative: a deep chain of imports must not hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(iter(targets), None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(edges.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def _part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_two_files_import_each_other() -> None:
    assert circles(_imports(lambda module: module)) == []


def test_no_two_parts_import_each_other() -> None:
    assert circles(_imports(_part)) == []


def test_a_circle_is_found_however_long() -> None:
    chain = {"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": {"b"}, "e": {"a"}}
    assert circles(chain) == [["b", "c", "d"]]
    assert circles({"a": {"b"}, "b": set()}) == []
