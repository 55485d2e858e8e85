"""Data: the embedded corpus, text files and folders, nanoGPT ``.bin`` files; deterministic batches.

Sampling is a pure function of ``(seed, step)``: the batch of step ``s`` is the same whether the run
was interrupted or not, so a resumed run needs no data-loader state beyond the step counter. Every
process computes the same global batch positions and keeps only its own rows.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .._config.schema import DataConfig, tokenizer_kind
from .._errors import DataError
from .bpe import BPETokenizer
from .byte_tokenizer import ByteTokenizer
from .mixture import (
    MixedTokens,
    check_shared_tokenizer,
    describe,
    missing_source,
    part_configs,
)
from .packing import PackedExamples, packed_eval_batches, packed_split, packed_train_batch
from .preference_mixture import PackedMixture, mixed_pairs_batch, pairs_mixture
from .store import ShardedTokens, check_tokenizer_json, is_store, open_store, store_tokenizer_file
from .token_files import BinMeta, read_bin_meta, same_meta

Tokenizer = ByteTokenizer | BPETokenizer
# Token ids in memory, a memmap'd .bin file, the shards of a token store (read with pread), one
# split of a mixture (a token array per source), of a store with a loss mask (packed examples), or
# of a mixture of preference stores (packed pairs per source).
TokenArray = np.ndarray | ShardedTokens | MixedTokens | PackedExamples | PackedMixture

# How much of a large .bin file is scanned to check that its token ids fit the vocabulary.
_VOCAB_CHECK_TOKENS = 1 << 24


def default_corpus() -> str:
    """CPython's own help text (``pydoc_data.topics``): ~460 kB of English prose and code, no
    download.

    Example:
        >>> text = default_corpus()
        >>> len(text) > 100_000, "assert" in text
        (True, True)
    """
    from pydoc_data.topics import topics  # ships with every CPython

    # Sorted keys: the text (and so the train/val split) does not depend on dict order.
    return "\n\n".join(topics[k].strip() for k in sorted(topics)) + "\n"


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Token ids of the train and validation splits (numpy arrays, read-only memmaps or a store's
    shards).

    ``bytes_per_token`` is measured on the validation split (text bytes / token ids), so a loss in
    nats per token divided by it is in nats per byte, comparable across tokenizers; it is None for a
    ``.bin`` file without a sidecar (its tokenizer, hence its bytes, are unknown).

    A mixture (``data.sources``) has one ``Dataset`` per source in ``parts``; its ``train`` and
    ``val`` are :class:`MixedTokens` over theirs, and its ``bytes_per_token`` is the sources'
    weighted by their shares of the training rows (what converts the train loss to nats per byte).

    A store with a loss mask (chat or completion examples, ``gpt prepare``) has
    :class:`PackedExamples` splits: its batches are dicts (``train_batch``). A mixture of
    preference stores has :class:`PackedMixture` splits over its sources' packed pairs.
    """

    train: TokenArray
    val: TokenArray
    source: str
    tokenizer: Tokenizer = dataclasses.field(default_factory=ByteTokenizer)
    bytes_per_token: float | None = 1.0
    bin_meta: BinMeta | None = None
    parts: tuple[Dataset, ...] = ()

    @property
    def loss_mask(self) -> bool:
        """Whether batches are dicts of ids, loss mask and segments (a store with a loss mask)."""
        return isinstance(self.train, PackedExamples | PackedMixture)

    @property
    def notes(self) -> tuple[str, ...]:
        """What opening the data left out, one line each (examples longer than a row), of
        each source of a mixture."""
        splits = [s for d in (self.parts or (self,)) for s in (d.train, d.val)]
        return tuple(s.note for s in splits if isinstance(s, PackedExamples) and s.note)


