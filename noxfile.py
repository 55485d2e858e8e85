"""Every check a contributor or CI runs: `uv run nox -s <session>` (`uv run nox -l` lists them).

Python 3.11, 3.12 and 3.13 are supported. What the default sessions run, where (CPU):

    session              Python   JAX                       tests
    tests                3.13     the locked one (0.12)     every test of every package, the
                                                            integration tests, the CI scripts'
    integration(jax=V)   per JAX_MATRIX  V                  MATRIX_TESTS (the oldest JAX:
                                                            MATRIX_INTEGRATION_TESTS, as floors
                                                            runs the packages' tests on it)
    integration_newest   3.12     the newest release        MATRIX_TESTS (and the integration tests
                                                            when it is not the locked one)
    floors               3.11     0.7.2, every dependency   every package's tests (FLOORS_TESTS
                                  at its declared floor     where a package lists a sample)
    lint, typecheck      3.11     the locked one (0.10.2)   ruff, mypy
    docs                 3.11     the locked one (0.10.2)   the site and every doctest
    wheels               3.11     the newest for 3.11       WHEEL_TESTS and MATRIX_TESTS against
                                  (0.10.2)                  each built wheel
    lm_eval              3.11     the locked one (0.10.2)   gpt-models' lm-eval extra (its own
                                                            venv: ~70 packages nothing else needs)
    next_primitives      3.13     the locked one (0.12)     NEXT_FLAG_SUITES once per JAX flag
                                                            for its next primitives (NEXT_FLAGS)
    interop              3.11     the locked one (0.10.2)   the tests marked `interop` (torch CPU,
                                                            transformers, peft: INTEROP_TESTS)

A new JAX release is one line: lock it (`uv lock --upgrade-package jax`; `tests` then runs on
it) and add the version it replaces to JAX_MATRIX, with the Python it needs.

Not in the default list: `integration_gpu`, `integration_tpu` and `bench_gpu` install the JAX
extra pinned to the locked JAX and fail where no such device exists (they are for the self-hosted
runners of `.github/workflows/accelerators.yml`);
`bench` runs the benchmarks. How the sessions work (interpreters, venvs, installs) is in
`.ci/nox_helpers.py`.
"""

from __future__ import annotations

import glob
import shutil
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent / ".ci"))
import nox_helpers as h

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
    "next_primitives",
    "interop",
]

