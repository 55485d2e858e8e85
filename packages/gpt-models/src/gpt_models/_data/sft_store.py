"""What a token store of chat or completion examples (an SFT store) holds beside its token shards.

Per split, three more shard streams, written by the same ``ShardWriter`` (atomic, resumable,
sha256-recorded) and checked the same way as the token shards:

    train-mask-00000.bin ...      the loss mask, one uint8 per token id (1: the loss counts it);
                                  shard i covers exactly the ids of token shard i
    train-examples-00000.bin ...  the length in ids of each example (uint32), in store order
    train-origins-00000.bin ...   where each example came from: two uint32 per example, the index
                                  of its input in the manifest's ``sources`` and its 1-based line
                                  (both examples of a preference pair carry the pair's line)

The examples follow each other in the token shards with no separator (an example ends with what
its template ends it with); a preference store's examples go in pairs, each pair's chosen example
then its rejected one. The manifest says ``"kind"`` (``chat``, ``completion`` or ``preference``,
which also records ``pairs`` per split),
``"loss_mask": true``, and records ``mask_shards``, ``example_shards``, ``origin_shards``,
``examples`` and ``masked_tokens`` per split; its ``version`` is ``SFT_VERSION``, which a
gpt-models that cannot read the masks refuses instead of training on the ids as plain text.

The origins came later, within the same version: a store without ``origin_shards`` (made by an
older gpt-models, or resumed from a prepare one started) trains as before, its notes naming no
line, and an older gpt-models trains on a store with them, not reading them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .manifest import SPLITS
from .store import ShardedTokens, ShardWriter, Store

MASK, EXAMPLES, ORIGINS = "mask", "examples", "origins"
STREAMS: dict[str, np.dtype[Any]] = {
    MASK: np.dtype("u1"),
    EXAMPLES: np.dtype("<u4"),
    ORIGINS: np.dtype("<u4"),
}
FIELDS = {MASK: "mask_shards", EXAMPLES: "example_shards", ORIGINS: "origin_shards"}


def stream(split: str, what: str) -> str:
    """The name of a split's mask, example-length or origin stream (its shards' prefix)."""
    return f"{split}-{what}"


def sft_writers(out: Path, state: dict[str, Any], shard_tokens: int) -> dict[str, ShardWriter]:
    """The mask, example-length and origin writers of both splits (an interrupted run's, cut
    back; an interrupted run of a gpt-models without origins resumes without them)."""
    older = bool(state["writers"]) and stream(SPLITS[0], ORIGINS) not in state["writers"]
    names = {
        stream(split, what): dtype
        for split in SPLITS
        for what, dtype in STREAMS.items()
        if not (older and what == ORIGINS)
    }
    return {
        name: ShardWriter(out, name, dtype, shard_tokens, state["writers"].get(name, {}))
        for name, dtype in names.items()
    }


def sft_manifest(kind: str, shards: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The manifest fields of an SFT store (but ``masked_tokens``), from its streams' records."""
    fields: dict[str, Any] = {"kind": kind, "loss_mask": True}
    for what, field in FIELDS.items():
        if stream(SPLITS[0], what) in shards:  # (no origins: resumed from an older prepare)
            fields[field] = {split: shards[stream(split, what)] for split in SPLITS}
    fields["examples"] = {s: sum(r["tokens"] for r in shards[stream(s, EXAMPLES)]) for s in SPLITS}
    if kind == "preference":  # two examples a pair, chosen then rejected
        fields["pairs"] = {s: n // 2 for s, n in fields["examples"].items()}
    return fields


def origins_of(source: int, line: int, count: int) -> np.ndarray:
    """The origins stream's values for a line's ``count`` examples (one, or a preference pair's
    two): its input's index in the manifest's ``sources`` and its 1-based line, for each."""
    return np.tile(np.array([source, line], np.uint32), count)


class Origins:
    """Where the examples of one split came from, read from its origins stream only at the
    examples asked about (two ``pread`` calls each at most, never the whole stream).

    ``of(i)`` is example ``i``'s ``name:line``, the name as the manifest's ``sources`` records it
    (relative to the folder given to gpt prepare, or the file's own name).
    """

    def __init__(self, values: ShardedTokens, names: list[str]) -> None:
        self.values, self.names = values, names

    def of(self, example: int) -> str:
        source, line = (int(v) for v in self.values[2 * example : 2 * example + 2])
        name = self.names[source] if source < len(self.names) else f"input {source}"
        return f"{name}:{line}"


def split_origins(store: Store, split: str) -> Origins | None:
    """The origins of a split's examples; None for a store made before gpt prepare recorded
    them."""
    records = store.manifest.get(FIELDS[ORIGINS], {}).get(split)
    if records is None:
        return None
    values = ShardedTokens([store.folder / r["file"] for r in records], STREAMS[ORIGINS])
    return Origins(values, [str(s.get("name")) for s in store.manifest.get("sources", [])])
