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
