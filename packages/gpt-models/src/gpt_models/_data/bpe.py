"""Subword tokenizers stored as JSON (never pickle): trained locally, or a Hugging Face
tokenizer.json.

It wraps the `tokenizers` package (Hugging Face's Rust tokenizers; nothing is downloaded). A
tokenizer trained here learns its merges from the training text and is byte-level: the 256 byte
values are the base alphabet, so any text, in any script, round-trips exactly and no id is
"unknown". :meth:`BPETokenizer.from_file` reads any `tokenizers` JSON file instead (GPT-2's
byte-level BPE, Llama's); :func:`read_tokenizer_json` is the one loader ``gpt train`` and
``gpt prepare`` share, so both give a file the same ids and the same end-of-text id.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .._errors import DataError

# The smallest vocabulary: the 256 byte values; uint16 .bin files cap the largest.
MIN_VOCAB, MAX_VOCAB = 257, 65536
# Tokens that end a document, looked up in this order (GPT-2, Llama 3, Llama 2 / SentencePiece,
# Gemma);
# a tokenizer with none of them gets the first as one more id.
END_OF_TEXT = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>")


_T = TypeVar("_T")


def _interruptible(work: Callable[[], _T]) -> _T:
    """``work()`` in a worker thread, waited on in short slices so that Ctrl-C stops the caller at
    once. tokenizers' trainer learns its merges in Rust, where Python runs no signal handler until
    it returns: a Ctrl-C 3 s into a 28 s BPE training was raised 25 s later.
    After a Ctrl-C the thread (a daemon) runs on until the trainer returns; its result is dropped.
    """
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["value"] = work()
        except BaseException as err:  # raised again in the caller's thread
            done["error"] = err

    thread = threading.Thread(target=run, name="bpe-train", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)  # a Ctrl-C's KeyboardInterrupt is raised here, in the main thread
    if "error" in done:
        raise done["error"]
    return done["value"]


def read_tokenizer_json(path: str | Path, *, what: str) -> Any:
    """A `tokenizers` JSON file as a ``tokenizers.Tokenizer`` that has an end-of-text token.

    ``what`` names where the path came from in error messages (``data.tokenizer``, ``--tokenizer``).
    A file with none of :data:`END_OF_TEXT` gets ``<|endoftext|>`` as one more (special) id, so the
    documents of a corpus can be separated; :func:`end_of_text_id` finds it.

    Raises:
        DataError: the file is missing or is not a tokenizers JSON file.
    """
    from tokenizers import Tokenizer

    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"{what} = {str(path)!r}: no such file. Expected 'byte', 'bpe' or the path of a "
            "tokenizers JSON file (e.g. the tokenizer.json of a Hugging Face model folder)."
        )
    try:
        tok = Tokenizer.from_str(path.read_text(encoding="utf-8"))
    except Exception as err:  # tokenizers raises its own Exception type on malformed JSON
        raise DataError(
            f"{what} {path} is not a tokenizers JSON file ({err}). Expected a tokenizer.json as "
            "written by the tokenizers library (a Hugging Face model's, or BPETokenizer.save)."
        ) from err
    if end_of_text_id(tok) is None:
        tok.add_special_tokens([END_OF_TEXT[0]])
    return tok


def end_of_text_id(tok: Any) -> int | None:
    """The id of the first :data:`END_OF_TEXT` token ``tok`` (a ``tokenizers.Tokenizer``) has."""
    for name in END_OF_TEXT:
        found = tok.token_to_id(name)
        if found is not None:
            return int(found)
    return None


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

    def __init__(self, tokenizer: Any) -> None:
        from tokenizers import decoders

        self._tok = tokenizer
        vocab = self._tok.get_vocab()
        self.byte_lengths = np.zeros(max(vocab.values(), default=-1) + 1, np.int64)
        if isinstance(self._tok.decoder, decoders.ByteLevel):
            # Byte-level vocab entries use one printable character per byte, so a token's byte
            # length is its string length: bytes per token without decoding.
            for piece, i in vocab.items():
                self.byte_lengths[i] = len(piece)
        else:  # e.g. SentencePiece-style (Llama): decode each id once
            ids = sorted(vocab.values())
            texts = self._tok.decode_batch([[i] for i in ids], skip_special_tokens=False)
            self.byte_lengths[ids] = [len(t.encode("utf-8")) for t in texts]

    @property
    def vocab_size(self) -> int:
        """Number of token ids (0 .. vocab_size - 1)."""
        return len(self.byte_lengths)

    @classmethod
    def train(cls, texts: Iterable[str], *, vocab_size: int) -> BPETokenizer:
        """Learn up to ``vocab_size - 257`` merges from ``texts`` (fewer if the text runs out of
        pairs); the last id is ``<|endoftext|>``, so ``vocab_size`` counts it.

        The end-of-text token is part of every tokenizer this project makes: it ends the documents
        of a token store, and it is what an exported model stops generating at. Read back from
        a run folder or passed as ``data.tokenizer``, the file then gives the same ids.

        Raises:
            ValueError: ``vocab_size`` outside ``[257, 65536]``.
        """
        if not MIN_VOCAB <= vocab_size <= MAX_VOCAB:
            raise ValueError(
                f"BPETokenizer.train got vocab_size={vocab_size}, expected "
                f"{MIN_VOCAB}..{MAX_VOCAB} "
                "(the 256 bytes plus at least one merge; at most what a uint16 .bin file can hold)."
            )
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size - 1,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=[],
            show_progress=False,
        )
        _interruptible(lambda: tok.train_from_iterator(texts, trainer))
        tok.add_special_tokens([END_OF_TEXT[0]])
        return cls(tok)

    @property
    def eot_id(self) -> int | None:
        """The end-of-text id (see :data:`END_OF_TEXT`); None for a file that has none (a
        tokenizer trained by an older version)."""
        return end_of_text_id(self._tok)

    @classmethod
    def from_file(cls, path: str | Path, *, what: str = "data.tokenizer") -> BPETokenizer:
        """A `tokenizers` JSON file, e.g. a Hugging Face model's ``tokenizer.json`` (GPT-2, Llama).

        It is read by :func:`read_tokenizer_json`, so a file without an end-of-text token gets one.

        Raises:
            DataError: the file is missing or is not a tokenizers JSON file.
        """
        return cls(read_tokenizer_json(path, what=what))

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
        return str(self._tok.to_str(pretty=False))

    def encode(self, text: str) -> np.ndarray:
        """``text`` as a 1-D ``int32`` array of token ids."""
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return np.asarray(ids, dtype=np.int32)

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        """Token ids back to text; ids outside the vocabulary raise ``ValueError``."""
        arr = np.asarray(ids).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            bad = int(arr.max() if arr.max() >= self.vocab_size else arr.min())
            raise ValueError(
                f"BPETokenizer.decode got token id {bad}, expected ids in 0..{self.vocab_size - 1}."
            )
        return str(self._tok.decode(arr.tolist(), skip_special_tokens=False))

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size})"
