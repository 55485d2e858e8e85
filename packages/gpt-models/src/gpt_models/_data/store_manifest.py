"""The manifest a finished ``gpt prepare`` writes (``prepare.py``), from its settings, its
per-source counts and every stream's shard records; ``manifest.py`` checks what a reader gets."""

from __future__ import annotations

from typing import Any

import numpy as np

from .chat_format import FIELD, ChatFormat
from .encoder import Encoder
from .manifest import FORMAT, SFT_VERSION, SPLITS, VERSION
from .out_folder import TOKENIZER_JSON
from .sft_store import sft_manifest
from .sources import SourceFile
from .val_split import SPLIT_RULE


def new_stats(sft: bool) -> dict[str, int]:
    """A source's counts before its first document (with the loss mask's for examples)."""
    plain = {"documents": 0, "undecodable": 0, "val_documents": 0}
    return plain | {"masked": 0, "val_masked": 0} if sft else plain


def store_manifest(
    settings: dict[str, Any],
    sources: list[SourceFile],
    stats: list[dict[str, int]],
    shards: dict[str, list[dict[str, Any]]],
    enc: Encoder,
    dtype: np.dtype[Any],
    chat: ChatFormat | None = None,
) -> dict[str, Any]:
    """The manifest; ``chat``: a chat store's format, which later commands read
    (``chat_format.py``)."""
    sft = "kind" in settings
    stats = stats + [new_stats(sft)] * (len(sources) - len(stats))
    fields = (
        {}
        if not sft
        else sft_manifest(settings["kind"], shards)
        | {
            "masked_tokens": {
                "train": sum(st["masked"] for st in stats),
                "val": sum(st["val_masked"] for st in stats),
            }
        }
    )
    return {
        "format": FORMAT,
        "version": SFT_VERSION if sft else VERSION,
        "dtype": dtype.name,
        "shard_tokens": settings["shard_tokens"],
        "tokenizer": {
            "kind": enc.kind,
            "vocab_size": enc.vocab_size,
            "eot_id": enc.eot_id,
            "sha256": enc.sha256(),
            "file": None if enc.json is None else TOKENIZER_JSON,
        },
        "split": {"rule": SPLIT_RULE, "val_fraction": settings["val_fraction"]},
        "text_field": settings["text_field"],
        "sources": [{**src, **st} for src, st in zip(settings["sources"], stats, strict=True)],
        "undecodable_bytes": sum(st["undecodable"] for st in stats),
        "documents": {
            "train": sum(st["documents"] - st["val_documents"] for st in stats),
            "val": sum(st["val_documents"] for st in stats),
        },
        "tokens": {s: sum(r["tokens"] for r in shards[s]) for s in SPLITS},
        "shards": {s: shards[s] for s in SPLITS},
        **fields,
        **({} if chat is None else {FIELD: chat.to_json()}),
        "settings": settings,
    }
