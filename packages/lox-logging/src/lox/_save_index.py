"""The files of a save folder: its index, read and checked line by line, and links refused.

A save folder holds ``lox-index.jsonl`` and ``chunks/<number>.npz``, nothing else, and lox opens
only those. Whatever the index says, a chunk is opened only under the name lox itself gives chunks
(``chunks/`` then digits then ``.npz``), and no file or folder inside the save is opened through a
symbolic link: an index line ``"file": "../../outside.npz"`` or a ``chunks`` link to another disk
would otherwise make ``load`` read, and ``save`` write, outside the folder. A save that breaks
these rules, or whose files are not what lox wrote, raises :class:`DamagedSaveError`.
"""

from __future__ import annotations

import errno
import json
import os
import re
from typing import IO, Any

import jax
import numpy as np

INDEX = "lox-index.jsonl"
CHUNKS = "chunks"
FORMAT = "lox-logdict"
VERSION = 1

_CHUNK_FILE = re.compile(r"chunks/[0-9]{8,}\.npz")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # absent on Windows: the islink check still runs


class DamagedSaveError(ValueError):
    """A save folder is not as lox wrote it, so lox refuses to read it or append to it.

    Raised by ``lox.load``, ``lox.save``, ``SaveLogger`` and ``lox.to_csv`` when a file of the
    save is missing, truncated or altered (an index line that is not JSON or not a lox entry, a
    chunk that is not a readable npz archive or whose arrays disagree with the index), when the
    index names a file that is not one of the save's chunks (``../../outside.npz``), or when the
    index, the ``chunks`` folder, a chunk or a ``SaveLogger`` run folder is a symbolic link (lox
    reads and writes only inside its folder and never follows one). The message names the file
    and the fix; the exception that revealed the damage, if any, is its ``__cause__``.

    A ``ValueError``, so ``except ValueError`` keeps working for callers that do not know it.

    Example:
        >>> import os, tempfile, numpy as np, lox
        >>> folder = tempfile.mkdtemp()
        >>> lox.save(lox.logdict({"x": np.zeros(1)}), folder)
        >>> os.remove(os.path.join(folder, "chunks", "00000000.npz"))
        >>> try:
        ...     lox.load(folder)
        ... except lox.DamagedSaveError as err:
        ...     print("chunks/00000000.npz" in str(err), "is missing" in str(err))
        True True
    """


def damaged(who: str, path: str, what: str, fix: str = "") -> DamagedSaveError:
    """The error for a damaged save at ``path``: what is wrong, then how to get going again."""
    fix = fix or (
        f"Restore {path!r} from a copy if you have one; to keep logging, save to a new folder."
    )
    return DamagedSaveError(f"{who}: {what} {fix}")


