"""How the sessions of ``noxfile.py`` do their work: interpreters, venvs, installs, pytest runs.

The noxfile says *what* runs *where* (its tables and its list of sessions); this module says how.
It never imports the noxfile: the tables come in as arguments. Sessions that need a Python nox
cannot find (pyenv's interpreters are not on nox's search path) run with ``venv_backend="none"``
and build their own venv here, with the interpreter :func:`find_python` found.

A missing interpreter follows nox's own rule for ``--error-on-missing-interpreters``: an error
where the ``CI`` environment variable is set (GitHub sets it; so does ``.ci/run``), a skip (or,
for ``tests``, the newest Python there is) elsewhere.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.markers import Marker

if TYPE_CHECKING:
    import nox

ROOT = Path(__file__).resolve().parent.parent
PYTEST = ["pytest", "-q", "--timeout=900", "-p", "no:cacheprovider", "--durations=15"]
# PYTHONDONTWRITEBYTECODE empty: every process a test starts reads the bytecode the first one wrote
# (with it set, as some CI images do, each start compiles JAX's sources again: 2.4 s instead of
# 0.75 s for `import jax` here). No persistent compilation cache: XLA:CPU crashed in CI on JAX 0.12
# loading an executable it had written itself (docs/decisions.md, "CI time, 2026-12-02").
ENV = {
    "WANDB_MODE": "disabled",
    "JAX_PLATFORMS": "cpu",
    "UV_SYSTEM_CERTS": "1",
    "UV_PYTHON_DOWNLOADS": "never",
    "PYTHONDONTWRITEBYTECODE": "",
}


# --- interpreters --------------------------------------------------------------------------------


def find_python(version: str) -> str | None:
    """An interpreter of Python ``version`` (``"3.13"``) on this machine, or ``None``.

    Looks on ``PATH``, then in pyenv's versions (a pyenv shim answers only for the version pyenv
    selects, so the shim alone is not enough), then among uv's own installs. Each candidate is
    run to check its version.
    """
    candidates = [shutil.which(f"python{version}")]
    pyenv = os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")
    candidates += sorted(glob.glob(pyenv), reverse=True)  # newest patch release first
    managed = subprocess.run(
        [uv(), "python", "find", "--python-preference", "only-managed", version],
        capture_output=True, text=True, env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
    )  # fmt: skip
    candidates.append(managed.stdout.strip() if managed.returncode == 0 else None)
    probe = "import sys; print('%d.%d' % sys.version_info[:2])"
    for c in filter(None, candidates):
        found = subprocess.run([c, "-c", probe], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == version:
            return c
    return None


def _missing(version: str, why: str) -> str:
    return (
        f"no Python {version} on this machine ({why}). Install it (pyenv install {version}, or "
        f"uv python install {version}) to run this session"
    )


def ci() -> bool:
    """Whether this is a CI run (nox's own test for ``--error-on-missing-interpreters``)."""
    return bool(os.environ.get("CI"))


def newest_python(session: nox.Session, versions: Sequence[str]) -> str:
    """The interpreter of the first of ``versions`` installed (under CI: the first, or an error)."""
    for version in versions:
        found = find_python(version)
        if found is not None:
            if version != versions[0]:
                session.warn(f"{_missing(versions[0], 'the newest supported')}; on {version}.")
            return found
        if ci():
            session.error(_missing(version, "CI tests the newest supported Python"))
    session.error(f"none of Python {', '.join(versions)} is installed")
    raise AssertionError  # session.error raises


def session_dir(session: nox.Session) -> Path:
    """``.nox/<session>``: where a session without a nox-made venv keeps its own."""
    return ROOT / ".nox" / re.sub(r"[^\w.]+", "-", session.name).strip("-")


def matrix_venv(session: nox.Session, version: str, why: str) -> str:
    """A fresh venv of Python ``version`` (``python`` path); a skip, or under CI an error, if
    that Python is not installed."""
    python = find_python(version)
    if python is None:
        (session.error if ci() else session.skip)(_missing(version, why))
    return make_venv(session, python)  # type: ignore[arg-type]


def uv() -> str:
    # nox puts its uv on PATH only for sessions with a venv; `uv run nox` exports the running uv.
    return os.environ.get("UV") or shutil.which("uv") or "uv"


def make_venv(session: nox.Session, python: str, name: str = "venv") -> str:
    """A fresh venv of interpreter ``python`` in the session's folder; returns its ``python``."""
    venv = session_dir(session) / name
    session.run(uv(), "venv", "--clear", "-q", "-p", python, str(venv), external=True)
    return str(venv / "bin" / "python")


def pip_install(session: nox.Session, python: str, *args: str) -> None:
    session.run(uv(), "pip", "install", "-q", "-p", python, *args, external=True)


# --- the lock ------------------------------------------------------------------------------------


def sync_locked(session: nox.Session, venv: str | Path, *groups: str, python: str | None = None
                ) -> None:  # fmt: skip
    """Install the locked workspace (and the dependency ``groups``) into the venv at ``venv``."""
    args = [uv(), "sync", "--locked", "--all-packages", "--no-default-groups"]
    args += [a for g in groups for a in ("--group", g)]
    args += ["--python", python] if python else []
    # VIRTUAL_ENV too: under `uv run nox` it names the tool venv, and uv warns that it differs.
    env = {"UV_PROJECT_ENVIRONMENT": str(venv), "VIRTUAL_ENV": str(venv)}
    session.run_install(*args, env=env, external=True)


def locked_version(name: str, python: str = "3.11") -> str:
    """The version ``uv.lock`` pins for package ``name`` on Python ``python`` (Linux).

    The lock holds one version per interpreter range where they differ (JAX 0.10.2 for 3.11,
    0.12 from 3.12).

    Example:
        >>> locked_version("jax", "3.11") != locked_version("jax", "3.13")
        True
    """
    env = {"python_version": python, "python_full_version": f"{python}.99", "sys_platform": "linux",
           "platform_system": "Linux", "implementation_name": "cpython"}  # fmt: skip
    for package in tomllib.loads((ROOT / "uv.lock").read_text())["package"]:
        if package["name"] != name:
            continue
        markers = package.get("resolution-markers", [])
        if not markers or any(Marker(m).evaluate(env) for m in markers):
            return package["version"]
    raise LookupError(f"uv.lock pins no {name} for Python {python}")


# --- tests ---------------------------------------------------------------------------------------


def workers() -> list[str]:
    """pytest-xdist's arguments for one worker per CPU (at most 4), or ``[]`` on one CPU.

    ``worksteal``: each worker starts on a contiguous share of the collection (so a module's
    fixtures are mostly made once) and takes from the others' ends when it runs out. Not
    ``loadfile``: when a worker crashed in the last file to hand out, xdist 3.8's loadfile
    scheduler waited forever (reproduced with a test that kills its own worker); a segfault in
    XLA:CPU did that to a CI run, which then ran out of time.

    Example:
        >>> args = workers()
        >>> args == [] or (args[0], args[2:]) == ("-n", ["--dist", "worksteal"])
        True
    """
    n = min(4, os.cpu_count() or 1)
    return [] if n < 2 else ["-n", str(n), "--dist", "worksteal"]


def pytest(session: nox.Session, python: str, *args: str) -> None:
    """Run pytest with the CI environment in the venv of ``python`` (``"python"``: the session's)."""
    external = python != "python"
    session.run(python, "-m", *PYTEST, *args, *session.posargs, env=ENV, external=external)


def pytest_each(session: nox.Session, python: str, groups: Sequence[Sequence[str]]) -> None:
    """Run pytest on each group of arguments in turn (one folder each), and only after the last
    fail, naming every failed test of every group: a failure in one package's tests must not
    keep the others from running and being reported.
    """
    from nox.command import CommandFailed

    reports = session_dir(session) / "junit"
    reports.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    for i, args in enumerate(groups):
        report = reports / f"{i}.xml"
        report.unlink(missing_ok=True)
        try:
            pytest(session, python, *args, f"--junitxml={report}")
        except CommandFailed:
            failed += failed_tests(report) or [f"{' '.join(args)}: pytest failed before testing"]
    if failed:
        listed = "\n".join(f"  {name}" for name in failed)
        session.error(f"{len(failed)} test(s) failed, in {len(groups)} pytest runs:\n{listed}")


def failed_tests(report: Path) -> list[str]:
    """``path::test`` of each failed or erroring test in a pytest JUnit XML report ([] if none).

    Example:
        >>> import tempfile
        >>> xml = ('<testsuites><testsuite><testcase classname="tests.test_a" name="test_x">'
        ...        '<failure message="boom"/></testcase><testcase classname="tests.test_a" '
        ...        'name="test_y"/></testsuite></testsuites>')
        >>> path = Path(tempfile.mkdtemp()) / "r.xml"
        >>> _ = path.write_text(xml)
        >>> failed_tests(path)
        ['tests/test_a.py::test_x']
    """
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError):
        return []
    return [
        f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        for case in root.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]


