"""Every check a contributor or CI runs: `uv run nox -s <session>` (`uv run nox -l` lists them).

CPU by default. The accelerator sessions (`integration_gpu`, `integration_tpu`, `bench_gpu`)
install the JAX extra pinned to the locked JAX and fail where no such device exists: they are
for the self-hosted runners of `.github/workflows/accelerators.yml`, not the default list.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = [
    "tests",
    "floors",
    "integration",
    "integration_newest",
    "lint",
    "typecheck",
    "docs",
    "wheels",
    "lm_eval",
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
    "lox-logging": ["wandb", "hypothesis", "pandas", "tensorboardX", "tbparse"],
    "blox-params": ["optax", "orbax-checkpoint", "treescope"],
    "paramspec-sharding": ["orbax-checkpoint"],
    "gpt-models": ["wandb", "pandas", "tensorboardX", "tbparse"],
}
TEST_TOOLS = ["pytest>=8", "pytest-timeout>=2.3.1"]
JAX_MATRIX = ["0.7.2", "0.8.3", "0.9.2", "0.10.2"]
# What the JAX-version matrix runs (`tests` runs everything on the locked JAX): the tests of code
# whose behaviour differs between JAX versions -- everything reached through core_primitives.compat
# (the interpreter, identity primitives, lox's transformations, paramspec's sharded init), the
# higher-order primitives blox re-traces (scan, shard_map, vmap'd randomness), orbax restores,
# the train step -- plus each package's public-API test as an install smoke test, and every
# integration test. A listed file that does not exist yet is left out, not an error.
MATRIX_TESTS = [
    "packages/*/tests/test_public_api.py",
    "packages/core-primitives/tests/test_interpreter.py",
    "packages/core-primitives/tests/test_threefry_lowering.py",
    "packages/lox-logging/tests/test_transforms.py",
    "packages/lox-logging/tests/test_compositions.py",
    "packages/lox-logging/tests/test_autodiff_regressions.py",
    "packages/lox-logging/tests/test_tap_order.py",
    "packages/lox-logging/tests/test_custom_derivative_sites.py",
    "packages/blox-params/tests/test_rng.py",
    "packages/blox-params/tests/test_recurrent.py",
    "packages/paramspec-sharding/tests/test_init.py",
    "packages/paramspec-sharding/tests/test_orbax.py",
    "packages/gpt-models/tests/test_checkpoint.py",
    # Every integration test but the fault suite: its kill -9 / lock / disk-full runs exercise our
    # own process handling, not JAX's (the start-up timeout was checked on 0.7.2 by hand), and at
    # several minutes each they would push CI past its time budget. `tests` runs them.
    "integration_tests/test_blox_training.py",
    "integration_tests/test_gpt_distributed.py",
    "integration_tests/test_gpt_training.py",
    "integration_tests/test_paramspec_blox.py",
]
# What `wheels` runs against each installed wheel: every test, except for blox-params and gpt-models,
# whose full suites (~3 and ~7 min here) already run in `tests` and `floors`; their wheels run the
# tests that reach what a wheel can lose (package data: the embedded corpus, presets, the CLI entry
# point, the notebook display; the layout of gpt's subpackages; the HF and prepare readers of
# files), every bad-input message, and the public API.
WHEEL_TESTS = {
    "blox-params": [
        "test_public_api.py",
        "test_bad_input.py",
        "test_display.py",
        "test_module.py",
        "test_params.py",
    ],
    "gpt-models": [
        "test_public_api.py",
        "test_layout.py",
        "test_cli.py",
        "test_tokenizer.py",
        "test_prepare.py",
        "test_hf.py",
    ],
}
# What `floors` runs of gpt-models at its dependency floors: the files that reach a third-party
# floor (orbax: checkpoints, the loop, the error log, auto-resume; optax: the step, Muon; tokenizers;
# pyarrow/zstandard: prepare; safetensors: HF; wandb/tensorboardX: logging, profiles) or a JAX API
# that moved (memory analysis, dot_product_attention), plus the public API and bad input. The rest
# (the CLI, sampling, presets, model maths) is our own code on the same JAX: `tests` runs it on the
# locked versions and the matrix's integration tests train and sample end to end on 0.7.2.
FLOORS_TESTS = {
    "gpt-models": [
        "test_public_api.py",
        "test_bad_input.py",
        "test_config.py",
        "test_data.py",
        "test_checkpoint.py",
        "test_loop.py",
        "test_run_log.py",
        "test_auto_resume.py",
        "test_train.py",
        "test_muon.py",
        "test_tokenizer.py",
        "test_bpe.py",
        "test_hf_tokenizer.py",
        "test_prepare.py",
        "test_hf.py",
        "test_logging.py",
        "test_profiling.py",
        "test_preflight.py",
        "test_attention.py",
    ],
}
CI_MODULES = ["check_floors", "release_check", "check_api_docs"]  # .ci scripts with doctests
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
    # The CI scripts' own logic (floors check, release check).
    ci = [".ci/tests", "--doctest-modules", *(f".ci/{m}.py" for m in CI_MODULES)]
    session.run(*PYTEST, *ci, env=ENV)


def _matrix_install(session: nox.Session, jax_spec: list[str]) -> None:
    editable = [a for p in PACKAGES for a in ("-e", f"packages/{p}")]
    extras = sorted({x for xs in TEST_EXTRAS.values() for x in xs})
    session.install(*editable, *jax_spec, *extras, *TEST_TOOLS)


def _matrix_test_groups() -> list[list[str]]:
    """MATRIX_TESTS that exist, one list per test folder (each folder runs in its own pytest)."""
    groups: dict[str, list[str]] = {}
    for pattern in MATRIX_TESTS:
        for path in sorted(glob.glob(pattern, root_dir=ROOT)):
            folder = path if (ROOT / path).is_dir() else str(Path(path).parent)
            groups.setdefault(folder, []).append(path)
    return list(groups.values())


def _run_matrix_tests(
    session: nox.Session, python: str = "python", floors_ran: bool = False
) -> None:
    external = python != "python"
    session.run(
        python, "-c", "import jax; print('JAX', jax.__version__)", env=ENV, external=external
    )
    for paths in _matrix_test_groups():
        if floors_ran and paths[0].startswith("packages/"):
            continue
        session.run(python, "-m", *PYTEST, *paths, *session.posargs, env=ENV, external=external)


@nox.session(python="3.11")
@nox.parametrize("jax", JAX_MATRIX)
def integration(session: nox.Session, jax: str) -> None:
    """The version-sensitive tests (MATRIX_TESTS) against one JAX version of the matrix (CPU).

    The locked JAX already runs every test in `tests`; its matrix entry only checks that the
    packages, pip-installed with the newest releases of their other dependencies, import and
    export their public API on it.
    """
    _matrix_install(session, [f"jax=={jax}", f"jaxlib=={jax}"])
    if jax == _locked_version("jax"):
        session.log(f"JAX {jax} is the locked version: `nox -s tests` runs every test on it")
        smoke = sorted(glob.glob("packages/*/tests/test_public_api.py", root_dir=ROOT))
        for path in smoke:
            session.run("python", "-m", *PYTEST, path, *session.posargs, env=ENV)
        return
    # `floors` runs every package's tests (gpt-models': FLOORS_TESTS, which hold its MATRIX_TESTS)
    # on the oldest JAX already: there the matrix adds the integration tests.
    oldest = jax == JAX_MATRIX[0]
    if oldest:
        session.log(
            f"JAX {jax}: `floors` runs the packages' tests on it; the integration tests here"
        )
    _run_matrix_tests(session, floors_ran=oldest)


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
    """MATRIX_TESTS against the newest JAX release (needs Python >= 3.12; skipped without one)."""
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
    _run_matrix_tests(session, pyexe)


# --- floors: every package at its declared lower bounds ------------------------------------------


def _pyproject(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def _requirements(pkg: str) -> list[str]:
    """A package's dependencies and the dependencies of every extra it declares."""
    project = _pyproject(ROOT / "packages" / pkg / "pyproject.toml")["project"]
    extras = project.get("optional-dependencies", {})
    return [*project.get("dependencies", []), *(r for rs in extras.values() for r in rs)]


