"""A byte-level BPE tokenizer trained locally on the user's corpus, stored as JSON (never pickle).

It wraps the `tokenizers` package (Hugging Face's Rust tokenizers; nothing is downloaded: the
merges are learnt from the training text). Byte-level means the 256 byte values are the base
alphabet, so any text, in any script, round-trips exactly and no id is "unknown".
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .._errors import DataError

# The smallest vocabulary: the 256 byte values; uint16 .bin files cap the largest.
MIN_VOCAB, MAX_VOCAB = 257, 65536


class BPETokenizer:
    """Byte-level BPE: ``encode`` text to ids, ``decode`` ids to text, ``save``/``load`` as JSON.

    Build one with :meth:`train` (from text) or :meth:`load` (a ``tokenizer.json`` file, e.g. the
    one a ``gpt train`` run folder holds when ``data.tokenizer = "bpe"``).

    Example:
        >>> tok = BPETokenizer.train(["the cat sat on the mat. " * 50], vocab_size=260)
        >>> tok.vocab_size
        260
        >>> ids = tok.encode("the cat sat, naïvely")
        >>> tok.decode(ids)
        'the cat sat, naïvely'
        >>> len(ids) < len("the cat sat, naïvely".encode())
        True
    """

    def __init__(self, tokenizer: object) -> None:
        self._tok = tokenizer
        vocab = self._tok.get_vocab()  # type: ignore[attr-defined]
        # Byte-level vocab entries use one printable character per byte, so a token's byte length
        # is its string length: that gives bytes per token without decoding.
        self.byte_lengths = np.zeros(len(vocab), np.int64)
        for piece, i in vocab.items():
            self.byte_lengths[i] = len(piece)

    @property
    def vocab_size(self) -> int:
        """Number of token ids (0 .. vocab_size - 1)."""
        return len(self.byte_lengths)

    @classmethod
    def train(cls, texts: Iterable[str], *, vocab_size: int) -> BPETokenizer:
        """Learn up to ``vocab_size - 256`` merges from ``texts`` (fewer if the text runs out of pairs).

        Raises:
            ValueError: ``vocab_size`` outside ``[257, 65536]``.
        """
        if not MIN_VOCAB <= vocab_size <= MAX_VOCAB:
            raise ValueError(
                f"BPETokenizer.train got vocab_size={vocab_size}, expected {MIN_VOCAB}..{MAX_VOCAB} "
                "(the 256 bytes plus at least one merge; at most what a uint16 .bin file can hold)."
            )
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=[],
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer)
        return cls(tok)

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        """Read a tokenizer saved by :meth:`save` (JSON).

        Raises:
            DataError: the file is missing or is not a tokenizer JSON file.
        """
        from tokenizers import Tokenizer

        path = Path(path)
        if not path.is_file():
            raise DataError(
                f"BPE tokenizer file {path} does not exist. A run trained with "
                'data.tokenizer = "bpe" keeps it as tokenizer.json in its run folder; restore that '
                "file, or start a new run (which trains a new tokenizer)."
            )
        try:
            return cls(Tokenizer.from_str(path.read_text(encoding="utf-8")))
        except Exception as err:  # tokenizers raises its own Exception type on malformed JSON
            raise DataError(
                f"{path} is not a valid tokenizer JSON file ({err}). Expected a file written by "
                "BPETokenizer.save (the tokenizers library's JSON format)."
            ) from err

    def save(self, path: str | Path) -> None:
        """Write the tokenizer as JSON (the `tokenizers` library's format) to ``path``."""
        Path(path).write_text(self.to_json(), encoding="utf-8")

    def to_json(self) -> str:
        """The tokenizer as the JSON text :meth:`save` writes (what a token store's hash covers)."""
        return str(self._tok.to_str(pretty=False))  # type: ignore[attr-defined]

    def encode(self, text: str) -> np.ndarray:
        """``text`` as a 1-D ``int32`` array of token ids."""
        ids = self._tok.encode(text, add_special_tokens=False).ids  # type: ignore[attr-defined]
        return np.asarray(ids, dtype=np.int32)

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        """Token ids back to text; ids outside the vocabulary raise ``ValueError``."""
        arr = np.asarray(ids).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            bad = int(arr.max() if arr.max() >= self.vocab_size else arr.min())
            raise ValueError(
                f"BPETokenizer.decode got token id {bad}, expected ids in 0..{self.vocab_size - 1}."
            )
        return str(self._tok.decode(arr.tolist(), skip_special_tokens=False))  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size})"
