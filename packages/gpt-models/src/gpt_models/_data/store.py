"""The token store ``gpt prepare`` writes and ``gpt train --set data.path=DIR`` reads.

A store is a folder::

    manifest.json          format version, tokenizer, split rule, sources, shards (written last)
    tokenizer.json         the BPE tokenizer (absent for the byte tokenizer)
    train-00000.bin ...    token ids, raw little-endian uint16 (vocab <= 65536) or uint32
    val-00000.bin ...

Every shard but the last of each split holds exactly ``shard_tokens`` ids; documents follow each
other, each ended by the tokenizer's end-of-text id (``eot_id``; byte 0, NUL, for the byte
tokenizer). Shards are plain arrays (read with ``os.pread``), never pickles. The manifest is
written last and atomically, so a folder without one is an unfinished prepare, never a store;
it is checked as a whole (``manifest.py``) before any shard is read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import DataError
from .manifest import (
    FORMAT,
    MANIFEST,
    SFT_SHARDS,
    SFT_VERSION,
    SPLITS,
    VERSION,
    manifest_problems,
    shard_name,
)

# Shards of at most this many bytes in all are sha256-checked when training starts: 0.19 s for a
# 100 MB store with its shards in the page cache (0.15 to 0.5 GB/s measured on a shared 2-core
# machine), so ~2 s at the limit, while compiling takes longer. Larger stores check sizes only (a
# re-run of gpt prepare with the same arguments verifies every hash): hashing 50 GB at every start
# and resume would cost minutes.
FULL_HASH_LIMIT = 1 << 30


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` through ``path.tmp`` + fsync + rename: never half a file under its name."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: Path, obj: object) -> None:
    write_atomic(path, (json.dumps(obj, indent=1) + "\n").encode())


class ShardWriter:
    """Appends ids to ``{split}-NNNNN.bin.tmp``; a full shard is fsynced, hashed and renamed."""

    def __init__(
        self, out: Path, split: str, dtype: np.dtype[Any], shard_tokens: int, state: dict[str, Any]
    ) -> None:
        self.out, self.split, self.dtype, self.shard_tokens = out, split, dtype, shard_tokens
        self.finished: list[dict[str, Any]] = list(state.get("finished", []))
        self.open_tokens = int(state.get("open_tokens", 0))
        self._rewind()
        self._file = self._tmp_path().open("ab")

    def _rewind(self) -> None:
        """Drop what a killed run wrote after its last saved state, so writing resumes there."""
        index, tmp = len(self.finished), self._tmp_path()
        final = self.out / shard_name(self.split, index)
        if not tmp.exists() and final.exists():  # finished after the state was saved
            os.replace(final, tmp)
        for later in itertools.count(index + 1):
            stale = [self.out / shard_name(self.split, later)]
            stale.append(stale[0].with_name(stale[0].name + ".tmp"))
            if not any(p.exists() for p in stale):
                break
            for p in stale:
                p.unlink(missing_ok=True)
        want = self.open_tokens * self.dtype.itemsize
        with tmp.open("ab") as f:
            if f.tell() < want:
                raise DataError(
                    f"{tmp} has {f.tell():,} bytes, but the saved progress of this gpt prepare "
                    f"needs {want:,}: the unfinished store was altered. Delete {self.out} and "
                    "start over."
                )
            f.truncate(want)

    def _tmp_path(self) -> Path:
        return self.out / (shard_name(self.split, len(self.finished)) + ".tmp")

    def append(self, ids: np.ndarray) -> None:
        ids = ids.astype(self.dtype, copy=False)
        while len(ids):
            room = self.shard_tokens - self.open_tokens
            self._file.write(ids[:room].tobytes())
            self.open_tokens += len(ids[:room])
            ids = ids[room:]
            if self.open_tokens == self.shard_tokens:
                self._finish()

    def _finish(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        tmp = self._tmp_path()
        final = self.out / shard_name(self.split, len(self.finished))
        os.replace(tmp, final)
        self.finished.append(shard_record(final, self.open_tokens))
        self.open_tokens = 0
        self._file = self._tmp_path().open("ab")

    def flush(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> list[dict[str, Any]]:
        """Finish the last, shorter shard (if any) and return every shard's record."""
        if self.open_tokens:
            self._finish()
        self._file.close()
        self._tmp_path().unlink(missing_ok=True)
        return self.finished

    def abandon(self) -> None:
        """Close the open shard without finishing it (a refused prepare removes it)."""
        self._file.close()

    def state(self) -> dict[str, Any]:
        return {"finished": self.finished, "open_tokens": self.open_tokens}


def shard_record(path: Path, tokens: int) -> dict[str, Any]:
    return {
        "file": path.name,
        "tokens": tokens,
        "bytes": path.stat().st_size,
        "sha256": file_sha256(path),
    }


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in 8 MiB pieces."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while piece := f.read(1 << 23):
            digest.update(piece)
    return digest.hexdigest()


