"""Loss and bits per byte of trained params on whole text files: the sliding-window protocol.

Each file is scored on its own. Windows of ``seq_len + 1`` tokens start every ``stride`` tokens; a
window scores only the tokens no earlier window scored, so every token after the first is scored
exactly once, with as much context as its window gives (at least ``seq_len - stride`` tokens once
the file is longer than one window). The first token of a file has no context and is not scored;
its bytes are left out of the byte count too, so bits per byte is
``scored nats / (ln 2 * UTF-8 bytes of the scored tokens)``, comparable across tokenizers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .._config.schema import Config
from .._data.byte_tokenizer import ByteTokenizer
from .._data.corpus import Tokenizer
from .._data.store import is_store
from .._distributed.mesh import on_one_device
from .._errors import DataError, UsageError
from .scoring import score_windows


@dataclasses.dataclass(frozen=True)
class TextScore:
    """What :func:`evaluate_text` measured.

    ``nats_per_token`` and ``bits_per_byte`` are over every scored token of every file; ``tokens``
    and ``bytes`` count the scored tokens and their UTF-8 bytes; ``windows`` the model calls' rows.
    """

    nats_per_token: float
    bits_per_byte: float
    tokens: int
    bytes: int
    files: int
    windows: int
    stride: int


def sliding_windows(n_tokens: int, seq_len: int, stride: int) -> list[tuple[int, int, int]]:
    """``(begin, end, first_scored)`` of each window over ``n_tokens`` ids: the window is ids
    ``[begin, end)`` and scores the ids ``[first_scored, end)``.

    Example:
        >>> sliding_windows(10, 4, 2)
        [(0, 5, 1), (2, 7, 5), (4, 9, 7), (6, 10, 9)]
    """
    out, begin, done = [], 0, 1
    while done < n_tokens:
        end = min(begin + seq_len + 1, n_tokens)
        out.append((begin, end, done))
        done, begin = end, begin + stride
    return out


def text_windows(ids: np.ndarray, seq_len: int, stride: int) -> tuple[list[np.ndarray], list[int]]:
    """The windows of one text's token ids and, for each, where its new scores start: window
    ``w`` scores its tokens ``[k + 1:]``, i.e. the log-probabilities ``[k:]`` of ``score_windows``.

    Example:
        >>> windows, starts = text_windows(np.arange(10), 4, 2)
        >>> [w.tolist() for w in windows[:2]], starts
        ([[0, 1, 2, 3, 4], [2, 3, 4, 5, 6]], [0, 2, 2, 2])
    """
    spans = sliding_windows(len(ids), seq_len, stride)
    return [ids[b:e] for b, e, _ in spans], [first - b - 1 for b, _, first in spans]


def evaluate_text(
    params: Any,
    config: Config,
    paths: str | Path | Sequence[str | Path],
    *,
    tokenizer: Tokenizer | None = None,
    stride: int | None = None,
    batch_size: int = 8,
    stream: TextIO | None = None,
) -> TextScore:
    """Nats per token and bits per byte of ``params`` over whole text files (or folders of them).

    Args:
        params: the model parameters (``load_run`` or ``init_params``).
        config: the run's config (its ``model`` section is used).
        paths: text files, or folders whose UTF-8 files (sorted, hidden and binary ones skipped)
            are each scored.
        tokenizer: the run's tokenizer (default bytes).
        stride: tokens between window starts, 1..seq_len (default ``seq_len // 2``); ``seq_len``
            gives non-overlapping windows, smaller strides more context per token and more compute.
        batch_size: windows per model call.
        stream: where a progress line goes (e.g. ``sys.stderr``); default none.

    Raises:
        UsageError: a stride or batch size out of range.
        DataError: a missing path, a file that is not UTF-8, or no scorable token in any file.

    Example:
        >>> import dataclasses, jax, tempfile, pathlib
        >>> from gpt_models import PRESETS, evaluate_text, init_params
        >>> tiny = PRESETS["tiny"]
        >>> cfg = dataclasses.replace(tiny, model=dataclasses.replace(
        ...     tiny.model, seq_len=16, d_model=32, n_layers=1, n_heads=2))
        >>> file = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
        >>> _ = file.write_text("hello world, " * 10)
        >>> score = evaluate_text(init_params(cfg.model, jax.random.key(0)), cfg, file)
        >>> score.tokens, score.bytes, 7.5 < score.bits_per_byte < 8.5  # untrained: ~log2(256)
        (129, 129, True)
    """
    tok = tokenizer or ByteTokenizer()
    files = text_files(paths)
    docs = [encode_file(tok, file) for file in files]
    return score_documents(
        params,
        config,
        docs,
        tokenizer=tok,
        stride=stride,
        batch_size=batch_size,
        stream=stream,
        names=[str(f) for f in files],
    )


def score_documents(
    params: Any,
    config: Config,
    docs: Sequence[np.ndarray],
    *,
    tokenizer: Tokenizer,
    stride: int | None,
    batch_size: int,
    stream: TextIO | None,
    names: Sequence[str],
) -> TextScore:
    """:func:`evaluate_text` on documents already tokenized (``docs``: arrays of token ids;
    ``names`` says what they are in messages).

    ``gpt eval --text @val`` scores a run's validation split this way, whatever its data is (text,
    ``.bin`` ids, a token store), with the ids the run trained on.
    """
    seq_len = config.model.seq_len
    stride = seq_len // 2 if stride is None else stride
    if not 1 <= stride <= seq_len:
        raise UsageError(
            f"evaluate_text: stride = {stride} is out of range; it must be 1..model.seq_len "
            f"({seq_len}). Use {max(seq_len // 2, 1)} (the default) or {seq_len} for "
            "non-overlapping windows."
        )
    if batch_size < 1:
        raise UsageError(f"evaluate_text: batch_size = {batch_size} must be >= 1.")
    windows, spans, n_bytes, n_tokens = [], [], 0, 0
    for ids in docs:
        more, starts = text_windows(ids, seq_len, stride)
        windows += more
        spans += starts
        if len(ids) > 1:
            n_tokens += len(ids) - 1
            n_bytes += _bytes(tokenizer, ids[1:])
    if not n_tokens:
        raise DataError(
            f"evaluate_text: nothing to score in {list(names)}: each file needs at "
            "least two tokens (the first one has no context)."
        )
    scores = score_windows(
        on_one_device(params),
        config.model,
        windows,
        batch_size=batch_size,
        label="eval text",
        stream=stream,
    )
    nats = float(sum(logp[k:].sum() for (logp, _), k in zip(scores, spans, strict=True)))
    return TextScore(
        nats_per_token=-nats / n_tokens,
        bits_per_byte=-nats / (math.log(2) * n_bytes),
        tokens=n_tokens,
        bytes=n_bytes,
        files=len(docs),
        windows=len(windows),
        stride=stride,
    )


def text_files(paths: str | Path | Sequence[str | Path]) -> list[Path]:
    """The files ``paths`` names: files as given, folders expanded to their UTF-8 files (sorted)."""
    given = [paths] if isinstance(paths, str | Path) else list(paths)
    files: list[Path] = []
    for p in map(Path, given):
        if is_store(p):  # token ids and their manifest: read as text, they would score garbage
            raise DataError(
                f"evaluate_text: {p} is a token store made by gpt prepare (token ids, not text). "
                "Score the validation split of a run trained on it with gpt eval --text @val, or "
                "pass the text files the store was made from."
            )
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            found = [f for f in sorted(p.rglob("*")) if f.is_file() and _visible(f, p) and _utf8(f)]
            if not found:
                raise DataError(
                    f"evaluate_text: folder {p} holds no UTF-8 text files (hidden and binary files "
                    "are skipped). Pass text files or a folder of them."
                )
            files += found
        else:
            raise DataError(
                f"evaluate_text: {p} does not exist. Pass text files or folders of text files."
            )
    if not files:
        raise DataError("evaluate_text: no files given. Pass text files or folders of text files.")
    return files


def _visible(file: Path, folder: Path) -> bool:
    return not any(part.startswith(".") for part in file.relative_to(folder).parts)


def _utf8(file: Path) -> bool:
    try:
        file.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def encode_file(tok: Tokenizer, file: Path) -> np.ndarray:
    """The token ids of a UTF-8 text file (a DataError naming the file otherwise)."""
    data = file.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"evaluate_text: {file}:{line} is not UTF-8 text (byte 0x{data[err.start]:02x} at "
            f"byte offset {err.start}). Bits per byte are measured on text; convert the file to "
            "UTF-8 or leave it out."
        ) from err
    if isinstance(tok, ByteTokenizer):
        return np.frombuffer(data, np.uint8).astype(np.int32)
    return np.asarray(tok.encode(text), np.int32)


def _bytes(tok: Tokenizer, ids: np.ndarray) -> int:
    if isinstance(tok, ByteTokenizer):
        return len(ids)
    return int(tok.byte_lengths[np.minimum(ids, tok.vocab_size - 1)].sum())
