"""The sidecar of a ``.bin`` token file: which tokenizer made the ids, so they are read the same
way.

A file ``X.bin`` (uint16 token ids, nanoGPT's layout) may have ``X.bin.json`` next to it::

    {"tokenizer": "bpe", "vocab_size": 2048, "tokenizer_file": "tokenizer.json"}

``tokenizer`` is ``"byte"`` (``vocab_size`` 256) or ``"bpe"``; a ``"bpe"`` sidecar names the
tokenizer
JSON file (written by ``BPETokenizer.save``), relative to the ``.bin``'s folder. ``dtype``, if
given,
must be ``"uint16"``. A ``.bin`` without a sidecar is read as before (nanoGPT files): its ids only
have to fit ``model.vocab_size``, its bytes per token are unknown, and it can only be used with
``data.tokenizer = "byte"``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from core_primitives import list_alternatives

from .._errors import DataError

TOKENIZERS = ("byte", "bpe")


@dataclasses.dataclass(frozen=True)
class BinMeta:
    """A parsed, checked sidecar: the tokenizer's name, its vocab size, and its file (BPE only)."""

    tokenizer: str
    vocab_size: int
    tokenizer_file: Path | None


def sidecar_path(bin_path: Path) -> Path:
    """``X.bin`` -> ``X.bin.json``."""
    return bin_path.with_name(bin_path.name + ".json")


def read_bin_meta(bin_path: Path, tokenizer: str) -> BinMeta | None:
    """The checked sidecar of ``bin_path`` (None if it has none and ``tokenizer`` is byte).

    Raises:
        DataError: a malformed sidecar, one that disagrees with ``data.tokenizer``, or a BPE
            ``.bin`` without a sidecar.
    """
    side = sidecar_path(bin_path)
    if not side.is_file():
        if tokenizer == "bpe":
            raise DataError(
                f'data.tokenizer = "bpe" with {bin_path}, but {side.name} is missing: the BPE '
                "tokenizer that made these ids is unknown. Write the sidecar next to the .bin, "
                "e.g. "
                '{"tokenizer": "bpe", "vocab_size": 2048, "tokenizer_file": "tokenizer.json"} '
                "(docs/gpt-models/data.md, nanoGPT .bin files), or use text data so that a "
                "tokenizer is trained."
            )
        return None
    meta = _parse(side)
    if meta.tokenizer != tokenizer:
        raise DataError(
            f"{side} says the ids in {bin_path.name} were made by the {meta.tokenizer!r} tokenizer "
            f"(vocab {meta.vocab_size}), but data.tokenizer = {tokenizer!r}. Set "
            f"--set data.tokenizer={meta.tokenizer}, or point data.path at data made by the "
            f"{tokenizer!r} tokenizer."
        )
    return meta


def read_sidecar(bin_path: Path) -> BinMeta | None:
    """The checked sidecar of ``bin_path`` as it is (None: it has none), whatever the run's
    tokenizer."""
    side = sidecar_path(bin_path)
    return _parse(side) if side.is_file() else None


def _parse(side: Path) -> BinMeta:
    try:
        raw: Any = json.loads(side.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{side} is not valid JSON ({err}). {_FORMAT}") from err
    if not isinstance(raw, dict):
        raise DataError(f"{side} holds {type(raw).__name__}, expected a JSON object. {_FORMAT}")
    problems = []
    name, vocab = raw.get("tokenizer"), raw.get("vocab_size", 0)
    if name not in TOKENIZERS:
        problems.append(f"tokenizer = {name!r} is not one of {list_alternatives(TOKENIZERS)}")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or not 0 < vocab <= 65536:
        problems.append(f"vocab_size = {vocab!r} must be an integer in 1..65536 (uint16 ids)")
    elif name == "byte" and vocab != 256:
        problems.append(f"vocab_size = {vocab} must be 256 for the byte tokenizer")
    if raw.get("dtype", "uint16") != "uint16":
        problems.append(f"dtype = {raw.get('dtype')!r}: only uint16 .bin files are read")
    file = raw.get("tokenizer_file")
    if name == "bpe" and not (isinstance(file, str) and (side.parent / file).is_file()):
        problems.append(
            f"tokenizer_file = {file!r} must name the BPE tokenizer JSON file next to it "
            f"(not found in {side.parent})"
        )
    if problems:
        raise DataError(f"{side}: " + "; ".join(problems) + f". {_FORMAT}")
    return BinMeta(str(name), int(vocab), side.parent / str(file) if name == "bpe" else None)


_FORMAT = (
    'Expected e.g. {"tokenizer": "byte", "vocab_size": 256} or {"tokenizer": "bpe", '
    '"vocab_size": 2048, "tokenizer_file": '
    '"tokenizer.json"} (docs/gpt-models/data.md, nanoGPT .bin files).'
)


def same_meta(a: BinMeta | None, b: BinMeta | None, where: str) -> None:
    """train.bin and val.bin must come from one tokenizer."""
    if a != b:
        raise DataError(
            f"train.bin and val.bin in {where} were made by different tokenizers ({_show(a)} vs "
            f"{_show(b)}, from their .bin.json sidecars). Re-tokenize both with one tokenizer."
        )


def _show(meta: BinMeta | None) -> str:
    return "no sidecar" if meta is None else f"{meta.tokenizer}, vocab {meta.vocab_size}"
