"""``nox -s tests`` runs every package's tests and fails after the last, listing every failure.

The first failing package used to stop the session: gpt-models' suite never ran after a
paramspec-sharding failure.
"""

from __future__ import annotations

import nox_helpers as h
import pytest
from nox.command import CommandFailed

FAILED = (
    '<testsuites><testsuite><testcase classname="packages.{pkg}.tests.test_a" name="test_{x}">'
    '<failure message="boom"/></testcase></testsuite></testsuites>'
)


class _Session:
    """What pytest_each uses of a nox session: each run's pytest fails for the packages named."""

    name, posargs = "tests", []

    def __init__(self, failing: dict[str, str]) -> None:
        self.failing, self.ran = failing, []

    def run(self, *args: str, env: object = None, external: bool = False) -> None:
        folder = args[2 + len(h.PYTEST)]  # python -m PYTEST FOLDER ...
        self.ran.append(folder)
        report = next(a for a in args if a.startswith("--junitxml=")).partition("=")[2]
        pkg = folder.split("/")[1] if folder.startswith("packages/") else folder
        if pkg in self.failing:
            with open(report, "w") as f:
                f.write(FAILED.format(pkg=pkg, x=self.failing[pkg]))
            raise CommandFailed("pytest")

    def error(self, message: str) -> None:
        raise RuntimeError(message)


def test_every_folder_runs_and_every_failure_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(h, "session_dir", lambda session: tmp_path)
    session = _Session({"paramspec-sharding": "two_processes", "gpt-models": "resume"})
    folders = [f"packages/{p}/tests" for p in ("core-primitives", "paramspec-sharding",
                                                "gpt-models")] + ["integration_tests"]  # fmt: skip
    with pytest.raises(RuntimeError) as failed:
        h.pytest_each(session, "python", [[f] for f in folders])
    assert session.ran == folders  # the runs after the first failure happened
    assert str(failed.value) == (
        "2 test(s) failed, in 4 pytest runs:\n"
        "  packages/paramspec-sharding/tests/test_a.py::test_two_processes\n"
        "  packages/gpt-models/tests/test_a.py::test_resume"
    )
    h.pytest_each(_Session({}), "python", [[f] for f in folders])  # all passed: no error
