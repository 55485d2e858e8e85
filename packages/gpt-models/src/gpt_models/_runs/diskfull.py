"""Recognise a full disk (or quota) in whatever shape the writer reports it, and say what to do.

Our own writes and lox's raise ``OSError(ENOSPC)``; orbax's tensorstore writer raises a
``ValueError``
whose text starts with ``RESOURCE_EXHAUSTED`` and quotes the file. XLA reports running out of memory
as ``RESOURCE_EXHAUSTED`` too, so that text alone is not a full disk: the quoted file's filesystem
must be short of space. Either may be the ``__context__``
of a later error (a flush in a ``finally`` block), so the whole chain is searched.
"""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path

from .snapshot import committed_steps

_FULL = (errno.ENOSPC, errno.EDQUOT)
_QUOTED_PATH = re.compile(r'"(/[^"]+)"')
# A filesystem with less free space than this (or than 1% of its size) is "short of space".
_SHORT_BYTES = 256 * 2**20


def error_chain(err: BaseException) -> list[BaseException]:
    """``err`` and every error it was raised from or during (causes and contexts), each once."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [err]
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__]
    return seen


def _full_path(err: BaseException) -> tuple[bool, str | None]:
    """(is this a full disk, the file being written if one of the errors names it)."""
    full, paths = False, []
    for e in error_chain(err):
        if isinstance(e, OSError) and e.errno in _FULL:
            full = True
            paths.append(e.filename)
        elif "No space left on device" in str(e) or "Disk quota exceeded" in str(e):
            full = True
            found = _QUOTED_PATH.search(str(e))
            paths.append(found.group(1) if found else None)
        elif "RESOURCE_EXHAUSTED" in str(e) and (quoted := _short_quoted_path(str(e))):
            # RESOURCE_EXHAUSTED is also XLA's "Out of memory allocating N bytes": only a
            # write error naming a file on a filesystem that really is short of space counts.
            full = True
            paths.append(quoted)
    return full, next((p for p in paths if p), None)


def _short_quoted_path(text: str) -> str | None:
    found = _QUOTED_PATH.search(text)
    return found.group(1) if found and _short_of_space(Path(found.group(1))) else None


def _short_of_space(path: Path) -> bool:
    for folder in (path, *path.parents):
        try:
            usage = shutil.disk_usage(folder)
        except OSError:
            continue
        return usage.free < max(_SHORT_BYTES, usage.total // 100)
    return False


def _free_bytes(path: Path) -> int | None:
    for folder in (path, *path.parents):
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            continue
    return None


def _size(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def disk_full_message(err: BaseException, run: Path) -> str | None:
    """The user's message for a full disk behind ``err`` (``None`` if ``err`` is something else)."""
    full, filename = _full_path(err)
    if not full:
        return None
    path = Path(filename) if filename else run
    steps = committed_steps(run / "checkpoints")
    if steps:
        then = (
            f"The newest complete checkpoint, step {steps[-1]} in {run / 'checkpoints'}, is intact "
            "(a checkpoint being written when the disk filled is discarded on resume). Free some "
            "space (or keep fewer checkpoints: --set train.keep_checkpoints=N), then continue with "
            f"`gpt train --resume {run}`."
        )
    else:
        then = "No checkpoint was complete yet: free some space, then run the same command again."
    return (
        f"The disk is full: writing {path} failed ({_size(_free_bytes(path))} free on that "
        f"filesystem). Training stopped. {then}"
    )
