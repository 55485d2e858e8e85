"""No import cycle between the modules of any package in ``packages/*/src``.

A cycle (``a`` imports ``b`` imports ``a``, at module level or inside a function) means neither
module can be read, tested or moved without the other; it is how a package's layers dissolve.
Imports are read with ``ast`` from the sources: module-level and function-level (lazy) imports
count, imports under ``if TYPE_CHECKING:`` do not (they never run). An import of a package's
name resolves to the submodule when there is one (``from . import _spool``), else to the
package's ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(p for p in (ROOT / "packages").glob("*/src/*") if (p / "__init__.py").is_file())


def _module_name(package: Path, path: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of import nodes that sit under ``if TYPE_CHECKING:``."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        name = getattr(test, "id", None) or getattr(test, "attr", None)
        if name == "TYPE_CHECKING":
            skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    return skipped


def _imports(package: Path, path: Path, modules: set[str]) -> set[str]:
    """The modules of ``package`` that ``path`` imports (resolved as the docstring says)."""
    me = _module_name(package, path)
    here = me if path.name == "__init__.py" else me.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_only(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = here.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            found |= {
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            }
    return {m for m in found if m in modules and m != me}


def _graph(package: Path) -> dict[str, set[str]]:
    paths = [p for p in package.rglob("*.py") if "__pycache__" not in p.parts]
    modules = {_module_name(package, p) for p in paths}
    return {_module_name(package, p): _imports(package, p, modules) for p in paths}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_no_import_cycle_between_modules(package):
    graph = _graph(package)
    cycles = _cycles(graph)
    edges = sum(len(v) for v in graph.values())
    print(
        f"{package.name}: {len(graph)} modules, {edges} imports between them, {len(cycles)} cycles"
    )
    assert not cycles, f"{package.name} has import cycles: " + "; ".join(
        " <-> ".join(c) for c in cycles
    )


def test_the_check_finds_a_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n"
    )
    assert _cycles(_graph(pkg)) == [["pkg.a", "pkg.sub.b"]]
    assert "pkg.a" not in _graph(pkg)["pkg.c"]  # under TYPE_CHECKING: no edge
