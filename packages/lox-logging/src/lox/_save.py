"""``save`` and ``load``: a logdict on disk, safely (no pickle) and appendable.

Layout of a save folder::

    path/lox-index.jsonl   one JSON object per line, only ever appended to
    path/chunks/00000000.npz   the arrays of one ``save`` call (np.savez, no object arrays)

The index starts with a header line; a ``key`` line describes a key when first saved (its
pytree structure, per-event shapes and dtypes, step names) and a ``chunk`` line lists, per
key id, how many events one chunk file holds. File names are built from integers only, so a
key such as ``"../x"`` or ``"/abs"`` is just a string in the index and can never become a path.
Appending writes one new chunk file and a few index lines: O(new data), old data untouched.
Reading checks every index line and chunk against what lox writes (``_save_index``): a damaged
or altered save raises ``DamagedSaveError`` naming the file, never numpy's or json's own error.
"""

from __future__ import annotations

import os
import threading
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from ._logdict import logdict
from ._logdict_checks import show_tree
from ._save_index import (
    CHUNKS,
    FORMAT,
    INDEX,
    VERSION,
    Index,
    chunk_name,
    damaged,
    dtype_of,
    folder_path,
    open_inside,
    read_index,
    refuse_link,
    write_lines,
)
from ._treecode import decode_tree, encode_tree

# Appends by one process reuse the index in memory: re-reading it each time would make every
# `save` cost O(number of earlier saves). The size check notices writes by anyone else.
_CACHE: dict[str, Index] = {}
_LOCK = threading.Lock()


def _index_for_append(path: str) -> Index:
    path = os.path.realpath(path)
    refuse_link("lox.save", path, INDEX)
    index_file = os.path.join(path, INDEX)
    if not os.path.exists(index_file) or os.path.getsize(index_file) == 0:
        _CACHE[path] = index = Index()
        write_lines(
            "lox.save", path, [{"format": FORMAT, "version": VERSION}], index, truncate=True
        )
        return index
    cached = _CACHE.get(path)
    if cached is not None and cached.size == os.path.getsize(index_file):
        return cached
    _CACHE[path] = index = read_index("lox.save", path)
    return index


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
    leaves = [np.zeros((1, *x["shape"]), dtype=dtype_of(x["dtype"])) for x in entry["leaves"]]
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
        TypeError: ``logs`` is not a logdict, holds object arrays, or ``path`` is not a path.
        ValueError: ``path`` is ``''`` (pass ``'.'`` to mean the working directory), or a key
            was saved before with another structure, shape, dtype or steps.
        DamagedSaveError: ``path`` holds a save that is damaged or altered (see ``load``), or
            its index or ``chunks`` folder is a symbolic link: lox writes only inside ``path``.
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
    path = _folder("lox.save", path)
    with _LOCK:
        index = _index_for_append(path)
        arrays, entries, counts = _chunk_contents(path, index, logs)
        number = len(index.chunks)
        if arrays:
            _write_chunk(path, number, arrays)
        if counts:
            entries.append({"chunk": number, "file": chunk_name(number), "counts": counts})
        if entries:
            write_lines("lox.save", path, entries, index)


def _chunk_contents(path: str, index: Index, logs: logdict):
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


def _write_chunk(path: str, number: int, arrays: dict[str, np.ndarray]) -> None:
    refuse_link("lox.save", path, CHUNKS)
    os.makedirs(os.path.join(path, CHUNKS), exist_ok=True)
    final = chunk_name(number)
    # Write then rename, so a crash never leaves a truncated chunk under its final name. The
    # temporary file is opened without following links; the rename replaces a link, never
    # writes through it.
    with open_inside("lox.save", path, final + ".tmp", "wb") as fh:
        np.savez(fh, **arrays)  # type: ignore[arg-type]  # member names are "<id>_<i>"
    os.replace(os.path.join(path, final + ".tmp"), os.path.join(path, final))