def load_dataset(
    cfg: DataConfig, *, seq_len: int, vocab_size: int, tokenizer: Tokenizer | None = None
) -> Dataset:
    """Load ``cfg.path`` (or the embedded corpus) and split off the last ``val_fraction`` for
    validation.

    Text is tokenized with ``tokenizer`` (default: bytes); ``.bin`` files are token ids already, and
    their sidecar (``X.bin.json``) must name ``cfg.tokenizer``. A token store (``gpt prepare``) is
    read with the tokenizer it was made with: ``tokenizer``, if given, must be that one (default:
    the store's own, from its folder).

    With ``cfg.sources`` (a mixture) each source is loaded so, with one tokenizer (``tokenizer``,
    or the one the sources were made with), into ``parts``.

    Raises:
        DataError: a missing path, an empty folder, too little data for one ``seq_len`` window in
            each
            split, token ids that do not fit ``vocab_size``, or a ``.bin`` sidecar that does not
            match;
            sources of a mixture made by different tokenizers.

    Example:
        >>> from gpt_models import DataConfig, load_dataset
        >>> ds = load_dataset(DataConfig(), seq_len=64, vocab_size=256)
        >>> len(ds.train) > 9 * len(ds.val) > 0, ds.bytes_per_token
        (True, 1.0)
    """
    if cfg.sources:
        return _mixture_dataset(cfg, seq_len, vocab_size, tokenizer)
    if cfg.path and is_store(Path(cfg.path)):
        ds = _store_dataset(Path(cfg.path), cfg, tokenizer, vocab_size, seq_len)
        return ds  # ids < the tokenizer's vocab by construction, checked against the model's
    tok = tokenizer or ByteTokenizer()
    source = cfg.path or "<embedded corpus: pydoc_data.topics>"
    bins = bin_files(cfg)
    if bins is not None:
        train, val, meta = _read_bins(bins, cfg)
        bpt = None if meta is None else _bytes_per_token(tok, val)
        ds = Dataset(train, val, source, tok, bpt, meta)
    else:
        train_bytes, val_bytes = text_splits(cfg)
        train, val = _encode(tok, train_bytes), _encode(tok, val_bytes)
        ds = Dataset(train, val, source, tok, len(val_bytes) / max(len(val), 1))
    _check_length(ds, seq_len, f"data.val_fraction = {cfg.val_fraction}")
    _check_vocab(ds, vocab_size)
    return ds


def bin_files(cfg: DataConfig) -> list[Path] | None:
    """The ``.bin`` token files of ``cfg.path`` (a ``.bin`` file, or train.bin + val.bin), else
    None."""
    path = Path(cfg.path) if cfg.path else None
    if path is not None and path.is_dir() and (path / "train.bin").is_file():
        return [path / "train.bin", path / "val.bin"]
    if path is not None and path.is_file() and path.suffix == ".bin":
        return [path]
    return None


def text_splits(cfg: DataConfig) -> tuple[bytes, bytes]:
    """The train and validation bytes of a text source (the embedded corpus, a file or a folder).

    The split falls on a UTF-8 character boundary, so both parts decode (a subword tokenizer needs
    text); the byte tokenizer's tokens are these bytes as they are.
    """
    raw = _read_text_bytes(Path(cfg.path) if cfg.path else None)
    cut = len(raw) - int(len(raw) * cfg.val_fraction)
    while 0 < cut < len(raw) and raw[cut] & 0xC0 == 0x80:  # a UTF-8 continuation byte
        cut += 1
    return raw[:cut], raw[cut:]


