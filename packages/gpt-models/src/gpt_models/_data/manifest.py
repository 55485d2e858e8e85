"""What a token store's ``manifest.json`` must hold, checked as a whole before any shard is read.

The manifest says how to read the shards: their dtype, and for each shard its file name, token
count, size and sha256. A reader trusts it for where to read and how to decode the bytes, so every
field is checked against the others first: names are plain file names inside the store folder
(``../outside.bin`` is refused), the dtype is the one the tokenizer's vocabulary needs, and each
shard's size is its token count times that dtype's width (a manifest whose dtype was edited from
uint16 to uint32 is refused by name, shard by shard, instead of training on garbage).
"""

from __future__ import annotations

import re
from typing import Any, TypeGuard

import numpy as np

MANIFEST = "manifest.json"
FORMAT = "gpt-models token store"
VERSION = 1
# The kinds of store with a loss mask: examples of chats, of completions, or preference pairs (a
# chosen then a rejected example each, packed together: packing.py).
EXAMPLE_KINDS = ("chat", "completion", "preference")
SFT_VERSION = 2  # a store with a loss mask (sft_store.py): older readers must refuse it
# The shard streams of a store with a loss mask beside its token shards (sft_store.py), by manifest
# field and width in bytes. ``origin_shards`` (where each example came from) came later: a store
# without it reads as before, and a reader that does not know it trains on the store all the same.
SFT_SHARDS = {"mask_shards": 1, "example_shards": 4, "origin_shards": 4}
OPTIONAL_SHARDS = ("origin_shards",)
SPLITS = ("train", "val")
DTYPES = ("uint16", "uint32")
TOKENIZER_KINDS = ("byte", "bpe")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def id_dtype(vocab_size: int) -> np.dtype[Any]:
    """uint16 when every id fits, else uint32."""
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def shard_name(split: str, index: int) -> str:
    return f"{split}-{index:05d}.bin"


def is_plain_name(name: object) -> TypeGuard[str]:
    """A file name that stays in its folder: no separator, not ``.``/``..``, not hidden."""
    return (
        isinstance(name, str)
        and bool(name)
        and not name.startswith(".")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
    )


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def manifest_problems(raw: dict[str, Any]) -> list[str]:
    """Everything wrong with a parsed manifest (format and version already checked); [] if none.

    Example:
        >>> manifest_problems({"dtype": "uint16", "tokenizer": {"kind": "byte", "vocab_size": 256,
        ...     "eot_id": 0, "sha256": "0" * 64, "file": None},
        ...     "shards": {"train": [{"file": "../x.bin", "tokens": 2, "bytes": 4,
        ...                           "sha256": "0" * 64}], "val": []}})
        ["shard train[0]: file = '../x.bin' is not a plain file name inside the store folder"]
    """
    problems = _tokenizer_problems(raw.get("tokenizer"))
    dtype = raw.get("dtype")
    width = 0
    if dtype not in DTYPES:
        problems.append(f"dtype = {dtype!r} is not one of {', '.join(DTYPES)}")
    else:
        width = np.dtype(dtype).itemsize
        vocab = (raw.get("tokenizer") or {}).get("vocab_size")
        if _count(vocab) and id_dtype(vocab).name != dtype:
            problems.append(
                f"dtype = {dtype!r}, but the tokenizer's {vocab:,} ids are stored as "
                f"{id_dtype(vocab).name}"
            )
    shards = raw.get("shards")
    if not isinstance(shards, dict) or any(not isinstance(shards.get(s), list) for s in SPLITS):
        problems.append('"shards" is missing or is not {"train": [...], "val": [...]}')
        return problems
    seen: set[str] = set()
    sized: list[str] = []  # shards whose size is not tokens x the dtype's width: told once
    for split in SPLITS:
        for i, rec in enumerate(shards[split]):
            problems += _shard_problems(f"{split}[{i}]", rec, width, dtype, seen, sized)
    if sized:
        more = f" (and {len(sized) - 1} more shard(s) likewise)" if sized[1:] else ""
        problems.append(f"{sized[0]}{more}")
    if raw.get("version") == SFT_VERSION:
        problems += _sft_problems(raw, seen)
    tokens = raw.get("tokens")
    for split in SPLITS:
        total = sum(
            r["tokens"] for r in shards[split] if isinstance(r, dict) and _count(r.get("tokens"))
        )
        if isinstance(tokens, dict) and tokens.get(split) != total:
            problems.append(
                f"tokens.{split} = {tokens.get(split)!r}, but its shards hold {total:,}"
            )
    return problems