def _req_name(req: str) -> str:
    return req.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0]


def _is_sibling(req: str) -> bool:
    return _req_name(req).strip().lower().replace("_", "-") in PACKAGES


def _with_siblings(pkg: str) -> list[str]:
    """The package and every workspace package it needs, dependencies first."""
    order: list[str] = []

    def visit(p: str) -> None:
        for req in _requirements(p):
            if _is_sibling(req):
                visit(_req_name(req).strip())
        if p not in order:
            order.append(p)

    visit(pkg)
    return order


def _dev_bound(session: nox.Session, name: str) -> str:
    """The root dev group's requirement for a third-party test dependency (it carries the floor)."""
    dev = _pyproject(ROOT / "pyproject.toml")["dependency-groups"]["dev"]
    for req in dev:
        if _req_name(req).strip().lower() == name.lower():
            return req
    session.error(
        f"test dependency {name!r} has no requirement in the root pyproject's dev group: add "
        f"`{name}>=X` there so `nox -s floors` installs (and checks) its floor"
    )
    raise AssertionError  # session.error raises


@nox.session(python=False)
def floors(session: nox.Session) -> None:
    """Each package at its declared floors (lowest-direct, JAX 0.7.2): check them, run its tests.

    One venv per package: the package and the siblings it needs (editable, every extra), its test
    dependencies at the root dev group's floors, JAX at the matrix's oldest version; every test,
    or the FLOORS_TESTS sample where a package lists one. uv resolves
    every direct requirement to its lowest version; `.ci/check_floors.py` fails when one landed
    above its declared floor (a floor nothing can reach). Then the dev tools at their floors lint
    and type-check the tree.
    """
    tmp = Path(session.create_tmp())
    oldest = JAX_MATRIX[0]
    for pkg in PACKAGES:
        venv = tmp / f"floors-{pkg}"
        session.run(_uv(), "venv", "--clear", "-q", "-p", "3.11", str(venv), external=True)
        py = str(venv / "bin" / "python")
        first_party = _with_siblings(pkg)
        reqs = [r for p in first_party for r in _requirements(p) if not _is_sibling(r)]
        provided = {_req_name(r).strip().lower() for r in reqs}
        tests = [_dev_bound(session, x) for x in TEST_EXTRAS[pkg] if x.lower() not in provided]
        editable = []
        for p in first_party:
            extras = _pyproject(ROOT / "packages" / p / "pyproject.toml")["project"]
            names = ",".join(extras.get("optional-dependencies", {}))
            editable += ["-e", f"packages/{p}[{names}]" if names else f"packages/{p}"]
        jax = [f"jax=={oldest}", f"jaxlib=={oldest}"]
        install = [_uv(), "pip", "install", "-q", "-p", py, "--resolution", "lowest-direct"]
        session.run(*install, *editable, *jax, *tests, *TEST_TOOLS, external=True)
        check = str(ROOT / ".ci" / "check_floors.py")
        session.run(py, check, *reqs, *tests, *TEST_TOOLS, external=True)
        tests_dir = f"packages/{pkg}/tests"
        picked = [f"{tests_dir}/{f}" for f in FLOORS_TESTS.get(pkg, [])] or [tests_dir]
        session.run(py, "-m", *PYTEST, *picked, *session.posargs, env=ENV, external=True)
    _dev_tools_at_floors(session, tmp)


