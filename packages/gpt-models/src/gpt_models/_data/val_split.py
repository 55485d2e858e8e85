"""Which split a document of ``gpt prepare`` goes to, and the ``--val-fraction`` that fixes an
empty validation split.

Each document has a key in [0, 1): a hash of (its source's name, its position). It goes to the
validation split when its key is below ``--val-fraction``, so adding files moves no document. On a
small corpus every key can lie above the fraction (12 documents at the default 0.01: 89% of the
time), and a single text file is a single document: the store would have no validation split,
which ``gpt train`` refuses. Prepare keeps the smallest keys it saw (with their token counts), so
that it can name a fraction that works, and what it puts in each split.
"""

from __future__ import annotations

import bisect
import hashlib
from typing import Any

SPLIT_RULE = (
    "val if int.from_bytes(blake2b(f'{source}\\0{position}', digest_size=8), 'little')"
    " < val_fraction * 2**64"
)
LADDER = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)  # the fractions a fix is chosen from
_KEEP = 64  # smallest keys remembered: enough to count every candidate's documents on small corpora


def _hash(name: str, pos: int) -> int:
    digest = hashlib.blake2b(f"{name}\0{pos}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def split_key(name: str, pos: int) -> float:
    """The key in [0, 1) of document ``pos`` of source ``name`` (for choosing a fraction)."""
    return _hash(name, pos) / 2.0**64


def split_of(name: str, pos: int, val_fraction: float) -> str:
    """The split of document ``pos`` of source ``name``: a hash, so adding files moves nothing."""
    # The integer against the float, compared exactly (as every store so far was split).
    return "val" if _hash(name, pos) < val_fraction * 2.0**64 else "train"


def remember(smallest: list[list[float]], key: float, tokens: int) -> None:
    """Keep ``[key, tokens]`` in ``smallest`` (sorted, at most ``_KEEP`` long; JSON-able for the
    progress file of a resumable prepare)."""
    if len(smallest) < _KEEP or key < smallest[-1][0]:
        bisect.insort(smallest, [key, tokens])
        del smallest[_KEEP:]


def suggest(smallest: list[list[float]], documents: int, given: float) -> dict[str, Any] | None:
    """The fraction of ``LADDER`` nearest ``given`` that puts at least one of the ``documents`` in
    each split (above ``given`` when its validation split is empty, below when its train split
    is): ``{"fraction", "val_documents", "val_tokens"}``, or None when no fraction can.

    Example:
        >>> suggest([[0.03, 40], [0.4, 50], [0.7, 60]], documents=3, given=0.01)
        {'fraction': 0.05, 'val_documents': 1, 'val_tokens': 40}
        >>> suggest([[0.03, 40], [0.4, 50]], documents=2, given=0.9)  # both in val at 0.9
        {'fraction': 0.3, 'val_documents': 1, 'val_tokens': 40}
    """
    in_val = sum(key < given for key, _ in smallest)
    upward = in_val == 0
    ladder = [f for f in LADDER if f > given] if upward else [f for f in LADDER if f < given][::-1]
    for fraction in ladder:
        val = [tokens for key, tokens in smallest if key < fraction]
        if val and len(val) < documents:
            return {"fraction": fraction, "val_documents": len(val), "val_tokens": int(sum(val))}
    return None


def empty_val_fix(
    smallest: list[list[float]], documents: int, given: float, text_file: str | None = None
) -> str:
    """What to do about an empty validation split, in words: a working ``--val-fraction``, or
    (too few documents for any) how to get more; ``text_file``: the corpus's only file, if text."""
    fix = suggest(smallest, documents, given)
    if fix is not None:
        return (
            f"--val-fraction {fix['fraction']} puts {fix['val_documents']} of the {documents:,} "
            f"documents ({fix['val_tokens']:,} tokens) in the validation split"
        )
    what = "1 document" if documents == 1 else f"{documents:,} documents"
    direct = (
        f"; or train on the text itself, gpt train --set data.path={text_file} (data.val_fraction "
        "splits its bytes)"
        if text_file is not None
        else ""
    )
    return (
        f"the corpus is {what} (a text file is one document; a .jsonl file has one per line), "
        f"too few for two splits: give more documents{direct}"
    )