def _tokenizer_problems(tok: object) -> list[str]:
    if not isinstance(tok, dict):
        return ['"tokenizer" is missing or is not an object']
    problems = []
    if tok.get("kind") not in TOKENIZER_KINDS:
        problems.append(f"tokenizer.kind = {tok.get('kind')!r} is not one of {TOKENIZER_KINDS}")
    vocab, eot = tok.get("vocab_size"), tok.get("eot_id")
    if not _count(vocab) or vocab == 0:
        problems.append(f"tokenizer.vocab_size = {vocab!r} is not a positive integer")
    elif not _count(eot) or eot >= vocab:
        problems.append(f"tokenizer.eot_id = {eot!r} is not an id below vocab_size {vocab}")
    if not isinstance(tok.get("sha256"), str):
        problems.append(f"tokenizer.sha256 = {tok.get('sha256')!r} is not a sha256")
    if tok.get("file") is not None and not is_plain_name(tok.get("file")):
        problems.append(
            f"tokenizer.file = {tok.get('file')!r} is not a plain file name inside the store folder"
        )
    return problems


def _shard_problems(
    where: str, rec: object, width: int, dtype: object, seen: set[str], sized: list[str]
) -> list[str]:
    if not isinstance(rec, dict):
        return [f"shard {where} is {type(rec).__name__}, not an object"]
    name = rec.get("file")
    if not is_plain_name(name):
        return [f"shard {where}: file = {name!r} is not a plain file name inside the store folder"]
    problems = []
    if name in seen:
        problems.append(f"shard {name} is listed twice")
    seen.add(name)
    tokens, size = rec.get("tokens"), rec.get("bytes")
    if not _count(tokens) or not _count(size):
        problems.append(f"shard {name}: tokens = {tokens!r} and bytes = {size!r} must be counts")
    elif width and size != tokens * width:
        sized.append(
            f"shard {name} holds {tokens:,} tokens in {size:,} bytes, not the {width} bytes a "
            f"token of dtype {dtype}"
        )
    if not isinstance(rec.get("sha256"), str) or not _SHA256.fullmatch(rec["sha256"]):
        problems.append(f"shard {name}: sha256 = {rec.get('sha256')!r} is not a sha256 hex digest")
    return problems


def _sft_problems(raw: dict[str, Any], seen: set[str]) -> list[str]:
    """The loss-mask fields: the kind, and mask, example-length and (if any) origin shards that
    cover the ids and the examples."""
    problems = []
    if raw.get("kind") not in EXAMPLE_KINDS or raw.get("loss_mask") is not True:
        problems.append(
            f"kind = {raw.get('kind')!r} and loss_mask = {raw.get('loss_mask')!r}, but a store of "
            "version 2 is a chat, completion or preference store with a loss mask"
        )
    for field, width in SFT_SHARDS.items():
        streams = raw.get(field)
        if streams is None and field in OPTIONAL_SHARDS:  # a store of an older gpt-models
            continue
        if not isinstance(streams, dict) or any(
            not isinstance(streams.get(s), list) for s in SPLITS
        ):
            problems.append(f'"{field}" is missing or is not {{"train": [...], "val": [...]}}')
            continue
        sized: list[str] = []
        for split in SPLITS:
            for i, rec in enumerate(streams[split]):
                dtype = "uint8" if width == 1 else "uint32"
                problems += _shard_problems(f"{field}.{split}[{i}]", rec, width, dtype, seen, sized)
        problems += sized[:1]
    masks, shards = raw.get("mask_shards"), raw.get("shards")
    if isinstance(masks, dict) and isinstance(shards, dict):
        for split in SPLITS:
            got = [r.get("tokens") for r in masks.get(split) or [] if isinstance(r, dict)]
            want = [r.get("tokens") for r in shards.get(split) or [] if isinstance(r, dict)]
            if got != want:
                problems.append(
                    f"mask_shards.{split} hold {got} ids per shard, but its token shards {want}"
                )
    return problems + _origin_problems(raw)


def _records(streams: dict[str, Any], split: str) -> list[dict[str, Any]]:
    """The shard records of a split that are objects (the others are told apart above)."""
    got = streams.get(split)
    return [r for r in got if isinstance(r, dict)] if isinstance(got, list) else []


def _origin_problems(raw: dict[str, Any]) -> list[str]:
    """The origins stream, where there is one: two values (input, line) for every example."""
    origins, lengths = raw.get("origin_shards"), raw.get("example_shards")
    if not isinstance(origins, dict) or not isinstance(lengths, dict):
        return []
    problems = []
    for split in SPLITS:
        got, examples = (
            sum(r["tokens"] for r in _records(streams, split) if _count(r.get("tokens")))
            for streams in (origins, lengths)
        )
        if got != 2 * examples:
            problems.append(
                f"origin_shards.{split} hold {got:,} values, but its {examples:,} examples need "
                f"two each ({2 * examples:,})"
            )
    return problems