def print_jax(session: nox.Session, python: str) -> str:
    """Log the venv's Python and JAX versions; return the JAX version."""
    probe = "import sys, jax; print('Python', sys.version.split()[0], 'JAX', jax.__version__)"
    out = session.run(python, "-c", probe, env=ENV, external=python != "python", silent=True)
    session.log(str(out).strip())
    return str(out).split()[-1]


def package_test_dirs(packages: Sequence[str]) -> list[str]:
    """Each package's tests folder (one without tests yet is reported and left out)."""
    dirs = [f"packages/{p}/tests" for p in packages]
    missing = [d for d in dirs if not list((ROOT / d).glob("test_*.py"))]
    if missing:
        print(f"nox: no tests yet in {missing}", file=sys.stderr)
    return [d for d in dirs if d not in missing]


def existing_tests(patterns: Iterable[str]) -> list[list[str]]:
    """The files ``patterns`` match, one list per folder (each folder runs in its own pytest).

    A pattern that matches nothing is left out, not an error.
    """
    groups: dict[str, list[str]] = {}
    for pattern in patterns:
        for path in sorted(glob.glob(pattern, root_dir=ROOT)):
            folder = path if (ROOT / path).is_dir() else str(Path(path).parent)
            groups.setdefault(folder, []).append(path)
    return list(groups.values())


