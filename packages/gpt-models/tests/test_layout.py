"""gpt_models' private subpackages form layers: a module imports only its own layer and the ones below.

The layers, bottom to top (each subpackage's ``__init__`` docstring says the same):
``_errors`` < ``_config`` < ``_data``, ``_distributed`` < ``_model`` < ``_runs`` < ``_training`` < ``_cli``.
Imports are read from the installed sources with ``ast``, function-level (lazy) imports included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gpt_models

PACKAGE = Path(gpt_models.__file__).parent
LAYERS = {
    "_errors": 0,
    "_config": 1,
    "_data": 2,
    "_distributed": 2,
    "_model": 3,
    "_runs": 4,
    "_training": 5,
    "_cli": 6,
}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _room(path: Path) -> str | None:
    """The top-level private subpackage (or ``_errors``) a module lives in; None for the package root."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0] if parts[0] in LAYERS else None


def _imported_rooms(path: Path) -> set[str]:
    """Rooms imported by relative imports anywhere in ``path`` (lazy imports count)."""
    depth = len(path.relative_to(PACKAGE).parts) - 1  # 0 for a root module, 1 inside a subpackage
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        if node.level == depth + 1:  # relative to the package root
            names = [node.module] if node.module else [a.name for a in node.names]
            rooms |= {n.split(".")[0] for n in names}
        elif node.level <= depth:  # inside its own subpackage
            rooms.add(path.relative_to(PACKAGE).parts[0])
    return rooms


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_higher_layer(path):
    room = _room(path)
    if room is None:  # __init__ and __main__ assemble the public API from every layer
        return
    higher = {r for r in _imported_rooms(path) if r in LAYERS and LAYERS[r] > LAYERS[room]}
    assert not higher, f"{path.relative_to(PACKAGE)} (layer {LAYERS[room]}) imports {higher}"


def test_every_module_lives_in_a_room():
    loose = [
        p.name
        for p in PACKAGE.glob("*.py")
        if p.stem not in ("__init__", "__main__") and p.stem not in LAYERS
    ]
    assert not loose, f"modules outside the layered subpackages: {loose}"
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name.startswith("_")} - {
        "__pycache__"
    }
    assert rooms <= set(LAYERS), f"subpackages without a layer: {rooms - set(LAYERS)}"


def test_each_room_says_what_it_may_import():
    for room, layer in LAYERS.items():
        init = PACKAGE / room / "__init__.py"
        if not init.exists():
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert f"Layer {layer}" in doc and "import" in doc, room


@pytest.mark.parametrize("room", [r for r in LAYERS if (PACKAGE / r).is_dir()])
def test_each_room_names_its_modules(room):
    init = PACKAGE / room / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    unnamed = [
        p.name for p in sorted((PACKAGE / room).glob("*.py")) if p.name != "__init__.py"
        and f"``{p.name}``" not in doc
    ]  # fmt: skip
    assert not unnamed, f"{room}/__init__.py's docstring does not say what {unnamed} hold"
