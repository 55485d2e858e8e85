"""The test files the noxfile names (WHEEL_TESTS) exist: a renamed test must not drop out silently."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _literal(name: str):
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"noxfile.py defines no {name}")


def test_every_wheel_test_file_exists():
    missing = [
        f"packages/{pkg}/tests/{f}"
        for pkg, files in _literal("WHEEL_TESTS").items()
        for f in files
        if not (ROOT / "packages" / pkg / "tests" / f).is_file()
    ]
    assert missing == []
