"""The run's error log: every failure of a run leaves a dated entry in ``RUN/errors.log``.

An entry is one header line (UTC time, the step, the error's type and message) and, for errors
that are not the user's to fix (a crash), the full traceback chain. Appends never leave the
folder they are given and never follow a symbolic link (neither the folder nor the file): a link
planted there is refused, silently, and the failure is still reported on the terminal.
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path

ERRORS_LOG = "errors.log"


def append_inside(folder: Path, name: str, text: str) -> Path | None:
    """Append ``text`` to ``folder/name``, created if missing; the path, or ``None`` if refused.

    ``folder`` and ``name`` are opened without following symbolic links (``O_NOFOLLOW``, the file
    relative to the opened folder), so the write lands in that folder or nowhere. ``None`` when
    either is a link, ``name`` is not a plain file name, or the write fails (a read-only or full
    disk): a log must never hide the error it records.
    """
    if not name or "/" in name or name in (".", ".."):
        return None
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
        try:
            data = text.encode("utf-8", errors="replace")
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    return folder / name


def log_failure(
    run: Path, step: int | None, err: BaseException, *, chain: bool, lines: list[str] | None = None
) -> Path | None:
    """Append ``err`` to ``run/errors.log``: time, step, message, and with ``chain`` the traceback.

    ``step``: the last step the run started (``None``: before the first). ``chain``: add the
    traceback chain (for a crash; a diverged or interrupted run's message is the whole story).
    ``lines``: what the libraries logged while the run stopped (added after the chain).
    Returns the log's path, or ``None`` where it could not be written.
    """
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    at = "before the first step" if step is None else f"step {step}"
    message = str(err).strip() or type(err).__name__
    entry = f"--- {when} {at} {type(err).__name__}: {message}\n"
    if chain:
        entry += "".join(traceback.format_exception(err))
    if lines:
        entry += "While stopping, the libraries logged:\n" + "".join(f"{x}\n" for x in lines)
    return append_inside(run, ERRORS_LOG, entry)
