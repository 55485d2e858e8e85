"""What a token store of chat or completion examples (an SFT store) holds beside its token shards.

Per split, two more shard streams, written by the same ``ShardWriter`` (atomic, resumable,
sha256-recorded) and checked the same way as the token shards:

    train-mask-00000.bin ...      the loss mask, one uint8 per token id (1: the loss counts it);
                                  shard i covers exactly the ids of token shard i
    train-examples-00000.bin ...  the length in ids of each example (uint32), in store order

The examples follow each other in the token shards with no separator (an example ends with what
its template ends it with); a preference store's examples go in pairs, each pair's chosen example
then its rejected one. The manifest says ``"kind"`` (``chat``, ``completion`` or ``preference``,
which also records ``pairs`` per split),
``"loss_mask": true``, and records ``mask_shards``, ``example_shards``, ``examples`` and
``masked_tokens`` per split; its ``version`` is ``SFT_VERSION``, which a gpt-models that cannot
read the masks refuses instead of training on the ids as plain text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .manifest import SPLITS
from .store import ShardWriter

MASK, EXAMPLES = "mask", "examples"
STREAMS: dict[str, np.dtype[Any]] = {MASK: np.dtype("u1"), EXAMPLES: np.dtype("<u4")}
FIELDS = {MASK: "mask_shards", EXAMPLES: "example_shards"}


def stream(split: str, what: str) -> str:
    """The name of a split's mask or example-length stream (its shards' prefix)."""
    return f"{split}-{what}"


def sft_writers(out: Path, state: dict[str, Any], shard_tokens: int) -> dict[str, ShardWriter]:
    """The mask and example-length writers of both splits (an interrupted run's, cut back)."""
    names = {stream(split, what): dtype for split in SPLITS for what, dtype in STREAMS.items()}
    return {
        name: ShardWriter(out, name, dtype, shard_tokens, state["writers"].get(name, {}))
        for name, dtype in names.items()
    }


def sft_manifest(kind: str, shards: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The manifest fields of an SFT store (but ``masked_tokens``), from its streams' records."""
    fields: dict[str, Any] = {"kind": kind, "loss_mask": True}
    for what, field in FIELDS.items():
        fields[field] = {split: shards[stream(split, what)] for split in SPLITS}
    fields["examples"] = {s: sum(r["tokens"] for r in shards[stream(s, EXAMPLES)]) for s in SPLITS}
    if kind == "preference":  # two examples a pair, chosen then rejected
        fields["pairs"] = {s: n // 2 for s, n in fields["examples"].items()}
    return fields