def check_shards(folder: Path, records: list[dict[str, Any]], *, full_hash: bool) -> None:
    """Every shard has its recorded size (and, with ``full_hash``, its sha256).

    Raises:
        DataError: a missing, truncated, extended or altered shard, named.
    """
    for rec in records:
        path = folder / rec["file"]
        fix = (
            "The store is damaged or was changed after gpt prepare wrote it: prepare it again "
            f"from the same inputs (into a new --out, or after deleting {folder}), or copy it "
            "again from where it was made."
        )
        if not path.is_file():
            what = "is not a regular file" if path.exists() else "is missing"
            raise DataError(f"Shard {path} listed in {folder / MANIFEST} {what}. {fix}")
        size = path.stat().st_size
        if size != rec["bytes"]:
            raise DataError(
                f"Shard {path} has {size:,} bytes, but {MANIFEST} records {rec['bytes']:,} "
                f"(truncated or altered). {fix}"
            )
        if full_hash and file_sha256(path) != rec["sha256"]:
            raise DataError(
                f"Shard {path} has the recorded size but not the recorded sha256 (its contents "
                f"changed). {fix}"
            )


class ShardedTokens:
    """The ids of one split, read from its shards on demand, indexed as one array (read-only).

    Supports ``len``, slices and integer-array indexing; :meth:`windows` (what batches use) reads
    one slice per window. Reads are ``pread`` calls on shard files opened once, with the kernel's
    read-ahead turned off (``POSIX_FADV_RANDOM``): nothing is mapped into the process, so its RSS
    does not grow with the store or with the steps a run makes, and a batch reads from disk only
    the pages its windows cover (a memory map reads ahead megabytes around each touched page and
    keeps every page it touched resident: a 300-step run over a 1.1 GB store held 1 GB of it).
    """

    def __init__(self, paths: list[Path], dtype: np.dtype[Any]) -> None:
        self.dtype = np.dtype(dtype)
        self._fds: list[int] = []
        sizes = []
        for path in paths:
            size = path.stat().st_size // self.dtype.itemsize
            if size == 0:
                continue
            fd = os.open(path, os.O_RDONLY)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            self._fds.append(fd)
            sizes.append(size)
        self._starts = np.cumsum([0, *sizes])
        weakref.finalize(self, _close_all, list(self._fds))

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def shape(self) -> tuple[int]:
        return (len(self),)

    def _read(self, shard: int, start: int, stop: int) -> np.ndarray:
        """Ids ``start:stop`` of shard ``shard`` (offsets within it)."""
        size = self.dtype.itemsize
        want = (stop - start) * size
        data = os.pread(self._fds[shard], want, start * size)
        if len(data) != want:
            raise DataError(
                f"A token store shard ended early: {want} bytes were expected at offset "
                f"{start * size}, {len(data)} were read. The store changed while this run read it; "
                "run gpt prepare again to rebuild it."
            )
        return np.frombuffer(data, self.dtype)

    def windows(self, starts: np.ndarray, length: int) -> np.ndarray:
        """``out[..., j] = self[starts[...] + j]`` for ``j < length``: one slice per window."""
        flat = starts.reshape(-1)
        out = np.empty((len(flat), length), self.dtype)
        for row, start in enumerate(flat.tolist()):
            out[row] = self[start : start + length]
        return out.reshape(*starts.shape, length)

    def __getitem__(self, index: Any) -> np.ndarray:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return self[np.arange(start, stop, step)]
            if stop <= start:
                return np.empty(0, self.dtype)
            first = int(np.searchsorted(self._starts, start, side="right")) - 1
            last = int(np.searchsorted(self._starts, stop - 1, side="right")) - 1
            parts = [
                self._read(s, max(start - a, 0), min(stop, b) - a)
                for s in range(first, last + 1)
                for a, b in [(int(self._starts[s]), int(self._starts[s + 1]))]
            ]
            return parts[0].copy() if len(parts) == 1 else np.concatenate(parts)
        idx = np.asarray(index, dtype=np.int64)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"index out of range for {n} token ids")
        idx = np.where(idx < 0, idx + n, idx)
        out = np.empty(idx.shape, self.dtype)
        for flat, i in enumerate(idx.reshape(-1).tolist()):
            out.reshape(-1)[flat] = self[i : i + 1][0]
        return out


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


@dataclasses.dataclass(frozen=True)
class Store:
    """An opened store: its folder, manifest and the two splits."""

    folder: Path
    manifest: dict[str, Any]
    train: ShardedTokens
    val: ShardedTokens

    @property
    def tokenizer_kind(self) -> str:
        return str(self.manifest["tokenizer"]["kind"])


