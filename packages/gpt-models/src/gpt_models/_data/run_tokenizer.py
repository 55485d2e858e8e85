"""Which tokenizer a run uses, where it is kept, and how the model's vocabulary follows it.

``data.tokenizer = "byte"`` needs nothing on disk. ``"bpe"`` is trained on the train split of text
data when a run starts (or read from the tokenizer file a ``.bin`` sidecar names); the path of a
tokenizers JSON file (e.g. a Hugging Face model's ``tokenizer.json``) is read with
``read_tokenizer_json``, the loader ``gpt prepare --tokenizer`` uses. Either is then kept in the run
folder as ``tokenizer.json``; resuming, sampling and evaluating read it from there, so a run folder
alone decodes its own ids.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import TextIO

import numpy as np

from .._config.schema import BUILTIN_TOKENIZERS, Config, DataConfig
from .._errors import DataError
from .bpe import BPETokenizer
from .byte_tokenizer import ByteTokenizer
from .corpus import Tokenizer, bin_files, text_splits
from .mixture import check_shared_tokenizer, part_configs
from .store import is_store, store_tokenizer_file
from .token_files import read_bin_meta, sidecar_path

TOKENIZER_FILE = "tokenizer.json"


def prepare_tokenizer(
    cfg: Config, run: Path, *, resume: bool, stream: TextIO
) -> tuple[Tokenizer, Config]:
    """The run's tokenizer, and ``cfg`` with ``model.vocab_size`` following it (a note if it
    changed)."""
    tok = _tokenizer(cfg, run, resume)
    want = model_vocab_size(tok)
    if not _vocab_is_known(cfg):
        return tok, cfg  # a .bin without a sidecar: its ids only have to fit model.vocab_size
    real = tok.vocab_size if tok.vocab_size != want else 0
    if cfg.model.vocab_real != real and cfg.model.vocab_size == want:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_real=real))
    if cfg.model.vocab_size != want:
        print(
            f"note: model.vocab_size = {cfg.model.vocab_size} -> {want}: the model's vocabulary "
            f"follows the tokenizer (data.tokenizer = {cfg.data.tokenizer!r}, {tok.vocab_size} ids"
            f"{', rounded up to a multiple of 64' if want != tok.vocab_size else ''}).",
            file=stream,
        )
        model = dataclasses.replace(cfg.model, vocab_size=want, vocab_real=real)
        cfg = dataclasses.replace(cfg, model=model)
    return tok, cfg


def model_vocab_size(tok: Tokenizer) -> int:
    """The model's vocab for ``tok``: its size, rounded up to a multiple of 64 (fast matmuls)."""
    return -(-tok.vocab_size // 64) * 64


def _vocab_is_known(cfg: Config) -> bool:
    given = cfg.data.tokenizer not in BUILTIN_TOKENIZERS  # a tokenizer.json says its own size
    return given or all(
        files is None or sidecar_path(files[0]).is_file()
        for files in (bin_files(part) for part in _parts(cfg))
    )


def _parts(cfg: Config) -> tuple[DataConfig, ...]:
    """The data configs the tokenizer must fit: data.path's, or one per source of a mixture."""
    return part_configs(cfg.data) or (cfg.data,)


def _tokenizer(cfg: Config, run: Path, resume: bool) -> Tokenizer:
    if cfg.data.sources:  # before one source's tokenizer is taken for all
        check_shared_tokenizer(cfg.data.sources)
    if cfg.data.tokenizer == "byte":
        return ByteTokenizer()
    if resume:
        return BPETokenizer.load(run / TOKENIZER_FILE)
    # A tokenizer.json; a store checks that it is the one the store was made with.
    if cfg.data.tokenizer != "bpe":
        tok = BPETokenizer.from_file(cfg.data.tokenizer)
        for files in (bin_files(part) for part in _parts(cfg)):
            if files is not None:
                _same_vocab(tok, files[0], f"data.tokenizer {cfg.data.tokenizer}")
        return tok
    for part in _parts(cfg):  # the tokenizer the data was made with (the sources share one)
        if part.path and is_store(Path(part.path)):
            file = store_tokenizer_file(Path(part.path), "bpe")
            assert file is not None  # a BPE store always has its tokenizer file
            return BPETokenizer.load(file)
        files = bin_files(part)
        if files is not None:
            meta = read_bin_meta(files[0], "bpe")
            assert meta is not None and meta.tokenizer_file is not None  # read_bin_meta checked
            tok = BPETokenizer.load(meta.tokenizer_file)
            _same_vocab(tok, files[0], f"its tokenizer file {meta.tokenizer_file}")
            return tok
    # Text only: trained on the train split of every source.
    texts = [text_splits(part)[0].decode("utf-8", errors="replace") for part in _parts(cfg)]
    return BPETokenizer.train(texts, vocab_size=cfg.data.bpe_vocab_size)


def _same_vocab(tok: Tokenizer, bin_file: Path, source: str) -> None:
    """The tokenizer has as many ids as the ``.bin``'s sidecar says its tokenizer had."""
    meta = read_bin_meta(bin_file, "bpe") if sidecar_path(bin_file).is_file() else None
    if meta is not None and tok.vocab_size != meta.vocab_size:
        raise DataError(
            f"{sidecar_path(bin_file)} declares vocab_size = {meta.vocab_size}, but {source} has "
            f"{tok.vocab_size} ids. Write the vocab size of the tokenizer that made the .bin, or "
            "use that tokenizer."
        )


def save_tokenizer(tok: Tokenizer, run: Path) -> None:
    """Keep a BPE or tokenizer.json tokenizer in the run folder (the byte one needs no file)."""
    if isinstance(tok, BPETokenizer):
        tok.save(run / TOKENIZER_FILE)


def run_tokenizer(run: str | Path, cfg: Config) -> Tokenizer:
    """The tokenizer of a finished run folder (for ``gpt sample`` and ``gpt eval``)."""
    if cfg.data.tokenizer == "byte":
        return ByteTokenizer()
    return BPETokenizer.load(Path(run) / TOKENIZER_FILE)


def decode_lenient(tok: Tokenizer, ids: np.ndarray) -> str:
    """Decode ``ids``; ids the tokenizer does not have become U+FFFD instead of raising.

    A model's vocab can be larger than its tokenizer's (rounded up to a multiple of 64, or a run
    made before the vocab followed the tokenizer), and sampling can pick those ids.
    """
    ids = np.asarray(ids).reshape(-1)
    known = (ids >= 0) & (ids < tok.vocab_size)
    parts = []
    for ok, group in itertools.groupby(
        zip(known.tolist(), ids.tolist(), strict=True), lambda t: t[0]
    ):
        chunk = [i for _, i in group]
        parts.append(tok.decode(np.array(chunk)) if ok else "\ufffd" * len(chunk))
    return "".join(parts)
