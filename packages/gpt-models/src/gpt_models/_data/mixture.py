"""Data mixtures (``data.sources``): the sampler, and the check that every source shares one
tokenizer.

Which source a row of step ``s`` comes from depends only on ``(seed, s, row)``: a uniform draw per
row from ``np.random.default_rng([seed, s, 1])``, placed on the cumulative weights. The row's window
is then drawn in its source with ``np.random.default_rng([seed, s])``, the stream ``train_batch``
uses for a single source, with that source's length as the bound. So a resumed run needs no loader
state beyond the step, every process computes the same global draws and reads only its own rows,
and a mixture of one source draws exactly the windows ``data.path`` would. Reading the windows is
``corpus.train_batch``'s (it knows the kinds of token arrays); loading the sources is
``corpus.load_dataset``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._config.schema import DataConfig
from .._config.sources import DataSource
from .._errors import DataError
from .bpe import BPETokenizer
from .store import is_store, read_manifest, tokenizer_sha256
from .token_files import read_sidecar

# The third entropy word of the source draws: [seed, step] alone is the window stream.
_SOURCE_STREAM = 1


class MixedTokens:
    """One split of a mixture: a token array per source, with the sources' names and weights.

    ``len()`` is the total number of ids; :meth:`draw` gives a step's rows. ``parts[k]`` is source
    ``k``'s array (a numpy array, a memmap or a store's shards), read only through its windows.
    """

    def __init__(
        self, parts: Sequence[Any], weights: Sequence[float], names: Sequence[str]
    ) -> None:
        self.parts = tuple(parts)
        self.names = tuple(names)
        total = float(sum(weights))
        self.weights = np.array([w / total for w in weights])
        self._cdf = np.cumsum(self.weights)

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def __getitem__(self, index: Any) -> np.ndarray:
        """A slice of the sources' ids one after the other (``val[:]``: every source's split).

        Windows are drawn per source (:meth:`draw`, ``Dataset.parts``), never across two sources,
        so other indices are refused rather than read across a boundary.
        """
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError(
                f"A mixture's split takes only a slice such as [a:b], got {index!r}: its windows "
                "come from one source each (train_batch, or each Dataset of Dataset.parts)."
            )
        start, stop, _ = index.indices(len(self))
        out, offset = [], 0
        for part in self.parts:
            lo, hi = max(start - offset, 0), min(stop - offset, len(part))
            if lo < hi:
                out.append(np.asarray(part[lo:hi]))
            offset += len(part)
        return np.concatenate(out) if out else np.empty(0, np.asarray(self.parts[0][:0]).dtype)

    def row_sources(self, step: int, *, seed: int, batch_size: int) -> np.ndarray:
        """The source index of each row of step ``step``'s global batch: ``(batch_size,)`` int64.

        Example:
            >>> import numpy as np
            >>> mix = MixedTokens([np.arange(100), np.arange(100)], [0.75, 0.25], ["a", "b"])
            >>> shares = np.bincount(np.concatenate(
            ...     [mix.row_sources(s, seed=0, batch_size=64) for s in range(200)])) / 12800
            >>> [round(float(x), 2) for x in shares]
            [0.75, 0.25]
        """
        u = np.random.default_rng([seed, step, _SOURCE_STREAM]).random(batch_size)
        # min(): a u that rounds onto the last edge of the cumulative sum stays in range.
        return np.minimum(np.searchsorted(self._cdf, u, side="right"), len(self.parts) - 1)

    def draw(
        self, step: int, *, seed: int, batch_size: int, seq_len: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(sources, starts)`` of step ``step``'s global batch: each row's source and its window's
        first position in that source, both ``(batch_size,)``."""
        which = self.row_sources(step, seed=seed, batch_size=batch_size)
        highs = np.array([len(p) - seq_len - 1 for p in self.parts], dtype=np.int64)
        starts = np.random.default_rng([seed, step]).integers(0, highs[which])
        return which, starts