def _folder(who: str, path: str | os.PathLike[str]) -> str:
    path = folder_path(who, path, "'runs/logs'")
    if os.path.exists(path) and not os.path.isdir(path):
        raise FileExistsError(
            f"{who}: {path!r} is a file; expected a folder (new or from an earlier "
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
        DamagedSaveError: the save is not as lox wrote it: a chunk is missing, truncated or
            altered, an index line is not JSON or not a lox entry, the index names a file that is
            not one of the save's chunks (such as ``../../outside.npz``: lox reads only inside
            ``path``), or the index, ``chunks`` or a chunk is a symbolic link. The message names
            the file; the error that revealed the damage is its ``__cause__``.
        ValueError: ``path`` is ``''``, or the save is from a newer lox.
        TypeError: ``path`` is not a path.

    Example:
        >>> import tempfile, numpy as np, lox
        >>> folder = tempfile.mkdtemp()
        >>> lox.save(lox.logdict({'p': {'w': np.ones((1, 2))}}), folder)
        >>> lox.load(folder)
        logdict({'p': {'w': float64[1,2]}})
    """
    path = folder_path("lox.load", path, "'runs/logs'")
    if not os.path.isfile(os.path.join(path, INDEX)):
        raise FileNotFoundError(_not_a_save(path))
    index = read_index("lox.load", path)
    if index.chunks:
        refuse_link("lox.load", path, CHUNKS)
    parts: dict[str, list[list[np.ndarray]]] = {key: [] for key in index.keys}
    by_id = {str(e["id"]): e for e in index.keys.values()}
    for chunk, line in zip(index.chunks, index.chunk_lines):
        for key, members in _read_chunk(path, chunk, line, by_id):
            parts[key].append(members)
    data, steps = {}, {}
    for key, entry in index.keys.items():
        columns = _concat_parts(entry, parts[key])
        n_leaves = len(entry["leaves"])
        data[key] = _decode(path, entry, columns[:n_leaves])
        steps[key] = {s["name"]: c for s, c in zip(entry["steps"], columns[n_leaves:])}
    return logdict(data, steps)


def _not_a_save(path: str) -> str:
    if not os.path.exists(path):
        return f"lox.load: {path!r} does not exist; expected a folder written by lox.save."
    if not os.path.isdir(path):
        return (
            f"lox.load: {path!r} is a file; expected the folder lox.save (or SaveLogger) wrote, "
            "which holds lox-index.jsonl. Pass that folder."
        )
    runs = sorted(d for d in os.listdir(path) if os.path.isfile(os.path.join(path, d, INDEX)))
    hint = (
        f" It holds the saves {runs}: SaveLogger writes one folder per run, so load one of "
        f"them, e.g. lox.load({os.path.join(path, runs[0])!r})."
        if runs
        else " Pass the folder given to lox.save."
    )
    return f"lox.load: {path!r} is not a lox save (no {INDEX} inside).{hint}"


# What reading a truncated or altered npz raises: zipfile's and zlib's errors, a short read,
# numpy's refusal of a pickle or of a member it cannot parse, a member the index promises.
_UNREADABLE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError)


def _read_chunk(
    path: str, chunk: dict[str, Any], line: int, by_id: dict[str, dict[str, Any]]
) -> list[tuple[str, list[np.ndarray]]]:
    """The members of one chunk, per key, checked against the index."""
    file = chunk["file"]
    listed = f"listed on line {line} of {INDEX}"
    fix = _without_chunk(path, chunk, line, by_id)
    try:
        fh = open_inside("lox.load", path, file, "rb")
    except FileNotFoundError as err:
        raise damaged(
            "lox.load",
            path,
            f"the chunk file {file} of the save {path!r} ({listed}) is missing. It was deleted "
            "or moved after lox wrote it.",
            fix,
        ) from err
    with fh:
        try:
            npz = np.load(fh, allow_pickle=False)
            if not isinstance(npz, np.lib.npyio.NpzFile):
                raise ValueError(f"it holds one {type(npz).__name__}, not an npz archive")
            with npz:
                return [
                    (by_id[k]["key"], _read_members(path, file, npz, by_id[k], n))
                    for k, n in chunk["counts"].items()
                ]
        except _UNREADABLE as err:
            raise damaged(
                "lox.load",
                path,
                f"the chunk file {file} of the save {path!r} ({listed}) cannot be read "
                f"({type(err).__name__}: {err}); expected an npz archive holding the arrays the "
                "index lists. It was truncated or altered after lox wrote it (lox writes each "
                "chunk under a temporary name and renames it, so a crash leaves none "
                "half-written).",
                fix,
            ) from err


def _without_chunk(
    path: str, chunk: dict[str, Any], line: int, by_id: dict[str, dict[str, Any]]
) -> str:
    """What to do about one unreadable chunk: put it back, or read every other event without it."""
    counts = [(by_id[k]["key"], n) for k, n in chunk["counts"].items()]
    held = ", ".join(f"{n} of {key!r}" for key, n in counts[1:])
    key, n = counts[0]
    held = f"{n} event{'s' * (n != 1)} of {key!r}" + (f", {held}" if held else "")
    # Reading the other chunks works once the chunk's index line is gone; the copy keeps the
    # original intact for a later restore, and is not appended to (see the last sentence).
    return (
        f"Put {os.path.join(path, chunk['file'])!r} back from a copy of the save if you have one. "
        f"To read the other events without it (it holds {held}), copy the folder, "
        f"delete line {line} from the copy's {INDEX} and lox.load the copy. To keep logging, "
        "save to a new folder."
    )


def _specs(entry: dict[str, Any]) -> list[tuple[str, list[int]]]:
    leaves = [(x["dtype"], x["shape"]) for x in entry["leaves"]]
    return leaves + [(s["dtype"], []) for s in entry["steps"]]


def _read_members(
    path: str, file: str, npz: Any, entry: dict[str, Any], events: int
) -> list[np.ndarray]:
    key_id = entry["id"]
    names = [f"{key_id}_{i}" for i in range(len(entry["leaves"]))]
    names += [f"{key_id}_s{j}" for j in range(len(entry["steps"]))]
    out = []
    for name, (dtype, shape) in zip(names, _specs(entry)):
        arr = npz[name]
        # np.save stores dtypes numpy does not know natively (bfloat16) as raw void bytes.
        arr = arr if arr.dtype == dtype_of(dtype) else arr.view(dtype_of(dtype))
        if arr.shape != (events, *shape):
            raise ValueError(
                f"member {name} of key {entry['key']!r} has shape {arr.shape}, but the index "
                f"lists {events} events of shape {tuple(shape)}"
            )
        out.append(arr)
    return out


def _concat_parts(entry: dict[str, Any], parts: list[list[np.ndarray]]) -> list[np.ndarray]:
    if not parts:  # a key saved with no events (e.g. from a scan of length 0)
        return [np.zeros((0, *shape), dtype_of(dtype)) for dtype, shape in _specs(entry)]
    return [np.concatenate(column, axis=0) for column in zip(*parts)]


def _decode(path: str, entry: dict[str, Any], leaves: list[np.ndarray]) -> Any:
    try:
        return decode_tree(entry["tree"], leaves)
    except (ValueError, KeyError, TypeError, IndexError) as err:
        raise damaged(
            "lox.load",
            path,
            f"the index entry of key {entry['key']!r} describes its pytree as "
            f"{entry['tree']!r:.120}, which is not a structure lox writes ({err}). The index "
            "was altered after lox wrote it.",
        ) from err
