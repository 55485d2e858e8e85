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
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from .._config.schema import Config, DataConfig, ModelConfig, fit_warmup
from .._config.toml import apply_overrides, load_config
from .._data.chat_format import ChatFormat
from .._data.corpus import Dataset, Tokenizer, load_dataset
from .._data.run_tokenizer import prepare_tokenizer
from .._distributed.processes import is_primary
from .._errors import ConfigError, DataError, UsageError
from .chat_file import data_chat_format, kept_chat_format
from .init_source import (
    InitSource,
    adopt_init_source,
    check_init_source,
    read_init_source,
    source_chat_format,
)
from .launch import Launch, check_launch
from .resolve import check_resume_model, resolve_paths
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
    notes = _Notes(stream)
    if init_from and overrides and "init.source" in overrides:
        raise UsageError(
            f"gpt train got --init-from {init_from} and --set init.source="
            f"{overrides['init.source']}: both name the weights to start from. Pass one of them "
            f"(--init-from {init_from} is short for --set init.source={init_from})."
        )
    base, source = _base_config(folder, config, resume=resume, init_from=init_from)
    cfg = apply_overrides(base, overrides or {}, from_text=True)
    if resume:
        check_resume_model(folder, base, cfg)
    if auto_resume and _has_checkpoints(folder):
        cfg, resume = _auto_resumed(folder, cfg, notes), True
    elif auto_resume:
        notes.say(f"--auto-resume: {folder} has no checkpoint yet; starting the run.")
    launch = check_launch(cfg, folder, resume=resume)  # before minutes of tokenizing or compiling
    cfg, tokenizer = _resolved(cfg, folder, resume=resume, notes=notes)
    if source is None and cfg.init.source:
        source = _source_of(cfg, resume=resume)
    if source is not None and not resume:
        check_init_source(cfg, tokenizer, source)
    data = _open_data(cfg, tokenizer, notes)
    chat = _chat_format(cfg, folder, source, notes)
    return Run(cfg, folder, tokenizer, data, source, chat, launch, resume, dry_run)


class _Notes:
    """Where resolving says what it decided: ``stream`` on process 0, nowhere on the others."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream if stream is not None and is_primary() else io.StringIO()

    def say(self, line: str) -> None:
        print(line, file=self.stream)


def _base_config(
    folder: Path, config: Config | str | None, *, resume: bool, init_from: str | None
) -> tuple[Config, InitSource | None]:
    """The config before ``--set``: the given one, or the run's own, with the init source's
    architecture and tokenizer (and that source, read once)."""
    if resume and init_from:
        raise ConfigError(
            "--init-from starts a new run; --resume continues one. Pass only one of them."
        )
    if isinstance(config, Config):
        base = config
    elif resume and config is not None:
        raise ConfigError("--resume takes the run's own config.toml; do not pass --config with it.")
    elif resume:
        base = load_config(str(folder / "config.toml"), run_folder=True)
    else:  # a fine-tune's schedule, not pre-training's, unless the config says otherwise
        base = load_config(config or ("finetune" if init_from else "tiny"))
    if not init_from:
        return base, None
    source = read_init_source(init_from)
    init = dataclasses.replace(base.init, source=str(source.path))
    return adopt_init_source(dataclasses.replace(base, init=init), source), source


def _has_checkpoints(folder: Path) -> bool:
    return bool(committed_steps(folder / "checkpoints")) and (folder / "config.toml").is_file()


def _auto_resumed(folder: Path, cfg: Config, notes: _Notes) -> Config:
    """``--auto-resume`` of a run with checkpoints: its own config, if this command's resolves to
    it (else a UsageError listing the keys that differ)."""
    saved = load_config(str(folder / "config.toml"), run_folder=True)
    mine = _resolved(cfg, folder, resume=True, notes=_Notes(None))[0]
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
    notes.say(
        f"--auto-resume: {folder} exists; continuing from its newest checkpoint (step {step})."
    )
    return saved


def _differences(mine: Config, saved: Config) -> list[tuple[str, Any, Any]]:
    a, b = _flat(saved), _flat(mine)
    return [(k, a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]


def _flat(cfg: Config) -> dict[str, Any]:
    from .._config.toml import to_dict

    return {f"{s}.{k}": v for s, values in to_dict(cfg).items() for k, v in values.items()}


def _resolved(
    cfg: Config, folder: Path, *, resume: bool, notes: _Notes
) -> tuple[Config, Tokenizer]:
    """Absolute paths and ``data.kind``, the fitted warmup, the tokenizer and the vocabulary
    following it (a model started from other weights keeps their vocabulary)."""
    cfg, note = fit_warmup(resolve_paths(cfg))
    if note:
        notes.say(f"note: {note}")
    said = io.StringIO()
    tokenizer, resolved = prepare_tokenizer(cfg, folder, resume=resume, stream=said)
    if cfg.init.source:
        return cfg, tokenizer
    for line in said.getvalue().splitlines():
        notes.say(line)
    return resolved, tokenizer


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


def _open_data(cfg: Config, tokenizer: Tokenizer, notes: _Notes) -> Dataset:
    data = load_dataset(
        cfg.data, seq_len=cfg.model.seq_len, vocab_size=cfg.model.vocab_size, tokenizer=tokenizer
    )
    for note in data.notes:  # examples too long for a row, left out (never cut)
        notes.say(note)
    if cfg.data.kind == "store" and cfg.data.val_fraction != DataConfig().val_fraction:
        notes.say(
            f"note: data.val_fraction = {cfg.data.val_fraction} does not apply to a token store: "
            f"{cfg.data.path} keeps the split gpt prepare made (its --val-fraction)."
        )
    return data


def _chat_format(
    cfg: Config, folder: Path, source: InitSource | None, notes: _Notes
) -> ChatFormat | None:
    """The chat format the run trains with: its chat store's; a chat store that cannot give it
    (prepared before stores recorded it) still trains, with a note saying how to fix it for later
    (a resumed run keeps the format it kept). On data that is not chat, a run started from a chat
    model keeps that model's format."""
    try:
        chat = data_chat_format(cfg)
    except DataError as err:
        kept = _kept(folder)
        if kept is None:
            notes.say(f"note: {err} Until then, sample.txt continues sample.prompt as plain text.")
        return kept
    if chat is not None or not cfg.init.source:
        return chat
    if source is None:  # a resumed run whose source was moved or changed since
        return _kept(folder)
    said = io.StringIO()
    chat = source_chat_format(cfg, source, said)
    for line in said.getvalue().splitlines():
        notes.say(line)
    return chat


def _kept(folder: Path) -> ChatFormat | None:
    try:  # a damaged kept file: as if there were none
        return kept_chat_format(folder)
    except DataError:
        return None
