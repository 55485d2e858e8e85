"""The batches of a store with a loss mask (``sft_store.py``): whole examples packed into rows.

A split's examples that fit a row of ``seq_len + 1`` ids are packed in order, each into the
current row while it has room, else into a new one (next fit). The training split packs them in a
permutation drawn from ``default_rng([seed, _PACK_STREAM])``, the validation split in store order;
so the rows are a pure function of the store and ``train.seed``. A step's rows are drawn as
``train_batch`` draws a plain store's windows (``default_rng([seed, step])``, with replacement),
each process keeping its own share: a resumed run reads exactly the batches of an uninterrupted one.

A row is three arrays of ``seq_len + 1``: ``tokens`` (0 after the last example), ``mask`` (the
loss mask, 0 at each example's first id and at padding) and ``segments`` (1, 2, ... per example,
0 at padding). An example longer than a row is never cut: it is left out and counted
(:attr:`PackedExamples.note`, which names the first and the longest by ``file:line`` where the
store records its examples' origins: ``sft_store.Origins``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._errors import DataError
from .sft_store import EXAMPLES, MASK, Origins, split_origins
from .store import ShardedTokens, Store

_PACK_STREAM = 2  # the third entropy word of the packing order ([seed, s]: windows; 1: mixtures)


class PackedExamples:
    """One split of a store with a loss mask: its ids, mask and example lengths, packed into rows.

    ``len()`` is its number of ids (as for a plain split); slices read its ids. With ``group``
    2 (a preference store) the unit packed is a pair of examples, chosen then rejected: a row is
    two sub-rows of ``seq_len + 1`` side by side (``2 * (seq_len + 1)`` ids), the chosen answers
    in the first and the rejected ones in the second, a pair's two with the same segment id.
    """

    def __init__(
        self,
        tokens: ShardedTokens,
        mask: ShardedTokens,
        lengths: np.ndarray,
        seq_len: int,
        *,
        split: str,
        source: str,
        group: int = 1,
        origins: Origins | None = None,
    ) -> None:
        self.tokens, self.mask, self.seq_len, self.group = tokens, mask, seq_len, group
        self.shuffle = split == "train"  # the validation split packs in store order
        self.lengths = np.asarray(lengths, np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)])[:-1]
        self.units = self.lengths.reshape(-1, group)  # (units, group): each example's length
        longest = self.units.max(axis=1, initial=0)  # each unit's longest example
        self.fits = np.flatnonzero(longest <= seq_len + 1)
        self.ref: np.ndarray | None = None  # (units, group) reference log-probs, when computed
        self._rows: dict[int | None, tuple[np.ndarray, np.ndarray]] = {}
        what = "examples" if group == 1 else "preference pairs"
        longer = "is longer" if group == 1 else "has an answer longer"
        n, skipped = len(self.units), len(self.units) - len(self.fits)

        def where(unit: int) -> str:  # "" for a store made before gpt prepare recorded origins
            return "" if origins is None else origins.of(unit * group)

        if n and not len(self.fits):
            at = where(int(longest.argmin()))
            raise DataError(
                f"Every one of the {n:,} {what} of the {split} split of {source} {longer} than "
                f"a row of model.seq_len + 1 = {seq_len + 1} tokens (the shortest has "
                f"{int(longest.min()):,}{at and f', at {at}'}), and examples are never cut. Set "
                f"--set model.seq_len={_fitting(longest)} (or more), or prepare shorter examples."
            )
        self.note = (
            ""
            if not skipped
            else (
                f"note: {skipped:,} of the {n:,} {what} of the {split} split of {source} "
                f"{'are' if group == 1 else 'have prompt plus answer'} longer than "
                f"model.seq_len + 1 = {seq_len + 1} tokens and are left out "
                + _left_out(longest, seq_len + 1, where)
            )
        )

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: Any) -> np.ndarray:
        return self.tokens[index]

    def rows(self, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
        """``(order, row_ptr)``: row ``r`` holds units ``order[row_ptr[r]:row_ptr[r + 1]]``."""
        key = seed if self.shuffle else None
        if key not in self._rows:
            order = self.fits
            if key is not None:
                order = np.random.default_rng([key, _PACK_STREAM]).permutation(order)
            self._rows[key] = (order, _next_fit(self.units[order], self.seq_len + 1))
        return self._rows[key]

    def read(self, rows: np.ndarray, seed: int | None) -> dict[str, np.ndarray]:
        """Rows ``rows`` (any shape) of the packing: ``tokens``/``mask``/``segments`` of shape
        ``(*rows.shape, group * (seq_len + 1))``; with reference log-probs (``ref``) also
        ``ref``, each unit's at its segment id in each sub-row."""
        order, ptr = self.rows(seed)
        flat = rows.reshape(-1)
        width, g = self.seq_len + 1, self.group
        out: dict[str, np.ndarray] = {
            "tokens": np.zeros((len(flat), g * width), np.int32),
            "mask": np.zeros((len(flat), g * width), np.uint8),
            "segments": np.zeros((len(flat), g * width), np.int32),
        }
        if self.ref is not None:
            out["ref"] = np.zeros((len(flat), g * width), np.float32)
        for i, r in enumerate(flat.tolist()):
            at = [k * width for k in range(g)]
            for seg, unit in enumerate(order[ptr[r] : ptr[r + 1]].tolist(), start=1):
                for k in range(g):
                    ex = unit * g + k
                    start, n, a = int(self.starts[ex]), int(self.lengths[ex]), at[k]
                    out["tokens"][i, a : a + n] = self.tokens[start : start + n]
                    out["mask"][i, a : a + n] = self.mask[start : start + n]
                    out["mask"][i, a] = 0  # the first id of an example is no target
                    out["segments"][i, a : a + n] = seg
                    if self.ref is not None:
                        out["ref"][i, k * width + seg] = self.ref[unit, k]
                    at[k] += n
        return {k: v.reshape(*rows.shape, g * width) for k, v in out.items()}

    def padding(self, seed: int | None = None) -> float:
        """The share of the packed rows' ids that is padding."""
        order, ptr = self.rows(seed)
        rows = len(ptr) - 1
        used = float(self.units[order].sum())
        return 1.0 - used / max(rows * self.group * (self.seq_len + 1), 1)


