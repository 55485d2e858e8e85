"""Reading a live run's checkpoints: a private, unchanging view made of hard links.

A run that is still training saves a step every ``train.checkpoint_every`` steps and deletes the
oldest (keep-N) while ``gpt eval`` or ``gpt sample`` may be reading one. Orbax reads a step file by
file, so a deletion in the middle fails the read part-way (and tensorstore prints tracebacks from
its aborted callbacks). Hard links fix this at the filesystem level: a linked file keeps its data
when the writer unlinks its name, so the reader sees finished steps that nothing changes. Linking
copies no data and takes milliseconds.

The view lives in ``checkpoints/.reading/<host>-<pid>-<random>/`` (orbax ignores the name) and is
removed when the read ends. A
reader killed with ``kill -9`` leaves its view behind; a later reader removes it once it is a
minute old, recognising it by the ``flock`` that the kernel dropped when its owner died.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

READING_DIR = ".reading"
_HELD = "held"
_GRACE_S = 60.0


@contextlib.contextmanager
def stable_view(checkpoints: Path) -> Iterator[Path]:
    """A folder with the same finished steps as ``checkpoints`` that no writer changes.

    Falls back to ``checkpoints`` itself where no view can be made (a read-only run folder, a
    filesystem without hard links); the restore then retries when a step vanishes mid-read.
    """
    root = checkpoints / READING_DIR
    try:
        root.mkdir(exist_ok=True)
        _remove_abandoned_views(root)
        view = Path(tempfile.mkdtemp(prefix=f"{socket.gethostname()}-{os.getpid()}-", dir=root))
    except OSError:
        yield checkpoints
        return
    held = os.open(view / _HELD, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            _link_finished_steps(checkpoints, view)
        except OSError:  # no hard links here (EXDEV, EPERM, ENOTSUP...): read the original
            yield checkpoints
        else:
            yield view
    finally:
        shutil.rmtree(view, ignore_errors=True)
        os.close(held)
        with contextlib.suppress(OSError):
            root.rmdir()  # only when no other reader's view is in it


def committed_steps(checkpoints: Path) -> list[int]:
    """The steps of ``checkpoints`` whose folder is complete, oldest first (no orbax needed).

    Orbax writes a step under a temporary name and renames it to its bare number once every file
    is written, so a folder named by a number is a finished step.
    """
    if not checkpoints.is_dir():
        return []
    return sorted(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit())


def _link_finished_steps(checkpoints: Path, view: Path) -> None:
    # Orbax writes a step under a temporary name and renames it when complete, so a folder named
    # by its step number is finished. A step deleted while we link it is left out.
    if not checkpoints.is_dir():
        return
    for entry in os.scandir(checkpoints):
        if entry.name.isdigit() and entry.is_dir(follow_symlinks=False):
            try:
                _link_tree(Path(entry.path), view / entry.name)
            except FileNotFoundError:
                shutil.rmtree(view / entry.name, ignore_errors=True)


def _link_tree(src: Path, dst: Path) -> None:
    dst.mkdir()
    for entry in os.scandir(src):
        if entry.is_dir(follow_symlinks=False):
            _link_tree(Path(entry.path), dst / entry.name)
        else:
            os.link(entry.path, dst / entry.name, follow_symlinks=False)


def _remove_abandoned_views(root: Path) -> None:
    # A view whose "held" file can be locked has no live reader (the kernel drops a dead
    # process's flock). A view younger than a minute is left alone: its reader may be between
    # creating the file and locking it (processes of one run resume at the same moment).
    for view in root.iterdir():
        try:
            if time.time() - view.stat().st_mtime < _GRACE_S:
                continue
            fd = os.open(view / _HELD, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live reader holds it
        finally:
            os.close(fd)
        shutil.rmtree(view, ignore_errors=True)
