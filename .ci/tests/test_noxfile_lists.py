"""The test files the noxfile names (WHEEL_TESTS, FLOORS_TESTS) exist: a renamed test must not drop
out silently."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _literal(name: str):
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"noxfile.py defines no {name}")


@pytest.mark.parametrize("name", ["WHEEL_TESTS", "FLOORS_TESTS"])
def test_every_listed_test_file_exists(name):
    missing = [
        f"packages/{pkg}/tests/{f}"
        for pkg, files in _literal(name).items()
        for f in files
        if not (ROOT / "packages" / pkg / "tests" / f).is_file()
    ]
    assert missing == []


def test_floors_runs_every_package_test_the_matrix_skips_on_the_oldest_jax():
    # integration(JAX_MATRIX[0]) leaves the packages' MATRIX_TESTS to `floors` (same JAX): a
    # package with a FLOORS_TESTS sample must hold its matrix files.
    floors = _literal("FLOORS_TESTS")
    skipped = [
        path
        for pattern in _literal("MATRIX_TESTS")
        if pattern.startswith("packages/")
        for path in sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(pattern))
    ]
    assert skipped
    missing = [
        path
        for path in skipped
        if (pkg := path.split("/")[1]) in floors and path.split("/")[-1] not in floors[pkg]
    ]
    assert missing == []


def test_every_package_says_it_supports_the_pythons_ci_tests():
    # The classifiers are what PyPI shows; the noxfile's PYTHONS are what CI runs the tests on.
    import tomllib

    said = {
        pkg.name: sorted(
            c.rsplit(" :: ", 1)[1]
            for c in tomllib.loads((pkg / "pyproject.toml").read_text())["project"]["classifiers"]
            if c.startswith("Programming Language :: Python :: 3.")
        )
        for pkg in sorted((ROOT / "packages").iterdir())
        if (pkg / "pyproject.toml").is_file()
    }
    tested = sorted(_literal("PYTHONS"))
    assert said == dict.fromkeys(said, tested) and len(said) == 5


def test_every_session_python_is_a_supported_one():
    pythons = set(_literal("PYTHONS"))
    used = {*_literal("JAX_MATRIX").values(), _literal("NEWEST_JAX_PYTHON")}
    assert used <= pythons, used - pythons


def test_every_matrix_integration_test_exists_and_the_fault_suite_is_not_one():
    listed = _literal("MATRIX_INTEGRATION_TESTS")
    assert [f for f in listed if not (ROOT / f).is_file()] == []
    # The rest of integration_tests/ (the fault suite) runs in `tests` only.
    every = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "integration_tests").glob("test_*.py"))
    assert set(listed) < set(every)


_INTEROP_LIBS = {"torch", "transformers", "peft", "trl"}


def _needs_interop(node: ast.AST) -> bool:
    """Whether ``node`` calls ``pytest.importorskip`` on one of the interop libraries."""
    return any(
        isinstance(call, ast.Call)
        and getattr(call.func, "attr", None) == "importorskip"
        and call.args
        and isinstance(call.args[0], ast.Constant)
        and call.args[0].value in _INTEROP_LIBS
        for call in ast.walk(node)
    )


def _marked(node: ast.FunctionDef) -> bool:
    return any("mark.interop" in ast.unparse(d) for d in node.decorator_list)


def test_every_test_needing_torch_or_transformers_is_marked_interop_and_listed():
    # `nox -s interop` runs `-m interop` over INTEROP_TESTS only: a test that importorskips torch,
    # transformers, peft or trl without the mark, or in a file not listed, would skip everywhere.
    listed = set(_literal("INTEROP_TESTS"))
    unmarked, unlisted = [], set()
    for path in sorted(ROOT.glob("packages/*/tests/**/test_*.py")):
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.ClassDef)]
        whole_module = any(_needs_interop(n) for n in top)  # a module-level importorskip
        module_mark = any(
            isinstance(n, ast.Assign)
            and getattr(n.targets[0], "id", None) == "pytestmark"
            and "mark.interop" in ast.unparse(n.value)
            for n in top
        )
        rel = str(path.relative_to(ROOT))
        for n in ast.walk(tree):
            if not (isinstance(n, ast.FunctionDef) and n.name.startswith("test_")):
                continue
            if whole_module or _needs_interop(n):
                if not (module_mark or _marked(n)):
                    unmarked.append(f"{rel}::{n.name}")
                if rel not in listed:
                    unlisted.add(rel)
    assert unmarked == [], "add @pytest.mark.interop to these tests"
    assert sorted(unlisted) == [], "add these files to INTEROP_TESTS in noxfile.py"
    assert listed <= {str(p.relative_to(ROOT)) for p in ROOT.glob("packages/*/tests/**/*.py")}