ROOT = h.ROOT
PYTHONS = ["3.13", "3.12", "3.11"]  # supported, newest first: `tests` runs on the first found
PACKAGES = ["core-primitives", "lox-logging", "blox-params", "paramspec-sharding", "gpt-models"]
# Third-party packages some tests use beyond a package's own dependencies.
TEST_EXTRAS = {
    "core-primitives": [],
    "lox-logging": ["wandb", "hypothesis", "pandas", "tensorboardX", "tbparse"],
    "blox-params": ["optax", "orbax-checkpoint", "treescope", "hypothesis"],
    "paramspec-sharding": ["orbax-checkpoint"],
    "gpt-models": ["wandb", "pandas", "tensorboardX", "tbparse"],
}
TEST_TOOLS = ["pytest>=8", "pytest-timeout>=2.3.1", "pytest-xdist>=3.6.1"]
# The JAX versions the matrix tests besides the locked ones, each with the Python it runs on
# (JAX 0.11 and later need Python >= 3.12). The first is the oldest supported JAX: `floors` runs it.
# The newest JAX for Python 3.11 (0.10.2, the lock's there) is not listed: `wheels` installs it and
# runs MATRIX_TESTS among each wheel's tests, as do `docs`, `lint`, `typecheck` and `interop`.
JAX_MATRIX = {
    "0.7.2": "3.11",
    "0.8.3": "3.11",
    "0.9.2": "3.11",
}
NEWEST_JAX_PYTHON = "3.12"  # `integration_newest`: the Python no other session runs the tests on
# What the JAX-version matrix runs (`tests` runs everything on the locked JAX): the tests of code
# whose behaviour differs between JAX versions -- everything reached through core_primitives.compat
# (the interpreter, identity primitives, lox's transformations, paramspec's sharded init), the
# higher-order primitives blox re-traces (scan, shard_map, vmap'd randomness), orbax restores,
# the train step -- plus each package's public-API test as an install smoke test. A listed file
# that does not exist yet is left out, not an error.
MATRIX_TESTS = [
    "packages/*/tests/test_public_api.py",
    "packages/core-primitives/tests/test_interpreter.py",
    "packages/core-primitives/tests/test_threefry_lowering.py",
    "packages/core-primitives/tests/test_compat.py",
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
]
# The flows across packages: every integration test but the fault suite, whose kill -9 / lock /
# disk-full runs exercise our own process handling, not JAX's (the start-up timeout was checked
# on 0.7.2 by hand; `tests` runs them). They run on the oldest JAX of the matrix, and in
# integration_newest when the newest release is not the locked one; `tests` runs them on the
# locked JAX. The other versions run MATRIX_TESTS alone, which reach every JAX-specific path
# (each integration run is ~2 minutes of the 60-minute CI budget); Python 3.11's own JAX (0.10.2)
# runs MATRIX_TESTS and trains, samples and evaluates end to end in `wheels` (gpt-models' CLI tests
# against its wheel) and `docs` (the library's doctests).
MATRIX_INTEGRATION_TESTS = [
    "integration_tests/test_blox_training.py",
    "integration_tests/test_gpt_distributed.py",
    "integration_tests/test_gpt_training.py",
    "integration_tests/test_paramspec_blox.py",
]
# What `wheels` runs against each installed wheel: every test, except for lox-logging, blox-params
# and gpt-models, whose full suites (~1.5, ~3 and ~7 min here) already run in `tests` and `floors`;
# their wheels run the tests that reach what a wheel can lose (package data: the embedded corpus,
# presets, the CLI entry point, the notebook display; the layout of gpt's subpackages; the HF and
# prepare readers of files; lox's loggers and their optional backends), every bad-input message,
# the public API and, for lox, its transformations; beside them each package's MATRIX_TESTS, as
# this is where the newest JAX for Python 3.11 runs them (`nox_helpers.with_matrix_tests`).
WHEEL_TESTS = {
    "lox-logging": [
        "test_public_api.py",
        "test_bad_input.py",
        "test_transforms.py",
        "test_logdict.py",
        "test_loggers.py",
        "test_save.py",
        "test_export.py",
        "test_html.py",
        "test_tensorboard.py",
    ],
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
# floor (orbax: checkpoints; optax: Muon; matplotlib: a whole run's loss.png; tokenizers,
# pyarrow/zstandard: prepare and the HF tokenizer; jinja2: chat templates; safetensors: HF;
# wandb/tensorboardX: logging, profiles) or a JAX API that moved (memory analysis,
# dot_product_attention), plus the public API. The rest (the CLI, bad input, the loop, sampling,
# presets, model maths) is our own code on the same JAX: `tests` runs it on the locked versions and
# the matrix's integration tests train and sample end to end on 0.7.2.
FLOORS_TESTS = {
    # blox: what reaches its floors (numpy, optax and orbax in test_params/test_lora, treescope in
    # test_display), the matrix's files, the core layers, the one attention file (JAX's
    # dot_product_attention moved between releases); the attention variants, packing, conv and
    # pooling suites (~10 of blox's ~13 minutes at load) are our code on the same JAX ops.
    "blox-params": [
        "test_public_api.py",
        "test_bad_input.py",
        "test_errors.py",
        "test_display.py",
        "test_params.py",
        "test_lora.py",
        "test_rng.py",
        "test_recurrent.py",
        "test_module.py",
        "test_graph.py",
        "test_linear.py",
        "test_norm.py",
        "test_dropout.py",
        "test_repeat.py",
        "test_sequential.py",
        "test_attention.py",
    ],
    "gpt-models": [
        "test_public_api.py",
        "test_checkpoint.py",
        "test_muon.py",
        "test_train.py",
        "test_hf_tokenizer.py",
        "test_prepare.py",
        "test_sft_data.py",
        "test_hf.py",
        "test_logging.py",
        "test_profiling.py",
        "test_preflight.py",
        "test_attention.py",
    ],
}
CI_MODULES = ["check_floors", "release_check", "check_api_docs", "nox_helpers"]  # with doctests
# `next_primitives`: JAX's opt-in flags for its next ("hijax") primitives. Each flag runs the
# whole of NEXT_FLAG_SUITES once: the interpreter, lox's transformation suites and blox's scanned
# layers (the files whose programs the flags change; the rest of the core, lox and blox suites
# build no scan, remat or custom derivative, and `tests` runs them). A flag JAX adds is one entry
# here and one name in core_primitives.compat.NEXT_FLAGS (the session fails when the two
# disagree). Where JAX does not implement a transformation of a new primitive, the root conftest
# reports JAX's own NotImplementedError as an expected failure; tests of programs JAX computes
# wrongly under a flag carry `next_flag_gap` (strict xfails).
NEXT_FLAGS = ["jax_scan3", "jax_remat3", "jax_custom_vjp3", "jax_custom_jvp3"]
NEXT_FLAG_SUITES = [
    "packages/core-primitives/tests/test_interpreter.py",
    "packages/lox-logging/tests/test_transforms.py",
    "packages/lox-logging/tests/test_autodiff_regressions.py",
    "packages/lox-logging/tests/test_tap_order.py",
    "packages/lox-logging/tests/test_custom_derivative_sites.py",
    "packages/blox-params/tests/test_repeat.py",
]


@nox.session(python=PYTHONS[0], venv_backend="none")
def tests(session: nox.Session) -> None:
    """Every package's tests and the integration tests on Python 3.13 with the locked JAX (0.12).

    Also the CI scripts' own tests. Each folder runs whatever failed before it; the session
    fails at the end, listing every failed test. Without Python 3.13 (outside CI, where that is
    an error) it runs on the newest supported Python there is, with the JAX the lock gives it.
    """
    python = h.newest_python(session, PYTHONS)
    venv = h.session_dir(session) / "venv"
    h.sync_locked(session, venv, "dev", python=python)
    py = str(venv / "bin" / "python")
    h.print_jax(session, py)
    # Every folder runs, and the session fails after the last, listing every failure. A package's
    # tests run on every CPU (pytest-xdist); the integration tests start processes of their own.
    groups = [[folder, *h.workers()] for folder in h.package_test_dirs(PACKAGES)]
    groups.append(["integration_tests"])
    groups.append([".ci/tests", "--doctest-modules", *(f".ci/{m}.py" for m in CI_MODULES)])
    h.pytest_each(session, py, groups)


@nox.session(python=PYTHONS[0], venv_backend="none")
def next_primitives(session: nox.Session) -> None:
    """NEXT_FLAG_SUITES once per flag of NEXT_FLAGS (`JAX_NEXT_FLAGS`), on the locked JAX of
    Python 3.13 (0.12; the newest supported Python there is, as in `tests`)."""
    python = h.newest_python(session, PYTHONS)
    venv = h.session_dir(session) / "venv"
    h.sync_locked(session, venv, "dev", python=python)
    py = str(venv / "bin" / "python")
    h.print_jax(session, py)
    probe = "from core_primitives.compat import NEXT_FLAGS; print(' '.join(NEXT_FLAGS))"
    compat_flags = str(session.run(py, "-c", probe, env=h.ENV, external=True, silent=True)).split()
    if compat_flags != list(NEXT_FLAGS):
        session.error(
            f"core_primitives.compat.NEXT_FLAGS is {compat_flags}, the noxfile's NEXT_FLAGS "
            f"{list(NEXT_FLAGS)}: give both the same flags, in the same order"
        )
    for flag in NEXT_FLAGS:
        env = {**h.ENV, "JAX_NEXT_FLAGS": flag}
        args = [*h.PYTEST, *h.workers(), *NEXT_FLAG_SUITES, *session.posargs]
        session.run(py, "-m", *args, env=env, external=True)


@nox.session(venv_backend="none")
@nox.parametrize("jax", list(JAX_MATRIX))
def integration(session: nox.Session, jax: str) -> None:
    """The version-sensitive tests (MATRIX_TESTS) on one JAX of the matrix, on its Python (CPU).

    The oldest JAX runs MATRIX_INTEGRATION_TESTS instead: `floors` runs the packages' tests on it.
    """
    py = h.matrix_venv(session, JAX_MATRIX[jax], f"JAX {jax} runs on it")
    h.pip_install(session, py, *h.editable(PACKAGES, TEST_EXTRAS), f"jax=={jax}",
                  f"jaxlib=={jax}", *TEST_TOOLS)  # fmt: skip
    h.print_jax(session, py)
    oldest = jax == next(iter(JAX_MATRIX))
    for paths in h.existing_tests(MATRIX_INTEGRATION_TESTS if oldest else MATRIX_TESTS):
        h.pytest(session, py, *paths, *h.workers())


@nox.session(venv_backend="none")
def integration_newest(session: nox.Session) -> None:
    """MATRIX_TESTS on Python 3.12 with the newest JAX release and the newest other dependencies.

    Also MATRIX_INTEGRATION_TESTS when that release is not the one `tests` ran them on (the lock's).
    """
    py = h.matrix_venv(session, NEWEST_JAX_PYTHON, "the newest JAX needs >= 3.12")
    h.pip_install(session, py, *h.editable(PACKAGES, TEST_EXTRAS), "jax", "jaxlib", *TEST_TOOLS)
    newest, locked = h.print_jax(session, py), h.locked_version("jax", PYTHONS[0])
    picked = [*MATRIX_TESTS, *(MATRIX_INTEGRATION_TESTS if newest != locked else [])]
    if newest == locked:
        session.log(f"JAX {newest} is the locked one: `tests` ran the integration tests on it")
    for paths in h.existing_tests(picked):
        h.pytest(session, py, *paths, *h.workers())


@nox.session(python=False)
def floors(session: nox.Session) -> None:
    """Each package at its declared floors (lowest-direct, JAX 0.7.2): check them, run its tests.

    One venv per package: the package and the siblings it needs (editable, every extra), its test
    dependencies at the root dev group's floors, JAX at the matrix's oldest version; every test,
    or the FLOORS_TESTS sample where a package lists one. uv resolves every direct requirement to
    its lowest version; `.ci/check_floors.py` fails when one landed above its declared floor (a
    floor nothing can reach). Then the dev tools at their floors lint and type-check the tree.
    """
    oldest = next(iter(JAX_MATRIX))
    for pkg in PACKAGES:
        py = h.make_venv(session, JAX_MATRIX[oldest], f"floors-{pkg}")
        h.install_at_floors(session, py, pkg, PACKAGES, TEST_EXTRAS[pkg], TEST_TOOLS, oldest)
        folder = f"packages/{pkg}/tests"
        tests = [f"{folder}/{f}" for f in FLOORS_TESTS.get(pkg, [])] or [folder]
        h.pytest(session, py, *tests, *h.workers())
    h.dev_tools_at_floors(session, h.make_venv(session, "3.11", "floors-dev-tools"), PACKAGES)


@nox.session(python="3.11")
@nox.parametrize("extra", ["cuda12", "cuda13"])
def integration_gpu(session: nox.Session, extra: str) -> None:
    """Every test on the GPUs present, with `jax[cudaXX]` at the locked JAX; fails without a GPU."""
    _accelerator_tests(session, "gpu", extra)


@nox.session(python="3.11")
def integration_tpu(session: nox.Session) -> None:
    """Every test on the TPU chips present, with `jax[tpu]` at the locked JAX; fails without a TPU."""
    _accelerator_tests(session, "tpu", "tpu")


def _accelerator_tests(session: nox.Session, kind: str, extra: str) -> None:
    h.require_accelerator(session, kind)
    session.install(*h.editable(PACKAGES, TEST_EXTRAS), _locked_jax(session, extra), *TEST_TOOLS)
    h.check_accelerator_seen(session, kind)
    for folder in [*h.package_test_dirs(PACKAGES), "integration_tests"]:
        session.run(*h.PYTEST, folder, *session.posargs, env=h.accelerator_env(kind))


def _locked_jax(session: nox.Session, extra: str) -> str:
    return f"jax[{extra}]=={h.locked_version('jax', session.python)}"  # type: ignore[arg-type]


@nox.session(python="3.11")
def bench_gpu(session: nox.Session) -> None:
    """The gpt benchmark on one GPU (gpt2-small, bf16 compute): writes benchmarks/gpt/RESULTS-gpu.md."""
    h.require_accelerator(session, "gpu")
    session.install(*h.editable(PACKAGES, TEST_EXTRAS), _locked_jax(session, "cuda12"))
    out = str(ROOT / "benchmarks" / "gpt" / "RESULTS-gpu.md")
    script = str(ROOT / "benchmarks" / "gpt" / "run.py")
    session.run("python", script, "--gpu-only", "--out", out, env={**h.ENV, "JAX_PLATFORMS": ""})


# The test files holding `interop`-marked tests (torch, transformers, peft, trl); `interop` runs
# only those tests (-m interop), the rest of each file runs in `tests`. A .ci test keeps it whole.
INTEROP_TESTS = [
    "packages/gpt-models/tests/test_hf.py",
    "packages/gpt-models/tests/test_hf_families.py",
    "packages/gpt-models/tests/test_sft_data.py",
    "packages/gpt-models/tests/test_chat_format.py",
    "packages/gpt-models/tests/test_lora.py",
    "packages/gpt-models/tests/test_preference_parity.py",
]


@nox.session(python="3.11")
def interop(session: nox.Session) -> None:
    """Hugging Face interop with torch (CPU), transformers and peft: the `interop`-marked tests.

    Every family's import/export parity against transformers (test_hf_families.py), transformers'
    generate on an export, the chat-template ids against ``apply_chat_template``, peft's logits
    with an exported LoRA adapter, the DPO, IPO and SimPO losses against trl's loss function
    (test_preference_parity.py); then check_hf_interop.py (tiny trained GPT-2- and Llama-shaped
    runs exported and reloaded). ``-- regen`` also rewrites the golden folders under gpt-models'
    tests/data.
    """
    h.sync_locked(session, session.virtualenv.location, "dev")
    session.install(*_torch_cpu(), "transformers", "peft", "trl")
    data = ROOT / "packages" / "gpt-models" / "tests" / "data"
    if "regen" in session.posargs:
        session.run("python", str(data / "make_hf_golden.py"), env=h.ENV)
    session.run(*h.PYTEST, *h.workers(), "-m", "interop", *INTEROP_TESTS, env=h.ENV)
    session.run("python", str(data / "check_hf_interop.py"), env=h.ENV)


def _torch_cpu() -> list[str]:
    """torch's CPU build where the machine keeps its wheel (a plain ``torch`` is a CUDA build of
    several GB, downloaded), else plain ``torch``."""
    wheels = sorted(glob.glob("/opt/wheels/torch-*+cpu-cp311-*.whl"))
    if not wheels:
        return ["torch"]
    version = Path(wheels[-1]).name.split("-")[1]
    return ["--find-links", "/opt/wheels", f"torch=={version}"]


@nox.session
def lm_eval(session: nox.Session) -> None:
    """gpt-models' lm-evaluation-harness extra: its tests and doctests, with the locked lm-eval.

    Its own session because lm-eval brings ~70 packages (datasets, scikit-learn, nltk, ...) that
    no other session needs; elsewhere those tests skip and those doctests are not collected.
    Offline: the tests' tasks are local YAMLs over local JSONL files; the datasets cache lives in
    the session's temporary folder.
    """
    h.sync_locked(session, session.virtualenv.location, "dev", "lm-eval")
    hf_home = str(Path(session.create_tmp()) / "hf")
    env = {**h.ENV, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": hf_home}
    src = "packages/gpt-models/src/gpt_models/_inference"
    doctests = ["--doctest-modules", f"{src}/lm_eval.py", f"{src}/lm_eval_model.py"]
    session.run(*h.PYTEST, "packages/gpt-models/tests/test_lm_eval.py", *doctests, env=env)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    h.sync_locked(session, session.virtualenv.location, "dev")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over every package's sources."""
    h.sync_locked(session, session.virtualenv.location, "dev")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site and run every doctest (docstrings and docs pages).

    First the gpt-models reference pages: `--check` fails when the CLI or config page differs
    from what the parser and the schema give (`python docs/_ext/gpt_reference.py` rewrites
    them). The `gpt` commands of the pages run in `tests` (gpt-models' test_docs_commands.py).
    """
    h.sync_locked(session, session.virtualenv.location, "dev", "docs")
    session.run("python", str(ROOT / "docs" / "_ext" / "gpt_reference.py"), "--check", env=h.ENV)
    session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"))
    session.run("python", str(ROOT / ".ci" / "check_api_docs.py"), str(ROOT / "site"))
    sources = (f"packages/{p}/src" for p in PACKAGES)
    h.pytest(session, "python", *h.workers(), "--doctest-modules", *sources)
    readmes = sorted(glob.glob("packages/*/README.md", root_dir=ROOT))  # their PyPI pages
    h.pytest(session, "python", *h.workers(), "--doctest-glob=*.md", "docs", "README.md", *readmes)


@nox.session(python="3.11", reuse_venv=False)
def wheels(session: nox.Session) -> None:
    """Build every wheel; install each alone (siblings from the local wheels), run its WHEEL_TESTS."""
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run("uv", "build", "--all-packages", "--wheel", "-o", str(dist), external=True)
    tmp = Path(session.create_tmp())
    for pkg in PACKAGES:
        picked = h.with_matrix_tests(pkg, WHEEL_TESTS.get(pkg, []), MATRIX_TESTS)
        h.check_wheel(session, pkg, PACKAGES, dist, tmp, TEST_EXTRAS[pkg], TEST_TOOLS, picked)


@nox.session
def bench(session: nox.Session) -> None:
    """Run every benchmark; each writes its RESULTS.md table next to its script."""
    h.sync_locked(session, session.virtualenv.location, "dev")
    for script in sorted(glob.glob(str(ROOT / "benchmarks" / "*" / "run.py"))):
        session.run("python", script, *session.posargs, env=h.ENV)
