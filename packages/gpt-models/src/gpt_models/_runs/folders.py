"""Run folders: naming a new one, recognising an existing one, writing into it, loading from it.

A run folder ``<out>/<name>/`` holds ``config.toml`` (the resolved config), ``checkpoints/``
(orbax),
``metrics/`` (lox ``SaveLogger``), ``loss.png`` and ``sample.txt``. Nothing is written outside it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core_primitives import list_alternatives

from .._config.schema import Config, MeshConfig
from .._config.toml import load_config
from .._distributed.mesh import single_device_mesh
from .._distributed.processes import is_primary
from .._errors import UsageError
from .._model.gpt import abstract_params
from .checkpoint import Checkpointer


def new_run_dir(out: str | Path, name: str | None, config_source: str | None) -> Path:
    """``out/name``; without a name, ``<preset>-<date>-<time>`` (``custom`` for a TOML file)."""
    if name is None:
        preset = "tiny" if config_source is None else config_source
        if preset.endswith(".toml") or "/" in preset or Path(preset).exists():
            preset = "custom"
        name = f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    return Path(out) / check_run_name(name)


def check_run_name(name: str) -> str:
    """A run name is one plain folder name: writes must never escape ``--out``."""
    bad = not name or name in (".", "..") or any(c in name for c in "/\\\0") or name.startswith(".")
    if bad:
        raise UsageError(
            f"Run name {name!r} is not a plain folder name. Use letters, digits, '-', '_' or '.', "
            "without '/' and not starting with '.', e.g. --name tiny-exp1."
        )
    return name


def check_run_folder(run_dir: str | Path, *, flag: str) -> Path:
    """``run_dir`` as a Path if it is a run folder (it has ``config.toml``), else a UsageError."""
    run = Path(run_dir)
    if (run / "config.toml").is_file():
        return run
    found = "does not exist" if not run.exists() else "has no config.toml"
    if run.exists() and not run.is_dir():
        found = "is a file, not a folder"
    raise UsageError(
        f"{flag} {run}: not a run folder ({found}). Expected a folder made by `gpt train`, holding "
        f"config.toml and checkpoints/; pass one, e.g. {flag} runs/<name>{_run_hint(run)}."
    )


# What a run writes before its config.toml (that is written once the launch is accepted): a folder
# holding only these is a run whose first launch stopped early.
_EARLY_NAMES = frozenset(
    {"lock", "checkpoints", "metrics", "tokenizer.json", "chat_format.json", "profile"}
)
# The files and folders a run writes; none of them may be a symbolic link (a write would land
# wherever it points).
_RUN_NAMES = (
    "lock",
    "config.toml",
    "checkpoints",
    "metrics",
    "metrics.csv",
    "loss.png",
    "sample.txt",
    "tokenizer.json",
    "chat_format.json",
    "tensorboard",
    "profile",
    "train.log",
)


def check_run_target(run: Path, *, resume: bool) -> None:
    """Refuse to train into ``run`` unless it is new, empty or a run folder, with no links in it.

    A folder is a run when it has ``config.toml`` (or only what a run writes before it). Checked
    before anything is written, so a refused launch leaves the folder as it was.

    Raises:
        UsageError: ``run`` is a file, another program's folder, not writable, or one of the
            run's files or folders is a symbolic link.
    """
    flag = "--resume" if resume else "--out/--name"
    if run.exists() and not run.is_dir():
        raise UsageError(
            f"{flag}: {run} is a file, not a run folder. Pass a new or existing run folder, e.g. "
            "--name another-name."
        )
    if not run.exists():
        return
    entries = sorted(p.name for p in run.iterdir())
    if not resume and entries and "config.toml" not in entries:
        others = [e for e in entries if e not in _EARLY_NAMES]
        if others:
            raise UsageError(
                f"{flag}: {run} is an existing folder that is not a gpt run (no config.toml; it "
                f"holds {list_alternatives(others, limit=5)}). Training would overwrite files in "
                "it; pick a new --name, or an empty or new --out folder."
            )
    for link in _links(run):
        raise UsageError(
            f"{flag}: {link} in run folder {run} is a symbolic link (to {os.readlink(link)}). A "
            "run never writes through links, since the write would land outside the run folder. "
            "Replace the link with the real file or folder, or use a new --name."
        )
    if not os.access(run, os.W_OK | os.X_OK):
        raise UsageError(
            f"{flag}: run folder {run} is not writable by this user. Make it writable "
            f"(chmod u+w {run}), or train into a new --name."
        )


def _links(run: Path) -> list[Path]:
    found = [run / n for n in _RUN_NAMES if (run / n).is_symlink()]
    for sub in ("checkpoints", "metrics"):
        if (run / sub).is_dir() and not (run / sub).is_symlink():
            for root, dirs, files in os.walk(run / sub):
                found += [Path(root) / n for n in dirs + files if (Path(root) / n).is_symlink()]
                if sub == "checkpoints":
                    dirs.clear()  # the step folders are orbax's; only their names are checked
    return found


def _run_hint(run: Path) -> str:
    # Name the run folders next to the one given, since a typo in the name is the usual cause.
    parent = run.parent if run.parent.is_dir() else None
    runs = (
        sorted(p.name for p in parent.iterdir() if (p / "config.toml").is_file()) if parent else []
    )
    if not runs:
        return ""
    return f" (run folders in {parent}: {list_alternatives(runs, limit=10)})"


def check_new_path(path: Path, *, what: str, fix: str) -> None:
    """Refuse ``path`` as a folder for a command to create: it exists (a file, a folder, a link,
    even one pointing nowhere), or a parent is a file. ``what`` names the flag, ``fix`` ends the
    message. Checked before anything is written."""
    if path.is_symlink():
        target = os.readlink(path)
        dangling = "" if path.exists() else ", which does not exist"
        raise UsageError(
            f"{what} {path} is a symbolic link (to {target}{dangling}); a new folder is never "
            f"made through a link, since it would land wherever the link points. {fix}"
        )
    if path.exists():
        kind = "a folder" if path.is_dir() else "a file"
        raise UsageError(f"{what} {path} exists already ({kind}); this writes a new folder. {fix}")
    for parent in path.parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise UsageError(
                    f"{what} {path}: {parent} is a file, not a folder, so nothing can be written "
                    f"below it. {fix}"
                )
            return


@contextlib.contextmanager
def new_folder(
    path: Path, *, what: str, fix: str, write_fix: str, shown: Path | None = None
) -> Iterator[Path]:
    """Make the folder ``path`` (and missing parents) for the block to fill; if the block fails,
    remove every folder made here, so a refused or failed command leaves nothing behind.

    Folders get their mode from the umask (``os.mkdir``). A write that fails with an ``OSError``
    (a read-only file system, no permission, a full disk) becomes one ``UsageError`` naming
    ``shown`` (default ``path``: a folder renamed into place later names its final path) and
    ending with ``write_fix``.
    """
    check_new_path(path, what=what, fix=fix)
    made: list[Path] = []
    try:
        for folder in (*reversed(path.parents), path):
            if not os.path.lexists(folder):
                os.mkdir(folder)
                made.append(folder)
        yield path
    except BaseException as err:
        for folder in reversed(made):
            shutil.rmtree(folder, ignore_errors=True)
        if isinstance(err, OSError):
            inside = err.filename and Path(err.filename).is_relative_to(path)
            where = f": {err.filename}" if err.filename and not inside else ""
            raise UsageError(
                f"{what} {shown or path}: writing failed ({err.strerror or err}{where}); nothing "
                f"was left "
                f"behind. {write_fix}"
            ) from err
        raise


def write_text(path: Path, text: str) -> None:
    """Write a run-folder file from process 0 only (every process computes the same text)."""
    if is_primary():
        path.write_text(text, encoding="utf-8")


def run_config(run_dir: str | Path, *, flag: str = "--run") -> Config:
    """The config a run folder was trained with (its ``config.toml``)."""
    run = check_run_folder(run_dir, flag=flag)
    return load_config(str(run / "config.toml"), run_folder=True)


def load_run(run_dir: str | Path, config: Config | None = None) -> tuple[Config, Any, int]:
    """``(config, params, step)`` of a run folder's newest readable checkpoint, on one device.

    Only the ``params`` item is read: the optimizer state (for Adam, twice the params) stays on
    disk.
    A damaged newest checkpoint falls back to the previous one with a warning.

    Args:
        run_dir: a folder made by ``gpt train`` (``config.toml`` and ``checkpoints/``).
        config: the config to restore with (default: the run's ``config.toml``); ``gpt sample
            --set``
            passes the run's config with its overrides.

    Raises:
        UsageError: ``run_dir`` is not a run folder.

    Example:
        >>> import dataclasses, io, tempfile
        >>> from gpt_models import PRESETS, load_run, train
        >>> tiny = PRESETS["tiny"]
        >>> cfg = dataclasses.replace(
        ...     tiny,
        ...     model=dataclasses.replace(
        ...         tiny.model, seq_len=32, d_model=32, n_layers=1, n_heads=2
        ...     ),
        ...     train=dataclasses.replace(tiny.train, steps=2, batch_size=8, warmup_steps=1,
        ...                               eval_batches=1),
        ... )
        >>> run = tempfile.mkdtemp() + "/run"
        >>> _ = train(cfg, run, stream=io.StringIO(), write_sample=False)
        >>> loaded, params, step = load_run(run)
        >>> loaded.model == cfg.model, step
        (True, 2)
    """
    cfg = run_config(run_dir) if config is None else config
    # Sampling and eval run on one device whatever mesh the run trained on: orbax reshards on
    # restore.
    cfg = dataclasses.replace(cfg, mesh=MeshConfig(data=1, fsdp=1, tensor=1))
    mesh = single_device_mesh()
    ckpt = Checkpointer(Path(run_dir) / "checkpoints", keep=cfg.train.keep_checkpoints)
    try:
        items, _, step = ckpt.restore({"params": abstract_params(cfg, mesh)})
    finally:
        ckpt.close()
    return cfg, items["params"], step