def _dev_tools_at_floors(session: nox.Session, tmp: Path) -> None:
    dev = _pyproject(ROOT / "pyproject.toml")["dependency-groups"]["dev"]
    tools = [r for r in dev if _req_name(r).strip() in ("ruff", "mypy", "nox")]
    venv = tmp / "floors-dev-tools"
    session.run(_uv(), "venv", "--clear", "-q", "-p", "3.11", str(venv), external=True)
    py = str(venv / "bin" / "python")
    editable = [a for p in PACKAGES for a in ("-e", f"packages/{p}")]
    install = [_uv(), "pip", "install", "-q", "-p", py, "--resolution", "lowest-direct"]
    session.run(*install, *tools, *editable, external=True)
    session.run(py, str(ROOT / ".ci" / "check_floors.py"), *tools, external=True)
    session.run(py, "-m", "ruff", "check", ".", external=True)
    session.run(py, "-m", "ruff", "format", "--check", ".", external=True)
    session.run(py, "-m", "mypy", external=True)
    session.run(py, "-m", "nox", "--list", external=True)


# --- accelerators: self-hosted runners only; a missing device is a failure ----------------------


def _locked_version(name: str) -> str:
    """The version uv.lock pins for `name` (the accelerator extras use the locked JAX)."""
    for package in _pyproject(ROOT / "uv.lock")["package"]:
        if package["name"] == name:
            return package["version"]
    raise LookupError(f"{name} is not in uv.lock")


def _require_accelerator(session: nox.Session, kind: str) -> None:
    if kind == "gpu" and shutil.which("nvidia-smi") is None:
        session.error(
            "no NVIDIA GPU on this machine (nvidia-smi not found): run this on a GPU runner"
        )
    if kind == "tpu" and not (glob.glob("/dev/accel*") or glob.glob("/dev/vfio/*")):
        session.error(
            "no TPU on this machine (no /dev/accel* or /dev/vfio/*): run this on a TPU VM"
        )


def _accelerator_session(session: nox.Session, kind: str, extra: str) -> None:
    _require_accelerator(session, kind)
    jax = _locked_version("jax")
    _matrix_install(session, [f"jax[{extra}]=={jax}"])
    # JAX_PLATFORMS="" lets JAX pick the accelerator; the root conftest only sets it when unset. The
    # tests compare float32 results tightly, as on CPU: no TF32/bf16 passes in float32 matmuls.
    env = {**ENV, "JAX_PLATFORMS": "", "JAX_DEFAULT_MATMUL_PRECISION": "highest"}
    probe = (
        f"import jax; b = jax.default_backend(); assert b == {kind!r}, f'JAX sees {{b}}, not {kind}'; "
        "print(jax.__version__, jax.device_count(), 'x', jax.devices()[0].device_kind)"
    )
    session.run("python", "-c", probe, env=env)
    for d in [*_test_dirs(), "integration_tests"]:
        session.run(*PYTEST, d, *session.posargs, env=env)


