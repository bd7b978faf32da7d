"""The layering rules of DESIGN.md, read from the source: every import counts, function-local
ones included. Passes and lowering never import the runtime, the runtime never imports the
torch.export machinery, and no fxdeploy module imports its way back to itself."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import ROOT

PACKAGE = ROOT / "fxdeploy"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = _modules()


def _owner(name: str) -> str:
    """The deepest fxdeploy module ``name`` lies in (``a.b.func`` -> ``a.b``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports(module: str) -> set[str]:
    """Every module ``module`` imports, anywhere in its source; fxdeploy ones resolved to modules."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*kept, base] if base else kept)
            for alias in node.names:  # a submodule by name is an edge to it; any other name, to base
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {_owner(name) or name for name in found}


GRAPH = {module: {m for m in imports(module) if m in MODULES and m != module} for module in MODULES}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in GRAPH:
        if root in index:
            continue
        work = [(root, iter(sorted(GRAPH[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
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
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(GRAPH[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _breaking(layer: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    return {
        module: sorted(m for m in imports(module) if any(_inside(m, f) for f in forbidden))
        for module in MODULES
        if _inside(module, layer) and any(any(_inside(m, f) for f in forbidden) for m in imports(module))
    }


def test_no_import_cycles() -> None:
    assert _cycles() == []


def test_passes_never_import_the_runtime() -> None:
    assert _breaking("fxdeploy.passes", ("fxdeploy.runtime",)) == {}


def test_lowering_never_imports_the_runtime() -> None:
    assert _breaking("fxdeploy.lowering", ("fxdeploy.runtime",)) == {}


def test_the_runtime_never_imports_the_export_machinery() -> None:
    machinery = ("torch.export", "torch._dynamo", "fxdeploy.capture", "fxdeploy.passes", "fxdeploy.lowering",
                 "fxdeploy.partition.cut", "fxdeploy.partition.host_nodes")
    assert _breaking("fxdeploy.runtime", machinery) == {}


def test_the_checker_sees_a_cycle_and_a_local_import() -> None:
    """The rules above can fail: a function-local import is an edge, and a cycle is found."""
    assert "fxdeploy.targets.builtin" in GRAPH["fxdeploy.targets"]  # imported inside _ensure_loaded
    GRAPH["fxdeploy.errors"].add("fxdeploy.api")  # errors -> api -> ... -> errors
    try:
        assert any("fxdeploy.errors" in component for component in _cycles())
    finally:
        GRAPH["fxdeploy.errors"].discard("fxdeploy.api")


LONG_FUNCTIONS = {("fxdeploy.ops.greedy", "greedy_keep")}
"""NMS kernels kept whole, each saying why in its docstring ("stays one function")."""


def _sizes() -> tuple[dict[str, int], dict[tuple[str, str], ast.FunctionDef | ast.AsyncFunctionDef]]:
    lines, long = {}, {}
    for module, path in MODULES.items():
        source = path.read_text(encoding="utf-8")
        lines[module] = len(source.splitlines())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                long[(module, node.name)] = node
    return lines, long


def test_modules_and_functions_stay_small() -> None:
    """No module over 300 lines, no function over 60 but the NMS kernels, at most 8 top-level modules."""
    lines, long = _sizes()
    assert {m: n for m, n in lines.items() if n > 300} == {}
    assert set(long) <= LONG_FUNCTIONS, sorted(set(long) - LONG_FUNCTIONS)
    for key in LONG_FUNCTIONS & set(long):
        assert "stays one function" in (ast.get_docstring(long[key]) or ""), key
    top = [path for path in PACKAGE.glob("*.py")]
    assert len(top) <= 8, sorted(p.name for p in top)
