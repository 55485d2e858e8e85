"""``gpt prepare``: tokenize a corpus of any size into a token store (``store.py``), resumably.

Documents stream through in chunks of about ``_CHUNK_BYTES`` of text (``chunks.py``: a reader
thread parses the files while the main thread tokenizes the previous chunk, the `tokenizers` batch
encoder on every core) and their ids are appended to the open shard of each split. After each chunk
the progress state (``.prepare-state.json``: where the input stream stands, the finished shards,
the length of the open ones) is saved atomically, so a killed run resumes from its last chunk: the
open shards are cut back to the saved lengths and the inputs are skipped up to the saved position.

It writes only where ``out_folder.py`` allows (a folder it creates, an empty one, or its own
unfinished output). A prepare refused for its inputs or its result (a damaged file, a bad line, no
text, an empty validation split) removes what it wrote there; one refused for what the folder
already holds (other settings, an altered shard) leaves the folder as it is.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .._errors import DataError
from .bpe import MAX_VOCAB, MIN_VOCAB
from .chat_format import FIELD, add_chat_format, chat_format_of
from .chat_template import ChatTemplate, find_chat_template
from .chunks import Meter, chunks, threaded
from .encoder import Encoder, make_encoder
from .examples import ignored_keys_note
from .manifest import MANIFEST, SPLITS, id_dtype
from .out_folder import STATE, claim, discard
from .prepare_checks import check_split, load_state, same_settings, sha_of_file
from .sft_encode import ExampleEncoder
from .sft_store import EXAMPLES, MASK, ORIGINS, origins_of, sft_writers, stream
from .sources import (
    Document,
    Expect,
    SourceFile,
    check_extras,
    detect_kind,
    find_sources,
    read_documents,
    skipped_note,
)
from .store import (
    ShardWriter,
    check_shards,
    file_sha256,
    read_manifest,
    shard_records,
    write_json_atomic,
)
from .store_manifest import new_stats, store_manifest
from .val_split import remember, split_key, split_of

_CHUNK_BYTES = 2 << 20  # ~2 MB of text: the encodings of a chunk stay ~100 MB
_BPE_SAMPLE_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class PrepareResult:
    """What ``prepare`` did: the store folder, its manifest, whether it had anything to do, the
    files of the input folders it skipped (not a kind it reads), and, for a store written with
    ``val_fraction=0``, the ``--val-fraction`` that would give it a validation split."""

    out: Path
    manifest: dict[str, Any]
    up_to_date: bool
    skipped: tuple[str, ...] = ()
    val_fix: str = ""

    @property
    def tokens(self) -> dict[str, int]:
        return {s: sum(r["tokens"] for r in self.manifest["shards"][s]) for s in SPLITS}

    @property
    def kind(self) -> str:
        """``"text"``, or ``"chat"``/``"completion"`` for a store with a loss mask."""
        return str(self.manifest.get("kind", "text"))


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
    more id, which ends every document. Documents go to the validation split by a hash of (file
    name, position), about ``val_fraction`` of them; with ``val_fraction > 0`` at least one must.

    ``.jsonl`` lines of chat (``{"messages": [...]}``) or completion (``{"prompt", "completion"}``)
    examples make a store with a loss mask (``sft_store.py``; rendered by ``sft_encode.py``, with
    the chat template beside a ``tokenizer.json`` if it has one), one example per line.

    ``out`` must be new, empty, or this function's own earlier output. ``progress`` (e.g.
    ``sys.stderr``) gets the files skipped in the input folders, then a progress line.

    Raises:
        DataError: bad inputs (see ``find_sources``/``read_documents``), an empty corpus, an
            empty validation split (the message names a ``val_fraction`` that works), an ``out``
            holding files this function did not write, a store or unfinished prepare in ``out``
            made from other inputs or settings, a damaged shard, or a full disk.

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
    found = find_sources(inputs)
    sources = found.files
    check_extras(sources)
    expect = detect_kind(sources)
    template = None
    if expect.kind in ("chat", "preference") and tokenizer not in ("byte", "bpe"):
        template = find_chat_template(Path(tokenizer))
    if progress is not None and found.skipped:
        print(f"note: {skipped_note(found.skipped)} (not a kind gpt prepare reads)", file=progress)
    settings = {
        "sources": [
            {"name": s.name, "bytes": s.size, "sha256": file_sha256(s.path)} for s in sources
        ],
        "tokenizer_arg": tokenizer if tokenizer in ("byte", "bpe") else sha_of_file(tokenizer),
        "bpe_vocab_size": bpe_vocab_size if tokenizer == "bpe" else None,
        "val_fraction": val_fraction,
        "text_field": text_field,
        "shard_tokens": shard_tokens,
    }
    if expect.kind != "text":  # (absent for plain text: its stores' settings stay as they were)
        settings["kind"] = expect.kind
        settings["chat_template"] = None if template is None else template.fingerprint()
    skipped = tuple(found.skipped)
    if (out / MANIFEST).is_file():
        manifest = read_manifest(out)
        same_settings(out, manifest.get("settings"), settings, MANIFEST)
        check_shards(out, shard_records(manifest), full_hash=True)
        if manifest.get("kind") == "chat" and FIELD not in manifest:
            manifest = add_chat_format(out, manifest, template)
        return PrepareResult(out, manifest, up_to_date=True, skipped=skipped)
    fresh = not (out / STATE).is_file()
    created = claim(out) if fresh else []  # a new or empty folder; anything else is refused here
    state = (
        {"settings": settings, "source": 0, "pos": 0, "stats": [], "writers": {}}
        if fresh
        else load_state(out, settings)
    )
    try:
        if fresh:
            write_json_atomic(out / STATE, state)  # first: the mark that this folder is ours
        job = _Job(out, sources, expect, template, progress, created)
        manifest, fix = _run(job, state, tokenizer, bpe_vocab_size)
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise DataError(
                f"The disk holding {out} is full (writing the token store). Finished shards and "
                f"the progress state are kept; nothing is marked complete ({MANIFEST} is written "
                "last). Free some space and re-run the same command to resume."
            ) from err
        raise
    return PrepareResult(out, manifest, up_to_date=False, skipped=skipped, val_fix=fix)


@dataclasses.dataclass(frozen=True)
class _Job:
    """What a prepare writes from and where: the inputs, their kind, the chat template."""

    out: Path
    sources: list[SourceFile]
    expect: Expect
    template: ChatTemplate | None
    progress: TextIO | None
    created: list[Path]


def _sample(sources: list[SourceFile], text_field: str, expect: Expect) -> Iterator[str]:
    seen = 0
    for doc in itertools.chain.from_iterable(
        read_documents(s, text_field=text_field, expect=expect) for s in sources
    ):
        yield doc.text
        seen += len(doc.text)
        if seen >= _BPE_SAMPLE_BYTES:
            return


def _run(
    job: _Job, state: dict[str, Any], tokenizer: str, bpe_vocab: int
) -> tuple[dict[str, Any], str]:
    """Write the store; its manifest and, for ``val_fraction`` 0, the fraction that would give
    a validation split. A refusal for the inputs or the result discards what was written."""
    out, sources, created = job.out, job.sources, job.created
    resumed = bool(state["writers"])
    if resumed:  # what the folder holds is checked first; a refusal there leaves it as it is
        enc, writers = _open(job, state, tokenizer, bpe_vocab)
    else:
        try:  # a fresh store: training a BPE tokenizer reads the inputs already
            enc, writers = _open(job, state, tokenizer, bpe_vocab)
        except DataError:
            discard(out, created)
            raise
    try:
        _write(job, state, enc, writers)
        shards = {s: w.close() for s, w in writers.items()}
        dtype = id_dtype(enc.vocab_size)
        chat = chat_format_of(enc, job.template) if job.expect.kind == "chat" else None
        manifest = store_manifest(
            state["settings"], sources, state["stats"], shards, enc, dtype, chat
        )
        fix = check_split(manifest, state, sources)
    except DataError:
        for w in writers.values():
            w.abandon()
        discard(out, created)
        raise
    write_json_atomic(out / MANIFEST, manifest)
    (out / STATE).unlink(missing_ok=True)
    return manifest, fix


def _open(
    job: _Job, state: dict[str, Any], tokenizer: str, bpe_vocab: int
) -> tuple[Encoder, dict[str, ShardWriter]]:
    """The encoder and the open shard writers (an interrupted run's, verified and cut back)."""
    out, sources, progress = job.out, job.sources, job.progress
    sample = _sample(sources, state["settings"]["text_field"], job.expect)
    enc, written = make_encoder(tokenizer, out, state, sample, bpe_vocab)
    if written is not None:
        state["tokenizer_sha256"] = written
        write_json_atomic(out / STATE, state)  # recorded before any shard is made with it
    dtype, shard_tokens = id_dtype(enc.vocab_size), state["settings"]["shard_tokens"]
    writers = {
        s: ShardWriter(out, s, dtype, shard_tokens, state["writers"].get(s, {})) for s in SPLITS
    }
    if job.expect.kind != "text":
        writers |= sft_writers(out, state, shard_tokens)
    if progress is not None and state["writers"]:
        kept = sum(len(w.finished) for w in writers.values())
        print(
            f"prepare: resuming an interrupted run in {out} ({kept} finished shards kept and "
            f"verified; input {sources[min(state['source'], len(sources) - 1)].name}, "
            f"document {state['pos']})",
            file=progress,
        )
    return enc, writers


def _write(job: _Job, state: dict[str, Any], enc: Encoder, writers: dict[str, ShardWriter]) -> None:
    out, sources = job.out, job.sources
    settings = state["settings"]
    text_field, val_fraction = settings["text_field"], settings["val_fraction"]
    stats: list[dict[str, int]] = state["stats"]
    smallest: list[list[float]] = state.setdefault("smallest_keys", [])
    total = sum(s.size for s in sources)
    meter = Meter(job.progress, total, sum(s.size for s in sources[: state["source"]]))
    sft = job.expect.kind != "text"
    examples = ExampleEncoder(job.expect.kind, enc, job.template) if sft else None
    ignored: dict[str, list[Any]] = {}  # message key -> [first file:line, lines]
    # Reading and JSON parsing run ahead in a thread; encoding (every core) and writing here. A
    # third stage (encoding in its own thread) measured no faster on 2 cores and peaked at 401 MB
    # instead of 311 MB (benchmarks/data/RESULTS.md).
    pieces = chunks(sources, state["source"], state["pos"], text_field, _CHUNK_BYTES, job.expect)
    for i, docs, done in threaded(pieces):
        while len(stats) <= i:
            stats.append(new_stats(sft))
        pairs = _encode(enc, examples, docs, sources[i])
        parts: dict[str, list[np.ndarray]] = {s: [] for s in writers}
        for doc, (doc_ids, mask, lengths) in zip(docs, pairs, strict=True):
            for key in doc.ignored:
                ignored.setdefault(key, [f"{sources[i].path}:{doc.pos + 1}", 0])[1] += 1
            if len(doc_ids) == 0:  # an empty document (file, text field): no text, no separator
                continue
            if len(lengths) == 2 and _same_answers(doc_ids, lengths):
                stats[i]["identical"] = stats[i].get("identical", 0) + 1
                state.setdefault("identical_first", f"{sources[i].path}:{doc.pos + 1}")
                continue
            split = split_of(sources[i].name, doc.pos, val_fraction)
            remember(smallest, split_key(sources[i].name, doc.pos), len(doc_ids))
            parts[split].append(doc_ids)
            stats[i]["documents"] += 1
            stats[i]["undecodable"] += doc.n_replaced
            stats[i]["val_documents"] += split == "val"
            if mask is not None:
                parts[stream(split, MASK)].append(mask)
                parts[stream(split, EXAMPLES)].append(lengths)
                if stream(split, ORIGINS) in parts:  # (not when resuming an older prepare)
                    parts[stream(split, ORIGINS)].append(origins_of(i, doc.pos + 1, len(lengths)))
                stats[i]["val_masked" if split == "val" else "masked"] += int(mask.sum())
        for name, writer in writers.items():
            if parts[name]:
                writer.append(np.concatenate(parts[name]))
            writer.flush()
        state.update(
            source=i + 1 if done else i,
            pos=0 if done else docs[-1].pos + 1,
            writers={s: w.state() for s, w in writers.items()},
        )
        write_json_atomic(out / STATE, state)
        meter.update(
            len(docs),
            sum(len(d.text) for d in docs),
            sum(len(x) for x, _, _ in pairs),
            sources[i].size if done else 0,
        )
    meter.close()
    if ignored and job.progress is not None:
        print(f"note: {ignored_keys_note(ignored)}", file=job.progress)
    same = sum(st.get("identical", 0) for st in stats)
    if same and job.progress is not None:
        print(
            f"note: {same:,} preference pair(s) have a chosen answer identical to the rejected "
            f"one (first {state['identical_first']}) and were left out: they teach no preference.",
            file=job.progress,
        )


def _encode(
    enc: Encoder, examples: ExampleEncoder | None, docs: list[Document], source: SourceFile
) -> list[tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
    """Each document's ids, its loss mask and its examples' lengths: plain text ended by the
    end-of-text id (no mask), a chat or completion example, or a preference pair's two
    (``sft_encode.py``)."""
    if examples is None:
        eot = np.array([enc.eot_id], np.uint32)
        ids = enc.encode([d.text for d in docs])
        return [(np.concatenate([x, eot]) if len(x) else x, None, _one(x)) for x in ids]
    wheres = [f"{source.path}:{d.pos + 1}" for d in docs]
    if examples.kind == "preference":
        return list(examples.encode_pairs([d.example for d in docs], wheres))
    return [(x, m, _one(x)) for x, m in examples.encode([d.example for d in docs], wheres)]


def _one(ids: np.ndarray) -> np.ndarray:
    return np.array([len(ids)], np.uint32)


def _same_answers(ids: np.ndarray, lengths: np.ndarray) -> bool:
    """Whether a pair's chosen example (the first ``lengths[0]`` ids) equals its rejected one."""
    return bool(lengths[0] == lengths[1] and np.array_equal(ids[: lengths[0]], ids[lengths[0] :]))
