"""Every check a contributor or CI runs: `uv run nox -s <session>` (`uv run nox -l` lists them).

CPU by default. Accelerator variants of `integration` install the matching JAX extra and run
only where such a device exists (`integration_gpu`, `integration_tpu`).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = [
    "tests",
    "integration",
    "integration_newest",
    "lint",
    "typecheck",
    "docs",
    "wheels",
]

ROOT = Path(__file__).parent
PACKAGES = ["core-primitives", "lox-logging", "blox-params", "paramspec-sharding", "gpt-models"]
IMPORT_NAMES = {
    "core-primitives": "core_primitives",
    "lox-logging": "lox",
    "blox-params": "blox",
    "paramspec-sharding": "paramspec",
    "gpt-models": "gpt_models",
}
# Third-party packages some tests use beyond a package's own dependencies.
TEST_EXTRAS = {
    "core-primitives": [],
    "lox-logging": ["wandb", "hypothesis>=6.100"],
    "blox-params": ["optax", "orbax-checkpoint", "treescope"],
    "paramspec-sharding": ["orbax-checkpoint"],
    "gpt-models": ["wandb"],
}
TEST_TOOLS = ["pytest>=8", "pytest-timeout>=2.3"]
JAX_MATRIX = ["0.7.2", "0.8.3", "0.9.2", "0.10.2"]
PYTEST = ["pytest", "-q", "--timeout=900", "-p", "no:cacheprovider"]
ENV = {
    "WANDB_MODE": "disabled",
    "JAX_PLATFORMS": "cpu",
    "UV_SYSTEM_CERTS": "1",
    "UV_PYTHON_DOWNLOADS": "never",
}


def _sync(session: nox.Session, *groups: str) -> None:
    """Install the locked workspace into the session's venv."""
    args = ["uv", "sync", "--locked", "--all-packages", "--no-default-groups"]
    for g in groups:
        args += ["--group", g]
    session.run_install(
        *args, env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location}, external=True
    )


def _test_dirs() -> list[str]:
    # A package whose tests folder is not in git yet (empty) is reported, not a usage error.
    dirs = [f"packages/{p}/tests" for p in PACKAGES]
    missing = [d for d in dirs if not list((ROOT / d).glob("test_*.py"))]
    if missing:
        print(f"nox: no tests yet in {missing}", file=sys.stderr)
    return [d for d in dirs if d not in missing]


@nox.session
def tests(session: nox.Session) -> None:
    """Each package's tests, then the integration tests, on the locked JAX."""
    _sync(session, "dev")
    for d in _test_dirs():
        session.run(*PYTEST, d, *session.posargs, env=ENV)
    session.run(*PYTEST, "integration_tests", *session.posargs, env=ENV)


def _matrix_install(session: nox.Session, jax_spec: list[str]) -> None:
    editable = [a for p in PACKAGES for a in ("-e", f"packages/{p}")]
    extras = sorted({x for xs in TEST_EXTRAS.values() for x in xs})
    session.install(*editable, *jax_spec, *extras, *TEST_TOOLS)


def _run_all_tests(session: nox.Session) -> None:
    session.run("python", "-c", "import jax; print('JAX', jax.__version__)", env=ENV)
    for d in [*_test_dirs(), "integration_tests"]:
        session.run(*PYTEST, d, *session.posargs, env=ENV)


@nox.session(python="3.11")
@nox.parametrize("jax", JAX_MATRIX)
def integration(session: nox.Session, jax: str) -> None:
    """All tests against one JAX version of the supported matrix (CPU)."""
    _matrix_install(session, [f"jax=={jax}", f"jaxlib=={jax}"])
    _run_all_tests(session)


def _python_at_least_312() -> str | None:
    """An interpreter >= 3.12 on this machine, or None (newest JAX needs one)."""
    candidates = [shutil.which(f"python3.{m}") for m in (14, 13, 12)]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")))
    for c in filter(None, candidates):
        probe = "import sys; assert sys.version_info >= (3, 12)"
        if subprocess.run([c, "-c", probe], capture_output=True).returncode == 0:
            return c
    return None


def _uv() -> str:
    # nox puts its uv on PATH only for sessions with a venv; `uv run nox` exports the running uv.
    return os.environ.get("UV") or shutil.which("uv") or "uv"


