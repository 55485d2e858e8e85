"""One run as a value: :func:`resolve_run` decides everything a run reads, once, at a command's
boundary, and hands on a frozen :class:`Run`.

``--resume``, ``--auto-resume``, ``--init-from`` and ``--dry-run`` are its arguments, not branches
that each resolve again: the config (a preset, a TOML file or a run's ``config.toml``, then the
init source's architecture, then ``--set``), the run folder's checks (``launch.py``), the paths and
kinds of the data (``resolve.py``), the tokenizer and the model's vocabulary, the data opened with
it, the init source (read once, carried as an object) and the chat format. Nothing is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from .._config.model import ModelConfig
from .._config.schema import Config, DataConfig, fit_warmup
from .._config.toml import apply_overrides, load_config
from .._data.chat_format import ChatFormat
from .._data.corpus import Dataset, Tokenizer, load_dataset
from .._distributed.mesh import check_mesh
from .._distributed.processes import is_primary
from .._errors import ConfigError, DataError, UsageError
from .init_source import (
    InitSource,
    Say,
    check_init_source,
    finetune_window,
    read_init_source,
    start_config,
    training_chat_format,
)
from .launch import Launch, check_launch
from .preference_run import check_preference
from .resolve import check_resume_model, resolve_config
from .snapshot import committed_steps


@dataclasses.dataclass(frozen=True)
class Run:
    """A run, resolved once: what every later step of a command reads instead of resolving again.

    Attributes:
        config: the resolved config (absolute paths, ``data.kind``, the fitted warmup, the
            vocabulary following the tokenizer); ``config.model`` carries the LoRA adapters.
        folder: the run folder (not created by resolving).
        tokenizer: the run's tokenizer, loaded or trained.
        data: the train and validation splits, opened with that tokenizer.
        init: the weights a new run starts from (``init.source``), read once; None without one.
        chat: the chat format the run trains with (its chat store's, or a chat model's it starts
            from); None for plain data.
        launch: the step the launch trains from and what to say of the run's records.
        stores: the identity of every token store it reads (its manifest's SHA-256), by where
            the config names it; each checkpoint records them, and a resume checks them.
        resume: whether the launch continues the run from its newest checkpoint.
        dry_run: whether the command only plans the run (``--dry-run``): nothing is written.
    """

    config: Config
    folder: Path
    tokenizer: Tokenizer
    data: Dataset
    init: InitSource | None
    chat: ChatFormat | None
    launch: Launch
    stores: dict[str, str] = dataclasses.field(default_factory=dict)
    resume: bool = False
    dry_run: bool = False

    @property
    def model(self) -> ModelConfig:
        """The model section every compiled program takes (with its LoRA adapters)."""
        return self.config.model


def resolve_run(
    folder: str | Path,
    config: Config | str | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    resume: bool = False,
    auto_resume: bool = False,
    init_from: str | None = None,
    dry_run: bool = False,
    stream: TextIO | None = None,
) -> Run:
    """Resolve the run that trains in ``folder``: everything it reads, decided once.

    Args:
        folder: the run folder (created later, by training).
        config: a ``Config``, a preset name or a TOML file; default: the run's own
            ``config.toml`` with ``resume``, else ``finetune`` with ``init_from``, else ``tiny``.
        overrides: dotted keys to set (``--set``), as text: ``{"train.steps": "100"}``.
        resume: continue the run in ``folder`` from its newest checkpoint.
        auto_resume: continue it if it has checkpoints (the same config required), else start it.
        init_from: start from the weights of a run folder or a Hugging Face folder.
        dry_run: only plan the run (the same checks, nothing written afterwards).
        stream: where the notes go (default: nowhere).

    Raises:
        ConfigError, DataError, UsageError: a bad config, data, init source or run folder; the
            message says what to change.

    Example:
        >>> import tempfile
        >>> from gpt_models import resolve_run
        >>> run = resolve_run(tempfile.mkdtemp() + "/demo", "tiny", overrides={"train.steps": "5"})
        >>> run.config.train.steps, run.data.source, run.init is None, run.launch.start
        (5, '<embedded corpus: pydoc_data.topics>', True, 0)
    """
    folder = Path(folder)
    quiet = stream is None or not is_primary()  # process 0 says what it decided
    say: Say = (lambda line: None) if quiet else (lambda line: print(line, file=stream))
    if init_from and overrides and "init.source" in overrides:
        raise UsageError(
            f"gpt train got --init-from {init_from} and --set init.source="
            f"{overrides['init.source']}: both name the weights to start from. Pass one of them "
            f"(--init-from {init_from} is short for --set init.source={init_from})."
        )
    base, source = start_config(folder, config, resume=resume, init_from=init_from)
    if source is not None:  # a shorter --set model.seq_len is the window a fine-tune trains at
        overrides = finetune_window(source, overrides or {}, say)
    cfg, note = fit_warmup(apply_overrides(base, overrides or {}, from_text=True))
    if note:
        say(f"note: {note}")
    if resume:
        check_resume_model(folder, base, cfg)
    if auto_resume and _has_checkpoints(folder):
        cfg, resume = _auto_resumed(folder, cfg, say), True
    elif auto_resume:
        say(f"--auto-resume: {folder} has no checkpoint yet; starting the run.")
    check_mesh(cfg.mesh)  # against every process's devices, before anything is read or written
    launch = check_launch(cfg, folder, resume=resume)  # before minutes of tokenizing or compiling
    cfg, tokenizer, stores = resolve_config(cfg, folder, resume=resume, say=say)
    if source is None and cfg.init.source:
        source = _source_of(cfg, resume=resume)
    if source is not None and not resume:
        check_init_source(cfg, tokenizer, source)
    vocab = cfg.model.vocab_size
    data = load_dataset(cfg.data, seq_len=cfg.window, vocab_size=vocab, tokenizer=tokenizer)
    for note in data.notes:  # examples too long for a row, left out (never cut)
        say(note)
    if cfg.data.kind == "store" and cfg.data.val_fraction != DataConfig().val_fraction:
        say(
            f"note: data.val_fraction = {cfg.data.val_fraction} does not apply to a token store: "
            f"{cfg.data.path} keeps the split gpt prepare made (its --val-fraction)."
        )
    check_preference(cfg, data, source, resume)
    chat = training_chat_format(cfg, folder, source, say)
    return Run(cfg, folder, tokenizer, data, source, chat, launch, stores, resume, dry_run)


def _has_checkpoints(folder: Path) -> bool:
    return bool(committed_steps(folder / "checkpoints")) and (folder / "config.toml").is_file()


def _auto_resumed(folder: Path, cfg: Config, say: Say) -> Config:
    """``--auto-resume`` of a run with checkpoints: its own config, if this command's resolves to
    it (else a UsageError listing the keys that differ)."""
    saved = load_config(str(folder / "config.toml"), run_folder=True)
    mine = resolve_config(cfg, folder, resume=True, say=lambda line: None)[0]
    differ = _differences(mine, saved)
    if differ:
        shown = "\n".join(f"  {k}: run has {a!r}, this command gives {b!r}" for k, a, b in differ)
        raise UsageError(
            f"--auto-resume: {folder} holds a run with a different config, so it cannot be "
            f"continued with this command ({len(differ)} key(s) differ):\n{shown}\nRun the "
            f"command that started it, change it on purpose with `gpt train --resume {folder} "
            "--set KEY=VALUE`, or pick another --name for a new run."
        )
    step = committed_steps(folder / "checkpoints")[-1]
    say(f"--auto-resume: {folder} exists; continuing from its newest checkpoint (step {step}).")
    return saved


def _differences(mine: Config, saved: Config) -> list[tuple[str, Any, Any]]:
    a, b = _flat(saved), _flat(mine)
    return [(k, a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]


def _flat(cfg: Config) -> dict[str, Any]:
    from .._config.toml import to_dict

    return {f"{s}.{k}": v for s, values in to_dict(cfg).items() for k, v in values.items()}


def _source_of(cfg: Config, *, resume: bool) -> InitSource | None:
    """``init.source`` set in the config itself (a TOML file, ``--set``, a resumed run's): read.

    A resumed run has its weights already: a source moved or changed since only loses its chat
    template (the run's kept one stands in).
    """
    try:
        return read_init_source(cfg.init.source)
    except (ConfigError, DataError, OSError):
        if resume:
            return None
        raise