def _store_dataset(
    folder: Path, cfg: DataConfig, tok: Tokenizer | None, vocab_size: int, seq_len: int
) -> Dataset:
    """A token store's splits, read from its shards on demand; its tokenizer must be the run's
    (``tok``; None: the store's own), and each split must hold a ``seq_len`` window."""
    file = store_tokenizer_file(folder, tokenizer_kind(cfg.tokenizer))
    if tok is None:
        tok = ByteTokenizer() if file is None else BPETokenizer.load(file)
    check_tokenizer_json(folder, tok.to_json() if isinstance(tok, BPETokenizer) else None)
    store = open_store(folder)
    vocab = int(store.manifest["tokenizer"]["vocab_size"])
    if vocab > vocab_size:
        raise DataError(
            f"The token store {folder} has {vocab} token ids, but model.vocab_size = "
            f"{vocab_size}. Set --set model.vocab_size={_round_up(vocab, 64)}."
        )
    if store.manifest.get("loss_mask"):
        train, val = (packed_split(store, s, seq_len) for s in ("train", "val"))
        return Dataset(train, val, str(folder), tok, _bytes_per_token(tok, store.val))
    ds = Dataset(store.train, store.val, str(folder), tok, _bytes_per_token(tok, store.val))
    # The split was made by gpt prepare: data.val_fraction does not apply to a store.
    made = store.manifest.get("settings", {}).get("val_fraction")
    _check_length(ds, seq_len, f"split by gpt prepare --val-fraction {made}")
    return ds


def _mixture_dataset(
    cfg: DataConfig, seq_len: int, vocab_size: int, tok: Tokenizer | None
) -> Dataset:
    check_shared_tokenizer(cfg.sources)
    parts: list[Dataset] = []
    for i, (src, part) in enumerate(zip(cfg.sources, part_configs(cfg), strict=True)):
        if not Path(src.path).exists():
            raise missing_source(i, src)
        parts.append(load_dataset(part, seq_len=seq_len, vocab_size=vocab_size, tokenizer=tok))
        tok = parts[0].tokenizer  # the first source's (a store's own), the others must agree
    names = [s.label for s in cfg.sources]
    weights = [s.weight for s in cfg.sources]
    trains, vals = [p.train for p in parts], [p.val for p in parts]
    # Preference stores: packed pairs (refused where mixed with anything else), else windows.
    train, val = pairs_mixture(cfg.sources, trains, vals) or (
        MixedTokens(trains, weights, names),
        MixedTokens(vals, weights, names),
    )
    per = [p.bytes_per_token for p in parts]
    bpt = None if None in per else float(np.dot(train.weights, np.array(per, dtype=float)))
    source = describe(names, train.weights, [s.path for s in cfg.sources])
    return Dataset(train, val, source, parts[0].tokenizer, bpt, None, tuple(parts))


def _encode(tok: Tokenizer, data: bytes) -> np.ndarray:
    if isinstance(tok, ByteTokenizer):
        return np.frombuffer(data, dtype=np.uint8)  # 1 byte per token: a quarter of int32's memory
    dtype = np.uint16 if tok.vocab_size <= 1 << 16 else np.uint32  # e.g. Llama 3's 128256 ids
    return tok.encode(data.decode("utf-8", errors="replace")).astype(dtype)


def _bytes_per_token(tok: Tokenizer, val: TokenArray) -> float:
    if isinstance(tok, ByteTokenizer):
        return 1.0
    ids = np.asarray(val[:_VOCAB_CHECK_TOKENS], dtype=np.int64)
    if not ids.size:  # an empty split, refused by _check_length before anything reads this
        return float("nan")
    return float(tok.byte_lengths[np.minimum(ids, tok.vocab_size - 1)].mean())


def _read_bins(files: list[Path], cfg: DataConfig) -> tuple[np.ndarray, np.ndarray, BinMeta | None]:
    arrays = [_read_bin(f) for f in files]
    metas = [read_bin_meta(f, tokenizer_kind(cfg.tokenizer)) for f in files]
    if len(files) == 2:
        same_meta(metas[0], metas[1], str(files[0].parent))
        train, val = arrays
    else:
        tokens = arrays[0]
        n_val = int(len(tokens) * cfg.val_fraction)
        train, val = tokens[: len(tokens) - n_val], tokens[len(tokens) - n_val :]
    meta = metas[0]
    if meta is not None:
        _check_vocab(Dataset(train, val, str(files[0])), meta.vocab_size, sidecar=True)
    return train, val, meta


