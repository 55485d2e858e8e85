"""One resolved run: what a run reads, decided once and recorded in its ``config.toml``.

A config as typed names things relative to where the command ran (``data.path = "stores/web"``,
``--init-from runs/base``) and leaves open what they are. Resolving it fixes both: ``data.path``,
a ``data.tokenizer`` file and ``init.source`` become absolute paths, ``data.kind`` records what
the data is (the embedded corpus, text, nanoGPT ``.bin`` ids or a ``gpt prepare`` token store), the
warmup is fitted to the run and ``model.vocab_size`` follows the tokenizer. ``gpt train`` writes the
result to ``config.toml``; ``--resume``, ``--auto-resume``, ``gpt eval``, ``sample`` and ``export``
read that file, so each works from any directory and sees the same data the run trained on.

A run on a chat store keeps the store's chat format (its template and end-of-turn token) in the
run folder as ``chat_format.json`` (:func:`data_chat_format` reads it from the data when the run
starts); ``gpt sample`` and ``gpt export`` read it with :func:`run_chat_format`.

The source of ``init.source`` (a run folder or a Hugging Face folder) is read once per process
(:func:`init_source`): its architecture becomes the new run's, and its tokenizer the run's tokenizer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import os
from pathlib import Path
from typing import TextIO

from .._config.schema import BUILTIN_TOKENIZERS, Config, DataConfig, ModelConfig, fit_warmup
from .._config.sources import DataSource
from .._config.toml import load_config
from .._data.chat_format import ChatFormat, manifest_chat_format, read_chat_format
from .._data.corpus import Tokenizer, bin_files
from .._data.mixture import missing_source
from .._data.run_tokenizer import prepare_tokenizer
from .._data.store import is_store, read_manifest
from .._errors import ConfigError, DataError, UsageError

# What data.path can hold (data.kind), as the messages name it.
DATA_KINDS = {
    "embedded": "the embedded corpus",
    "text": "text (a file or a folder of files)",
    "bin": "nanoGPT .bin token ids",
    "store": "a token store made by gpt prepare",
    "mixture": "a mixture of data.sources",
}
# Where a run trained on chat data keeps the chat format of its data (``_data/chat_format.py``).
CHAT_FILE = "chat_format.json"
# Model keys that may differ from the weights a run starts from or resumes: how the same weights
# are computed (the attention kernel, compute dtype, remat, scan), stored or regularised (dropout).
FREE_KEYS = ("dtype", "param_dtype", "remat", "scan_layers", "init_std", "dropout", "attention")
ARCH_KEYS = tuple(f.name for f in dataclasses.fields(ModelConfig) if f.name not in FREE_KEYS)
# The [lora] keys that shape (or scale) the adapters a checkpoint holds.
LORA_ARCH_KEYS = ("rank", "alpha", "targets")


def _lora_key(cfg: Config, key: str) -> object:
    """A ``LORA_ARCH_KEYS`` value as it acts: alpha 0 is rank, targets as the projections."""
    lora = cfg.lora
    if key == "alpha":
        return lora.scale_alpha if lora.enabled else 0.0
    if key == "targets":
        return lora.kernels(gated=cfg.model.mlp == "swiglu") if lora.enabled else ()
    return lora.rank


def absolute(path: str) -> str:
    """``path`` made absolute against the working directory (``~`` expanded, ``..`` folded)."""
    return os.path.abspath(os.path.expanduser(path))


def data_kind(path: str) -> str:
    """What ``data.path`` holds: ``embedded`` (""), ``store``, ``bin`` or ``text``.

    Example:
        >>> data_kind(""), data_kind("corpus/train.bin"), data_kind("books.txt")
        ('embedded', 'bin', 'text')
    """
    if not path:
        return "embedded"
    if is_store(Path(path)):
        return "store"
    if bin_files(DataConfig(path=path)) is not None or path.endswith(".bin"):
        return "bin"
    return "text"


def resolve_paths(cfg: Config) -> Config:
    """``cfg`` with absolute paths and ``data.kind`` filled in (nothing else is read).

    Raises:
        DataError: ``data.kind`` was recorded (a run's config.toml) and ``data.path`` now holds
            another kind of data.
    """
    d = cfg.data
    path = absolute(d.path) if d.path else ""
    tokenizer = d.tokenizer if d.tokenizer in BUILTIN_TOKENIZERS else absolute(d.tokenizer)
    kind = "mixture" if d.sources else data_kind(path)
    if d.kind and d.kind != kind:
        raise DataError(
            f"data.path = {path} holds {DATA_KINDS[kind]}, but this run was made with "
            f"{DATA_KINDS[d.kind]} there (data.kind = {d.kind!r} in its config.toml): the files "
            "were replaced since. Put the run's data back at that path, or train a new run on "
            "this data (gpt train --set data.path=...)."
        )
    sources = tuple(_resolve_source(i, s) for i, s in enumerate(d.sources))
    data = dataclasses.replace(d, path=path, tokenizer=tokenizer, kind=kind, sources=sources)
    source = absolute(cfg.init.source) if cfg.init.source else ""
    return dataclasses.replace(cfg, data=data, init=dataclasses.replace(cfg.init, source=source))


def _resolve_source(i: int, src: DataSource) -> DataSource:
    """A source of ``data.sources`` as ``data.path`` is resolved: absolute, its kind and name set."""
    path = absolute(src.path)
    if not Path(path).exists():
        raise missing_source(i, dataclasses.replace(src, path=path))
    kind = data_kind(path)
    if src.kind and src.kind != kind:
        raise DataError(
            f"data.sources[{i}] ({src.label!r}) path {path} holds {DATA_KINDS[kind]}, but this "
            f"run was made with {DATA_KINDS[src.kind]} there (kind = {src.kind!r} in its "
            "config.toml): the files were replaced since. Put the source's data back at that "
            "path, or train a new run on this data."
        )
    return dataclasses.replace(src, path=path, kind=kind, name=src.label)


def resolve_config(
    cfg: Config, run: Path, *, resume: bool, stream: TextIO | None = None
) -> tuple[Config, Tokenizer]:
    """The config ``train`` runs and records, and the run's tokenizer.

    Absolute paths and ``data.kind`` (:func:`resolve_paths`), the warmup fitted to the run, the
    tokenizer (read, or trained for ``bpe``; the run folder's own when resuming) and
    ``model.vocab_size`` following it; with ``init.source``, the source's architecture and
    vocabulary are checked. Notes go to ``stream`` (default: nowhere). Nothing is written.

    Raises:
        ConfigError, DataError: the data, the tokenizer or the init source do not fit the config.
    """
    stream = stream or io.StringIO()
    cfg, note = fit_warmup(resolve_paths(cfg))
    if note:
        print(f"note: {note}", file=stream)
    if not cfg.init.source:
        tokenizer, cfg = prepare_tokenizer(cfg, run, resume=resume, stream=stream)
        return cfg, tokenizer
    # The model keeps the source's vocabulary: its size is not rounded to the tokenizer's.
    tokenizer, _ = prepare_tokenizer(cfg, run, resume=resume, stream=io.StringIO())
    if not resume:
        check_init_source(cfg, tokenizer)
    return cfg, tokenizer


def data_chat_format(cfg: Config) -> ChatFormat | None:
    """The chat format of the data ``cfg`` (resolved) trains on: a chat store's; None for any other
    data (text, completion examples, a mixture, which holds no example stores).

    Raises:
        DataError: a chat store prepared before stores recorded it, or a damaged record.
    """
    store = Path(cfg.data.path)
    if cfg.data.kind != "store" or not is_store(store):
        return None
    manifest = read_manifest(store)
    return manifest_chat_format(manifest, store) if manifest.get("kind") == "chat" else None


def training_chat_format(cfg: Config, run: Path, stream: TextIO) -> ChatFormat | None:
    """:func:`data_chat_format` as ``gpt train`` takes it: a chat store that cannot give it
    (prepared before stores recorded it) still trains, with a note on ``stream`` saying how to fix
    it for later; a resumed run keeps the format it kept, else its sample.txt continues
    sample.prompt as plain text. On data that is not chat, a run started from a chat model keeps
    that model's format (:func:`source_chat_format`)."""
    try:
        chat = data_chat_format(cfg)
    except DataError as err:
        with contextlib.suppress(DataError):  # a damaged kept file: as if there were none
            if (run / CHAT_FILE).is_file():
                return read_chat_format(run / CHAT_FILE)
        print(f"note: {err} Until then, sample.txt continues sample.prompt as plain text.",
              file=stream)  # fmt: skip
        return None
    if chat is not None or not cfg.init.source:
        return chat
    try:
        return source_chat_format(cfg, stream)
    except UsageError:  # the source was moved or changed since the run started from it
        with contextlib.suppress(DataError):
            if (run / CHAT_FILE).is_file():
                return read_chat_format(run / CHAT_FILE)
        return None


def source_chat_format(cfg: Config, stream: TextIO) -> ChatFormat | None:
    """The chat format of ``cfg.init.source`` (a run's kept one, a Hugging Face folder's
    template), for a run that starts from it on data that is not chat, with its tokenizer: the
    weights are still the chat model's, and its exports should still carry its template. A note
    on ``stream`` says so, or why a damaged one is not kept."""
    source = init_source(cfg.init.source)
    if not _same_tokenizer(cfg.data.tokenizer, source.tokenizer):
        return None  # another tokenizer: the template's text would not be the ids it was for
    try:
        if source.kind == "hf":
            from .hf_import import folder_chat_format

            tokenizer = None if source.tokenizer is None else str(source.tokenizer)
            chat = folder_chat_format(source.path, tokenizer)[0]
        else:
            kept = source.path / CHAT_FILE
            chat = read_chat_format(kept) if kept.is_file() else None
    except DataError as err:
        print(f"note: {err} This run keeps no chat template of its own.", file=stream)
        return None
    if chat is not None:
        print(
            f"note: the data is not chat, so this run keeps the chat template of init.source "
            f"{source.path} (from {chat.template_file}): gpt sample writes a prompt as a user "
            "turn (--raw: as plain text) and gpt export carries the template.",
            file=stream,
        )
    return chat


def run_chat_format(run: str | Path, cfg: Config) -> ChatFormat | None:
    """The chat format a run was trained with (None: not on chat data): the one ``gpt train``
    kept in the run folder, or for a run trained before runs kept it, its data's.

    Raises:
        DataError: the kept file is damaged, or the run's chat store does not record it.
    """
    kept = Path(run) / CHAT_FILE
    return read_chat_format(kept) if kept.is_file() else data_chat_format(cfg)


def keep_chat_format(chat: ChatFormat | None, run: Path) -> None:
    """Keep ``chat`` in the run folder (or remove an earlier one: the data is not chat now)."""
    if chat is None:
        (run / CHAT_FILE).unlink(missing_ok=True)
        return
    (run / CHAT_FILE).write_text(json.dumps(chat.to_json(), indent=1) + "\n", encoding="utf-8")


def _same_tokenizer(tokenizer: str, source: Path | None) -> bool:
    """Whether ``data.tokenizer`` is the source's (None: the byte tokenizer), by content: the
    same JSON copied elsewhere, or written with other spacing, is the same tokenizer."""
    if source is None or tokenizer in BUILTIN_TOKENIZERS:
        return source is None and tokenizer == "byte"
    try:
        return bool(json.loads(Path(tokenizer).read_bytes()) == json.loads(source.read_bytes()))
    except (OSError, ValueError):  # the run's own tokenizer check says what is wrong with it
        return False


@dataclasses.dataclass(frozen=True)
class InitSource:
    """The weights a run starts from (``init.source``): a run folder or a Hugging Face folder.

    ``model`` is its architecture; ``tokenizer`` its ``tokenizer.json`` (None: the byte tokenizer,
    or a Hugging Face folder without one).
    """

    path: Path
    kind: str  # "run" or "hf"
    model: ModelConfig
    tokenizer: Path | None


def init_source(path: str) -> InitSource:
    """The init source at ``path``, read once per process (again only if its config file changed).

    Raises:
        ConfigError: ``path`` is neither a run folder nor a Hugging Face model folder.
        CheckpointFormatError: a Hugging Face folder whose config.json cannot be used.
    """
    folder = Path(absolute(path))
    for name in ("config.toml", "config.json"):
        if (folder / name).is_file():
            stat = (folder / name).stat()
            return _read_source(str(folder), name, stat.st_mtime_ns, stat.st_size)
    raise ConfigError(
        f"init.source = {path!r} is neither a run folder (config.toml) nor a Hugging Face "
        "model folder (config.json + model.safetensors). Pass one of those, e.g. --init-from "
        "runs/<name>."
    )


@functools.lru_cache(maxsize=8)
def _read_source(folder: str, config_name: str, mtime_ns: int, size: int) -> InitSource:
    del mtime_ns, size  # part of the cache key only: a rewritten config file is read again
    path = Path(folder)
    if config_name == "config.toml":
        model = load_config(str(path / "config.toml"), run_folder=True).model
        kind = "run"
    else:
        from .hf_import import read_hf_config

        model = read_hf_config(path)[1].model
        kind = "hf"
    tokenizer = path / "tokenizer.json"
    return InitSource(path, kind, model, tokenizer if tokenizer.is_file() else None)


def adopt_init_source(cfg: Config) -> Config:
    """``cfg`` with the architecture and tokenizer of its ``init.source``.

    The free model keys (``FREE_KEYS``) stay ``cfg``'s; ``gpt train --init-from`` applies this
    before its ``--set`` flags, so a ``--set data.tokenizer=...`` still wins.
    """
    source = init_source(cfg.init.source)
    free = {k: getattr(cfg.model, k) for k in FREE_KEYS if k != "init_std"}
    data = cfg.data
    if source.tokenizer is not None:
        data = dataclasses.replace(data, tokenizer=str(source.tokenizer))
    init = dataclasses.replace(cfg.init, source=str(source.path))
    model = dataclasses.replace(source.model, **free)
    return dataclasses.replace(cfg, model=model, data=data, init=init)


def check_init_source(cfg: Config, tokenizer: Tokenizer) -> None:
    """Refuse a model section or a tokenizer that does not fit ``cfg.init.source``'s weights."""
    source = init_source(cfg.init.source)
    for key in ARCH_KEYS:
        if getattr(cfg.model, key) != getattr(source.model, key):
            raise ConfigError(
                f"model.{key} = {getattr(cfg.model, key)!r} changes the architecture of "
                f"init.source = {str(source.path)!r}, which has model.{key} = "
                f"{getattr(source.model, key)!r}. A run started from its weights keeps its "
                f"architecture: drop the --set model.{key} (train/data/sample keys and "
                f"model.{'/'.join(FREE_KEYS)} may change)."
            )
    if tokenizer.vocab_size > source.model.real_vocab:
        raise ConfigError(
            f"The tokenizer (data.tokenizer = {cfg.data.tokenizer!r}) has {tokenizer.vocab_size} "
            f"ids but init.source = {str(source.path)!r} has a vocabulary of "
            f"{source.model.real_vocab}: its ids would index past the model's embeddings. Use "
            "the source's tokenizer."
        )


def check_resume_model(run: Path, saved_cfg: Config, cfg: Config) -> None:
    """Refuse a ``--set`` that changes the architecture of the run being resumed (its ``saved``
    config): the checkpoint's params could not be restored into it. The LoRA adapters are part
    of it (``lora.dropout`` may change, like ``model.dropout``)."""
    saved, model = saved_cfg.model, cfg.model
    for key in LORA_ARCH_KEYS:
        was, now = getattr(saved_cfg.lora, key), getattr(cfg.lora, key)
        if _lora_key(saved_cfg, key) != _lora_key(cfg, key):
            raise ConfigError(
                f"gpt train --resume {run} --set lora.{key}={now!r}: a resumed run keeps its LoRA "
                f"adapters, and this run has lora.{key} = {was!r}; its checkpoints hold "
                f"{'no adapters' if not saved_cfg.lora.enabled else 'adapters of that shape'}. "
                "Drop that --set, or start a new run from this one's weights with --init-from "
                f"{run} --set lora.{key}=... (the adapters are merged into the weights it starts "
                "from)."
            )
    for key in ARCH_KEYS:
        if getattr(model, key) != getattr(saved, key):
            raise ConfigError(
                f"gpt train --resume {run} --set model.{key}={getattr(model, key)!r}: a resumed run "
                f"keeps its architecture, and this run has model.{key} = "
                f"{getattr(saved, key)!r}. Drop that --set (train/data/sample keys and "
                f"model.{'/'.join(FREE_KEYS)} may change), or train the other architecture as a "
                "new run with --name."
            )