def folder_path(who: str, path: Any, example: str) -> str:
    """``path`` as a string, refusing what cannot name a save folder (a non-path, ``''``)."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(
            f"{who}: path must be a folder path (str or os.PathLike), got {path!r:.60} "
            f"({type(path).__name__}). Pass the folder's name, e.g. {example}."
        )
    text = os.fspath(path)
    # An empty path would mean the working directory to os.path.join and open(): the logs would
    # land beside the user's files (or be read from them) instead of being refused.
    if text == "":
        raise ValueError(
            f"{who}: path is '' (an empty string); expected the folder of the logs. Pass the "
            f"folder's name, e.g. {example}, or '.' if you mean the working directory."
        )
    return text


def refuse_link(who: str, path: str, name: str) -> None:
    """Raise if ``path/name`` is a symbolic link: lox never reads or writes through one."""
    full = os.path.join(path, name)
    if os.path.islink(full):
        raise _link_error(who, path, name)


def _link_error(who: str, path: str, name: str) -> DamagedSaveError:
    try:
        target = os.readlink(os.path.join(path, name))
    except OSError:  # replaced since it was seen as a link
        target = "?"
    return damaged(
        who,
        path,
        f"{name} in the save folder {path!r} is a symbolic link (to {target!r}); lox reads and "
        "writes only inside its folder and never through a link.",
        "Remove the link (a save holds real files), or save to another folder.",
    )


def open_inside(who: str, path: str, name: str, mode: str) -> IO[bytes]:
    """Open ``path/name`` in binary ``mode`` ('rb', 'r+b', 'wb') without following a link."""
    refuse_link(who, path, name)
    flags = {"rb": os.O_RDONLY, "r+b": os.O_RDWR, "wb": os.O_WRONLY | os.O_CREAT | os.O_TRUNC}
    try:
        fd = os.open(os.path.join(path, name), flags[mode] | _NOFOLLOW, 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP:  # became a link since the check above
            raise _link_error(who, path, name) from err
        raise
    return os.fdopen(fd, mode)


def dtype_of(name: str) -> np.dtype:
    """The numpy dtype an index names (jax's bfloat16 and float8 types included)."""
    # jax's dtypes (bfloat16, float8_*) are known to numpy once ml_dtypes is imported by jax.
    return np.dtype(jax.numpy.dtype(name))


def _is_dtype(name: Any) -> bool:
    try:
        return isinstance(name, str) and dtype_of(name).kind not in "OMm"
    except TypeError:
        return False


def chunk_name(number: int) -> str:
    return f"{CHUNKS}/{number:08d}.npz"


# ---------------------------------------------------------------------------------------------
# The index, as kept in memory between appends.


class Index:
    """What a save folder holds: key metadata and the chunk list, mirrored from the index file."""

    def __init__(self) -> None:
        self.keys: dict[str, dict[str, Any]] = {}  # key -> its `key` line
        self.ids: set[str] = set()  # the key ids, as chunk lines spell them
        self.chunks: list[dict[str, Any]] = []  # `chunk` lines in order
        self.chunk_lines: list[int] = []  # their line numbers in the file (1-based)
        self.size = 0  # bytes of the index file this mirrors

    def apply(self, entry: dict[str, Any], line: int = 0) -> None:
        if "key" in entry:
            self.keys[entry["key"]] = entry
            self.ids.add(str(entry["id"]))
        elif "chunk" in entry:
            self.chunks.append(entry)
            self.chunk_lines.append(line)


def read_index(who: str, path: str) -> Index:
    """Read and check ``path``'s index; a line lox did not write raises ``DamagedSaveError``."""
    index = Index()
    with open_inside(who, path, INDEX, "rb") as fh:
        raw = fh.read()
    # A crash while appending can leave a last line without its newline: that append never
    # completed (chunk files are written first), so ignore it.
    complete = raw[: raw.rfind(b"\n") + 1]
    lines = complete.decode("utf-8", errors="replace").splitlines()
    if not lines:
        raise damaged(
            who,
            path,
            f"{os.path.join(path, INDEX)!r} holds no complete line; the first save "
            "into this folder was interrupted before it wrote anything.",
            f"Delete {path!r} (it holds no logs) or save to a new folder.",
        )
    check_header(who, path, _parse(who, path, lines[0], 1))
    for number, line in enumerate(lines[1:], start=2):
        entry = _parse(who, path, line, number)
        _check_entry(who, path, entry, number, index)
        index.apply(entry, number)
    index.size = len(complete)
    return index


def _parse(who: str, path: str, line: str, number: int) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as err:
        raise damaged(
            who,
            path,
            f"line {number} of {os.path.join(path, INDEX)!r} is not valid JSON ({err.msg}, column "
            f"{err.colno}): got {line[:80]!r}, expected one JSON object as lox writes it. The "
            "index was altered or damaged after lox wrote it (lox only appends whole lines).",
        ) from err


def check_header(who: str, path: str, header: Any) -> None:
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise damaged(
            who,
            path,
            f"{os.path.join(path, INDEX)!r} is not a lox save index (got first line "
            f"{header!r:.80}, expected {{'format': {FORMAT!r}, ...}}).",
            "Pass a folder written by lox.save or SaveLogger, or restore this one from a copy.",
        )
    version = header.get("version", 0)
    if not isinstance(version, int) or version > VERSION:
        raise ValueError(
            f"{who}: {path!r} was written by a newer lox (format version {version!r}, "
            f"this lox reads up to {VERSION}). Upgrade lox-logging to load it."
        )


def _check_entry(who: str, path: str, entry: Any, number: int, index: Index) -> None:
    """An index line must be an entry lox writes; a chunk may only name a chunk of the save."""
    where = f"line {number} of {os.path.join(path, INDEX)!r}"
    if not isinstance(entry, dict):
        problem = f"is {entry!r:.80}, expected a JSON object"
        raise damaged(who, path, f"{where} {problem}; the index was altered after lox wrote it.")
    if "key" in entry:
        problem = _key_problem(entry)
    elif "chunk" in entry:
        problem = _chunk_problem(entry, index)
    else:
        return  # a line kind this lox does not know: ignored, as newer minor versions may add some
    if problem:
        raise damaged(who, path, f"{where} {problem}; the index was altered after lox wrote it.")


def _key_problem(entry: dict[str, Any]) -> str:
    leaves, steps = entry.get("leaves"), entry.get("steps")
    ok = (
        isinstance(entry["key"], str)
        and isinstance(entry.get("id"), int)
        and isinstance(entry.get("tree"), dict)
        and isinstance(leaves, list)
        and all(_is_leaf_spec(x) for x in leaves)
        and isinstance(steps, list)
        and all(isinstance(s, dict) and _is_dtype(s.get("dtype")) and "name" in s for s in steps)
    )
    return "" if ok else f"holds a malformed key entry {entry!r:.120}"


def _is_leaf_spec(x: Any) -> bool:
    shape = x.get("shape") if isinstance(x, dict) else None
    return (
        isinstance(x, dict)
        and _is_dtype(x.get("dtype"))
        and isinstance(shape, list)
        and all(isinstance(d, int) and d >= 0 for d in shape)
    )


def _chunk_problem(entry: dict[str, Any], index: Index) -> str:
    file, counts = entry.get("file"), entry.get("counts")
    if not isinstance(file, str) or not _CHUNK_FILE.fullmatch(file):
        return (
            f"names the chunk file {file!r}, which is not a chunk of this save (lox names chunks "
            "'chunks/<digits>.npz' and reads nothing outside its folder)"
        )
    if not isinstance(counts, dict) or not all(
        k in index.ids and isinstance(n, int) and n >= 0 for k, n in counts.items()
    ):
        return f"lists event counts {counts!r:.80} for keys the index does not describe"
    return ""


def write_lines(
    who: str, path: str, entries: list[dict[str, Any]], index: Index, *, truncate=False
):
    """Append ``entries`` to the index (or start it), never through a link."""
    text = "".join(json.dumps(e, ensure_ascii=True) + "\n" for e in entries).encode("utf-8")
    with open_inside(who, path, INDEX, "wb" if truncate else "r+b") as fh:
        # Drop a half-written last line left by a crash, so the new lines start on their own.
        fh.seek(index.size if not truncate else 0)
        fh.truncate()
        fh.write(text)
    index.size += len(text)
    for entry in entries:
        index.apply(entry)