def with_matrix_tests(pkg: str, picked: list[str], matrix: Iterable[str]) -> list[str]:
    """``picked`` (test file names of ``pkg``) and ``pkg``'s files among the ``matrix`` patterns;
    ``[]`` (every test) stays ``[]``.

    Example:
        >>> with_matrix_tests("lox-logging", ["test_save.py"], ["packages/*/tests/test_public_api.py"])
        ['test_save.py', 'test_public_api.py']
        >>> with_matrix_tests("core-primitives", [], ["packages/*/tests/test_public_api.py"])
        []
    """
    if not picked:
        return []
    prefix = f"packages/{pkg}/tests/"
    found = (p for m in matrix for p in sorted(glob.glob(m, root_dir=ROOT)) if p.startswith(prefix))
    return list(dict.fromkeys([*picked, *(p.removeprefix(prefix) for p in found)]))


def editable(packages: Sequence[str], extras: dict[str, list[str]]) -> list[str]:
    """Every package editable and every test extra: a matrix venv's install arguments."""
    every_extra = sorted({x for xs in extras.values() for x in xs})
    return [*(a for p in packages for a in ("-e", f"packages/{p}")), *every_extra]


# --- floors --------------------------------------------------------------------------------------


def pyproject(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def requirements(pkg: str) -> list[str]:
    """A package's dependencies and the dependencies of every extra it declares."""
    project = pyproject(ROOT / "packages" / pkg / "pyproject.toml")["project"]
    extras = project.get("optional-dependencies", {})
    return [*project.get("dependencies", []), *(r for rs in extras.values() for r in rs)]


def req_name(req: str) -> str:
    for sep in (";", "[", "<", ">", "=", "!", "~"):
        req = req.split(sep)[0]
    return req.strip()


def _is_sibling(req: str, packages: Sequence[str]) -> bool:
    return req_name(req).lower().replace("_", "-") in packages


def with_siblings(pkg: str, packages: Sequence[str]) -> list[str]:
    """The package and every workspace package it needs, dependencies first."""
    order: list[str] = []

    def visit(p: str) -> None:
        for req in requirements(p):
            if _is_sibling(req, packages):
                visit(req_name(req))
        if p not in order:
            order.append(p)

    visit(pkg)
    return order


def dev_bound(session: nox.Session, name: str) -> str:
    """The root dev group's requirement for a third-party test dependency (it carries the floor)."""
    for req in pyproject(ROOT / "pyproject.toml")["dependency-groups"]["dev"]:
        if req_name(req).lower() == name.lower():
            return req
    session.error(
        f"test dependency {name!r} has no requirement in the root pyproject's dev group: add "
        f"`{name}>=X` there so `nox -s floors` installs (and checks) its floor"
    )
    raise AssertionError  # session.error raises


def install_at_floors(session: nox.Session, python: str, pkg: str, packages: Sequence[str],
                      test_extras: list[str], tools: list[str], jax: str) -> None:  # fmt: skip
    """``pkg``, its siblings (editable, every extra) and its test dependencies at their floors,
    JAX at ``jax``; then ``.ci/check_floors.py`` fails where uv had to go above a floor."""
    first_party = with_siblings(pkg, packages)
    reqs = [r for p in first_party for r in requirements(p) if not _is_sibling(r, packages)]
    provided = {req_name(r).lower() for r in reqs}
    tests = [dev_bound(session, x) for x in test_extras if x.lower() not in provided]
    args = []
    for p in first_party:
        extras = pyproject(ROOT / "packages" / p / "pyproject.toml")["project"]
        names = ",".join(extras.get("optional-dependencies", {}))
        args += ["-e", f"packages/{p}[{names}]" if names else f"packages/{p}"]
    pins = [f"jax=={jax}", f"jaxlib=={jax}"]
    pip_install(session, python, "--resolution", "lowest-direct", *args, *pins, *tests, *tools)
    check = str(ROOT / ".ci" / "check_floors.py")
    session.run(python, check, *reqs, *tests, *tools, external=True)


def dev_tools_at_floors(session: nox.Session, python: str, packages: Sequence[str]) -> None:
    """ruff, mypy and nox at their floors lint and type-check the tree."""
    dev = pyproject(ROOT / "pyproject.toml")["dependency-groups"]["dev"]
    tools = [r for r in dev if req_name(r) in ("ruff", "mypy", "nox")]
    args = [a for p in packages for a in ("-e", f"packages/{p}")]
    pip_install(session, python, "--resolution", "lowest-direct", *tools, *args)
    session.run(python, str(ROOT / ".ci" / "check_floors.py"), *tools, external=True)
    for tool in (["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"],
                 ["nox", "--list"]):  # fmt: skip
        session.run(python, "-m", *tool, external=True)


# --- accelerators --------------------------------------------------------------------------------


def require_accelerator(session: nox.Session, kind: str) -> None:
    if kind == "gpu" and shutil.which("nvidia-smi") is None:
        session.error(
            "no NVIDIA GPU on this machine (nvidia-smi not found): run this on a GPU runner"
        )
    if kind == "tpu" and not (glob.glob("/dev/accel*") or glob.glob("/dev/vfio/*")):
        session.error(
            "no TPU on this machine (no /dev/accel* or /dev/vfio/*): run this on a TPU VM"
        )


def accelerator_env(kind: str) -> dict[str, str]:
    # JAX_PLATFORMS="" lets JAX pick the accelerator; the root conftest only sets it when unset. The
    # tests compare float32 results tightly, as on CPU: no TF32/bf16 passes in float32 matmuls.
    return {**ENV, "JAX_PLATFORMS": "", "JAX_DEFAULT_MATMUL_PRECISION": "highest"}


def check_accelerator_seen(session: nox.Session, kind: str) -> None:
    probe = (
        f"import jax; b = jax.default_backend(); assert b == {kind!r}, f'JAX sees {{b}}, not {kind}'; "
        "print(jax.__version__, jax.device_count(), 'x', jax.devices()[0].device_kind)"
    )
    session.run("python", "-c", probe, env=accelerator_env(kind))


# --- wheels --------------------------------------------------------------------------------------


def check_wheel(session: nox.Session, pkg: str, packages: Sequence[str], dist: Path, tmp: Path,
                extras: list[str], tools: list[str], picked: list[str]) -> None:  # fmt: skip
    """Install ``pkg``'s wheel alone (siblings from ``dist``) and run ``picked`` of its tests
    (every test when empty) from a copy outside the source tree."""
    venv = tmp / f"venv-{pkg}"
    session.run("uv", "venv", "--clear", "-q", "-p", sys.executable, str(venv), external=True)
    py = str(venv / "bin" / "python")
    (wheel,) = dist.glob(f"{pkg.replace('-', '_')}-*.whl")
    # uv caches a --find-links wheel by its file name and never re-reads it, so a rebuilt wheel of
    # an unchanged version (always the case here) would install the copy cached by an earlier run.
    # Refreshing our own packages makes every install read the wheels this session just built.
    refresh = [arg for name in packages for arg in ("--refresh-package", name)]
    install = ["uv", "pip", "install", "-q", "-p", py, "--find-links", str(dist), *refresh]
    session.run(*install, str(wheel), external=True)
    if pkg == "core-primitives":
        session.run(py, str(ROOT / ".ci" / "check_core_deps.py"), external=True)
    session.run(*install, *extras, *tools, external=True)
    session.run(py, str(ROOT / ".ci" / "check_installed_wheels.py"), str(dist), external=True)
    tests = tmp / f"tests-{pkg}"
    shutil.rmtree(tests, ignore_errors=True)
    shutil.copytree(ROOT / "packages" / pkg / "tests", tests)
    # The root conftest (the shared test environment, device-shaped meshes, `min_devices`) goes
    # above the copy, and --confcutdir makes pytest load it from there.
    shutil.copy(ROOT / "conftest.py", tmp / "conftest.py")
    paths = [str(tests / f) for f in picked] or [str(tests)]
    args = [*PYTEST, *workers(), "--confcutdir", str(tmp), *paths]
    session.run(py, "-m", *args, env=ENV, external=True)
