"""The lower packages' modules import each other without circles (docs/decisions.md, the layout rule).

Every relative import counts, lazy ones inside functions and ``TYPE_CHECKING`` blocks included: a
circle means some lower module reaches up. gpt_models' layers have their own test
(packages/gpt-models/tests/test_layout.py).
"""

import ast
import importlib
from pathlib import Path

import pytest

PACKAGES = ["core_primitives", "lox", "blox", "paramspec"]


def _imports(package: str) -> dict[str, set[str]]:
    """Module name -> the sibling modules it imports (relative imports anywhere in its source)."""
    root = Path(str(importlib.import_module(package).__file__)).parent
    modules = {p.stem for p in root.glob("*.py")} - {"__init__"}
    graph: dict[str, set[str]] = {}
    for name in modules:
        found = set()
        for node in ast.walk(ast.parse((root / f"{name}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                found |= {n.split(".")[0] for n in names}
        graph[name] = found & modules - {name}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a path that returns to its start, or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once fully explored

    def walk(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":  # on the path to here: the path from it closes a circle
                return [*path[path.index(nxt) :], node, nxt]
            if nxt not in state and (found := walk(nxt, [*path, node])):
                return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := walk(start, [])):
            return found
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package):
    circle = _circle(_imports(package))
    assert circle is None, f"{package} imports in a circle: {' -> '.join(circle or [])}"


def test_a_circle_is_found():
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None
