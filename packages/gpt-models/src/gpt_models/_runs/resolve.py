"""Resolving a config: what a run reads, decided once and recorded in its ``config.toml``.

A config as typed names things relative to where the command ran (``data.path = "stores/web"``,
``--init-from runs/base``) and leaves open what they are. Resolving it fixes both: ``data.path``,
a ``data.tokenizer`` file and ``init.source`` become absolute paths, ``data.kind`` records what
the data is (the embedded corpus, text, nanoGPT ``.bin`` ids or a ``gpt prepare`` token store), the
warmup is fitted to the run and ``model.vocab_size`` follows the tokenizer. ``gpt train`` writes the
result to ``config.toml``; ``--resume``, ``--auto-resume``, ``gpt eval``, ``sample`` and ``export``
read that file, so each works from any directory and sees the same data the run trained on.

The whole run (this, its tokenizer, data, init source and chat format) is ``run.py``'s
:func:`resolve_run`.
"""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path
from typing import NamedTuple

from .._config.schema import BUILTIN_TOKENIZERS, Config, DataConfig
from .._config.sources import DataSource
from .._data.corpus import Tokenizer, bin_files
from .._data.mixture import missing_source
from .._data.run_tokenizer import prepare_tokenizer
from .._data.store import is_store, manifest_digest
from .._errors import ConfigError, DataError
from .init_source import ARCH_KEYS, FREE_KEYS, Say

# What data.path can hold (data.kind), as the messages name it.
DATA_KINDS = {
    "embedded": "the embedded corpus",
    "text": "text (a file or a folder of files)",
    "bin": "nanoGPT .bin token ids",
    "store": "a token store made by gpt prepare",
    "mixture": "a mixture of data.sources",
}
# The [lora] keys that shape (or scale) the adapters a checkpoint holds.
LORA_ARCH_KEYS = ("rank", "alpha", "targets")


def _lora_key(cfg: Config, key: str) -> object:
    """A ``LORA_ARCH_KEYS`` value as it acts: alpha 0 is rank, targets as the projections."""
    lora = cfg.lora
    if key == "alpha":
        return lora.scale_alpha if lora.enabled else 0.0
    if key == "targets":
        return lora.kernels(gated=cfg.model.gated) if lora.enabled else ()
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
    """A source of ``data.sources`` as ``data.path`` is resolved: absolute, its kind and name
    set."""
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
            window = (  # the length it trains at is the data's, and may change
                f" A shorter training window is --set data.seq_len=N, N from 1 to {saved.seq_len}."
                if key == "seq_len" and model.seq_len < saved.seq_len
                else ""
            )
            raise ConfigError(
                f"gpt train --resume {run} --set model.{key}={getattr(model, key)!r}: a resumed "
                f"run "
                f"keeps its architecture, and this run has model.{key} = "
                f"{getattr(saved, key)!r}. Drop that --set (train/data/sample keys and "
                f"model.{'/'.join(FREE_KEYS)} may change), or train the other architecture as a "
                f"new run with --name.{window}"
            )


class Resolved(NamedTuple):
    """A resolved config, its tokenizer, and the identity of the token stores it reads."""

    config: Config
    tokenizer: Tokenizer
    stores: dict[str, str]


def resolve_config(cfg: Config, folder: Path, *, resume: bool, say: Say) -> Resolved:
    """The config a run trains and records, its tokenizer and its stores' identities: absolute
    paths and ``data.kind`` (:func:`resolve_paths`), every token store's manifest digest
    (:func:`store_digests`), the tokenizer (read, or trained for ``bpe``; the run folder's own when
    resuming) and ``model.vocab_size`` following it (a model started from other weights keeps
    their vocabulary). Notes go to ``say``; nothing is written.
    """
    cfg = resolve_paths(cfg)
    stores = store_digests(cfg)
    said = io.StringIO()
    tokenizer, resolved = prepare_tokenizer(cfg, folder, resume=resume, stream=said)
    if cfg.init.source:
        return Resolved(cfg, tokenizer, stores)
    for line in said.getvalue().splitlines():
        say(line)
    return Resolved(resolved, tokenizer, stores)


def store_digests(cfg: Config) -> dict[str, str]:
    """The identity of every token store the run (resolved) reads, by where the config names it:
    ``data.path``, or ``data.sources[i] (name)`` for a mixture's sources."""
    if cfg.data.kind == "store":
        return {f"data.path = {cfg.data.path}": manifest_digest(Path(cfg.data.path))}
    return {
        f"data.sources[{i}] ({src.label!r}) at {src.path}": manifest_digest(Path(src.path))
        for i, src in enumerate(cfg.data.sources)
        if src.kind == "store"
    }


def check_same_stores(
    now: dict[str, str], recorded: dict[str, str] | None, run: Path, step: int
) -> None:
    """Refuse to resume ``run`` on token stores (``now``: :func:`store_digests`) other than the
    ones its checkpoint ``step`` recorded (``None``: a checkpoint from before they were)."""
    if recorded is None:
        return
    for where, digest in recorded.items():
        if now.get(where, digest) != digest:
            raise DataError(
                f"--resume {run}: the token store {where} is not the one this run trained on: "
                f"its manifest changed since checkpoint step {step} (sha256 {digest[:12]} then, "
                f"{now[where][:12]} now), so the batches after the checkpoint would come from "
                "other data. Put the run's store back at that path, or train on the new one as a "
                f"new run from this one's weights: gpt train --init-from {run} --name NEW."
            )