def _read_text_bytes(path: Path | None) -> bytes:
    if path is None:
        return default_corpus().encode("utf-8")
    if not path.exists():
        raise DataError(
            f"Data path {path} does not exist. Expected a text file, a folder of text files, a "
            'nanoGPT uint16 .bin file, or data.path="" for the embedded corpus.'
        )
    if path.is_file():
        return path.read_bytes()
    return _read_folder(path)


def _read_bin(path: Path) -> np.ndarray:
    if not path.is_file():
        raise DataError(f"Expected nanoGPT token file {path} (uint16), but it does not exist.")
    if path.stat().st_size < 2 or path.stat().st_size % 2:
        raise DataError(
            f"{path} has {path.stat().st_size} bytes; a nanoGPT .bin file holds uint16 token ids, "
            "so its size must be a positive multiple of 2."
        )
    return np.memmap(path, dtype=np.uint16, mode="r")


def _read_folder(folder: Path) -> bytes:
    """All UTF-8 text files under ``folder`` (sorted, hidden ones skipped), joined by blank
    lines."""
    parts = []
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        if any(part.startswith(".") for part in file.relative_to(folder).parts):
            continue
        data = file.read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # binary files (images, archives) are not text to learn from
        parts.append(data)
    if not parts:
        raise DataError(
            f"Data folder {folder} holds no UTF-8 text files (hidden and binary files are "
            f"skipped). "
            "Point data.path at a text file, a folder of .txt/.md/.py files, or a .bin file."
        )
    return b"\n\n".join(parts)


def _check_length(ds: Dataset, seq_len: int, split_by: str) -> None:
    """Each split holds one window; ``split_by`` says what set the split (a config key or the
    ``gpt prepare`` flag of a token store)."""
    need = seq_len + 2  # one window of seq_len inputs plus the shifted target, and one spare start
    for split, arr in (("train", ds.train), ("validation", ds.val)):
        if len(arr) < need:
            raise DataError(
                f"Data {ds.source} is too short: its {split} split has {len(arr)} tokens "
                f"({split_by}), but model.seq_len = {seq_len} needs at least {need}. Use more "
                f"text, or a shorter context, e.g. --set model.seq_len={max(8, len(arr) // 4)}."
            )


def _check_vocab(ds: Dataset, vocab_size: int, *, sidecar: bool = False) -> None:
    top = max(int(ds.train[:_VOCAB_CHECK_TOKENS].max()), int(ds.val[:_VOCAB_CHECK_TOKENS].max()))
    if sidecar and top >= vocab_size:
        raise DataError(
            f"{ds.source} has token id {top}, but its .bin.json sidecar declares vocab_size = "
            f"{vocab_size}. The sidecar does not describe this file; write the vocab size of the "
            "tokenizer that made it."
        )
    if top >= vocab_size:
        raise DataError(
            f"Data {ds.source} has token id {top}, but model.vocab_size = {vocab_size}. Set "
            f"--set model.vocab_size={_round_up(top + 1, 64)} (or the size of the tokenizer that "
            "wrote the data)."
        )


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def _windows(tokens: TokenArray, starts: np.ndarray, seq_len: int) -> np.ndarray:
    if isinstance(tokens, ShardedTokens):  # one slice per window, not a lookup per token
        return np.asarray(tokens.windows(starts, seq_len + 1), dtype=np.int32)
    idx = starts[..., None] + np.arange(seq_len + 1)
    return np.asarray(tokens[idx], dtype=np.int32)