def is_store(path: Path) -> bool:
    return path.is_dir() and (path / MANIFEST).is_file()


def manifest_digest(folder: Path) -> str:
    """The identity of a store: the SHA-256 of its manifest, which lists every shard with its size
    and digest (another store made from other text, even with the same tokenizer, differs)."""
    return hashlib.sha256((folder / MANIFEST).read_bytes()).hexdigest()


def read_manifest(folder: Path) -> dict[str, Any]:
    """The checked manifest of a store.

    Raises:
        DataError: not JSON, not a store manifest, or a version this code does not read.
    """
    path = folder / MANIFEST
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path} is not valid JSON ({err}); re-run gpt prepare.") from err
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise DataError(f'{path} is not a gpt prepare manifest (no "format": {FORMAT!r}).')
    if raw.get("version") not in (VERSION, SFT_VERSION):
        raise DataError(
            f"{path} has store format version {raw.get('version')!r}; this gpt-models reads "
            f"versions {VERSION} and {SFT_VERSION} (with a loss mask). Re-run gpt prepare with "
            "this version."
        )
    if problems := manifest_problems(raw):
        shown = "; ".join(problems[:6]) + (
            f"; and {len(problems) - 6} more" if problems[6:] else ""
        )
        raise DataError(
            f"{path} does not describe a store gpt prepare wrote (edited or damaged): {shown}. "
            "Its shards cannot be read safely. Prepare the store again (gpt prepare with the same "
            f"inputs, into a new --out or after deleting {folder}), or restore {MANIFEST} from a "
            "copy."
        )
    return raw


def shard_records(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every shard a manifest lists: token ids, and a store with a loss mask's masks, example
    lengths and (stores made since they were added) origins (``sft_store.py``)."""
    records = [r for split in SPLITS for r in manifest["shards"][split]]
    for field in SFT_SHARDS:
        records += [r for split in SPLITS for r in manifest.get(field, {}).get(split, [])]
    return records


def open_store(folder: Path, *, full_hash: bool | None = None) -> Store:
    """Open a store for reading: manifest, sizes (and hashes, see ``FULL_HASH_LIMIT``) checked.

    Raises:
        DataError: see :func:`read_manifest` and :func:`check_shards`.
    """
    manifest = read_manifest(folder)
    records = shard_records(manifest)
    if full_hash is None:
        full_hash = sum(r["bytes"] for r in records) <= FULL_HASH_LIMIT
    check_shards(folder, records, full_hash=full_hash)
    dtype = np.dtype(manifest["dtype"])
    train, val = (
        ShardedTokens([folder / r["file"] for r in manifest["shards"][s]], dtype) for s in SPLITS
    )
    return Store(folder, manifest, train, val)


def store_tokenizer_file(folder: Path, want: str) -> Path | None:
    """The tokenizer file of the store in ``folder`` (None: byte), checked against
    ``data.tokenizer``.

    Raises:
        DataError: the store was made by another kind of tokenizer, or its file is missing/altered.
    """
    info = read_manifest(folder)["tokenizer"]
    if info["kind"] != want:
        raise DataError(
            f"The token store {folder} was made by the {info['kind']!r} tokenizer "
            f"({info['vocab_size']} ids), but data.tokenizer = {want!r}. Set "
            f"--set data.tokenizer={info['kind']}, or prepare the store again with "
            f"gpt prepare --tokenizer {want}."
        )
    if info.get("file") is None:
        return None
    path = folder / info["file"]
    if not path.is_file() or file_sha256(path) != info["sha256"]:
        raise DataError(
            f"The tokenizer file {path} of the token store is missing or is not the one its "
            "shards were made with (sha256 differs from manifest.json). Restore it or prepare "
            "the store again."
        )
    return path


def tokenizer_sha256(tokenizer_json: str | None) -> str:
    """A tokenizer's identity as a store's manifest records it: the sha256 of its JSON
    (``None``: the byte tokenizer, recorded as the hash of ``b"byte"``)."""
    return hashlib.sha256((tokenizer_json or "byte").encode()).hexdigest()


def check_tokenizer_json(folder: Path, tokenizer_json: str | None) -> None:
    """The run's tokenizer (its JSON; None: byte) is the one the store was made with.

    Raises:
        DataError: it is not (e.g. a resumed run whose tokenizer.json differs from the store's).
    """
    info = read_manifest(folder)["tokenizer"]
    got = tokenizer_sha256(tokenizer_json)
    if got != info["sha256"]:
        raise DataError(
            f"The run's tokenizer is not the one the token store {folder} was made with "
            f"(sha256 {got[:12]}... vs {info['sha256'][:12]}... in manifest.json): its ids would "
            "mean other text. Train a new run on this store, or point data.path at the store "
            "this run was trained on."
        )
