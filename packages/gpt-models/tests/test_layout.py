"""gpt_models' private subpackages form layers: a module imports only its own layer and the ones below.

The layers, bottom to top (each subpackage's ``__init__`` docstring says the same):
``_errors``, ``_console`` < ``_config`` < ``_data``, ``_distributed`` < ``_model`` < ``_runs`` <
``_compute`` < ``_inference``, ``_training``, ``_serving`` < ``_cli``. Two subpackages of one
layer never import each other: training takes evaluation and sampling as hooks from the command.
Imports are read from the installed sources with ``ast``, function-level (lazy) imports included.
Beside the layers sit the modules that assemble them: ``__init__`` (the public API), ``__main__``
and ``internal`` (what the tests and benchmarks may reach).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gpt_models

PACKAGE = Path(gpt_models.__file__).parent
LAYERS = {
    "_errors": 0,
    "_console": 0,
    "_config": 1,
    "_data": 2,
    "_distributed": 2,
    "_model": 3,
    "_runs": 4,
    "_compute": 5,
    "_inference": 6,
    "_training": 6,
    "_serving": 6,
    "_cli": 7,
}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


# The root modules that may import every layer.
ASSEMBLERS = ("__init__", "__main__", "internal")


def _subpackage(path: Path) -> str | None:
    """The top-level private subpackage (or ``_errors``) a module lives in; None for the package root."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0] if parts[0] in LAYERS else None


def _imported_subpackages(path: Path) -> set[str]:
    """Subpackages imported by relative imports anywhere in ``path`` (lazy imports count)."""
    depth = len(path.relative_to(PACKAGE).parts) - 1  # 0 for a root module, 1 inside a subpackage
    imported = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        if node.level == depth + 1:  # relative to the package root
            names = [node.module] if node.module else [a.name for a in node.names]
            imported |= {n.split(".")[0] for n in names}
        elif node.level <= depth:  # inside its own subpackage
            imported.add(path.relative_to(PACKAGE).parts[0])
    return imported


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_higher_layer(path):
    own = _subpackage(path)
    if own is None:  # an assembler (see ASSEMBLERS): it may import every layer
        return
    imported = _imported_subpackages(path) & set(LAYERS)
    higher = {s for s in imported if LAYERS[s] > LAYERS[own]}
    assert not higher, f"{path.relative_to(PACKAGE)} (layer {LAYERS[own]}) imports {higher}"
    beside = {s for s in imported if LAYERS[s] == LAYERS[own] and s != own and LAYERS[s] > 2}
    assert not beside, (
        f"{path.relative_to(PACKAGE)} imports {beside}, beside it in layer {LAYERS[own]}"
    )


def test_reading_commands_do_not_import_training(tmp_path, make_config, patience):
    # `gpt sample` and `gpt eval` of a run never load the training code: a subprocess runs both
    # and lists the gpt_models modules they imported.
    import io
    import sys

    run = tmp_path / "run"
    cfg = make_config(mesh={"data": -1}, train={"steps": 1, "checkpoint_every": 1})
    gpt_models.train(cfg, run, stream=io.StringIO(), write_sample=False)
    script = (
        "import sys\n"
        "from gpt_models import main\n"
        f"assert main(['sample', '--run', {str(run)!r}, '--max-new-tokens', '2']) == 0\n"
        f"assert main(['eval', '--run', {str(run)!r}]) == 0\n"
        "print(sorted(m for m in sys.modules if m.startswith('gpt_models._training')))\n"
    )
    out = patience.run([sys.executable, "-c", script], text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_every_module_lives_in_a_layer():
    loose = [
        p.name for p in PACKAGE.glob("*.py") if p.stem not in ASSEMBLERS and p.stem not in LAYERS
    ]
    assert not loose, f"modules outside the layered subpackages: {loose}"
    subpackages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name.startswith("_")} - {
        "__pycache__"
    }
    assert subpackages <= set(LAYERS), f"subpackages without a layer: {subpackages - set(LAYERS)}"


def test_each_subpackage_says_what_it_may_import():
    for subpackage, layer in LAYERS.items():
        init = PACKAGE / subpackage / "__init__.py"
        if not init.exists():
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert f"Layer {layer}" in doc and "import" in doc, subpackage


@pytest.mark.parametrize("subpackage", [s for s in LAYERS if (PACKAGE / s).is_dir()])
def test_each_subpackage_names_its_modules(subpackage):
    init = PACKAGE / subpackage / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    unnamed = [
        p.name for p in sorted((PACKAGE / subpackage).glob("*.py")) if p.name != "__init__.py"
        and f"``{p.name}``" not in doc
    ]  # fmt: skip
    assert not unnamed, f"{subpackage}/__init__.py's docstring does not say what {unnamed} hold"


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = fn.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (args.vararg is not None) + (args.kwarg is not None)


def test_no_private_function_takes_more_than_eight_parameters():
    # Values travel as named bundles (a Run, a TrainPlan, Hooks, Sampling), not as 13- and
    # 15-argument calls. The public API keeps its documented signatures (generate has 10).
    public = set(gpt_models.__all__)
    long = [
        f"{path.relative_to(PACKAGE)}:{node.name} ({_parameters(node)})"
        for path in _modules()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and _parameters(node) > 8
        and node.name not in public
    ]
    assert not long, f"functions with more than 8 parameters: {long}"