def train_batch(
    tokens: TokenArray,
    step: int,
    *,
    seed: int,
    batch_size: int,
    grad_accum: int,
    seq_len: int,
    process_index: int = 0,
    process_count: int = 1,
) -> np.ndarray:
    """This process's rows of step ``step``'s batch: ``(grad_accum, rows, seq_len + 1)`` int32.

    For a split of a store with a loss mask (:class:`PackedExamples`) it is a dict of three such
    arrays: ``tokens`` (int32), ``mask`` (uint8: 1 where ``tokens[..., t]`` is a target the loss
    counts) and ``segments`` (int32: 1, 2, ... per packed example, 0 at padding); rows are drawn
    from the split's packing for ``seed`` as windows are (see ``packing.py``).

    The global batch depends only on ``(seed, step)``; process ``p`` of ``P`` keeps rows
    ``[p * m / P, (p + 1) * m / P)`` of each micro-batch of ``m`` rows. ``tokens`` may be a
    mixture's train split (``Dataset.train`` of ``data.sources``): each row then comes from one
    source, drawn by weight (see ``MixedTokens``); of preference stores, a dict as for one
    (``preference_mixture.py``).

    Example:
        >>> import numpy as np
        >>> from gpt_models import train_batch
        >>> toks = np.arange(1000)
        >>> a = train_batch(toks, 7, seed=0, batch_size=4, grad_accum=2, seq_len=8)
        >>> b = train_batch(toks, 7, seed=0, batch_size=4, grad_accum=2, seq_len=8)
        >>> a.shape, bool((a == b).all())
        ((2, 2, 9), True)
    """
    rows = batch_size // grad_accum // process_count
    if isinstance(tokens, PackedExamples | PackedMixture):  # a mixture's: before MixedTokens
        packed = mixed_pairs_batch if isinstance(tokens, PackedMixture) else packed_train_batch
        return packed(
            tokens,  # type: ignore[arg-type]
            step,
            seed=seed,
            batch_size=batch_size,  # type: ignore[return-value]
            grad_accum=grad_accum,
            rows=rows,
            process_index=process_index,
        )
    if isinstance(tokens, MixedTokens):
        which, starts = tokens.draw(step, seed=seed, batch_size=batch_size, seq_len=seq_len)
    else:
        rng = np.random.default_rng([seed, step])
        starts = rng.integers(0, len(tokens) - seq_len - 1, size=batch_size)
        which = np.zeros_like(starts)
    mine = np.s_[:, process_index * rows : (process_index + 1) * rows]
    starts, which = (a.reshape(grad_accum, batch_size // grad_accum)[mine] for a in (starts, which))
    if not isinstance(tokens, MixedTokens):
        return _windows(tokens, starts, seq_len)
    out = np.empty((*starts.shape, seq_len + 1), np.int32)
    for k, part in enumerate(tokens.parts):  # each source's rows read from that source only
        if (rows_k := which == k).any():
            out[rows_k] = _windows(part, starts[rows_k], seq_len)
    return out


def eval_batches(
    tokens: TokenArray,
    *,
    n_batches: int,
    batch_size: int,
    seq_len: int,
    process_index: int = 0,
    process_count: int = 1,
) -> np.ndarray:
    """Fixed, evenly spaced validation windows: ``(n_batches, rows, seq_len + 1)`` int32.

    The same windows at every evaluation, so val losses of different steps (and runs) compare.
    For a split of a store with a loss mask: a dict as :func:`train_batch` gives, of evenly
    spaced rows of the split's packing in store order (the same for every seed).

    Example:
        >>> import numpy as np
        >>> from gpt_models import eval_batches
        >>> eval_batches(np.arange(100), n_batches=2, batch_size=3, seq_len=4)[:, :, 0].tolist()
        [[0, 19, 38], [57, 76, 95]]
    """
    if isinstance(tokens, PackedExamples):
        return packed_eval_batches(
            tokens,
            n_batches=n_batches,
            batch_size=batch_size,  # type: ignore[return-value]
            rows=batch_size // process_count,
            process_index=process_index,
        )
    starts = np.linspace(0, len(tokens) - seq_len - 1, n_batches * batch_size).astype(np.int64)
    starts = starts.reshape(n_batches, batch_size)
    rows = batch_size // process_count
    mine = starts[:, process_index * rows : (process_index + 1) * rows]
    return _windows(tokens, mine, seq_len)
