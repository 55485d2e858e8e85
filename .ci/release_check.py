"""Refuse to publish a package whose sibling requirements no published version satisfies.

uv does not enforce version bounds between workspace members, so `gpt-models 0.2.0` needing
`lox-logging>=0.2.0` passes every test here while `pip install gpt-models` would fail for users
until lox-logging 0.2.0 is on PyPI. The release workflow runs this before publishing:

    python .ci/release_check.py DIST [DIST ...]

DISTs are the packages this run publishes. Each one's requirements on workspace siblings must be
satisfied by a version already on PyPI or one published earlier in the same run. Prints the
publication order (dependencies first) on success; exits 1 naming every unsatisfied requirement.
`unsatisfied` and `publish_order` are the testable core (see `.ci/tests/test_release_check.py`).
"""

from __future__ import annotations

import json
import sys
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent


def unsatisfied(
    requirements: Iterable[str], available: Mapping[str, Iterable[str]], siblings: Iterable[str]
) -> list[str]:
    """One message per sibling requirement that no available version satisfies.

    `available` maps a distribution name to the versions a user can install (published, or
    published earlier in this run); requirements on non-siblings (PyPI projects) are not checked.

    >>> unsatisfied(["lox-logging>=0.2,<0.3", "jax>=0.7.2"], {"lox-logging": ["0.1.0"]}, ["lox-logging"])
    ['lox-logging>=0.2,<0.3: available versions are 0.1.0; none satisfies it']
    """
    sibling_names = {canonicalize_name(s) for s in siblings}
    known = {canonicalize_name(k): list(v) for k, v in available.items()}
    problems = []
    for text in requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        if name not in sibling_names:
            continue
        versions = _parse(known.get(name, []))
        if not any(req.specifier.contains(v, prereleases=False) for v in versions):
            listed = ", ".join(str(v) for v in sorted(versions)) or "none"
            problems.append(f"{text}: available versions are {listed}; none satisfies it")
    return problems


def _parse(versions: Iterable[str]) -> list[Version]:
    parsed = []
    for v in versions:
        try:
            parsed.append(Version(v))
        except InvalidVersion:
            continue  # PyPI keeps a few legacy version strings; they cannot satisfy a bound
    return parsed


def publish_order(requires: Mapping[str, Iterable[str]]) -> list[str]:
    """The packages of `requires` (name -> sibling names it needs), dependencies first.

    >>> publish_order({"gpt-models": ["lox-logging"], "lox-logging": [], "x": ["gpt-models"]})
    ['lox-logging', 'gpt-models', 'x']
    """
    order: list[str] = []

    def visit(name: str, stack: tuple[str, ...]) -> None:
        if name in stack:
            raise ValueError(f"sibling requirements form a cycle: {' -> '.join((*stack, name))}")
        if name in order:
            return
        for dep in requires.get(name, ()):
            if dep in requires:
                visit(dep, (*stack, name))
        order.append(name)

    for name in requires:
        visit(name, ())
    return order


def _project(dist: str) -> dict:
    path = ROOT / "packages" / dist / "pyproject.toml"
    if not path.is_file():
        raise SystemExit(f"release check: {dist!r} is not a package under packages/")
    return tomllib.loads(path.read_text())["project"]


def _requirements(project: dict) -> list[str]:
    extras = project.get("optional-dependencies", {})
    return [*project.get("dependencies", []), *(r for rs in extras.values() for r in rs)]


def _pypi_versions(name: str) -> list[str]:
    """Versions of `name` on PyPI with at least one file that is not yanked ([] if none)."""
    url = f"https://pypi.org/pypi/{name}/json"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            releases = json.load(response)["releases"]
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise
    return [v for v, files in releases.items() if any(not f.get("yanked") for f in files)]


def main(dists: list[str]) -> int:
    if not dists:
        print("usage: python .ci/release_check.py DIST [DIST ...]", file=sys.stderr)
        return 2
    siblings = sorted(p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml"))
    projects = {d: _project(d) for d in dists}
    requires = {
        d: [
            canonicalize_name(Requirement(r).name)
            for r in _requirements(p)
            if canonicalize_name(Requirement(r).name) in siblings
        ]
        for d, p in projects.items()
    }
    available: dict[str, list[str]] = {}
    failed = False
    for dist in publish_order(requires):
        for dep in requires[dist]:
            if dep not in available:
                available[dep] = _pypi_versions(dep)
        problems = unsatisfied(_requirements(projects[dist]), available, siblings)
        version = projects[dist]["version"]
        for p in problems:
            failed = True
            print(
                f"release check: {dist} {version} requires {p}. Publish that sibling first "
                "(tag it in this push) or relax the bound.",
                file=sys.stderr,
            )
        # A package that passes is published in this run, before the ones that need it.
        if dist not in available:
            available[dist] = _pypi_versions(dist)
        available[dist].append(version)
    if failed:
        return 1
    print(" ".join(publish_order(requires)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
