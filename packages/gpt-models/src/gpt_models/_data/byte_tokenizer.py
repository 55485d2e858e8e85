"""Byte-level tokenizer: token ids are UTF-8 bytes, so any text round-trips and nothing is
downloaded."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class ByteTokenizer:
    """Vocabulary of the 256 byte values; ``encode`` gives UTF-8 bytes, ``decode`` reverses it.

    Decoding is lenient: a model can emit a byte sequence that is not valid UTF-8 (half of a
    multi-byte character), which decodes to U+FFFD instead of raising.

    Example:
        >>> tok = ByteTokenizer()
        >>> ids = tok.encode("héllo")
        >>> ids.tolist()
        [104, 195, 169, 108, 108, 111]
        >>> tok.decode(ids)
        'héllo'
    """

    vocab_size: int = 256
    # NUL ends a document: gpt prepare writes it after each one, and an export names it as the
    # end-of-text (eos) token, so a model trained on a token store stops where its documents did.
    eot_id: int = 0

    def encode(self, text: str) -> np.ndarray:
        """``text`` as a 1-D ``int32`` array of UTF-8 byte values."""
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        """Token ids (0..255) back to text; invalid UTF-8 becomes U+FFFD."""
        arr = np.asarray(ids).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            bad = int(arr.max() if arr.max() > 255 else arr.min())
            raise ValueError(
                f"ByteTokenizer.decode got token id {bad}, expected ids in 0..255. The ids "
                f"probably "
                "come from a model with model.vocab_size > 256 (a .bin dataset with its own "
                "tokenizer)."
            )
        return arr.astype(np.uint8).tobytes().decode("utf-8", errors="replace")

    def to_json(self) -> str:
        """This tokenizer as a `tokenizers` JSON file (what ``gpt export`` writes as
        tokenizer.json).

        A byte-level BPE without merges: id ``b`` is byte ``b``, so transformers' tokenizer gives
        the ids this one does. Byte-level BPE spells each byte as one character (the printable
        Latin-1 bytes as themselves, the 68 others from U+0100 on, in byte order).
        """
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
        others = iter(range(0x100, 0x200))
        chars = [chr(b) if b in printable else chr(next(others)) for b in range(256)]
        tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        return str(tok.to_str(pretty=False))

    def __repr__(self) -> str:
        return "ByteTokenizer(vocab_size=256)"