@nox.session(python=False)
def integration_newest(session: nox.Session) -> None:
    """All tests against the newest JAX release (needs Python >= 3.12; skipped without one)."""
    python = _python_at_least_312()
    if python is None:
        session.skip("no Python >= 3.12 interpreter on this machine: the newest JAX needs one")
    venv = ROOT / ".nox" / "integration_newest-venv"
    session.run(_uv(), "venv", "--clear", "-q", "-p", python, str(venv), external=True)
    pyexe = str(venv / "bin" / "python")
    editable = [a for p in PACKAGES for a in ("-e", f"packages/{p}")]
    extras = sorted({x for xs in TEST_EXTRAS.values() for x in xs})
    session.run(
        _uv(),
        "pip",
        "install",
        "-q",
        "-p",
        pyexe,
        *editable,
        "jax",
        "jaxlib",
        *extras,
        *TEST_TOOLS,
        external=True,
    )
    session.run(pyexe, "-c", "import jax; print('JAX', jax.__version__)", external=True)
    for d in [*_test_dirs(), "integration_tests"]:
        session.run(pyexe, "-m", *PYTEST, d, *session.posargs, env=ENV, external=True)


def _accelerator_present(kind: str) -> bool:
    if kind == "gpu":
        return shutil.which("nvidia-smi") is not None
    return bool(glob.glob("/dev/accel*")) or bool(glob.glob("/dev/vfio/*"))


@nox.session(python="3.11")
@nox.parametrize("extra", ["cuda12", "cuda13"])
def integration_gpu(session: nox.Session, extra: str) -> None:
    """All tests on a GPU with `jax[cudaXX]` (skipped where no NVIDIA GPU is present)."""
    if not _accelerator_present("gpu"):
        session.skip("no NVIDIA GPU on this machine (nvidia-smi not found)")
    _matrix_install(session, [f"jax[{extra}]"])
    session.run("python", "-c", "import jax; assert jax.default_backend() == 'gpu'")
    env = {**ENV, "JAX_PLATFORMS": ""}
    for d in [*_test_dirs(), "integration_tests"]:
        session.run(*PYTEST, d, *session.posargs, env=env)


@nox.session(python="3.11")
def integration_tpu(session: nox.Session) -> None:
    """All tests on a TPU with `jax[tpu]` (skipped where no TPU is present)."""
    if not _accelerator_present("tpu"):
        session.skip("no TPU on this machine")
    _matrix_install(session, ["jax[tpu]"])
    env = {**ENV, "JAX_PLATFORMS": ""}
    for d in [*_test_dirs(), "integration_tests"]:
        session.run(*PYTEST, d, *session.posargs, env=env)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    _sync(session, "dev")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over every package's sources."""
    _sync(session, "dev")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site and run every doctest (docstrings and docs pages)."""
    _sync(session, "dev", "docs")
    session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"))
    srcs = [f"packages/{p}/src" for p in PACKAGES]
    session.run(*PYTEST, "--doctest-modules", *srcs, env=ENV)
    session.run(*PYTEST, "--doctest-glob=*.md", "docs", "README.md", env=ENV)


@nox.session(python="3.11", reuse_venv=False)
def wheels(session: nox.Session) -> None:
    """Build every wheel; install each alone (siblings from the local wheels) and run its tests."""
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run("uv", "build", "--all-packages", "--wheel", "-o", str(dist), external=True)
    tmp = Path(session.create_tmp())
    for pkg in PACKAGES:
        _check_wheel(session, pkg, dist, tmp)


def _check_wheel(session: nox.Session, pkg: str, dist: Path, tmp: Path) -> None:
    venv = tmp / f"venv-{pkg}"
    session.run("uv", "venv", "--clear", "-q", "-p", sys.executable, str(venv), external=True)
    py = str(venv / "bin" / "python")
    (wheel,) = dist.glob(f"{pkg.replace('-', '_')}-*.whl")
    # uv caches a --find-links wheel by its file name and never re-reads it, so a rebuilt wheel of
    # an unchanged version (always the case here) would install the copy cached by an earlier run.
    # Refreshing our own packages makes every install read the wheels this session just built.
    refresh = [arg for name in PACKAGES for arg in ("--refresh-package", name)]
    install = ["uv", "pip", "install", "-q", "-p", py, "--find-links", str(dist), *refresh]
    session.run(*install, str(wheel), external=True)
    if pkg == "core-primitives":
        session.run(py, str(ROOT / ".ci" / "check_core_deps.py"), external=True)
    session.run(*install, *TEST_EXTRAS[pkg], *TEST_TOOLS, external=True)
    session.run(py, str(ROOT / ".ci" / "check_installed_wheels.py"), str(dist), external=True)
    # Run the tests from a copy outside the source tree so only the installed wheel is importable.
    tests = tmp / f"tests-{pkg}"
    shutil.rmtree(tests, ignore_errors=True)
    shutil.copytree(ROOT / "packages" / pkg / "tests", tests)
    session.run(py, "-m", *PYTEST, str(tests), env=ENV, external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """Run every benchmark; each writes its RESULTS.md table next to its script."""
    _sync(session, "dev")
    for script in sorted(glob.glob(str(ROOT / "benchmarks" / "*" / "run.py"))):
        session.run("python", script, *session.posargs, env=ENV)
