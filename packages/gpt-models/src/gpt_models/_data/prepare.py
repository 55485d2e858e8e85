"""``gpt prepare``: tokenize a corpus of any size into a token store (``store.py``), resumably.

Documents stream through in chunks of about ``_CHUNK_BYTES`` of text: a reader thread parses the
files while the main thread tokenizes the previous chunk (the `tokenizers` batch encoder runs on
every core) and appends ids to the open shard of each split. After each chunk the progress state
(``.prepare-state.json``: where the input stream stands, the finished shards, the length of the
open ones) is saved atomically, so a killed run resumes from its last chunk: the open shards are
cut back to the saved lengths and the inputs are skipped up to the saved position.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import json
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .._errors import DataError
from .bpe import (
    END_OF_TEXT,
    MAX_VOCAB,
    MIN_VOCAB,
    BPETokenizer,
    end_of_text_id,
    read_tokenizer_json,
)
from .sources import SourceFile, file_sha256, find_sources, read_documents
from .store import (
    FORMAT,
    MANIFEST,
    SPLIT_RULE,
    SPLITS,
    VERSION,
    ShardWriter,
    check_shards,
    id_dtype,
    read_manifest,
    split_of,
    write_atomic,
    write_json_atomic,
)

STATE = ".prepare-state.json"
TOKENIZER_JSON = "tokenizer.json"
_CHUNK_BYTES = 2 << 20  # ~2 MB of text: the encodings of a chunk stay ~100 MB
_BPE_SAMPLE_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class PrepareResult:
    """What ``prepare`` did: the store folder, its manifest, and whether it had anything to do."""

    out: Path
    manifest: dict[str, Any]
    up_to_date: bool

    @property
    def tokens(self) -> dict[str, int]:
        return {s: sum(r["tokens"] for r in self.manifest["shards"][s]) for s in SPLITS}


class _Encoder:
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

    def sha256(self) -> str:
        import hashlib

        return hashlib.sha256((self.json or "byte").encode()).hexdigest()

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        if self.tok is None:
            return [np.frombuffer(t.encode("utf-8", errors="replace"), np.uint8) for t in texts]
        # encode_batch_fast (no character offsets) is tokenizers >= 0.20; the floor has encode_batch.
        encode = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        encs = encode(texts, add_special_tokens=False)
        return [np.array(e.ids, np.uint32) for e in encs]


def prepare(
    inputs: Sequence[str | Path],
    out: str | Path,
    *,
    tokenizer: str = "byte",
    val_fraction: float = 0.01,
    text_field: str = "text",
    shard_tokens: int = 1 << 26,
    bpe_vocab_size: int = 2048,
    progress: TextIO | None = None,
) -> PrepareResult:
    """Tokenize ``inputs`` (files and folders) into a token store in ``out``; resumable.

    ``tokenizer`` is ``"byte"``, ``"bpe"`` (trained here on the first ~64 MB of documents, with
    ``bpe_vocab_size`` ids) or the path of a ``tokenizer.json`` (the `tokenizers` library's format).
    A file is read as ``gpt train`` reads ``data.tokenizer`` (``read_tokenizer_json``); a tokenizer
    without an end-of-text token (``<|endoftext|>``, ``</s>``, ...) gets ``<|endoftext|>`` as one
    more id, which ends every document. Documents go to the
    validation split by a hash of (file name, position), about ``val_fraction`` of them.

    Raises:
        DataError: bad inputs (see ``find_sources``/``read_documents``), an empty corpus, a
            store or unfinished prepare in ``out`` made from other inputs or settings, a damaged
            shard, or a full disk.

    Example:
        >>> import tempfile, pathlib
        >>> from gpt_models import prepare
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "a.txt").write_text("hello world " * 100)
        >>> r = prepare([d / "a.txt"], d / "store", val_fraction=0.0)
        >>> r.tokens, r.up_to_date
        ({'train': 1201, 'val': 0}, False)
        >>> prepare([d / "a.txt"], d / "store", val_fraction=0.0).up_to_date
        True
    """
    if not 0.0 <= val_fraction < 1.0:
        raise DataError(f"--val-fraction {val_fraction} is outside [0, 1); e.g. 0.01.")
    if shard_tokens < 1:
        raise DataError(f"shard_tokens = {shard_tokens} must be positive, e.g. {1 << 26}.")
    if tokenizer == "bpe" and not MIN_VOCAB <= bpe_vocab_size <= MAX_VOCAB:
        raise DataError(
            f"--bpe-vocab-size {bpe_vocab_size} is outside {MIN_VOCAB}..{MAX_VOCAB} (the 256 "
            "bytes plus at least one merge, at most what uint16 token ids hold); e.g. 2048."
        )
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(
            f"--out {out} is a file, but a token store is a folder (shards and {MANIFEST}). "
            f"Pass a new or existing folder, e.g. --out {out.parent / (out.stem + '-store')}."
        )
    sources = find_sources(inputs)
    hashes = [file_sha256(s.path) for s in sources]
    settings = {
        "sources": [
            {"name": s.name, "bytes": s.size, "sha256": h}
            for s, h in zip(sources, hashes, strict=True)
        ],
        "tokenizer_arg": tokenizer if tokenizer in ("byte", "bpe") else _sha_of_file(tokenizer),
        "bpe_vocab_size": bpe_vocab_size if tokenizer == "bpe" else None,
        "val_fraction": val_fraction,
        "text_field": text_field,
        "shard_tokens": shard_tokens,
    }
    if (out / MANIFEST).is_file():
        manifest = read_manifest(out)
        _same_settings(out, manifest.get("settings"), settings, MANIFEST)
        check_shards(out, [r for s in SPLITS for r in manifest["shards"][s]], full_hash=True)
        return PrepareResult(out, manifest, up_to_date=True)
    out.mkdir(parents=True, exist_ok=True)
    state = _load_state(out, settings)
    try:
        return _run(out, sources, settings, state, tokenizer, bpe_vocab_size, progress)
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise DataError(
                f"The disk holding {out} is full (writing the token store). Finished shards and "
                f"the progress state are kept; nothing is marked complete ({MANIFEST} is written "
                "last). Free some space and re-run the same command to resume."
            ) from err
        raise


def _sha_of_file(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise DataError(
            f"--tokenizer {path!r} is neither 'byte', 'bpe' nor an existing tokenizer.json file. "
            "Give byte, bpe (trained on the corpus) or the path of a tokenizers JSON file."
        )
    return file_sha256(p)


def _same_settings(out: Path, old: Any, new: dict[str, Any], what: str) -> None:
    if old == new:
        return
    diffs = sorted(k for k in new if not isinstance(old, dict) or old.get(k) != new[k])
    raise DataError(
        f"{out} already holds {what} from other inputs or settings (differing: "
        f"{', '.join(diffs) or 'all'}; e.g. another tokenizer or changed files). Prepare into a "
        "new --out folder, or delete this one to start over."
    )


def _load_state(out: Path, settings: dict[str, Any]) -> dict[str, Any]:
    path = out / STATE
    if not path.is_file():
        return {"settings": settings, "source": 0, "pos": 0, "stats": [], "writers": {}}
    try:
        state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(
            f"{path} (the progress of an unfinished gpt prepare) is not valid JSON ({err}). "
            "Delete the folder and start over."
        ) from err
    _same_settings(out, state.get("settings"), settings, "an unfinished prepare")
    for split in SPLITS:
        check_shards(out, state["writers"].get(split, {}).get("finished", []), full_hash=True)
    return state


def _make_encoder(
    tokenizer: str, out: Path, sources: list[SourceFile], text_field: str, vocab: int
) -> _Encoder:
    if tokenizer == "byte":
        return _Encoder("byte")
    from tokenizers import Tokenizer

    saved = out / TOKENIZER_JSON
    if saved.is_file():  # a resumed run: the tokenizer is the one the first shards were made with
        return _Encoder("bpe", Tokenizer.from_str(saved.read_text(encoding="utf-8")))
    if tokenizer == "bpe":
        sample = _sample(sources, text_field)
        tok = BPETokenizer.train(sample, vocab_size=vocab)._tok
    else:
        tok = read_tokenizer_json(tokenizer, what="--tokenizer")  # the loader gpt train uses
    enc = _Encoder("bpe", tok)
    assert enc.json is not None
    write_atomic(saved, enc.json.encode())
    return enc


def _sample(sources: list[SourceFile], text_field: str) -> Iterator[str]:
    seen = 0
    for doc in itertools.chain.from_iterable(
        read_documents(s, text_field=text_field) for s in sources
    ):
        yield doc.text
        seen += len(doc.text)
        if seen >= _BPE_SAMPLE_BYTES:
            return


def _chunks(
    sources: list[SourceFile], state: dict[str, Any], text_field: str
) -> Iterator[tuple[int, list[Any], bool]]:
    """(source index, documents, source finished) pieces of about _CHUNK_BYTES, from the cursor."""
    for i in range(state["source"], len(sources)):
        skip = state["pos"] if i == state["source"] else 0
        docs: list[Any] = []
        size = 0
        for doc in read_documents(sources[i], text_field=text_field, skip=skip):
            docs.append(doc)
            size += len(doc.text)
            if size >= _CHUNK_BYTES:
                yield i, docs, False
                docs, size = [], 0
        yield i, docs, True


def _threaded(it: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """``it`` run ahead in a thread (at most ``depth`` items), its exceptions re-raised here."""
    q: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def work() -> None:
        try:
            for item in it:
                if stop.is_set():
                    return
                q.put((True, item))
            q.put((False, None))
        except BaseException as err:  # handed to the consumer, which raises it
            q.put((False, err))

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        while True:
            ok, item = q.get()
            if not ok:
                if item is not None:
                    raise item
                return
            yield item
    finally:
        stop.set()


def _run(
    out: Path,
    sources: list[SourceFile],
    settings: dict[str, Any],
    state: dict[str, Any],
    tokenizer: str,
    bpe_vocab: int,
    progress: TextIO | None,
) -> PrepareResult:
    text_field, val_fraction = settings["text_field"], settings["val_fraction"]
    enc = _make_encoder(tokenizer, out, sources, text_field, bpe_vocab)
    dtype = id_dtype(enc.vocab_size)
    writers = {
        s: ShardWriter(out, s, dtype, settings["shard_tokens"], state["writers"].get(s, {}))
        for s in SPLITS
    }
    stats: list[dict[str, int]] = state["stats"]
    if progress is not None and state["writers"]:
        kept = sum(len(w.finished) for w in writers.values())
        print(
            f"prepare: resuming an interrupted run in {out} ({kept} finished shards kept and "
            f"verified; input {sources[min(state['source'], len(sources) - 1)].name}, "
            f"document {state['pos']})",
            file=progress,
        )
    meter = _Meter(
        progress, sum(s.size for s in sources), sum(s.size for s in sources[: state["source"]])
    )
    # Reading and JSON parsing run ahead in a thread; encoding (every core) and writing here. A
    # third stage (encoding in its own thread) measured no faster on 2 cores and peaked at 401 MB
    # instead of 311 MB (benchmarks/data/RESULTS.md).
    for i, docs, done in _threaded(_chunks(sources, state, text_field)):
        while len(stats) <= i:
            stats.append({"documents": 0, "undecodable": 0, "val_documents": 0})
        ids = enc.encode([d.text for d in docs])
        parts: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}
        eot = np.array([enc.eot_id], np.uint32)
        for doc, doc_ids in zip(docs, ids, strict=True):
            if len(doc_ids) == 0:  # an empty document (file, text field): no text, no separator
                continue
            split = split_of(sources[i].name, doc.pos, val_fraction)
            parts[split] += [doc_ids, eot]
            stats[i]["documents"] += 1
            stats[i]["undecodable"] += doc.n_replaced
            stats[i]["val_documents"] += split == "val"
        for split in SPLITS:
            if parts[split]:
                writers[split].append(np.concatenate(parts[split]))
            writers[split].flush()
        state = {
            "settings": settings,
            "source": i + 1 if done else i,
            "pos": 0 if done else docs[-1].pos + 1,
            "stats": stats,
            "writers": {s: w.state() for s, w in writers.items()},
        }
        write_json_atomic(out / STATE, state)
        meter.update(
            len(docs),
            sum(len(d.text) for d in docs),
            sum(len(x) + 1 for x in ids if len(x)),
            sources[i].size if done else 0,
        )
    meter.close()
    shards = {s: w.close() for s, w in writers.items()}
    manifest = _manifest(settings, sources, stats, shards, enc, dtype)
    if manifest["tokens"]["train"] == 0:
        raise DataError(
            f"The corpus {', '.join(s.name for s in sources)} holds no text (no documents, or "
            "only empty ones), so there is nothing to train on. Check the inputs and --text-field."
        )
    write_json_atomic(out / MANIFEST, manifest)
    (out / STATE).unlink(missing_ok=True)
    return PrepareResult(out, manifest, up_to_date=False)


def _manifest(
    settings: dict[str, Any],
    sources: list[SourceFile],
    stats: list[dict[str, int]],
    shards: dict[str, list[dict[str, Any]]],
    enc: _Encoder,
    dtype: np.dtype[Any],
) -> dict[str, Any]:
    stats = stats + [{"documents": 0, "undecodable": 0, "val_documents": 0}] * (
        len(sources) - len(stats)
    )
    return {
        "format": FORMAT,
        "version": VERSION,
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
        "shards": shards,
        "settings": settings,
    }


class _Meter:
    """One stderr line, rewritten at most twice a second: documents, MB/s, tokens/s, ETA."""

    def __init__(self, stream: TextIO | None, total_bytes: int, done_bytes: int) -> None:
        self.stream, self.total, self.done = stream, max(total_bytes, 1), done_bytes
        self.start = self.last = time.perf_counter()
        self.docs = self.text = self.tokens = 0
        self.in_file = 0

    def update(self, docs: int, text: int, tokens: int, finished_file: int) -> None:
        self.docs, self.text, self.tokens = self.docs + docs, self.text + text, self.tokens + tokens
        self.in_file += text
        if finished_file:
            self.done, self.in_file = self.done + finished_file, 0
        now = time.perf_counter()
        if self.stream is None or now - self.last < 0.5:
            return
        self.last = now
        elapsed = now - self.start
        rate = self.text / elapsed
        left = max(self.total - self.done - self.in_file, 0)
        eta = left / rate if rate else float("inf")
        print(
            f"\rprepare: {self.docs:,} docs | {rate / 1e6:.1f} MB/s | "
            f"{self.tokens / elapsed:,.0f} tokens/s | {min(100.0, 100 * (self.total - left) / self.total):.0f}% | "
            f"ETA {eta:,.0f} s   ",
            end="",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        if self.stream is not None and self.docs:
            elapsed = time.perf_counter() - self.start
            print(
                f"\rprepare: {self.docs:,} docs, {self.tokens:,} tokens in {elapsed:.1f} s "
                f"({self.text / elapsed / 1e6:.1f} MB/s)          ",
                file=self.stream,
            )
