"""Mixtures of preference stores (``data.sources`` of stores of chosen/rejected pairs): the split,
its batches, and which mixtures of stores with a loss mask are refused.

A step's rows are drawn as a plain mixture's are (``mixture.py``): each row's source from
``MixedTokens.row_sources`` (``default_rng([seed, step, 1])`` on the cumulative weights), then
the row of that source's packing from ``default_rng([seed, step])``, the stream a single store's
``packed_train_batch`` draws from, bounded by that source's number of packed rows. So a resumed run
needs no loader state beyond the step, every process computes the same global draws and reads only
its own rows, and a mixture of one preference store draws exactly the batches of ``data.path``.
Each source packs its training pairs as it would alone (``packing.py``, ``[seed, 2]``).

Mixtures of chat or completion stores stay refused (``mixture.example_store_in_mixture``): their
runs also take a chat format from their store, which a mixture would have to agree on first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._config.sources import DataSource
from .._errors import DataError
from .mixture import MixedTokens, example_store_in_mixture
from .packing import PackedExamples

_PAIRS = 2  # PackedExamples.group of a preference store: a chosen and a rejected example


class PackedMixture(MixedTokens):
    """One split of a mixture of preference stores: each source's :class:`PackedExamples`.

    As :class:`MixedTokens` (``len()``, slices of the ids, ``row_sources``, the sources' names and
    normalised weights); :meth:`picks` draws a step's packed rows instead of windows.

    Example:
        >>> import numpy as np
        >>> class Rows:  # stands in for a source's packing: 40 and 10 packed rows
        ...     def __init__(self, n): self.n = n
        ...     def rows(self, seed): return None, np.arange(self.n + 1)
        >>> mix = PackedMixture([Rows(40), Rows(10)], [0.7, 0.3], ["a", "b"])
        >>> which, picks = mix.picks(3, seed=0, batch_size=8)
        >>> bool((picks < np.array([40, 10])[which]).all())
        True
    """

    group = _PAIRS

    def picks(self, step: int, *, seed: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``(sources, rows)`` of step ``step``'s global batch: each row's source and the index of
        the packed row it reads there, both ``(batch_size,)``."""
        which = self.row_sources(step, seed=seed, batch_size=batch_size)
        highs = np.array([len(p.rows(seed)[1]) - 1 for p in self.parts], dtype=np.int64)
        return which, np.random.default_rng([seed, step]).integers(0, highs[which])


def mixed_pairs_batch(
    split: PackedMixture,
    step: int,
    *,
    seed: int,
    batch_size: int,
    grad_accum: int,
    rows: int,
    process_index: int,
) -> dict[str, np.ndarray]:
    """This process's rows of step ``step``, each row read from its own source only: the dict
    ``packed_train_batch`` gives, each array ``(grad_accum, rows, 2 * (seq_len + 1))``."""
    which, picks = split.picks(step, seed=seed, batch_size=batch_size)
    mine = np.s_[:, process_index * rows : (process_index + 1) * rows]
    which, picks = (a.reshape(grad_accum, batch_size // grad_accum)[mine] for a in (which, picks))
    out: dict[str, np.ndarray] = {}
    for k, part in enumerate(split.parts):
        if not (rows_k := which == k).any():
            continue
        got = part.read(picks[rows_k], seed)
        for key, value in got.items():
            if key not in out:
                out[key] = np.zeros((*picks.shape, value.shape[-1]), value.dtype)
            out[key][rows_k] = value
    return out


def pairs_mixture(
    sources: Sequence[DataSource], trains: Sequence[Any], vals: Sequence[Any]
) -> tuple[PackedMixture, PackedMixture] | None:
    """The train and validation splits of a mixture whose sources hold a loss mask: a
    :class:`PackedMixture` each where every source is a preference store; None where none holds a
    loss mask (a plain mixture).

    Raises:
        DataError: a chat or completion store among the sources (``example_store_in_mixture``), or a
            preference store mixed with a source that is not one.
    """
    packed = [isinstance(t, PackedExamples) for t in trains]
    if not any(packed):
        return None
    for i, (src, t) in enumerate(zip(sources, trains, strict=True)):
        if isinstance(t, PackedExamples) and t.group != _PAIRS:
            raise example_store_in_mixture(i, src)
    i, j = packed.index(True), packed.index(False) if not all(packed) else -1
    if j >= 0:
        raise not_all_pairs(i, sources[i], j, sources[j])
    names, weights = [s.label for s in sources], [s.weight for s in sources]
    return PackedMixture(trains, weights, names), PackedMixture(vals, weights, names)


def not_all_pairs(i: int, pairs: DataSource, j: int, other: DataSource) -> DataError:
    """The error for a preference store (source ``i``) mixed with source ``j``, which is not one."""
    return DataError(
        f"data.sources[{i}] ({pairs.label!r}, {pairs.path}) is a preference store (chosen/"
        f"rejected pairs), but data.sources[{j}] ({other.label!r}, {other.path}) holds plain "
        "text or token ids, and a preference store mixes only with other preference stores (a step "
        "reads pairs from every source). Expected every source to be a store made by gpt prepare "
        f"of prompt/chosen/rejected JSONL; prepare {other.label!r} so, or leave it out of "
        "data.sources."
    )


def packed_splits(data: Any) -> tuple[PackedExamples, ...]:
    """The packed splits of a ``Dataset`` of pairs, train then validation of each source (a
    mixture's sources, or the store itself): what a precomputed reference scores."""
    splits = [s for p in (data.parts or (data,)) for s in (p.train, p.val)]
    assert all(isinstance(s, PackedExamples) for s in splits)
    return tuple(splits)