def packed_split(store: Store, split: str, seq_len: int) -> PackedExamples:
    """A split of a store with a loss mask, its examples packed into rows of ``seq_len + 1``."""
    m, folder = store.manifest, store.folder
    paths = {
        what: [folder / r["file"] for r in m[field][split]]
        for what, field in ((MASK, "mask_shards"), (EXAMPLES, "example_shards"))
    }
    lengths = np.asarray(ShardedTokens(paths[EXAMPLES], np.dtype("<u4"))[:], np.int64)
    if not len(lengths):
        made = m.get("settings", {}).get("val_fraction")
        raise DataError(
            f"The {split} split of the token store {folder} holds no examples (split by gpt "
            f"prepare --val-fraction {made}), and training needs both splits. Prepare the store "
            "again with a --val-fraction that puts examples in both (gpt prepare names one)."
        )
    tokens = store.train if split == "train" else store.val
    mask = ShardedTokens(paths[MASK], np.dtype("u1"))
    return PackedExamples(
        tokens,
        mask,
        lengths,
        seq_len,
        split=split,
        source=str(folder),
        group=2 if m.get("kind") == "preference" else 1,
        origins=split_origins(store, split),
    )


def _next_fit(lengths: np.ndarray, width: int) -> np.ndarray:
    """Row boundaries (``row_ptr``) of next-fit packing units of ``lengths`` ``(units, group)``
    (each <= ``width``) in order: a unit goes into the current row while every sub-row has room."""
    ptr, used = [0], np.zeros(lengths.shape[1], np.int64)
    for i, n in enumerate(lengths):
        if (used + n > width).any():
            ptr.append(i)
            used[:] = 0
        used += n
    if len(lengths):
        ptr.append(len(lengths))
    return np.array(ptr, np.int64)


def _left_out(longest: np.ndarray, width: int, where: Callable[[int], str]) -> str:
    """The end of the note on the units longer than a row (``longest``: each unit's longest
    example): where the first and the longest came from (``where(unit)``; "" where the store does
    not record it) and how to keep them."""
    big, too_long = int(longest.argmax()), longest > width
    most, first = int(longest[big]), where(int(np.argmax(too_long)))
    if not first:
        return f"(the longest has {most:,}; examples are never cut)."
    several = int(too_long.sum()) > 1
    at = (
        f"the first is {first}; the longest has {most:,} tokens, at {where(big)}"
        if several
        else f"it is {first}, with {most:,} tokens"
    )
    them = "them" if several else "it"
    return (
        f"({at}; examples are never cut). To keep {them}, set --set model.seq_len={most - 1} "
        f"(or more), or shorten {them}."
    )


def _fitting(lengths: np.ndarray) -> int:
    """A seq_len that fits at least half the examples, rounded up to a multiple of 64."""
    return max(64, -(-(int(np.median(lengths)) - 1) // 64) * 64)


def packed_train_batch(
    split: PackedExamples,
    step: int,
    *,
    seed: int,
    batch_size: int,
    grad_accum: int,
    rows: int,
    process_index: int,
) -> dict[str, np.ndarray]:
    """This process's rows of step ``step``: each array ``(grad_accum, rows, seq_len + 1)``."""
    _, ptr = split.rows(seed)
    picks = np.random.default_rng([seed, step]).integers(0, len(ptr) - 1, size=batch_size)
    picks = picks.reshape(grad_accum, batch_size // grad_accum)
    return split.read(picks[:, process_index * rows : (process_index + 1) * rows], seed)


def packed_eval_batches(
    split: PackedExamples, *, n_batches: int, batch_size: int, rows: int, process_index: int
) -> dict[str, np.ndarray]:
    """Fixed, evenly spaced rows of the packing: each array ``(n_batches, rows, seq_len + 1)``."""
    _, ptr = split.rows(None)
    picks = np.linspace(0, len(ptr) - 2, n_batches * batch_size).round().astype(np.int64)
    picks = picks.reshape(n_batches, batch_size)
    return split.read(picks[:, process_index * rows : (process_index + 1) * rows], None)
