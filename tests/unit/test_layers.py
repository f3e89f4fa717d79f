"""The import graph of ``src/rlvr`` respects the layers of ``rlvr.layers``: no cycle between modules
and no import from a lower layer into a higher one.

Every ``import`` / ``from … import`` statement counts, at module level or inside a function (a lazy
import is still a dependency). An edge goes to the module imported: ``from rlvr.a import b`` is an
edge to ``rlvr.a.b`` when that is a module, else to ``rlvr.a``. A package's ``__init__`` is a module
of its own; the parent packages Python imports first are not edges. Built-ins found by name through
``rlvr.registry`` are not import statements and so not edges.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlvr.layers import LAYERS, layer_of

SRC = Path(__file__).resolve().parents[2] / "src"

# Edges allowed to break the rules for now, each with the reason and when it goes (none today).
ALLOWED: set[tuple[str, str]] = set()


def modules() -> dict[str, Path]:
    """Dotted name → file of every module under ``src/rlvr`` (a package is its ``__init__``)."""
    out = {}
    for path in sorted((SRC / "rlvr").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _target(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` (module or module.attribute) starts with."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement names (``rlvr.a.b`` for ``from rlvr.a import b``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:  # relative: resolved against the importing module's package
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    return [f"{base}.{a.name}" for a in node.names]


def import_graph() -> dict[str, dict[str, int]]:
    """module → {imported rlvr module: first line}, self-imports left out."""
    known = modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for name in _imported(node, module, path.name == "__init__.py"):
                target = _target(name, known) if name.split(".")[0] == "rlvr" else None
                if target is not None and target != module:
                    edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _allowed(graph: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {m: {t: line for t, line in edges.items() if (m, t) not in ALLOWED} for m, edges in graph.items()}


def test_every_module_has_a_layer():
    missing = []
    for module in modules():
        try:
            layer_of(module)
        except KeyError:
            missing.append(module)
    assert not missing, f"modules with no layer in rlvr.layers.LAYERS: {missing}"


def test_every_layer_key_names_a_module():
    known = {name.removeprefix("rlvr").removeprefix(".") for name in modules()}
    stale = [key for key in LAYERS if key not in known]
    assert not stale, f"rlvr.layers.LAYERS keys that name no module or package: {stale}"


def test_a_layer_is_a_folder_or_a_top_level_module():
    dotted = [key for key in LAYERS if "." in key]
    assert not dotted, f"rlvr.layers.LAYERS keys below a folder (a folder is one layer): {dotted}"


def test_no_import_cycles():
    graph = _allowed(import_graph())
    report = []
    for component in cycles(graph):
        inside = set(component)
        edges = [f"{m}:{graph[m][t]} -> {t}" for m in component for t in sorted(graph[m]) if t in inside]
        report.append("cycle of " + ", ".join(component) + ":\n    " + "\n    ".join(edges))
    assert not report, "import cycles:\n  " + "\n  ".join(report)


def test_no_import_from_a_lower_layer_into_a_higher_one():
    graph = _allowed(import_graph())
    upward = [f"{m}:{line} (layer {layer_of(m)}) -> {t} (layer {layer_of(t)})"
              for m, edges in sorted(graph.items()) for t, line in sorted(edges.items())
              if layer_of(t) > layer_of(m)]
    assert not upward, "imports into a higher layer (see rlvr.layers):\n  " + "\n  ".join(upward)


@pytest.mark.slow  # over ~2 s: not in make test-fast
def test_every_allowed_edge_is_still_needed():
    graph = import_graph()
    in_cycle = {m: i for i, component in enumerate(cycles(graph)) for m in component}
    stale = [f"{m} -> {t}" for m, t in sorted(ALLOWED)
             if t not in graph.get(m, {}) or (layer_of(t) <= layer_of(m) and
                                              (m not in in_cycle or in_cycle.get(t) != in_cycle[m]))]
    assert not stale, f"allowed edges that break no rule any more; remove them from ALLOWED: {stale}"


def test_the_check_sees_function_local_and_relative_imports():
    tree = ast.parse("def f():\n    from rlvr.train.build import build_model\nfrom . import base\n")
    names = [n for node in ast.walk(tree) for n in _imported(node, "rlvr.optim.es", False)]
    assert sorted(names) == ["rlvr.optim.base", "rlvr.train.build.build_model"]
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert cycles(graph) == [["a", "b", "c"]]
