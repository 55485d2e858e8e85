"""``save`` and ``load``: a logdict on disk, safely (no pickle) and appendable.

Layout of a save folder::

    path/lox-index.jsonl   one JSON object per line, only ever appended to
    path/chunks/00000000.npz   the arrays of one ``save`` call (np.savez, no object arrays)

The index starts with a header line; a ``key`` line describes a key when first saved (its
pytree structure, per-event shapes and dtypes, step names) and a ``chunk`` line lists, per
key id, how many events one chunk file holds. File names are built from integers only, so a
key such as ``"../x"`` or ``"/abs"`` is just a string in the index and can never become a path.
Appending writes one new chunk file and a few index lines: O(new data), old data untouched.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from ._logdict import logdict
from ._logdict_checks import show_tree
from ._treecode import decode_tree, encode_tree

INDEX = "lox-index.jsonl"
CHUNKS = "chunks"
FORMAT = "lox-logdict"
VERSION = 1


# ---------------------------------------------------------------------------------------------
# The index of one save folder, as kept in memory between appends.


class _Index:
    """What a save folder holds: key metadata and the chunk list, mirrored from the index file."""

    def __init__(self) -> None:
        self.keys: dict[str, dict[str, Any]] = {}  # key -> its `key` line
        self.chunks: list[dict[str, Any]] = []  # `chunk` lines in order
        self.size = 0  # bytes of the index file this mirrors

    def apply(self, entry: dict[str, Any]) -> None:
        if "key" in entry:
            self.keys[entry["key"]] = entry
        elif "chunk" in entry:
            self.chunks.append(entry)


def _read_index(path: str) -> _Index:
    index = _Index()
    with open(os.path.join(path, INDEX), "rb") as fh:
        raw = fh.read()
    # A crash while appending can leave a last line without its newline: that append never
    # completed (chunk files are written first), so ignore it.
    complete = raw[: raw.rfind(b"\n") + 1]
    lines = complete.decode("utf-8").splitlines()
    if not lines:
        raise ValueError(f"lox.load: {path!r} has an empty {INDEX}; the save was interrupted.")
    _check_header(path, json.loads(lines[0]))
    for line in lines[1:]:
        index.apply(json.loads(line))
    index.size = len(complete)
    return index


def _check_header(path: str, header: Any) -> None:
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(
            f"lox: {os.path.join(path, INDEX)!r} is not a lox save index (got first line "
            f"{header!r}, expected {{'format': {FORMAT!r}, ...}})."
        )
    if header.get("version", 0) > VERSION:
        raise ValueError(
            f"lox: {path!r} was written by a newer lox (format version {header['version']}, "
            f"this lox reads up to {VERSION}). Upgrade lox-logging to load it."
        )


# Appends by one process reuse the index in memory: re-reading it each time would make every
# `save` cost O(number of earlier saves). The size check notices writes by anyone else.
_CACHE: dict[str, _Index] = {}
_LOCK = threading.Lock()


def _index_for_append(path: str) -> _Index:
    path = os.path.realpath(path)
    index_file = os.path.join(path, INDEX)
    if not os.path.exists(index_file) or os.path.getsize(index_file) == 0:
        _CACHE[path] = index = _Index()
        _write_lines(path, [{"format": FORMAT, "version": VERSION}], index, truncate=True)
        return index
    cached = _CACHE.get(path)
    if cached is not None and cached.size == os.path.getsize(index_file):
        return cached
    _CACHE[path] = index = _read_index(path)
    return index


def _write_lines(path: str, entries: list[dict[str, Any]], index: _Index, *, truncate=False):
    text = "".join(json.dumps(e, ensure_ascii=True) + "\n" for e in entries).encode("utf-8")
    with open(os.path.join(path, INDEX), "wb" if truncate else "r+b") as fh:
        # Drop a half-written last line left by a crash, so the new lines start on their own.
        fh.seek(index.size if not truncate else 0)
        fh.truncate()
        fh.write(text)
    index.size += len(text)
    for entry in entries:
        index.apply(entry)


# ---------------------------------------------------------------------------------------------
# save


def _host_leaf(key: str, x: Any) -> np.ndarray:
    if isinstance(x, jax.core.Tracer):
        raise TypeError(
            f"lox.save: key {key!r} holds a traced value ({x.aval}): save writes files, so it "
            "runs outside jit/vmap/grad. Return the logs from the traced function (lox.spool) "
            "and save them after, or log through lox.SaveLogger, which saves from a callback."
        )
    arr = np.asarray(jax.device_get(x))
    if arr.dtype.hasobject:
        raise TypeError(
            f"lox.save: key {key!r} holds an object array ({arr.dtype}); only numeric, bool "
            "and string-free arrays can be saved (pickle is never used). Log arrays of numbers."
        )
    return arr


def _key_entry(key: str, key_id: int, value: Any, steps: Mapping[str, Any]) -> dict[str, Any]:
    leaves, tree = encode_tree(value)
    return {
        "key": key,
        "id": key_id,
        "tree": tree,
        "leaves": [{"dtype": x.dtype.name, "shape": list(x.shape[1:])} for x in leaves],
        "steps": [{"name": n, "dtype": s.dtype.name} for n, s in steps.items()],
    }


def _check_append(path: str, key: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    """An appended key must look like the saved one, or `load` could not concatenate it."""
    if old["tree"] == new["tree"] and old["leaves"] == new["leaves"]:
        if [s["name"] for s in old["steps"]] == [s["name"] for s in new["steps"]]:
            return
        raise ValueError(
            f"lox.save: key {key!r} was saved to {path!r} with steps "
            f"{[s['name'] for s in old['steps']]}, now given steps "
            f"{[s['name'] for s in new['steps']]}. A key needs the same steps at every event: "
            "log the same step names each time, or save to another folder."
        )
    raise ValueError(
        f"lox.save: key {key!r} was saved to {path!r} as {_describe(old)} per event, now "
        f"given {_describe(new)}. One key keeps one structure, shape and dtype; log a "
        "consistent value, use another key, or save to another folder."
    )


def _describe(entry: dict[str, Any]) -> str:
    leaves = [np.zeros((1, *x["shape"]), dtype=_dtype(x["dtype"])) for x in entry["leaves"]]
    return show_tree(decode_tree(entry["tree"], leaves), per_event=True)


def save(logs: logdict, path: str | os.PathLike[str]) -> None:
    """Write ``logs`` (data and steps) to the folder ``path``, appending if it holds a save.

    Each call writes one new chunk file and appends to ``path/lox-index.jsonl``: earlier data
    is never rewritten, so appending costs O(new data). Arrays are stored with ``np.savez``
    and read back with ``allow_pickle=False``; key and step names live only inside the
    index, so any string is a valid key and nothing is written outside ``path``.

    Args:
        logs: the logdict to write (jax or numpy arrays; not traced values).
        path: a folder; created if missing.

    Raises:
        TypeError: ``logs`` is not a logdict, or holds object arrays.
        ValueError: a key was saved before with another structure, shape, dtype or steps.
        FileExistsError: ``path`` is a file.

    Example:
        >>> import tempfile, jax.numpy as jnp, lox
        >>> folder = tempfile.mkdtemp()
        >>> steps = lambda i: {'loss': {'step': jnp.array([i])}}
        >>> lox.save(lox.logdict({'loss': jnp.array([0.5])}, steps(0)), folder)
        >>> lox.save(lox.logdict({'loss': jnp.array([0.25])}, steps(1)), folder)
        >>> logs = lox.load(folder)
        >>> logs['loss'].tolist(), logs.steps['loss']['step'].tolist()
        ([0.5, 0.25], [0, 1])
    """
    if not isinstance(logs, logdict):
        raise TypeError(
            f"lox.save: expected a logdict, got {type(logs).__name__}. Wrap plain dicts: "
            "lox.save(lox.logdict({'loss': values[None]}), path)."
        )
    path = _folder(path)
    with _LOCK:
        index = _index_for_append(path)
        arrays, entries, counts = _chunk_contents(path, index, logs)
        number = len(index.chunks)
        if arrays:
            _write_chunk(path, number, arrays)
        if counts:
            entries.append({"chunk": number, "file": _chunk_name(number), "counts": counts})
        if entries:
            _write_lines(path, entries, index)


def _chunk_contents(path: str, index: _Index, logs: logdict):
    """The arrays of one chunk (named by key id and position), new key lines, event counts."""
    arrays: dict[str, np.ndarray] = {}
    entries: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    next_id = len(index.keys)
    all_steps = logs.steps
    for key, value in logs.items():
        value = jax.tree.map(lambda x, key=key: _host_leaf(key, x), value)
        steps = {n: _host_leaf(key, s) for n, s in all_steps[key].items()}
        known = index.keys.get(key)
        entry = _key_entry(key, known["id"] if known else next_id, value, steps)
        if known:
            _check_append(path, key, known, entry)
        else:
            entries.append(entry)
            next_id += 1
        n = _events(value, steps)
        if n:
            counts[str(entry["id"])] = n
            arrays.update(_member_arrays(entry["id"], value, steps))
    return arrays, entries, counts


def _events(value: Any, steps: Mapping[str, np.ndarray]) -> int:
    leaves = [*jax.tree.leaves(value), *steps.values()]
    return int(leaves[0].shape[0]) if leaves else 0


def _member_arrays(key_id: int, value: Any, steps: Mapping[str, np.ndarray]):
    leaves, _ = encode_tree(value)
    out = {f"{key_id}_{i}": x for i, x in enumerate(leaves)}
    out.update({f"{key_id}_s{j}": s for j, s in enumerate(steps.values())})
    return out


def _chunk_name(number: int) -> str:
    return f"{CHUNKS}/{number:08d}.npz"


def _write_chunk(path: str, number: int, arrays: dict[str, np.ndarray]) -> None:
    chunks = os.path.join(path, CHUNKS)
    if os.path.islink(chunks):
        raise FileExistsError(
            f"lox.save: {chunks!r} is a symbolic link; lox writes only inside {path!r}. "
            "Remove the link or save to another folder."
        )
    os.makedirs(chunks, exist_ok=True)
    final = os.path.join(path, _chunk_name(number))
    # Write then rename, so a crash never leaves a truncated chunk under its final name.
    with open(final + ".tmp", "wb") as fh:
        np.savez(fh, **arrays)  # type: ignore[arg-type]  # member names are "<id>_<i>"
    os.replace(final + ".tmp", final)


def _folder(path: str | os.PathLike[str]) -> str:
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise FileExistsError(
            f"lox.save: {path!r} is a file; expected a folder (new or from an earlier "
            "lox.save). Choose another path."
        )
    os.makedirs(path, exist_ok=True)
    return path


# ---------------------------------------------------------------------------------------------
# load


def load(path: str | os.PathLike[str]) -> logdict:
    """Read a folder written by :func:`save` (or by one run of ``SaveLogger``) as a logdict.

    Args:
        path: the folder passed to ``save``.

    Returns:
        A logdict of numpy arrays, with every saved event of every key in save order, and
        their steps. Pytree values come back as pytrees: dicts, lists, tuples and ``None``
        as themselves, namedtuples as namedtuples of the same name and fields, other
        custom nodes as dicts keyed by their child names.

    Raises:
        FileNotFoundError: ``path`` does not exist or holds no lox save.
        ValueError: the save is damaged or from a newer lox.

    Example:
        >>> import tempfile, numpy as np, lox
        >>> folder = tempfile.mkdtemp()
        >>> lox.save(lox.logdict({'p': {'w': np.ones((1, 2))}}), folder)
        >>> lox.load(folder)
        logdict({'p': {'w': float64[1,2]}})
    """
    path = os.fspath(path)
    if not os.path.isfile(os.path.join(path, INDEX)):
        raise FileNotFoundError(_not_a_save(path))
    index = _read_index(path)
    parts: dict[str, list[list[np.ndarray]]] = {key: [] for key in index.keys}
    by_id = {str(e["id"]): e for e in index.keys.values()}
    for chunk in index.chunks:
        with np.load(os.path.join(path, chunk["file"]), allow_pickle=False) as npz:
            for key_id, _ in chunk["counts"].items():
                entry = by_id[key_id]
                parts[entry["key"]].append(_read_members(npz, entry))
    data, steps = {}, {}
    for key, entry in index.keys.items():
        columns = _concat_parts(entry, parts[key])
        n_leaves = len(entry["leaves"])
        data[key] = decode_tree(entry["tree"], columns[:n_leaves])
        steps[key] = {s["name"]: c for s, c in zip(entry["steps"], columns[n_leaves:])}
    return logdict(data, steps)


def _not_a_save(path: str) -> str:
    if not os.path.isdir(path):
        return f"lox.load: {path!r} does not exist; expected a folder written by lox.save."
    runs = sorted(d for d in os.listdir(path) if os.path.isfile(os.path.join(path, d, INDEX)))
    hint = (
        f" It holds the saves {runs}: SaveLogger writes one folder per run, so load one of "
        f"them, e.g. lox.load({os.path.join(path, runs[0])!r})."
        if runs
        else " Pass the folder given to lox.save."
    )
    return f"lox.load: {path!r} is not a lox save (no {INDEX} inside).{hint}"


def _dtype(name: str) -> np.dtype:
    # jax's dtypes (bfloat16, float8_*) are known to numpy once ml_dtypes is imported by jax.
    return np.dtype(jax.numpy.dtype(name))


def _specs(entry: dict[str, Any]) -> list[tuple[str, list[int]]]:
    leaves = [(x["dtype"], x["shape"]) for x in entry["leaves"]]
    return leaves + [(s["dtype"], []) for s in entry["steps"]]


def _read_members(npz: Any, entry: dict[str, Any]) -> list[np.ndarray]:
    key_id = entry["id"]
    names = [f"{key_id}_{i}" for i in range(len(entry["leaves"]))]
    names += [f"{key_id}_s{j}" for j in range(len(entry["steps"]))]
    out = []
    for name, (dtype, _) in zip(names, _specs(entry)):
        arr = npz[name]
        # np.save stores dtypes numpy does not know natively (bfloat16) as raw void bytes.
        out.append(arr if arr.dtype == _dtype(dtype) else arr.view(_dtype(dtype)))
    return out


def _concat_parts(entry: dict[str, Any], parts: list[list[np.ndarray]]) -> list[np.ndarray]:
    if not parts:  # a key saved with no events (e.g. from a scan of length 0)
        return [np.zeros((0, *shape), _dtype(dtype)) for dtype, shape in _specs(entry)]
    return [np.concatenate(column, axis=0) for column in zip(*parts)]