@nox.session(python="3.11")
@nox.parametrize("extra", ["cuda12", "cuda13"])
def integration_gpu(session: nox.Session, extra: str) -> None:
    """Every test on the GPUs present, with `jax[cudaXX]` at the locked JAX; fails without a GPU."""
    _accelerator_session(session, "gpu", extra)


@nox.session(python="3.11")
def integration_tpu(session: nox.Session) -> None:
    """Every test on the TPU chips present, with `jax[tpu]` at the locked JAX; fails without a TPU."""
    _accelerator_session(session, "tpu", "tpu")


@nox.session(python="3.11")
def bench_gpu(session: nox.Session) -> None:
    """The gpt benchmark on one GPU (gpt2-small, bf16 compute): writes benchmarks/gpt/RESULTS-gpu.md."""
    _require_accelerator(session, "gpu")
    _matrix_install(session, [f"jax[cuda12]=={_locked_version('jax')}"])
    out = str(ROOT / "benchmarks" / "gpt" / "RESULTS-gpu.md")
    env = {**ENV, "JAX_PLATFORMS": ""}
    session.run(
        "python", str(ROOT / "benchmarks" / "gpt" / "run.py"), "--gpu-only", "--out", out, env=env
    )


@nox.session
def interop(session: nox.Session) -> None:
    """Hugging Face interop (opt-in, not in the default list: it installs torch + transformers).

    Exports trained tiny GPT-2- and Llama-shaped runs and checks transformers' logits and greedy
    tokens on them; ``-- regen`` also rewrites the golden folders under gpt-models' tests/data.
    """
    _sync(session, "dev")
    session.install("torch", "transformers")
    data = ROOT / "packages" / "gpt-models" / "tests" / "data"
    if "regen" in session.posargs:
        session.run("python", str(data / "make_hf_golden.py"), env=ENV)
    session.run("python", str(data / "check_hf_interop.py"), env=ENV)
    session.run(*PYTEST, "packages/gpt-models/tests/test_hf.py", env=ENV)


@nox.session
def lm_eval(session: nox.Session) -> None:
    """gpt-models' lm-evaluation-harness extra: its tests and doctests, with the locked lm-eval.

    Its own session because lm-eval brings ~70 packages (datasets, scikit-learn, nltk, ...) that
    no other session needs; elsewhere those tests skip and those doctests are not collected.
    Offline: the tests' tasks are local YAMLs over local JSONL files; the datasets cache lives in
    the session's temporary folder.
    """
    _sync(session, "dev", "lm-eval")
    hf_home = str(Path(session.create_tmp()) / "hf")
    env = {**ENV, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": hf_home}
    src = "packages/gpt-models/src/gpt_models/_training"
    doctests = ["--doctest-modules", f"{src}/lm_eval.py", f"{src}/lm_eval_model.py"]
    session.run(*PYTEST, "packages/gpt-models/tests/test_lm_eval.py", *doctests, env=env)


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
    session.run("python", str(ROOT / ".ci" / "check_api_docs.py"), str(ROOT / "site"))
    srcs = [f"packages/{p}/src" for p in PACKAGES]
    session.run(*PYTEST, "--doctest-modules", *srcs, env=ENV)
    readmes = sorted(glob.glob("packages/*/README.md", root_dir=ROOT))  # their PyPI pages
    session.run(*PYTEST, "--doctest-glob=*.md", "docs", "README.md", *readmes, env=ENV)


@nox.session(python="3.11", reuse_venv=False)
def wheels(session: nox.Session) -> None:
    """Build every wheel; install each alone (siblings from the local wheels), run its WHEEL_TESTS."""
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
    # The root conftest (the shared test environment, device-shaped meshes, `min_devices`) goes
    # above the copy, and --confcutdir makes pytest load it from there.
    shutil.copy(ROOT / "conftest.py", tmp / "conftest.py")
    confcut = ["--confcutdir", str(tmp)]
    picked = [str(tests / f) for f in WHEEL_TESTS.get(pkg, [])] or [str(tests)]
    session.run(py, "-m", *PYTEST, *confcut, *picked, env=ENV, external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """Run every benchmark; each writes its RESULTS.md table next to its script."""
    _sync(session, "dev")
    for script in sorted(glob.glob(str(ROOT / "benchmarks" / "*" / "run.py"))):
        session.run("python", script, *session.posargs, env=ENV)