def missing_source(i: int, src: DataSource) -> DataError:
    """The error for source ``i`` of ``data.sources``, whose path does not exist."""
    return DataError(
        f"data.sources[{i}] ({src.label!r}) has path {src.path}, which does not exist. Expected a "
        "text file or folder, a nanoGPT .bin file or a token store made by gpt prepare; fix the "
        "path, or leave the source out of data.sources."
    )


def example_store_in_mixture(i: int, src: DataSource) -> DataError:
    """The error for source ``i`` of ``data.sources``, a store of chat or completion examples
    (preference stores mix with each other: ``preference_mixture.py``)."""
    return DataError(
        f"data.sources[{i}] ({src.label!r}, {src.path}) is a store of chat or completion examples "
        "with a loss mask, and a mixture reads windows of plain token ids: mixing example stores "
        f"is not supported. Train on it alone (--set data.path={src.path}), or prepare the "
        "sources' JSONL files into one store."
    )


def part_configs(cfg: DataConfig) -> tuple[DataConfig, ...]:
    """One ``DataConfig`` per source of ``cfg.sources``: its path and kind, the rest ``cfg``'s."""
    return tuple(
        dataclasses.replace(cfg, path=s.path, kind=s.kind, sources=()) for s in cfg.sources
    )


@dataclasses.dataclass(frozen=True)
class _Made:
    """The tokenizer a source's ids were made with, as far as the source says."""

    sha256: str
    shown: str


def check_shared_tokenizer(sources: Sequence[DataSource]) -> None:
    """Every source that records its tokenizer (a token store, a ``.bin`` with a sidecar) records
    the same one; text is tokenized by the run's tokenizer and records none.

    Raises:
        DataError: two sources made by different tokenizers, both named.
    """
    first: tuple[DataSource, _Made] | None = None
    for src in sources:
        made = _made_by(Path(src.path))
        if made is None:
            continue
        if first is None:
            first = (src, made)
            continue
        ref, ref_made = first
        if made.sha256 != ref_made.sha256:
            raise DataError(
                f"The sources {ref.label!r} ({ref.path}) and {src.label!r} ({src.path}) of "
                f"data.sources were made by different tokenizers: {ref.label!r} by "
                f"{ref_made.shown}, "
                f"{src.label!r} by {made.shown}. A mixture trains one model on one tokenizer's "
                f"ids. Prepare {src.label!r} again with the tokenizer of {ref.label!r} (gpt "
                f"prepare ... --tokenizer {_tokenizer_flag(Path(ref.path))}), or leave it out."
            )


def _made_by(path: Path) -> _Made | None:
    if is_store(path):
        info = read_manifest(path)["tokenizer"]
        sha = str(info["sha256"])
        return _Made(
            sha, f"the {info['kind']} tokenizer ({info['vocab_size']} ids, sha256 {sha[:12]})"
        )
    bins = [path / "train.bin"] if path.is_dir() else [path] if path.suffix == ".bin" else []
    meta = read_sidecar(bins[0]) if bins and bins[0].is_file() else None
    if meta is None:
        return None
    tokenizer_json = (
        None if meta.tokenizer_file is None else BPETokenizer.load(meta.tokenizer_file).to_json()
    )
    sha = tokenizer_sha256(tokenizer_json)
    return _Made(sha, f"the {meta.tokenizer} tokenizer ({meta.vocab_size} ids, sha256 {sha[:12]})")


def _tokenizer_flag(path: Path) -> str:
    if is_store(path):
        info = read_manifest(path)["tokenizer"]
        return str(path / info["file"]) if info.get("file") else "byte"
    bins = [path / "train.bin"] if path.is_dir() else [path]
    meta = read_sidecar(bins[0])
    return str(meta.tokenizer_file) if meta is not None and meta.tokenizer_file else "byte"


def describe(names: Sequence[str], weights: np.ndarray, paths: Sequence[str]) -> str:
    """``mixture of web (0.8, /data/web) and code (0.2, /data/code.txt)``: what messages call it."""
    items = [f"{n} ({w:.3g}, {p})" for n, w, p in zip(names, weights.tolist(), paths, strict=True)]
    listed = items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    return f"mixture of {listed}"
