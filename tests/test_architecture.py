"""The import graph: dependencies point down and never in a circle.

The layer rules live in pyproject.toml ([tool.importlinter]) and are checked by import-linter;
circles are found here on grimp's graph, which counts every import — at module level, inside
functions and under TYPE_CHECKING alike, since each is a dependency a reader has to follow.
"""

from __future__ import annotations

import logging
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

REPO = Path(__file__).resolve().parent.parent


def test_the_layer_contracts_hold() -> None:
    # import-linter configures logging with dictConfig, which disables every logger already made:
    # Warden's own, so a later test in this worker that reads its log (caplog) saw nothing.
    loggers = [logger for logger in logging.root.manager.loggerDict.values() if isinstance(logger, logging.Logger)]
    kept = [(logger, logger.disabled) for logger in loggers]
    try:
        status = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True)
    finally:
        for logger, disabled in kept:
            logger.disabled = disabled
    assert status == 0, "an import points up or sideways: run `.venv/bin/lint-imports` to see which"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circles() -> None:
    graph = grimp.build_graph("warden")
    # `warden/__init__.py` re-exports the public API lazily (PEP 562); modules importing the
    # package for its name are not a circle of code, so the package itself is left out.
    edges = {m: graph.find_modules_directly_imported_by(m) - {"warden"} for m in graph.modules if m != "warden"}
    assert len(edges) > 100 and "warden.bootstrap" in edges["warden.interfaces.cli.main"] | set().union(*edges.values())
    assert _cycles(edges) == []


def test_the_circle_finder_finds_circles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
