"""The tokenizer ``gpt prepare`` encodes a store with: the byte tokenizer, a BPE tokenizer trained
on the corpus, a given ``tokenizer.json``, or the one an interrupted prepare saved in its folder.

A saved ``tokenizer.json`` is reused only when it is the file that prepare recorded (its sha256 in
the progress file): a different one would make the rest of the store with other ids than the
shards already written.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import DataError
from .bpe import END_OF_TEXT, BPETokenizer, end_of_text_id, read_tokenizer_json
from .out_folder import STATE, TOKENIZER_JSON
from .store import file_sha256, tokenizer_sha256, write_atomic


class Encoder:
    """The tokenizer as prepare uses it: batch encode, its end-of-text id, its JSON (if BPE)."""

    def __init__(self, kind: str, tok: Any = None) -> None:
        self.kind, self.tok = kind, tok
        if tok is None:
            self.vocab_size, self.eot_id, self.json = 256, 0, None
        else:
            eot = end_of_text_id(tok)
            if eot is None:  # a BPE trained here has no special tokens
                tok.add_special_tokens([END_OF_TEXT[0]])
                eot = tok.token_to_id(END_OF_TEXT[0])
            self.vocab_size, self.eot_id = tok.get_vocab_size(), int(eot)
            self.json = tok.to_str(pretty=False)

    @property
    def eot_text(self) -> str:
        """The end-of-text token as text, which the tokenizer maps back to its one id (an added
        token is matched whole, and splits the text around it: no merge across its edges)."""
        return "\0" if self.tok is None else str(self.tok.id_to_token(self.eot_id))

    def sha256(self) -> str:
        return tokenizer_sha256(self.json)

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        if self.tok is None:
            return [np.frombuffer(t.encode("utf-8", errors="replace"), np.uint8) for t in texts]
        # encode_batch_fast (no character offsets) is tokenizers >= 0.20; the floor has
        # encode_batch.
        encode = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        encs = encode(texts, add_special_tokens=False)
        return [np.array(e.ids, np.uint32) for e in encs]


def make_encoder(
    tokenizer: str, out: Path, state: dict[str, Any], sample: Iterator[str], vocab: int
) -> tuple[Encoder, str | None]:
    """The tokenizer of the store in ``out``, and the sha256 of its ``tokenizer.json`` when written
    now (to record in the progress file before any shard is made with it; None: nothing new).

    ``sample``: the documents a BPE tokenizer is trained on (read only when one is trained).

    Raises:
        DataError: the saved ``tokenizer.json`` of an interrupted prepare is missing or changed.
    """
    if tokenizer == "byte":
        return Encoder("byte"), None
    from tokenizers import Tokenizer

    saved, recorded = out / TOKENIZER_JSON, state.get("tokenizer_sha256")
    # Stores begun before the hash was recorded have progress and no record: their file is theirs.
    if recorded is not None or (saved.is_file() and state["writers"]):
        if not saved.is_file() or (recorded is not None and file_sha256(saved) != recorded):
            raise DataError(
                f"{saved} is missing or is not the tokenizer this unfinished gpt prepare made "
                f"(its sha256 differs from the one recorded in {STATE}): the shards written so "
                f"far would not match it. Delete {out} and start over."
            )
        return Encoder("bpe", Tokenizer.from_str(saved.read_text(encoding="utf-8"))), None
    if tokenizer == "bpe":
        tok = BPETokenizer.train(sample, vocab_size=vocab)._tok
    else:
        tok = read_tokenizer_json(tokenizer, what="--tokenizer")  # the loader gpt train uses
    enc = Encoder("bpe", tok)
    assert enc.json is not None
    write_atomic(saved, enc.json.encode())
    return enc, file_sha256(saved)
